"""pytest-streamguard: deadlines for LLM token streams under injected network faults.

The pytest plugin lives in :mod:`pytest_streamguard.plugin` (entry point ``streamguard``);
the embedded Toxiproxy-API server in :mod:`pytest_streamguard.toxiproxy_server`. The names
below are the public API a test may import.
"""

from pytest_streamguard.deadlines import Deadline, DeadlineViolation, Violation
from pytest_streamguard.faults import Faults
from pytest_streamguard.guard import StreamGuard
from pytest_streamguard.reports import TestRecord
from pytest_streamguard.stats import percentile
from pytest_streamguard.target import Target
from pytest_streamguard.trace import Chunk, FaultRecord, StreamTrace

__version__ = "0.1.0"

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
