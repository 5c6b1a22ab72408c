"""``total_timeout``: every stream cut at the same elapsed time since its request, while it
still flowed: a hop's write or total timeout (a gateway's 1 s ``WriteTimeout``, a proxy's
``proxy_send_timeout`` or a load balancer's request timeout), not a read timeout after a silence
(``idle_cut``, :mod:`.ends`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pytest_streamguard.common.display import counted
from pytest_streamguard.verdict.findings.base import Finding, Observed
from pytest_streamguard.verdict.findings.base import seconds as _s
from pytest_streamguard.verdict.findings.ends import IDLE_CUT_KINDS, IDLE_MIN_S
from pytest_streamguard.verdict.findings.own import explained, own_fault

#: total_timeout: at least this many streams that did not complete, cut by something on the
#: way (``cut``, ``reset``, ``network``, ``truncated``: never ``timeout``, the plugin's own
#: client) ...
TOTAL_MIN_STREAMS = 2
#: ... each at least this many seconds after its request ...
TOTAL_MIN_S = 0.5
#: ... all within this share (or ``TOTAL_TOLERANCE_S``) of their median elapsed time ...
TOTAL_TOLERANCE = 0.05
TOTAL_TOLERANCE_S = 0.05
#: ... while they still flowed: the silence before each cut under this share of its elapsed
#: time, and under ``IDLE_MIN_S`` (a cut after a long silence is a read timeout's,
#: ``idle_cut``) ...
TOTAL_FLOWING_SHARE = 0.5
#: ... and no stream of the test completed after running longer than that (every stream that
#: lived that long was cut then).


def _last_byte(trace: Observed) -> int:
    head = trace.response_ns if trace.response_ns is not None else trace.request_ns
    return max([head, *(c.stamp_ns for c in trace.chunks), *trace.heartbeat_ns])


def total_timeout(traces: Sequence[Observed]) -> Finding | None:
    """``total_timeout`` (or ``own_fault`` where the plugin's own cut ended the streams), or
    None."""
    cut = [
        t
        for t in traces
        if not t.completed and t.error_kind in IDLE_CUT_KINDS and t.end_ns is not None
    ]
    if len(cut) < TOTAL_MIN_STREAMS:
        return None
    elapsed = {t.name: _s((t.end_ns or 0) - t.request_ns) for t in cut}
    middle = statistics.median(elapsed.values())
    spread = max(abs(e - middle) for e in elapsed.values())
    if middle < TOTAL_MIN_S or spread > max(TOTAL_TOLERANCE * middle, TOTAL_TOLERANCE_S):
        return None
    silences = [_s((t.end_ns or 0) - _last_byte(t)) for t in cut]
    if max(silences) >= min(TOTAL_FLOWING_SHARE * middle, IDLE_MIN_S):
        return None
    longer = [
        t
        for t in traces
        if t.completed and t.end_ns is not None and _s(t.end_ns - t.request_ns) > middle + spread
    ]
    if longer:
        return None
    names = tuple(t.name for t in cut)
    own = explained(cut, [(t.end_ns or 0, t.end_ns or 0) for t in cut])
    if own is not None:
        return own_fault("total_timeout", own, names, middle)
    kinds = ", ".join(sorted({str(t.error_kind) for t in cut}))
    return Finding(
        "total_timeout",
        f"{counted(len(cut), 'stream')} ended {kinds} {min(elapsed.values()):.3f} s to "
        f"{max(elapsed.values()):.3f} s after their requests, still flowing (at most "
        f"{max(silences):.3f} s after their last byte); none ran longer (a {middle:.1f} s "
        "write or total timeout on the way?)",
        names,
        {
            "streams": len(cut),
            "elapsed_s": middle,
            "spread_s": spread,
            "longest_silence_s": max(silences),
        },
    )
