"""What the probe saw: a light request sent to the target beside the streams, as plain data.

The probe itself (:mod:`pytest_streamguard.stream.probe`) goes to the target directly, never
through the fault proxy, every ``interval_s``: the target's ready path (``kind="http"``) or a
TCP connect (``kind="tcp"``). Each sample is ``(stamp_ns, latency_ns)``: when it was sent
(``time.perf_counter_ns()``, the streams' clock) and how long the answer took, or None when no
answer came (an error, or the probe's own timeout).

A blocked event loop cannot answer its ready path while it is blocked; a server whose slots are
all taken answers at once. Findings read the samples through :func:`waits`. A TCP connect is
answered by the kernel from the listening socket's backlog, with or without the app's loop, so
it tells a stopped host or a closed port from a live one but never a blocked loop: findings use
``http`` samples only (:attr:`Probed.sees_the_loop`). Under a stack the entry's probe holds each
inner service's own (:attr:`Probed.inner`): a blocked loop is named at the hop whose probe waited.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MODEL_ROUTES",
    "PROBE_KINDS",
    "PROBE_WAIT_S",
    "ProbeWaits",
    "Probed",
    "Waited",
    "loop_waits_ns",
    "merge",
    "model_route",
    "waits",
]

#: ``http``: a GET of the target's ready path; ``tcp``: a TCP connect to its port.
PROBE_KINDS = ("http", "tcp")

#: Paths that touch the model: an OpenAI-compatible server's model list (llama-cpp-python takes
#: its model's lock to answer it, which ends the stream in progress) and Ollama's.
MODEL_ROUTES = ("/v1/models", "/models", "/api/tags", "/api/ps")


def model_route(path: str) -> bool:
    """Whether a probe of ``path`` touches the model (:data:`MODEL_ROUTES`, or one model's
    entry under ``/v1/models/``)."""
    route = path.split("?", 1)[0].rstrip("/")
    return route in MODEL_ROUTES or route.startswith("/v1/models/")


#: A sample waited when its answer took at least this many seconds (a stall's floor,
#: ``STALL_MIN_S``: a ready path on loopback answers in about a millisecond, under 10 ms with
#: 10 streams keeping a 2-core machine busy).
PROBE_WAIT_S = 0.05


@dataclass
class Probed:
    """A probe's samples: ``kind`` (``http`` or ``tcp``), ``target`` (the ready path, or
    ``host:port``), ``interval_s`` and ``samples`` (``(stamp_ns, latency_ns | None)``, in the
    order sent); under a stack, ``hop`` (the service probed) and ``inner`` (each inner
    service's own probe, in start order: the model first).

    ``cpu_waits``, for a target the plugin started: by a sample's stamp, the part of its wait
    that was the machine's (the run-queue waits that held its answer up: a free loop answers
    late on a busy machine too; ``stream.probe.cpu_wait_ns``), and ``behind``, under a stack,
    the part spent on the hops behind this one (a ready path that asks theirs). The findings
    take both off (:func:`waits`, :class:`Waited`)."""

    kind: str
    target: str
    interval_s: float
    samples: list[tuple[int, int | None]] = field(default_factory=list)
    cpu_waits: dict[int, int] = field(default_factory=dict)
    hop: str | None = None
    inner: list[Probed] = field(default_factory=list)
    behind: dict[int, int] = field(default_factory=dict)

    @property
    def what(self) -> str:
        """The probe in words: ``the ready path /readyz`` or ``a TCP connect`` (``... of
        model``, ``... to model`` under a stack)."""
        of = "" if self.hop is None else (" of " if self.kind == "http" else " to ") + self.hop
        return (f"the ready path {self.target}" if self.kind == "http" else "a TCP connect") + of

    @property
    def hops(self) -> list[Probed]:
        """Every service's probe, the innermost first (``inner``, then this one)."""
        return [*self.inner, self]

    @property
    def sees_the_loop(self) -> bool:
        """Whether the app's own loop answers this probe (see the module docstring)."""
        return self.kind == "http"

    def merged(self, other: Probed) -> Probed:
        """This probe's samples and ``other``'s, in the order sent (one test's several
        streams and loads), each inner service's with the other's of the same service."""
        inner = {probe.hop: probe for probe in self.inner}
        for probe in other.inner:
            inner[probe.hop] = inner[probe.hop].merged(probe) if probe.hop in inner else probe
        return Probed(
            self.kind,
            self.target,
            self.interval_s,
            sorted([*self.samples, *other.samples], key=lambda s: s[0]),
            {**self.cpu_waits, **other.cpu_waits},
            self.hop,
            list(inner.values()),
            {**self.behind, **other.behind},
        )

    def to_dict(self) -> dict[str, Any]:
        """Builtin-typed form (``samples`` as ``[stamp_ns, latency_ns or null]`` pairs)."""
        return {
            "kind": self.kind,
            "target": self.target,
            "interval_s": self.interval_s,
            "samples": [[stamp, latency] for stamp, latency in self.samples],
            **({"cpu_waits": [list(w) for w in self.cpu_waits.items()]} if self.cpu_waits else {}),
            **({"hop": self.hop} if self.hop is not None else {}),
            **({"inner": [probe.to_dict() for probe in self.inner]} if self.inner else {}),
            **({"behind": [list(wait) for wait in self.behind.items()]} if self.behind else {}),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Probed:
        """Inverse of :meth:`to_dict`."""
        return cls(
            kind=str(raw["kind"]),
            target=str(raw["target"]),
            interval_s=float(raw["interval_s"]),
            samples=[
                (int(stamp), None if latency is None else int(latency))
                for stamp, latency in raw.get("samples", [])
            ],
            cpu_waits={int(stamp): int(wait) for stamp, wait in raw.get("cpu_waits", [])},
            hop=None if raw.get("hop") is None else str(raw["hop"]),
            inner=[cls.from_dict(probe) for probe in raw.get("inner", [])],
            behind={int(stamp): int(wait) for stamp, wait in raw.get("behind", [])},
        )


def merge(probes: Iterable[Probed | None]) -> Probed | None:
    """Every sample of ``probes`` in one :class:`Probed` (None when none has any)."""
    found = [p for p in probes if p is not None]
    return functools.reduce(Probed.merged, found) if found else None


@dataclass(frozen=True)
class ProbeWaits:
    """How the probe fared over one span of time: ``samples`` sent or answered in it,
    ``waited`` of them took ``PROBE_WAIT_S`` or more (or got no answer), ``longest_s`` the
    longest wait and ``share`` of the span the probe spent waiting that long."""

    samples: int
    waited: int
    longest_s: float
    share: float


def _spans(probe: Probed, end_ns: int) -> list[tuple[int, int, bool, int]]:
    """Each sample as (sent, answered or given up, answered, out until): a sample without an
    answer waited until the next one was sent (or ``end_ns``). An answered sample's span is its
    wait for the loop: its latency less the target's wait for a CPU meanwhile and its wait on
    the hops behind (:attr:`Probed.cpu_waits`, :attr:`Probed.behind`); it was out its latency."""
    spans = []
    for k, (stamp, latency) in enumerate(probe.samples):
        if latency is not None:
            elsewhere = probe.cpu_waits.get(stamp, 0) + probe.behind.get(stamp, 0)
            spans.append((stamp, stamp + latency - min(elsewhere, latency), True, stamp + latency))
            continue
        nxt = probe.samples[k + 1][0] if k + 1 < len(probe.samples) else max(end_ns, stamp)
        spans.append((stamp, nxt, False, nxt))
    return spans


def loop_waits_ns(probe: Probed) -> list[int]:
    """Each answered sample's wait for the loop (ns), as :func:`_spans` reads it."""
    return [done - sent for sent, done, answered, _ in _spans(probe, 0) if answered]


def waits(probe: Probed | None, windows: Sequence[tuple[int, int]]) -> ProbeWaits | None:
    """How the probe fared within ``windows`` (``(start_ns, end_ns)`` pairs), or None when it
    cannot tell (no probe, a TCP probe, or no sample in them)."""
    if probe is None or not probe.sees_the_loop or not probe.samples or not windows:
        return None
    last = max(end for _, end in windows)
    spans = _spans(probe, last)
    floor = int(PROBE_WAIT_S * 1e9)
    # A sample out in a window tells of it, though its wait was all the machine's (a sample out
    # 0.27 s that waited as long for a CPU, over a 30-stream load's stall: a busy machine).
    inside = [
        (sent, done, answered)
        for sent, done, answered, until in spans
        if any(sent <= b and until >= a for a, b in windows)
    ]
    if not inside:
        return None
    slow = [(sent, done) for sent, done, answered in inside if done - sent >= floor or not answered]
    covered = sum(max(0, min(done, b) - max(sent, a)) for sent, done in slow for a, b in windows)
    length = sum(b - a for a, b in windows)
    longest_s = max(done - sent for sent, done, _ in inside) / 1e9
    return ProbeWaits(len(inside), len(slow), longest_s, covered / length if length > 0 else 0.0)


class Waited:
    """The spans in which a probe, or any of its :attr:`~Probed.inner` ones, waited
    (``PROBE_WAIT_S`` or more, or no answer), merged and sorted once, for many windows to be
    weighed against them quickly (a load's every gap)."""

    def __init__(self, probe: Probed) -> None:
        floor = int(PROBE_WAIT_S * 1e9)
        # A last sample without an answer waited while any probe was still sent.
        end = max((stamp for one in probe.hops for stamp, _ in one.samples[-1:]), default=0)
        spans = sorted(span for one in probe.hops for span in _spans(one, end))
        merged: list[list[int]] = []
        for sent, done, answered, _ in spans:
            if answered and done - sent < floor:
                continue
            if merged and sent <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], done)
            else:
                merged.append([sent, done])
        self.starts = [a for a, _ in merged]
        self.spans = [(a, b) for a, b in merged]

    def share(self, start_ns: int, end_ns: int) -> float:
        """The share of ``[start_ns, end_ns]`` the probe spent waiting."""
        if end_ns <= start_ns:
            return 0.0
        covered = 0
        k = max(bisect.bisect_right(self.starts, start_ns) - 1, 0)
        while k < len(self.spans) and self.spans[k][0] < end_ns:
            a, b = self.spans[k]
            covered += max(0, min(b, end_ns) - max(a, start_ns))
            k += 1
        return covered / (end_ns - start_ns)
