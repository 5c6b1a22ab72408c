"""``bursts``: a stream's chunks released in groups of a fixed size or at a fixed period, a
hop that flushes by size (Go's ``bufio.Writer`` or ``io.Copy`` into one: 4 KB at a time) or
by timer, while the server sent them one by one.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter

from pytest_streamguard.verdict.findings.base import Finding, Observed, held_here, sent_stamp
from pytest_streamguard.verdict.findings.base import seconds as _s
from pytest_streamguard.verdict.findings.own import own_gap

#: bursts: at least this many reads each brought ``BURSTS_GROUP_CHUNKS`` chunks or more (three
#: sizes and gaps to compare: two agree by chance, as a busy machine's reads of a healthy one) ...
BURSTS_MIN_GROUPS = 4
BURSTS_GROUP_CHUNKS = 2
#: ... together holding at least this share of its chunks ...
BURSTS_SHARE = 0.75
#: ... at least ``BURSTS_MIN_GAP_S`` apart, less the Toxiproxy's wait for a CPU (a
#: healthy stream's reads that caught two tokens at once come a token's gap apart) ...
BURSTS_MIN_GAP_S = 0.05
#: ... and of a fixed size (every group but the last within this share of their median
#: bytes) or at a fixed period (the gaps between groups within this share of their median).
BURSTS_TOLERANCE = 0.1
#: Where the chunks carry the server's send stamps (``sent_ns``), the server must have sent
#: each group's chunks over at least this many seconds: chunks it wrote together arrive together
#: through any hop (a server that generates in batches), and nothing between grouped them.
BURSTS_SENT_SPAN_S = 0.02


def _fixed(values: list[float]) -> bool:
    middle = statistics.median(values)
    return middle > 0 and all(abs(v - middle) <= BURSTS_TOLERANCE * middle for v in values)


def _sent_spans(trace: Observed, groups: set[int]) -> list[float]:
    by_read: dict[int, list[int]] = {}
    for chunk in trace.chunks:
        if chunk.stamp_ns in groups and (sent := sent_stamp(chunk)) is not None:
            by_read.setdefault(chunk.stamp_ns, []).append(sent)
    return [_s(max(s) - min(s)) for s in by_read.values() if len(s) >= BURSTS_GROUP_CHUNKS]


def bursts(trace: Observed) -> Finding | None:
    """``bursts`` on ``trace``, ``own_fault`` where a fault the plugin applied made the gaps
    between its groups, or None."""
    per_read = Counter(c.stamp_ns for c in trace.chunks)
    groups = sorted(stamp for stamp, n in per_read.items() if n >= BURSTS_GROUP_CHUNKS)
    held = sum(per_read[stamp] for stamp in groups)
    if len(groups) < BURSTS_MIN_GROUPS or held < BURSTS_SHARE * len(trace.chunks):
        return None
    gaps = [b - a for a, b in itertools.pairwise(groups)]
    # Each gap less what this machine held over it (the proxy's CPU waits, the reader's loop):
    # where that leaves one short, a busy machine spaced the reads, not a hop.
    shortest = min(b - a - held_here(trace, a, b) for a, b in itertools.pairwise(groups))
    if shortest < BURSTS_MIN_GAP_S * 1e9:
        return None
    # A group's bytes: every read at its stamp (the reads of one arrival share the kernel's).
    bytes_at: Counter[int] = Counter()
    for at, n in trace.reads:
        bytes_at[at] += n
    sizes = [float(bytes_at[stamp]) for stamp in groups[:-1]]
    by_size = _fixed(sizes)
    by_period = _fixed([float(g) for g in gaps])
    if not by_size and not by_period:
        return None
    spans = _sent_spans(trace, set(groups))
    if spans and statistics.median(spans) < BURSTS_SENT_SPAN_S:
        return None
    longest = max(gaps)
    at = groups[gaps.index(longest)]
    own = own_gap(trace, at, at + longest, "bursts")
    if own is not None:
        return own
    period = _s(int(statistics.median(gaps)))
    how = (
        f"of about {statistics.median(sizes):.0f} B each, {period:.3f} s apart"
        if by_size
        else f"every {period:.3f} s"
    )
    return Finding(
        "bursts",
        f"{held} of {len(trace.chunks)} chunks came in {len(groups)} reads {how}, up to "
        f"{max(per_read.values())} chunks a read (a hop that flushes by "
        f"{'size' if by_size else 'timer'}?)",
        (trace.name,),
        {
            "chunks": len(trace.chunks),
            "held": held,
            "groups": len(groups),
            "by": "size" if by_size else "period",
            "group_bytes": statistics.median(sizes) if sizes else 0.0,
            "period_s": period,
        },
    )
