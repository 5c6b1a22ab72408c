"""The summary's notes on how far the timing of its figures can be trusted.

A figure is as good as its arrival stamps: :func:`client_delay_lines` warns when the client
machine itself was slow to read what had arrived, and :func:`stamp_source_lines` names the
streams whose stamps are not the kernel's receive stamps.
"""

from __future__ import annotations

from pytest_streamguard.common.display import counted
from pytest_streamguard.report.records import TestRecord
from pytest_streamguard.verdict.stats import percentile

__all__ = ["CLIENT_DELAY_WARN_S", "client_delay_lines", "stamp_source_lines"]

#: The client's read delay at p99 (seconds) above which the summary warns.
CLIENT_DELAY_WARN_S = 0.001


def client_delay_lines(records: list[TestRecord]) -> list[str]:
    """A warning when the client's own read delay (bytes arrived to bytes read, pooled over
    every stream that recorded one) passes 1 ms at p99: the client machine, not the server, was
    then the limit of the figures' timing."""
    reads = [d / 1e9 for r in records for t in r.traces for d in t.read_delay_ns]
    p99 = percentile(reads, 99)
    if p99 is None or p99 <= CLIENT_DELAY_WARN_S:
        return []
    return [
        f"warning: the client's own read delay (bytes arrived to bytes read) was "
        f"{p99 * 1e3:.1f} ms at p99, over 1 ms: the client machine was busy; arrival stamps "
        "are the kernel's, but events read together share the later one; a load reads on "
        "every core with processes='auto'"
    ]


# What each stamp source means, for streams whose stamps are not the kernel's.
_STAMP_SOURCES = {
    "loop": "when the event loop read the bytes (no kernel receive stamp on this platform)",
    "client": "when the client took the bytes (https, read by httpx's own transport)",
}


def stamp_source_lines(records: list[TestRecord]) -> list[str]:
    """A note for streams whose arrival stamps are not the kernel's: their figures hold the
    client's own delay, which the kernel's stamps leave out."""
    counts: dict[str, int] = {}
    for record in records:
        for trace in record.traces:
            if trace.stamps in _STAMP_SOURCES:
                counts[trace.stamps] = counts.get(trace.stamps, 0) + 1
    return [
        f"note: {counted(count, 'stream')} stamped {_STAMP_SOURCES[source]}, not at the "
        "kernel's receive stamp: their figures include the client's own delay"
        for source, count in sorted(counts.items())
    ]
