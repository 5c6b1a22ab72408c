"""``backpressure``: under a throttle of the client's side, the server's writes waited."""

from __future__ import annotations

from typing import Any

from pytest_streamguard.verdict.findings.base import Finding, Observed, sent_stamp
from pytest_streamguard.verdict.findings.base import seconds as _s

#: backpressure (docs/findings.md says why): under a throttle of the client's side that paced
#: its reads (they took ``BACKPRESSURE_PACED`` of its rate or more), ``BACKPRESSURE_MIN_CHUNKS``
#: chunks carrying ``sent_ns`` waited this many seconds longer from the server's write to the
#: client's read than the quickest, less their own bytes' time at the throttle's rate.
BACKPRESSURE_MIN_S = 0.25
BACKPRESSURE_MIN_CHUNKS = 3
BACKPRESSURE_PACED = 0.5
THROTTLES = frozenset({"bandwidth", "slow_reader"})


def _throttle(trace: Observed) -> Any:
    end = trace.end_ns if trace.end_ns is not None else trace.request_ns
    for fault in getattr(trace, "faults", ()):
        if fault.kind in THROTTLES and fault.active_during(trace.request_ns, end):
            return fault
    return None


def _limit_kb(throttle: Any) -> float:
    """The throttle's rate in KB/s."""
    if throttle.kind == "bandwidth":
        return float(throttle.params["kb_per_second"])
    return float(throttle.params["bytes_per_second"]) / 1000


def backpressure(trace: Observed) -> Finding | None:
    throttle = _throttle(trace)
    if throttle is None:
        return None
    on = throttle.on_ns if throttle.on_ns is not None else trace.request_ns
    off = throttle.off_ns if throttle.off_ns is not None else trace.end_ns or trace.request_ns
    # Surely under the throttle: before the call that lifted it began (what the client reads
    # while that call runs is already the buffers' drain, kilobytes at once).
    lifting = getattr(throttle, "lifting_ns", None)
    off = min(off, lifting) if lifting is not None else off
    bytes_per_ns = _limit_kb(throttle) * 1000 / 1e9

    def own(chunk: Any) -> int:
        return round(getattr(chunk, "nbytes", 0) / bytes_per_ns)

    # What each chunk waited queued behind earlier bytes: from the server's write to the
    # client's read, less the time its own bytes took at the throttle's rate when it was read
    # under the throttle (that part is the throttle's, not a queue's).
    waits = [
        chunk.stamp_ns - sent - (own(chunk) if on <= chunk.stamp_ns <= off else 0)
        for chunk in trace.chunks
        if (sent := sent_stamp(chunk)) is not None
    ]
    if len(waits) < BACKPRESSURE_MIN_CHUNKS:
        return None
    quickest = min(waits)
    held = [w - quickest for w in waits if w - quickest >= BACKPRESSURE_MIN_S * 1e9]
    if len(held) < BACKPRESSURE_MIN_CHUNKS:
        return None
    # The client's read rate while the throttle was on (a test may lift it to drain the rest).
    # (The first read's bytes came before the span the rate is over.)
    during = [(stamp, n) for stamp, n in trace.reads if on <= stamp <= off]
    nbytes = sum(n for _, n in during)
    span = _s(during[-1][0] - during[0][0]) if len(during) > 1 else 0.0
    rate = (nbytes - during[0][1]) / span / 1000 if span > 0 else 0.0
    if rate < BACKPRESSURE_PACED * _limit_kb(throttle):
        return None
    longest = _s(max(held))
    return Finding(
        "backpressure",
        f"under {throttle.describe()}: {len(held)} of {len(waits)} chunks waited "
        f"{BACKPRESSURE_MIN_S:g} s to {longest:.3f} s longer from the server's write to the "
        f"client's read than the quickest (past their own bytes' time at its rate); the client "
        f"read {rate:.1f} KB/s while it was on",
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
