"""Every exception the plugin raises, in one module; users catch :class:`StreamguardError`.

The hierarchy::

    StreamguardError                    anything the plugin raises on purpose
    ├── StreamguardFailure              a test's check failed (an AssertionError: the test fails)
    │   ├── DeadlineViolation           a stream broke its token_deadline
    │   ├── FindingsFailed              the streams showed a finding the test's fail_on names
    │   ├── FindingsUnchecked           a finding fail_on names was not checkable
    │   └── FaultsNotFired              a fault never took effect (--streamguard-strict-faults)
    ├── SetupError                      something the test needs could not start (a RuntimeError)
    │   ├── StartupError                a process exited or was not ready in time
    │   │   └── ReadyPathError          its ready path kept answering a 4xx
    │   ├── IngressError                nginx is missing, failed, or was used in the wrong state
    │   ├── ShardStartError             a load shard's process failed before it was ready
    │   └── ToxiproxyError              a Toxiproxy API call failed or timed out
    ├── ProfileError                    a fault profile that cannot be used (a ValueError)
    ├── NeedsEmbeddedToxiproxy          a fault this Toxiproxy cannot apply (the test is skipped)
    └── StreamError                     a frame that ends a stream as a failure
        ├── ServerError                 the server said, inside the stream, that it failed
        └── ProtocolError               what arrived is not a stream of that protocol

A failure's message is written by the module that judged it (:mod:`pytest_streamguard.verdict`
for deadlines and findings, :mod:`pytest_streamguard.faults.fired` for faults); this module only
holds the classes, so every family can import it. The embedded Toxiproxy server is a program of
its own and keeps its errors in :mod:`pytest_streamguard.toxiproxy_server.errors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "ClientErrorAnswer",
    "DeadlineViolation",
    "FaultsNotFired",
    "FindingsFailed",
    "FindingsUnchecked",
    "IngressError",
    "NeedsEmbeddedToxiproxy",
    "ProfileError",
    "ProtocolError",
    "ReadyPathError",
    "ServerError",
    "SetupError",
    "ShardStartError",
    "StartupError",
    "StreamError",
    "StreamguardError",
    "StreamguardFailure",
    "ToxiproxyError",
]


class StreamguardError(Exception):
    """The base of every exception pytest-streamguard raises on purpose."""


class StreamguardFailure(StreamguardError, AssertionError):
    """A test's check failed: an assertion failure, so pytest reports the test as failed."""


class DeadlineViolation(StreamguardFailure):
    """A stream broke its token deadline.

    ``violations`` holds the individual :class:`~pytest_streamguard.Violation` records; the
    message (:func:`pytest_streamguard.verdict.deadlines.format_violations` writes it) shows the
    worst few and says where every stream's verdict can be read."""

    def __init__(self, message: str, violations: Sequence[Any]) -> None:
        self.violations = list(violations)
        super().__init__(message)


class FindingsFailed(StreamguardFailure):
    """A test's streams showed findings its ``fail_on`` (``--streamguard-fail-on``, the ini key
    or the marker's ``fail_on=``) names, even though they met their deadlines."""

    def __init__(self, message: str, findings: Sequence[Any]) -> None:
        self.findings = list(findings)
        super().__init__(message)


class FindingsUnchecked(StreamguardFailure):
    """Under ``--streamguard-unchecked fail``: findings a test's ``fail_on`` names that could not
    be checked on this target (``unchecked``: each with its ``finding`` and ``reason``)."""

    def __init__(self, message: str, unchecked: Sequence[Any]) -> None:
        self.unchecked = list(unchecked)
        super().__init__(message)


class FaultsNotFired(StreamguardFailure):
    """Under ``--streamguard-strict-faults``: the test's faults that never took effect, each
    with what its streams showed (:mod:`pytest_streamguard.faults.fired`)."""

    def __init__(self, message: str, faults: Sequence[Any]) -> None:
        self.faults = list(faults)
        super().__init__(message)


class SetupError(StreamguardError, RuntimeError):
    """Something a test needs (a process, the proxy, the ingress, a shard) could not be had."""


class StartupError(SetupError):
    """A process exited or did not become ready in time; the message carries its output tail."""


class ReadyPathError(StartupError):
    """The ready URL kept answering a 4xx (see
    :data:`pytest_streamguard.services.processes.CLIENT_ERROR_FAIL_S`): a wrong path."""


class IngressError(SetupError):
    """nginx is missing, failed to start, or the ingress was used in the wrong state."""


class ShardStartError(SetupError):
    """A shard's process failed before it was ready; the message carries its output tail."""


class ToxiproxyError(SetupError):
    """A Toxiproxy API call failed or timed out; the message names the server and operation."""


class ProfileError(StreamguardError, ValueError):
    """A profile file or name that cannot be used; the message names it and what is accepted."""


class NeedsEmbeddedToxiproxy(StreamguardError, ValueError):
    """A fault that only the embedded Toxiproxy server applies (a chunk fault:
    ``stall``, ``cut``/``reset`` with ``after_chunks``), asked of a Toxiproxy that has no such
    toxic (a real ``toxiproxy-server``). Raised when the fault is called, before any stream is
    read; the plugin reports the test as skipped with this message as the reason, in the body
    or from a matrix profile (a ``ValueError``, as the refusal it was before)."""


class StreamError(StreamguardError):
    """A frame that ends the stream as a failure; ``kind`` is the trace's ``error_kind``."""

    kind = "server"


class ServerError(StreamError):
    """The server said, inside the stream, that it failed (an error event or object)."""

    kind = "server"


class ProtocolError(StreamError):
    """What arrived is not a stream of this format (e.g. non-JSON where JSON is required)."""

    kind = "protocol"


class ClientErrorAnswer(StreamguardError):
    """A ready poll gave up: the URL answered ``status`` (a 4xx) for ``seconds`` (at least; the
    threshold it was given, so the message reads the same on a slow machine). Internal: the
    process starter turns it into a :class:`ReadyPathError`."""

    def __init__(self, status: int, seconds: float) -> None:
        super().__init__(f"HTTP {status} for {seconds:g} s")
        self.status = status
        self.seconds = seconds
