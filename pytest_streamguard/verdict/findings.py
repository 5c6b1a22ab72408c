"""Findings: named incidents the evidence of a stream (or of a test's streams) shows.

A finding names a cause from the problem table (a buffering ingress, a blocked event loop, a
cold start, an idle timeout, a body held open) and carries the evidence that matched: counts
and times, never a guess without them. Every threshold is a module constant, documented in
docs/findings.md; each is set so that the fixed variant of its incident shows no finding.

:func:`trace_findings` reads one stream; :func:`group_findings` reads the streams of one test
or load together (a blocked loop, a full server and a cold start show only across streams);
:func:`findings_of` is both. The group findings also read the samples of the probe sent to the
target beside the streams (:mod:`pytest_streamguard.verdict.probe`): a blocked loop keeps the
probe waiting, a full server (``queued``) answers it at once.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pytest_streamguard.common.display import counted
from pytest_streamguard.common.names import KNOWN, parse_fail_on
from pytest_streamguard.errors import FindingsFailed
from pytest_streamguard.verdict.probe import Probed, ProbeWaits, waits

__all__ = [
    "KNOWN",
    "Finding",
    "Observed",
    "Probed",
    "findings_of",
    "group_findings",
    "not_cancelled",
    "parse_fail_on",
    "target_gauges",
    "trace_findings",
]

#: buffered: a stream of at least this many chunks ...
BUFFERED_MIN_CHUNKS = 4
#: ... whose largest one or two reads hold at least this share of its chunks ...
BUFFERED_SHARE = 0.75
#: ... and came at its end: the first of them at least this share of the way from the request
#: to the stream's end (a fast server's first tokens coalesced into one read at the start of a
#: stream that goes on, or is cut later, are not buffering).
BUFFERED_AT_END = 0.8
#: ... and held: the read that brought them came at least this many seconds after the request
#: (a 32-token answer of 0.126 s in all reached the client in one read while 30 streams kept a
#: 2-core machine busy: a hop's scheduling delay, not a gateway collecting the answer).
BUFFERED_MIN_S = 0.25
#: ... and, where the chunks carry the server's own send stamps (``sent_ns``, the bundled
#: target's events), the server sent the held chunks over at least this many seconds: chunks
#: it sent together (a 16-token answer generated in tens of ms after a 1 s cold start) arrive
#: together through any hop, and nothing between held them.
BUFFERED_SENT_SPAN_S = 0.1

#: blocked_loop (shared stalls): a stall is a gap above this many seconds and above
#: ``STALL_FACTOR`` times the stream's median gap ...
STALL_MIN_S = 0.05
STALL_FACTOR = 4.0
#: ... and a shared stall is an instant inside the stalls of at least this many streams (and
#: of at least half the streams read) ...
SHARED_MIN_STREAMS = 3
#: ... seen at least this many separate times (a batch engine admitting 30 streams at once
#: stalled them all together twice, up to 0.185 s, while its prefills ran: not a blocked loop,
#: which stalls them again at every block).
SHARED_MIN_TIMES = 3
#: blocked_loop (staircase): at least this many streams sent together (each request sent
#: before the first of them got its head) ...
STAIR_MIN_STREAMS = 4
#: ... whose heads (or first tokens) arrived in steps: at least ``STAIR_MIN_STEPS`` (and at
#: least this share of the gaps between consecutive arrivals) at least ``STAIR_STEP_S`` apart
#: (a blocked loop often lets a few streams through together at each step) ...
STAIR_STEP_SHARE = 1 / 3
STAIR_MIN_STEPS = 3
STAIR_STEP_S = 0.02
#: ... rising by at least this many seconds from the first to the last.
STAIR_RISE_S = 0.2
#: blocked_loop (released together): the staircase's single step. At least
#: ``STAIR_MIN_STREAMS`` streams sent together, each completed with at least
#: ``BUFFERED_MIN_CHUNKS`` chunks, whose response heads and whole answers (first to last chunk)
#: all arrived within this many seconds of each other, at least ``STAIR_RISE_S`` after the last
#: request: nothing of any of them came out before (a server that sends its head with the first
#: body, as uvicorn does, and a loop held until every generation was done). A buffering
#: ingress passes the head on as soon as the server sends it, long before the answer's end.
RELEASE_WINDOW_S = 0.05
#: blocked_loop (served one after another): of at least ``STAIR_MIN_STREAMS`` streams sent
#: together, at least ``QUEUED_MIN_STREAMS`` (and at least half) got their response heads only
#: after another of them had already received its whole answer (at least
#: ``BUFFERED_MIN_CHUNKS`` chunks), ``QUEUED_MIN_WAIT_S`` or more after their own request ...
QUEUED_MIN_STREAMS = 3
#: ... (the continuous-batching target on a busy 2-core machine once served one 48-token
#: answer in 0.2 s before the 7 other streams' heads, the last at 0.229 s: a pause no deadline
#: would see; the naive target held them 0.6 s on a quiet machine, seconds on a busy one) ...
QUEUED_MIN_WAIT_S = 0.5
#: ... and at most this many of them had their heads before the first whole answer ended: a
#: blocked loop serves one answer (or two) at a time, where a server that admits a batch and
#: queues the rest serves many side by side (the continuous-batching target had 10 of 30
#: streams under way when the first answer ended, on a quiet 2-core machine: capacity, not a
#: blocked loop).
SERVED_AT_ONCE_MAX = 2

#: blocked_loop with the probe's samples (``--streamguard-probe``, the target's ready path by
#: default): whichever pattern above matched, the probe must have waited (answers that took
#: ``PROBE_WAIT_S`` or more, see :mod:`pytest_streamguard.verdict.probe`, or none) for at least
#: this share of the windows the pattern names (the shared stalls; the span from the requests to
#: the last step, head or silence's end). A loop blocked 0.15 s kept the probe waiting from the
#: probe after the block began, at most ``interval`` late, to its end: two thirds of the window
#: or more; a server whose loop is free answers in milliseconds, a few per cent of it. Where
#: the pattern's windows hold no sample (the probe off, a TCP probe, a target given by URL the
#: probe could not reach), the pattern alone decides, as it did before the probe.
PROBE_WAIT_SHARE = 0.25

#: queued (capacity, not blame): of at least ``STAIR_MIN_STREAMS`` streams sent together, at
#: least ``QUEUED_MIN_STREAMS`` got their first token only after another of them had received
#: its whole answer (at least ``BUFFERED_MIN_CHUNKS`` chunks), ``QUEUED_MIN_WAIT_S`` or more
#: after their own request, while the probe kept answering (it waited under
#: ``PROBE_WAIT_SHARE`` of that span). The concurrency at which waiting began is how many of
#: them had their first token before that first answer ended (the server's slots).

#: cold_start: at least this many streams with a first token; the first stream's TTFT at least
#: ``COLD_FACTOR`` times the median of the later ones and at least ``COLD_MIN_S`` above it.
COLD_MIN_STREAMS = 3
COLD_FACTOR = 3.0
COLD_MIN_S = 0.2

#: idle_cut: a stream that did not complete, cut, reset or timed out after a silence of at
#: least this many seconds ...
IDLE_MIN_S = 0.9
#: ... within this share (or ``IDLE_TOLERANCE_S``) of a whole number of seconds.
IDLE_TOLERANCE = 0.05
IDLE_TOLERANCE_S = 0.1
#: ... counted from the last byte, or from a byte at most this long before it: nginx keeps a
#: running timer whose new deadline would move by under 300 ms (``NGX_TIMER_LAZY_DELAY``), so
#: its read timeout can fire up to 0.3 s early counted from the last read (a busy run saw
#: 0.872 s behind a 1 s ``proxy_read_timeout``, 0.992 s after the response head 0.120 s
#: before the last chunk).
IDLE_LAZY_S = 0.3
_CUT_KINDS = frozenset({"cut", "reset", "timeout", "network", "truncated"})
#: ... and something on the way cut the stream: a ``timeout`` is the plugin's own client giving
#: up (its read limit, or the ``total`` bound), never a hop's read timeout (a 20-stream load
#: whose app blocked its loop 0.1 s every 5 tokens ended on the client's 1.050 s read limit,
#: 1.052 s after the last chunk, and was named ``idle_cut`` with no ingress on the way).
_IDLE_CUT_KINDS = _CUT_KINDS - {"timeout"}

#: held_open: the body stayed open at least this many seconds after the protocol's end.
HELD_OPEN_MIN_S = 0.1

#: backpressure: under a throttle of the client's side (``bandwidth`` or ``slow_reader``) on
#: the stream that paced its reads (the client read at least ``BACKPRESSURE_PACED`` of the
#: throttle's rate while it was on), at least ``BACKPRESSURE_MIN_CHUNKS`` chunks that carry the
#: server's own send stamp (``sent_ns``, the bundled target's events) waited at least this many
#: seconds longer between the server's write and the client's read than the stream's quickest
#: chunk did (the slow-reader incident: 0.8 to 0.9 s at most, over 0.25 s for most of its
#: 200-odd events).
BACKPRESSURE_MIN_S = 0.25
BACKPRESSURE_MIN_CHUNKS = 3
BACKPRESSURE_PACED = 0.5
_THROTTLES = frozenset({"bandwidth", "slow_reader"})

#: not_cancelled: generation still running this many seconds after a cut stream ended (the
#: target's engine still generating requests no open stream holds).
NOT_CANCELLED_AFTER_S = 1.0


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


@dataclass(frozen=True)
class Finding:
    """One named incident and its evidence.

    ``evidence`` says in words what matched; ``data`` holds the same counts and times
    (seconds) as numbers; ``streams`` names the streams it was seen on; ``cause``, where the
    probe's samples back the finding, says the cause in a user's words (``the event loop was
    blocked: the ready path /readyz took 0.310 s while 8 streams stalled``).
    """

    name: str
    evidence: str
    streams: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict)
    cause: str = ""
    #: Under a stack: the service it was seen at (``buffered`` at ``gateway``; see
    #: :mod:`pytest_streamguard.verdict.hops`); None without a stack.
    hop: str | None = None

    def describe(self) -> str:
        """``name: evidence`` (``name at HOP: evidence`` under a stack), as the verdict and the
        summary show it."""
        at = "" if self.hop is None else f" at {self.hop}"
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


def _s(ns: int) -> float:
    return ns / 1e9


def _buffered(trace: Observed) -> Finding | None:
    chunks = trace.chunks
    if len(chunks) < BUFFERED_MIN_CHUNKS:
        return None
    # Chunks framed from one network read carry that read's stamp.
    per_read = Counter(c.stamp_ns for c in chunks)
    top = per_read.most_common(2)
    reads = [stamp for stamp, _ in top]
    held = sum(n for _, n in top)
    if len(top) == 2 and top[1][1] == 1:
        reads, held = reads[:1], top[0][1]
    if held < BUFFERED_SHARE * len(chunks) or max(reads) != chunks[-1].stamp_ns:
        return None
    end = trace.end_ns if trace.end_ns is not None else chunks[-1].stamp_ns
    if min(reads) - trace.request_ns < BUFFERED_AT_END * (end - trace.request_ns):
        return None
    last = max(reads)
    at = _s(last - trace.request_ns)
    if at < BUFFERED_MIN_S:
        return None
    held_reads = set(reads)
    sent = [
        sent_ns
        for chunk in chunks
        if chunk.stamp_ns in held_reads
        and isinstance(data := getattr(chunk, "data", None), dict)
        and isinstance(sent_ns := data.get("sent_ns"), int)
    ]
    server = ""
    if len(sent) >= BUFFERED_MIN_CHUNKS:
        span = _s(max(sent) - min(sent))
        if span < BUFFERED_SENT_SPAN_S:
            return None
        server = f"; the server sent them over {span:.3f} s"
    distinct = len({stamp for stamp, _ in trace.reads})
    instants = "" if distinct == len(trace.reads) else f", at {counted(distinct, 'instant')}"
    word = "read" if len(reads) == 1 else "reads"
    return Finding(
        "buffered",
        f"{held} of {len(chunks)} chunks in {len(reads)} {word}, the last at {at:.3f} s "
        f"({counted(len(trace.reads), 'read')} in all{instants}){server}",
        (trace.name,),
        {
            "chunks": len(chunks),
            "held": held,
            "reads": len(reads),
            "all_reads": len(trace.reads),
            "at_s": at,
        },
    )


def _idle_cut(trace: Observed) -> Finding | None:
    if trace.completed or trace.error_kind not in _IDLE_CUT_KINDS or trace.end_ns is None:
        return None
    head = trace.response_ns if trace.response_ns is not None else trace.request_ns
    stamps = sorted({head, *(c.stamp_ns for c in trace.chunks), *trace.heartbeat_ns})
    last = stamps[-1]
    silence = _s(trace.end_ns - last)
    # The byte from which the end is the roundest time (the later one of a tie), among the
    # last byte and those at most IDLE_LAZY_S before it, which a lazy timer may count from.
    candidates = [
        (abs(since - round(since)), -stamp, stamp, since)
        for stamp in stamps
        if _s(last - stamp) <= IDLE_LAZY_S and (since := _s(trace.end_ns - stamp)) >= IDLE_MIN_S
    ]
    if not candidates:
        return None
    off, _, stamp, since = min(candidates)
    whole = round(since)
    if off > max(IDLE_TOLERANCE * whole, IDLE_TOLERANCE_S):
        return None
    evidence = f"{trace.error_kind} after {silence:.3f} s of silence"
    if stamp != last:
        evidence += f", {since:.3f} s after a read {_s(last - stamp):.3f} s before the last"
    return Finding(
        "idle_cut",
        f"{evidence} (a {whole} s read timeout?)",
        (trace.name,),
        {"silence_s": silence, "since_s": since, "round_s": whole, "error_kind": trace.error_kind},
    )


def _held_open(trace: Observed) -> Finding | None:
    held = getattr(trace, "held_open_s", None)
    if not isinstance(held, int | float) or held < HELD_OPEN_MIN_S:
        return None
    return Finding(
        "held_open",
        f"body held open {held:.3f} s after the protocol's end",
        (trace.name,),
        {"held_open_s": float(held)},
    )


def _throttle(trace: Observed) -> Any:
    end = trace.end_ns if trace.end_ns is not None else trace.request_ns
    for fault in getattr(trace, "faults", ()):
        if fault.kind in _THROTTLES and fault.active_during(trace.request_ns, end):
            return fault
    return None


def _limit_kb(throttle: Any) -> float:
    """The throttle's rate in KB/s."""
    if throttle.kind == "bandwidth":
        return float(throttle.params["kb_per_second"])
    return float(throttle.params["bytes_per_second"]) / 1000


def _backpressure(trace: Observed) -> Finding | None:
    throttle = _throttle(trace)
    if throttle is None:
        return None
    waits = [
        chunk.stamp_ns - sent
        for chunk in trace.chunks
        if isinstance(data := getattr(chunk, "data", None), dict)
        and isinstance(sent := data.get("sent_ns"), int)
    ]
    if len(waits) < BACKPRESSURE_MIN_CHUNKS:
        return None
    quickest = min(waits)
    held = [w - quickest for w in waits if w - quickest >= BACKPRESSURE_MIN_S * 1e9]
    if len(held) < BACKPRESSURE_MIN_CHUNKS:
        return None
    # The client's read rate while the throttle was on (a test may lift it to drain the rest).
    on = throttle.on_ns if throttle.on_ns is not None else trace.request_ns
    off = throttle.off_ns if throttle.off_ns is not None else trace.end_ns or trace.request_ns
    during = [(stamp, n) for stamp, n in trace.reads if on <= stamp <= off]
    nbytes = sum(n for _, n in during)
    span = _s(during[-1][0] - during[0][0]) if len(during) > 1 else 0.0
    rate = nbytes / span / 1000 if span > 0 else 0.0
    if rate < BACKPRESSURE_PACED * _limit_kb(throttle):
        return None
    longest = _s(max(held))
    return Finding(
        "backpressure",
        f"under {throttle.describe()}: {len(held)} of {len(waits)} chunks waited "
        f"{BACKPRESSURE_MIN_S:g} s to {longest:.3f} s longer from the server's write to the "
        f"client's read than the quickest; the client read {rate:.1f} KB/s while it was on",
        (trace.name,),
        {
            "fault": throttle.describe(),
            "chunks": len(waits),
            "held": len(held),
            "longest_s": longest,
            "bytes": nbytes,
            "kb_per_s": rate,
        },
    )


def trace_findings(trace: Observed) -> list[Finding]:
    """The findings one stream shows by itself: ``buffered``, ``idle_cut``, ``held_open``,
    ``backpressure``."""
    found = (_buffered(trace), _idle_cut(trace), _held_open(trace), _backpressure(trace))
    return [f for f in found if f is not None]


def _stalls(trace: Observed) -> list[tuple[int, int]]:
    stamps = [c.stamp_ns for c in trace.chunks]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    if len(gaps) < 2:
        return []
    floor = max(STALL_MIN_S * 1e9, STALL_FACTOR * statistics.median(gaps))
    return [(a, b) for a, b in itertools.pairwise(stamps) if b - a > floor]


#: A blocked_loop pattern's finding and the windows (``(start_ns, end_ns)``) in which it says
#: the loop was held, for the probe's samples to confirm.
_Matched = tuple[Finding, list[tuple[int, int]]]


def _shared_stalls(traces: Sequence[Observed]) -> _Matched | None:
    stalls = {t.name: _stalls(t) for t in traces}
    need = max(SHARED_MIN_STREAMS, (len(traces) + 1) // 2)
    if len(traces) < need:
        return None
    # Sweep the stall windows: the instants inside at least ``need`` streams' stalls.
    edges = sorted(
        (stamp, delta)
        for windows in stalls.values()
        for a, b in windows
        for stamp, delta in ((a, 1), (b, -1))
    )
    times: list[tuple[int, int, int]] = []  # start, end, most streams stalled together
    depth, start, peak = 0, 0, 0
    for stamp, delta in edges:
        before = depth
        depth += delta
        if before < need <= depth:
            start, peak = stamp, depth
        elif depth >= need:
            peak = max(peak, depth)
        elif before >= need > depth:
            times.append((start, stamp, peak))
    if len(times) < SHARED_MIN_TIMES:
        return None
    t0 = min(t.request_ns for t in traces)
    longest = max(times, key=lambda w: w[1] - w[0])
    most = max(w[2] for w in times)
    stalled = sorted(name for name, windows in stalls.items() if windows)
    found = Finding(
        "blocked_loop",
        f"up to {most} of {len(traces)} streams stalled together {len(times)} times; longest "
        f"{_s(longest[1] - longest[0]):.3f} s at {_s(longest[0] - t0):.3f} s",
        tuple(stalled),
        {
            "streams": len(traces),
            "most_stalled": most,
            "times": len(times),
            "longest_s": _s(longest[1] - longest[0]),
            "at_s": _s(longest[0] - t0),
        },
    )
    return found, [(a, b) for a, b, _ in times]


def _staircase(traces: Sequence[Observed], what: str) -> _Matched | None:
    if what == "heads":
        arrivals = [(t.response_ns, t) for t in traces if t.response_ns is not None]
    else:
        arrivals = [(t.chunks[0].stamp_ns, t) for t in traces if t.chunks]
    if len(arrivals) < STAIR_MIN_STREAMS:
        return None
    first = min(stamp for stamp, _ in arrivals)
    together = sorted(
        ((stamp, t) for stamp, t in arrivals if t.request_ns <= first), key=lambda a: a[0]
    )
    if len(together) < STAIR_MIN_STREAMS:
        return None
    stamps = [stamp for stamp, _ in together]
    steps = [b - a for a, b in itertools.pairwise(stamps)]
    rise = _s(stamps[-1] - stamps[0])
    big = sum(1 for s in steps if s >= STAIR_STEP_S * 1e9)
    if rise < STAIR_RISE_S or big < max(STAIR_MIN_STEPS, STAIR_STEP_SHARE * len(steps)):
        return None
    t0 = min(t.request_ns for _, t in together)
    noun = "response heads" if what == "heads" else "first tokens"
    found = Finding(
        "blocked_loop",
        f"{noun} of {len(together)} streams sent together arrived in a staircase of "
        f"{big + 1} steps: {_s(stamps[0] - t0):.3f} s to {_s(stamps[-1] - t0):.3f} s",
        tuple(t.name for _, t in together),
        {
            "streams": len(together),
            "first_s": _s(stamps[0] - t0),
            "last_s": _s(stamps[-1] - t0),
            "steps": big + 1,
            "staircase": what,
        },
    )
    return found, [(t0, stamps[-1])]


def _released_together(traces: Sequence[Observed]) -> _Matched | None:
    done = [t for t in traces if t.completed and len(t.chunks) >= BUFFERED_MIN_CHUNKS]
    if len(done) < STAIR_MIN_STREAMS or any(t.response_ns is None for t in done):
        return None
    first_head = min(t.response_ns for t in done if t.response_ns is not None)
    together = [t for t in done if t.request_ns <= first_head]
    if len(together) < STAIR_MIN_STREAMS:
        return None
    stamps = [
        stamp
        for t in together
        for stamp in (t.response_ns, t.chunks[0].stamp_ns, t.chunks[-1].stamp_ns)
        if stamp is not None
    ]
    sent = max(t.request_ns for t in together)
    window = _s(max(stamps) - min(stamps))
    silent = _s(min(stamps) - sent)
    if window > RELEASE_WINDOW_S or silent < STAIR_RISE_S:
        return None
    found = Finding(
        "blocked_loop",
        f"response heads and whole answers of {len(together)} streams sent together arrived "
        f"within {window:.3f} s, after {silent:.3f} s in which none of them got a byte",
        tuple(t.name for t in together),
        {"streams": len(together), "window_s": window, "silent_s": silent},
    )
    return found, [(sent, min(stamps))]


def _served_in_turn(traces: Sequence[Observed]) -> _Matched | None:
    heads = [t for t in traces if t.response_ns is not None]
    if len(heads) < STAIR_MIN_STREAMS:
        return None
    first = min(t.response_ns for t in heads if t.response_ns is not None)
    together = [t for t in heads if t.request_ns <= first]
    if len(together) < STAIR_MIN_STREAMS:
        return None
    ended = [
        (t.chunks[-1].stamp_ns, t)
        for t in together
        if t.completed and len(t.chunks) >= BUFFERED_MIN_CHUNKS
    ]
    queued = []
    for t in together:
        assert t.response_ns is not None
        waited = t.response_ns - t.request_ns >= QUEUED_MIN_WAIT_S * 1e9
        if waited and any(end <= t.response_ns and o is not t for end, o in ended):
            queued.append(t)
    if len(queued) < max(QUEUED_MIN_STREAMS, len(together) / 2):
        return None
    t0 = min(t.request_ns for t in together)
    first_end, served = min(((end, o) for end, o in ended), key=lambda e: e[0])
    under_way = [t for t in together if t.response_ns is not None and t.response_ns < first_end]
    if len(under_way) > SERVED_AT_ONCE_MAX:
        return None
    latest = max(t.response_ns for t in queued if t.response_ns is not None)
    found = Finding(
        "blocked_loop",
        f"{len(queued)} of {len(together)} streams sent together got their response heads only "
        f"after another had its whole answer (the first of them by {_s(first_end - t0):.3f} s, "
        f"{len(served.chunks)} chunks); the last head at {_s(latest - t0):.3f} s",
        tuple(t.name for t in queued),
        {
            "streams": len(together),
            "queued": len(queued),
            "first_answer_s": _s(first_end - t0),
            "last_head_s": _s(latest - t0),
        },
    )
    return found, [(t0, latest)]


def _cold_start(traces: Sequence[Observed]) -> Finding | None:
    started = sorted((t for t in traces if t.ttft is not None), key=lambda t: t.request_ns)
    if len(started) < COLD_MIN_STREAMS:
        return None
    first = started[0].ttft
    later = statistics.median(t.ttft for t in started[1:] if t.ttft is not None)
    assert first is not None
    if first < COLD_FACTOR * later or first - later < COLD_MIN_S:
        return None
    return Finding(
        "cold_start",
        f"first stream's TTFT {first:.3f} s, the {len(started) - 1} later streams' median "
        f"{later:.3f} s",
        (started[0].name,),
        {"first_ttft_s": first, "later_median_s": later, "later": len(started) - 1},
    )


def _probe_words(seen: ProbeWaits, probe: Probed) -> str:
    return (
        f"{probe.what} took up to {seen.longest_s:.3f} s there, waiting "
        f"{seen.share:.0%} of that time ({seen.waited} of {counted(seen.samples, 'probe')} "
        "waited)"
    )


def _probe_data(seen: ProbeWaits) -> dict[str, Any]:
    return {
        "probe_samples": seen.samples,
        "probe_waited": seen.waited,
        "probe_longest_s": seen.longest_s,
        "probe_share": seen.share,
    }


def _confirmed(matched: _Matched, probe: Probed | None) -> Finding | None:
    """A blocked_loop pattern as the probe saw it: unchanged where it has no sample in the
    pattern's windows; None where it kept answering there (the loop was free); else with the
    probe's wait added to its evidence and its cause in words."""
    finding, windows = matched
    seen = waits(probe, windows)
    if seen is None or probe is None:
        return finding
    if seen.share < PROBE_WAIT_SHARE:
        return None
    streams = counted(len(finding.streams), "stream")
    return Finding(
        finding.name,
        f"{finding.evidence}; {_probe_words(seen, probe)}",
        finding.streams,
        {**finding.data, **_probe_data(seen)},
        cause=(
            f"the event loop was blocked: {probe.what} took {seen.longest_s:.2f} s while "
            f"{streams} stalled"
        ),
    )


def _blocked_loop(traces: Sequence[Observed], probe: Probed | None) -> Finding | None:
    for matched in (
        _shared_stalls(traces),
        _staircase(traces, "heads"),
        _staircase(traces, "tokens"),
        _served_in_turn(traces),
        _released_together(traces),
    ):
        if matched is None:
            continue
        found = _confirmed(matched, probe)
        if found is not None:
            return found
    return None


def _queued(traces: Sequence[Observed], probe: Probed | None) -> Finding | None:
    firsts = [(t.chunks[0].stamp_ns, t) for t in traces if t.chunks]
    if probe is None or len(firsts) < STAIR_MIN_STREAMS:
        return None
    first = min(stamp for stamp, _ in firsts)
    together = sorted(
        ((stamp, t) for stamp, t in firsts if t.request_ns <= first), key=lambda a: a[0]
    )
    ended = [
        t.chunks[-1].stamp_ns
        for _, t in together
        if t.completed and len(t.chunks) >= BUFFERED_MIN_CHUNKS
    ]
    if len(together) < STAIR_MIN_STREAMS or not ended:
        return None
    first_end = min(ended)
    waiting = [
        (stamp, t)
        for stamp, t in together
        if stamp >= first_end and stamp - t.request_ns >= QUEUED_MIN_WAIT_S * 1e9
    ]
    if len(waiting) < QUEUED_MIN_STREAMS:
        return None
    start = min(t.request_ns for _, t in together)
    last = max(stamp for stamp, _ in waiting)
    seen = waits(probe, [(start, last)])
    if seen is None or seen.share >= PROBE_WAIT_SHARE:
        return None
    slots = sum(1 for stamp, _ in together if stamp < first_end)
    longest = max(_s(stamp - t.request_ns) for stamp, t in waiting)
    return Finding(
        "queued",
        f"{len(waiting)} of {len(together)} streams sent together waited up to {longest:.3f} s "
        f"for a slot: their first tokens came only after another stream's whole answer; "
        f"waiting began at a concurrency of {slots} ({slots} served at once); "
        f"{probe.what} answered meanwhile, in at most {seen.longest_s:.3f} s "
        f"({counted(seen.samples, 'probe')})",
        tuple(t.name for _, t in waiting),
        {
            "streams": len(together),
            "waiting": len(waiting),
            "concurrency": slots,
            "longest_wait_s": longest,
            "first_answer_s": _s(first_end - start),
            **_probe_data(seen),
        },
        cause=(
            f"the server was full: {len(waiting)} streams waited up to {longest:.2f} s for one "
            f"of its {slots} slots while {probe.what} answered in {seen.longest_s:.3f} s"
        ),
    )


def group_findings(traces: Sequence[Observed], probe: Probed | None = None) -> list[Finding]:
    """The findings only several streams of one test or load show: ``blocked_loop`` (shared
    stalls, else a staircase of heads, else of first tokens, else streams served in turn, else
    every answer released at once; where ``probe`` has samples in the pattern's windows, only
    if it waited there too), ``queued`` (only with the probe's samples) and ``cold_start``."""
    found = (_blocked_loop(traces, probe), _queued(traces, probe), _cold_start(traces))
    return [f for f in found if f is not None]


def findings_of(traces: Sequence[Observed], probe: Probed | None = None) -> list[Finding]:
    """Every finding of a test's or a load's streams, in :data:`KNOWN`'s order; a per-stream
    finding seen on several streams is listed once per stream. ``probe``: the samples of the
    probe sent beside them (:mod:`pytest_streamguard.verdict.probe`), which ``blocked_loop``
    and ``queued`` read."""
    found = [f for t in traces for f in trace_findings(t)] + group_findings(traces, probe)
    order = list(KNOWN)
    return sorted(found, key=lambda f: order.index(f.name))


#: The findings read from the target's side, not from the streams alone (a test record keeps
#: them beside what :func:`findings_of` reads from its traces).
SERVER_SIDE = frozenset({"not_cancelled"})

#: The bundled target's gauges :func:`not_cancelled` reads: requests its engine still
#: generates for, and streams that hold a slot (an open client connection).
ENGINE_GAUGE = "streamguard_target_engine_requests"
OPEN_GAUGE = "streamguard_target_active_streams"


def target_gauges(
    url: str, timeout: float = 2.0, attempts: int = 3
) -> Callable[[], tuple[float, float] | None]:
    """A reader of the target's engine requests and open streams (``GET url/metrics``, the
    bundled target's gauges); it returns None for a target that does not export both, or
    that did not answer in ``attempts`` tries of ``timeout`` seconds each (a target busy
    generating on a loaded machine once took over 1 s to answer, and a single try read that
    as a target without gauges)."""

    def read() -> tuple[float, float] | None:
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        for attempt in range(attempts):
            try:
                response = httpx.get(url.rstrip("/") + "/metrics", timeout=timeout)
                response.raise_for_status()
                families = {f.name: f for f in text_string_to_metric_families(response.text)}
                engine, open_ = families[ENGINE_GAUGE], families[OPEN_GAUGE]
                return float(engine.samples[0].value), float(open_.samples[0].value)
            except httpx.TransportError:
                if attempt == attempts - 1:
                    return None
            except (httpx.HTTPError, KeyError, IndexError, ValueError):
                return None
        return None

    return read


def _cut_for_good(trace: Observed) -> bool:
    """A stream whose connection the client side ended: cut, reset, a network error or a
    timeout, but not one held in a blackhole (the server cannot learn of that one)."""
    if trace.completed or trace.error_kind not in _CUT_KINDS or not trace.end_ns:
        return False
    end = trace.end_ns
    return not any(
        f.kind == "blackhole" and f.active_during(trace.request_ns, end)
        for f in getattr(trace, "faults", ())
    )


def not_cancelled(
    traces: Sequence[Observed],
    gauges: Callable[[], tuple[float, float] | None],
    *,
    after_s: float = NOT_CANCELLED_AFTER_S,
) -> Finding | None:
    """``not_cancelled``: once every stream of ``traces`` has ended and at least one was cut
    (``cut``, ``reset``, ``timeout``, ``network``, ``truncated``; not in a blackhole), the
    target's engine still generated ``after_s`` seconds after the last cut (``gauges``: the
    engine's requests and the open streams, see :func:`target_gauges`; only meaningful for a
    target no other client uses, such as the one the plugin started). Waits until then at
    most, and not at all once the engine is idle or the target exports neither gauge."""
    cut = [t for t in traces if _cut_for_good(t)]
    if not cut or any(t.end_ns is None for t in traces):
        return None
    last = max(t.end_ns for t in cut if t.end_ns is not None)
    until = last + int(after_s * 1e9)
    while True:
        read = gauges()
        if read is None:
            return None
        engine, open_ = read
        now = time.perf_counter_ns()
        if engine <= 0:
            return None
        if now >= until:
            break
        time.sleep(min(0.05, (until - now) / 1e9))
    since = _s(now - last)
    return Finding(
        "not_cancelled",
        f"generation still running {since:.3f} s after the cut: the target's engine had "
        f"{engine:g} {'request' if engine == 1 else 'requests'} and {open_:g} open "
        f"{'stream' if open_ == 1 else 'streams'} after every stream of the test had ended",
        tuple(t.name for t in cut),
        {"after_s": since, "engine_requests": engine, "open_streams": open_},
    )


def names_of(found: Iterable[Finding]) -> list[str]:
    """The distinct names, in :data:`KNOWN`'s order."""
    seen = {f.name for f in found}
    return [name for name in KNOWN if name in seen]


def findings_failed(gated: list[Finding]) -> FindingsFailed:
    """The :class:`~pytest_streamguard.errors.FindingsFailed` to raise for the findings a
    test's ``fail_on`` names (``gated``)."""
    names = ", ".join(dict.fromkeys(f.name for f in gated))
    words = next((f.cause for f in gated if f.cause), "")
    cause = f" (likely cause: {words})" if words else ""
    lines = [f"streamguard finding(s) this test fails on (fail_on): {names}{cause}"]
    lines += [f"  {f.describe()}" for f in gated]
    lines.append("  the thresholds and what each finding means: docs/findings.md")
    return FindingsFailed("\n".join(lines), gated)
