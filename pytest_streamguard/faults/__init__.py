"""Faults: what a test injects (:mod:`.inject`, ``streamguard.faults``), how each is applied
and whether it took effect; docs/index.md says which module owns what."""
