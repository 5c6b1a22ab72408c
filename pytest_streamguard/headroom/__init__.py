"""Headroom: how far a stream is from breaking, found by search (``streamguard.headroom()``);
docs/index.md says which module owns what."""
