"""What every finding rule shares: the shape of a stream it reads (:class:`Observed`) and
the finding itself (:class:`Finding`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class _Stamped(Protocol):
    @property
    def stamp_ns(self) -> int:
        """When the read that completed this chunk returned."""


@runtime_checkable
class Observed(Protocol):
    """What a finding reads of a stream: :class:`~pytest_streamguard.stream.trace.Observed` is one
    (findings depend on this shape only, so the trace can depend on them without a cycle)."""

    name: str
    request_ns: int
    response_ns: int | None
    end_ns: int | None
    completed: bool
    error_kind: str | None
    reads: list[tuple[int, int]]
    heartbeat_ns: list[int]

    @property
    def chunks(self) -> Sequence[_Stamped]:
        """The stream's tokens in order."""

    @property
    def ttft(self) -> float | None:
        """Seconds from the request to the first token."""


#: ``Finding.hop`` under a stack where no evidence places the finding at one of its hops.
UNKNOWN_HOP = "unknown"


@dataclass(frozen=True)
class Finding:
    """One named incident and its evidence.

    ``evidence`` says in words what matched; ``data`` holds the same counts and times
    (seconds) as numbers; ``streams`` names the streams it was seen on; ``cause``, where the
    probe's samples back the finding, says the cause in a user's words (``the event loop was
    blocked: the ready path /readyz took 0.310 s while 8 streams stalled``)."""

    name: str
    evidence: str
    streams: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict)
    cause: str = ""
    #: Under a stack: the service it was seen at (``buffered`` at ``gateway``; see
    #: :mod:`pytest_streamguard.verdict.hops`), :data:`UNKNOWN_HOP` where no evidence places
    #: it; None without a stack.
    hop: str | None = None

    def describe(self) -> str:
        """``name: evidence`` (``name at HOP: evidence`` under a stack, ``name at an unknown
        hop: evidence`` where no evidence places it), as the verdict and the summary show it."""
        at = "" if self.hop is None else f" at {self.hop}"
        at = " at an unknown hop" if self.hop == UNKNOWN_HOP else at
        return f"{self.name}{at}: {self.evidence}"

    def to_dict(self) -> dict[str, Any]:
        """Builtin-typed form."""
        return {
            "name": self.name,
            "evidence": self.evidence,
            "streams": list(self.streams),
            "data": dict(self.data),
            **({"cause": self.cause} if self.cause else {}),
            **({"hop": self.hop} if self.hop is not None else {}),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Finding:
        """Inverse of :meth:`to_dict`."""
        return cls(
            name=str(raw["name"]),
            evidence=str(raw["evidence"]),
            streams=tuple(str(s) for s in raw.get("streams", [])),
            data=dict(raw.get("data", {})),
            cause=str(raw.get("cause", "")),
            hop=None if raw.get("hop") is None else str(raw["hop"]),
        )


def sent_ns(data: Any) -> int | None:
    """The server's own send stamp a frame's payload carries (``data["sent_ns"]``, as the
    bundled target's events do), or None."""
    sent = data.get("sent_ns") if isinstance(data, dict) else None
    return sent if isinstance(sent, int) and not isinstance(sent, bool) else None


def sent_stamp(chunk: Any) -> int | None:
    """:func:`sent_ns` of a chunk's payload."""
    return sent_ns(getattr(chunk, "data", None))


def held_here(trace: Observed, start: int, end: int) -> int:
    """How long this machine held what the read stamped ``end`` brought, since ``start``: the
    Toxiproxy's CPU waits (``proxy_waits``) and the client's own loop held (``reader_held``)."""
    waited: int = dict(getattr(trace, "proxy_waits", None) or ()).get(end, 0)
    spans: Sequence[tuple[int, int]] = getattr(trace, "reader_held", None) or ()
    return waited + sum(max(0, min(b, end) - max(a, start)) for a, b in spans)


def seconds(ns: int) -> float:
    """Nanoseconds as seconds."""
    return ns / 1e9
