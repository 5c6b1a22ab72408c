"""pytest-streamguard: deadlines for LLM token streams under injected network faults.

The pytest plugin lives in :mod:`pytest_streamguard.plugin` (entry point ``streamguard``);
the embedded Toxiproxy-API server in :mod:`pytest_streamguard.toxiproxy_server`. The names
below are the public API a test may import. They load on first access (PEP 562): pytest imports
this package on every start through the entry point, and the plugin's runtime (httpx,
toxiproxy-python, ...) must not load unless ``--streamguard`` is on.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_streamguard.deadlines import Deadline, DeadlineViolation, Violation
    from pytest_streamguard.faults import Faults
    from pytest_streamguard.guard import StreamGuard
    from pytest_streamguard.reports import TestRecord
    from pytest_streamguard.stats import percentile
    from pytest_streamguard.target import Target
    from pytest_streamguard.trace import Chunk, FaultRecord, StreamTrace

__version__ = "0.1.0"

# public name -> the module that defines it
_PUBLIC = {
    "Chunk": "trace",
    "Deadline": "deadlines",
    "DeadlineViolation": "deadlines",
    "FaultRecord": "trace",
    "Faults": "faults",
    "StreamGuard": "guard",
    "StreamTrace": "trace",
    "Target": "target",
    "TestRecord": "reports",
    "Violation": "deadlines",
    "percentile": "stats",
}

__all__ = [
    "Chunk",
    "Deadline",
    "DeadlineViolation",
    "FaultRecord",
    "Faults",
    "StreamGuard",
    "StreamTrace",
    "Target",
    "TestRecord",
    "Violation",
    "__version__",
    "percentile",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_streamguard' has no attribute {name!r}")
    # Not cached in this module's globals: a second in-process pytest run (pytester) imports
    # the plugin's modules afresh, and a cached name would be the first run's class (an
    # exception the test catches by it would then go uncaught).
    return getattr(importlib.import_module(f"pytest_streamguard.{module}"), name)


def __dir__() -> list[str]:
    """The public names, loaded or not."""
    return sorted(__all__)
