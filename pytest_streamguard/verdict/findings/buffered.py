"""``buffered``: most of a stream's chunks arrived in one or two reads at its end (a hop that
collects the answer, then sends it).
"""

from __future__ import annotations

import itertools
from collections import Counter

from pytest_streamguard.common.display import counted
from pytest_streamguard.verdict.findings.base import Finding, Observed, held_here, sent_stamp
from pytest_streamguard.verdict.findings.base import seconds as _s
from pytest_streamguard.verdict.findings.own import own_gap

#: buffered (docs/findings.md says why each bound): a stream of at least this many chunks ...
BUFFERED_MIN_CHUNKS = 4
#: ... whose largest one or two arrivals (the reads within this many seconds of an arrival's
#: first: a gateway passing on a whole answer writes its events back to back) ...
BUFFERED_TOGETHER_S = 0.005
#: ... hold at least this share of its chunks ...
BUFFERED_SHARE = 0.75
#: ... at its end: the first this share of the way from the request to its last token (where
#: it completed, else to the cut) ...
BUFFERED_AT_END = 0.8
#: ... the last read at least this many seconds after the request (less is a busy machine) ...
BUFFERED_MIN_S = 0.25
#: ... sent over at least this many seconds, where the chunks carry the server's ``sent_ns``
#: (chunks the server sent together arrive together through any hop) ...
BUFFERED_SENT_SPAN_S = 0.1
#: ... and not where this machine held them this share of the silence before them, from the
#: first one's send (:func:`.held_here`: the Toxiproxy's waits for a CPU, the reader's loop).
BUFFERED_HELD_SHARE = 0.5


def buffered(trace: Observed) -> Finding | None:
    """``buffered`` on ``trace``, or ``own_fault`` where a fault the plugin applied made the
    gap that held the chunks (:mod:`.own`), or None."""
    chunks = trace.chunks
    if len(chunks) < BUFFERED_MIN_CHUNKS:
        return None
    # Chunks framed from one network read carry that read's stamp; an arrival is named by
    # its first read's.
    arrival = _arrivals(sorted({c.stamp_ns for c in chunks}))
    top = Counter(arrival[c.stamp_ns] for c in chunks).most_common(2)
    end = chunks[-1].stamp_ns if trace.completed or trace.end_ns is None else trace.end_ns
    at_end = trace.request_ns + BUFFERED_AT_END * (end - trace.request_ns)
    if top[0][0] < at_end:
        return None
    # The second arrival counts where it too is at the end (on a busy machine a stream's first
    # tokens often share a read: that pair is not what held the answer).
    if len(top) == 2 and (top[1][1] == 1 or top[1][0] < at_end):
        top = top[:1]
    arrivals = {stamp for stamp, _ in top}
    held = sum(n for _, n in top)
    if held < BUFFERED_SHARE * len(chunks) or arrival[chunks[-1].stamp_ns] not in arrivals:
        return None
    reads = sorted(stamp for stamp, first in arrival.items() if first in arrivals)
    last = reads[-1]
    at = _s(last - trace.request_ns)
    if at < BUFFERED_MIN_S:
        return None
    held_reads = set(reads)
    sent = [
        sent_ns
        for chunk in chunks
        if chunk.stamp_ns in held_reads and (sent_ns := sent_stamp(chunk)) is not None
    ]
    server = ""
    if len(sent) >= BUFFERED_MIN_CHUNKS:
        span = _s(max(sent) - min(sent))
        if span < BUFFERED_SENT_SPAN_S:
            return None
        server = f"; the server sent them over {span:.3f} s"
    # What held them: from the start of the longest gap before them (the request's, where the
    # head came with them; a few chunks may trickle in after it); one the plugin made is its own.
    arrived = {c.stamp_ns for c in chunks} | {trace.response_ns or trace.request_ns}
    stamps = [trace.request_ns, *sorted(s for s in arrived if s < min(reads)), min(reads)]
    since = max(itertools.pairwise(stamps), key=lambda gap: gap[1] - gap[0])[0]
    # This machine held them (the proxy, the reader) over that silence, from a send if stamped.
    on_way = min(sent) if sent and since < min(sent) < min(reads) else since
    if held_here(trace, on_way, min(reads)) >= BUFFERED_HELD_SHARE * (min(reads) - on_way) > 0:
        return None
    own = own_gap(trace, since, last, "buffered")
    if own is not None:
        return own
    distinct = len({stamp for stamp, _ in trace.reads})
    instants = "" if distinct == len(trace.reads) else f", at {counted(distinct, 'instant')}"
    word = "read" if len(reads) == 1 else "reads"
    # The span of one arrival's reads (across two arrivals it would be the gap between them).
    merged = len(arrivals) == 1 and len(reads) > 1
    within = f" within {1000 * _s(last - reads[0]):.0f} ms" if merged else ""
    return Finding(
        "buffered",
        f"{held} of {len(chunks)} chunks in {len(reads)} {word}{within}, the last at {at:.3f} s "
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


def _arrivals(stamps: list[int]) -> dict[int, int]:
    """Each read's stamp (sorted) and the first read of its arrival: the reads from one up to
    :data:`BUFFERED_TOGETHER_S` after it."""
    first: dict[int, int] = {}
    start = None
    for stamp in stamps:
        if start is None or stamp - start > BUFFERED_TOGETHER_S * 1e9:
            start = stamp
        first[stamp] = start
    return first
