"""The proxy's forwarding delay at a headroom level, as the level's own streams show it
(docs/headroom.md, "The proxy's share").

It is measured on the level's own streams, not on a probe beside them: a handful of direct
reads while the proxy forwards a hundred streams says nothing of what those hundred went
through. Each data event's delay is the client's kernel receive stamp minus the target's send
stamp (``sent_ns``), both ``CLOCK_MONOTONIC`` on one machine: an upper bound on the proxy's
share that needs no help from the proxy, so it reads the same through the embedded server and
a real Toxiproxy. Not measured (and said so, with why) where no event carries ``sent_ns``,
where a stream was read on another machine (a Ray shard's clock is its node's), or where a
delay is negative or implausibly long (a ``sent_ns`` on some other clock).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_streamguard.stream.trace import StreamTrace
from pytest_streamguard.verdict.stats import percentile

__all__ = ["NOT_MEASURED", "Forwarding", "forwarding"]

NOT_MEASURED = "not measured"
# A send stamp this far before its arrival is on another clock, not a slow hop.
_PLAUSIBLE_S = 600.0


@dataclass(frozen=True)
class Forwarding:
    """A level's forwarding delay: ``line`` as shown (``p50 0.41 ms, p99 1.7 ms, max 2.3 ms
    over 240 events (send stamp to kernel receipt)`` or ``not measured: ...``) and its
    ``figures`` (seconds and a count; empty when not measured)."""

    line: str
    figures: dict[str, Any] = field(default_factory=dict)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def forwarding(
    traces: Sequence[StreamTrace], toxic_s: float | None = None, toxic: str = ""
) -> Forwarding:
    """The forwarding delay of a level's streams (see the module docstring). ``toxic``: the
    level's own toxic on the hop, in words; ``toxic_s``: the fixed delay it adds to every
    event (a ``latency`` level), taken off each event's delay, or None where it cannot be
    (``jitter``, ``bandwidth``: their figures say the toxic is in them)."""
    if any(t.node is not None for t in traces):
        return Forwarding(f"{NOT_MEASURED}: streams read on other machines (their own clocks)")
    delays: list[float] = []
    kernel = True
    for trace in traces:
        stamped = [
            chunk
            for chunk in trace.chunks
            if isinstance(chunk.data, dict) and isinstance(chunk.data.get("sent_ns"), int)
        ]
        kernel = kernel and (not stamped or trace.stamps == "kernel")
        delays.extend((chunk.stamp_ns - chunk.data["sent_ns"]) / 1e9 for chunk in stamped)
    if not delays:
        return Forwarding(f"{NOT_MEASURED}: the target's events carry no sent_ns send stamp")
    if min(delays) < 0 or max(delays) > _PLAUSIBLE_S:
        return Forwarding(
            f"{NOT_MEASURED}: the events' sent_ns is not on this machine's monotonic clock"
        )
    if toxic_s is not None:
        delays = [delay - toxic_s for delay in delays]
    p50, p99 = percentile(delays, 50) or 0.0, percentile(delays, 99) or 0.0
    high = max(delays)
    stamp = "kernel receipt" if kernel else "client stamp"
    if toxic:
        how = "less" if toxic_s is not None else "with"
        stamp += f", {how} the level's {toxic}"
    return Forwarding(
        f"p50 {_ms(p50)}, p99 {_ms(p99)}, max {_ms(high)} over {len(delays)} events "
        f"(send stamp to {stamp})",
        {
            "forwarding_p50_s": p50,
            "forwarding_p99_s": p99,
            "forwarding_max_s": high,
            "forwarding_events": len(delays),
            "forwarding_stamps": "kernel" if kernel else "client",
        },
    )
