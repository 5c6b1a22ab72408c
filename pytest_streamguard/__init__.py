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

from pytest_streamguard import _moved

if TYPE_CHECKING:
    from pytest_streamguard.errors import DeadlineViolation
    from pytest_streamguard.faults.inject import Faults
    from pytest_streamguard.guard import StreamGuard
    from pytest_streamguard.report.records import TestRecord
    from pytest_streamguard.services.app import Target
    from pytest_streamguard.stream.trace import Chunk, FaultRecord, StreamTrace
    from pytest_streamguard.verdict.deadlines import Deadline, Violation
    from pytest_streamguard.verdict.stats import percentile

__version__ = "0.1.0"

_moved.install()

# public name -> the module that defines it
_PUBLIC = {
    "Chunk": "stream.trace",
    "Deadline": "verdict.deadlines",
    "DeadlineViolation": "errors",
    "FaultRecord": "stream.trace",
    "Faults": "faults.inject",
    "StreamGuard": "guard",
    "StreamTrace": "stream.trace",
    "Target": "services.app",
    "TestRecord": "report.records",
    "Violation": "verdict.deadlines",
    "percentile": "verdict.stats",
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
    """The public name from its module, imported on first access.

    Not cached here: the module's own entry in ``sys.modules`` is the one source, so a test
    process that drops and re-imports the plugin's modules (pytester's in-process runs) gets
    the class the plugin now raises, never the one of an earlier run.
    """
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_streamguard' has no attribute {name!r}")
    return getattr(importlib.import_module(f"pytest_streamguard.{module}"), name)


def __dir__() -> list[str]:
    """The public names, loaded or not."""
    return sorted(__all__)
