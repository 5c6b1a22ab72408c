"""Capacity, not blame: ``queued`` (streams waited for a slot of a full server while the probe
answered at once) and ``cold_start`` (the first stream's TTFT far above the later ones').
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pytest_streamguard.common.display import counted
from pytest_streamguard.verdict.findings.base import Finding, Observed
from pytest_streamguard.verdict.findings.base import seconds as _s
from pytest_streamguard.verdict.findings.buffered import BUFFERED_MIN_CHUNKS
from pytest_streamguard.verdict.findings.loop import (
    PROBE_WAIT_SHARE,
    QUEUED_MIN_STREAMS,
    QUEUED_MIN_WAIT_S,
    STAIR_MIN_STREAMS,
    sent_together,
)
from pytest_streamguard.verdict.findings.loop import probe_data as _probe_data
from pytest_streamguard.verdict.probe import Probed, waits

#: queued (capacity, not blame): of at least ``STAIR_MIN_STREAMS`` streams sent together, at
#: least ``QUEUED_MIN_STREAMS`` got their first token only after another of them had received
#: its whole answer (at least ``BUFFERED_MIN_CHUNKS`` chunks), ``QUEUED_MIN_WAIT_S`` or more
#: after their own request, while the probe (and under a stack every service's own) kept
#: answering: it waited under ``PROBE_WAIT_SHARE`` of that span. The concurrency at which
#: waiting began (its slots) is how many of them had their first token before that answer.

#: cold_start: at least this many streams with a first token; the first stream's TTFT at least
#: ``COLD_FACTOR`` times the median of the later ones and at least ``COLD_MIN_S`` above it.
COLD_MIN_STREAMS = 3
COLD_FACTOR = 3.0
COLD_MIN_S = 0.2


def cold_start(traces: Sequence[Observed]) -> Finding | None:
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


def queued(traces: Sequence[Observed], probe: Probed | None) -> Finding | None:
    firsts = [(t.chunks[0].stamp_ns, t) for t in traces if t.chunks]
    if probe is None or len(firsts) < STAIR_MIN_STREAMS:
        return None
    together = sent_together(firsts)
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
    heard = [waits(one, [(start, last)]) for one in probe.hops]
    if seen is None or any(w is not None and w.share >= PROBE_WAIT_SHARE for w in heard):
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
