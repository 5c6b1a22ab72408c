"""A headroom search driven to its end: each level the search asks for is run as a load under
its fault, judged by the test's deadline, and kept as a :class:`~.result.HeadroomLevel` with
the hop's forwarding delay its streams show (:mod:`~.forwarding`).

The guard passes the load to run (``n`` streams, at ``rate`` or closed loop) as a function, so
this family sits below it (``LAYERS`` in ``tests/test_import_cycles.py``); a sync search runs
:func:`ameasure` on a private event loop.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_streamguard.common.numbers import whole
from pytest_streamguard.faults.inject import Faults, log_of
from pytest_streamguard.headroom.forwarding import Forwarding, forwarding
from pytest_streamguard.headroom.levels import RATE_WINDOW_S, Scale, judge, resolve_axis
from pytest_streamguard.headroom.result import Headroom, HeadroomLevel
from pytest_streamguard.headroom.search import REPEATS, Search
from pytest_streamguard.load import MAX_STREAMS, LoadResult
from pytest_streamguard.stream.trace import FaultRecord
from pytest_streamguard.verdict.deadlines import Deadline

__all__ = ["Measurement", "ameasure"]

#: Runs one level's load: ``n`` streams, open loop at ``rate`` requests/s or closed (None).
LoadAt = Callable[[int, "float | None"], Awaitable[LoadResult]]

NO_DEADLINE = (
    "streamguard.headroom() judges each level by the test's token_deadline: mark the test "
    "with @pytest.mark.token_deadline(ttft=..., chunk=..., percentile=...)"
)


@dataclass
class Measurement:
    """One headroom search of a test: its levels, the deadline they are judged by, the load
    at a level that is not a number of streams (``streams``), and the faults it applies."""

    scale: Scale
    deadline: Deadline
    streams: int
    faults: Faults
    levels: list[HeadroomLevel] = field(default_factory=list)
    search: Search = field(init=False)

    def __post_init__(self) -> None:
        self.search = Search(self.scale.count, REPEATS)

    @classmethod
    def of(
        cls,
        deadline: Deadline | None,
        faults: Faults,
        *,
        vary: str,
        up_to: Any,
        precision: Any,
        streams: Any,
    ) -> Measurement:
        """A search's options checked (a ValueError names what is accepted)."""
        if deadline is None:
            raise ValueError(NO_DEADLINE)
        scale = resolve_axis(vary, up_to, precision)
        if not whole(streams) or not 1 <= streams <= MAX_STREAMS:
            raise ValueError(
                f"headroom(streams={streams!r}): expected a whole number of concurrent streams "
                f"from 1 to {MAX_STREAMS} (each level's load, unless vary='streams')"
            )
        if vary == "streams" and scale.up_to > MAX_STREAMS:
            raise ValueError(f"headroom(up_to={scale.up_to:g}): at most {MAX_STREAMS} streams")
        return cls(scale, deadline, streams, faults)

    def load_at(self, level: float) -> tuple[int, float | None]:
        """The load a level runs: ``(n, rate)``."""
        vary = self.scale.axis.vary
        if vary == "streams":
            return int(level), None
        if vary == "rate":
            n = max(self.streams, math.ceil(level * RATE_WINDOW_S))
            return min(n, MAX_STREAMS), level
        return self.streams, None

    def fault_at(self, level: float) -> FaultRecord | None:
        """Put the level's fault on (none for streams and rate)."""
        fault = self.scale.axis.fault
        return None if fault is None else fault(self.faults, level)

    def forwarding_at(self, level: float, result: LoadResult) -> Forwarding:
        """The hop's forwarding delay at ``level`` (:mod:`~.forwarding`), the level's own
        latency taken off, or its jitter or bandwidth toxic named in it."""
        vary = self.scale.axis.vary
        if vary == "latency":
            return forwarding(result.traces, level / 1e3, f"{level:g} ms latency toxic")
        if vary in ("jitter", "bandwidth"):
            unit = self.scale.axis.unit
            return forwarding(result.traces, None, f"{level:g} {unit} {vary} toxic")
        return forwarding(result.traces)

    def keep(self, level: float, result: LoadResult) -> bool:
        """Judge a level's load and keep it; whether it held."""
        judged = judge(result, self.deadline)
        confirming = any(kept.level == level for kept in self.levels)
        delay = self.forwarding_at(level, result)
        self.levels.append(
            HeadroomLevel(
                level=level,
                held=judged.held,
                figures={**judged.figures, **delay.figures},
                violations=judged.violations,
                findings=judged.findings,
                confirming=confirming,
                forwarding=delay.line,
            )
        )
        return judged.held

    def headroom(self) -> Headroom:
        """What the search found."""
        search, scale = self.search, self.scale
        broke = search.broke_at
        broke_at = None if broke is None else scale.level(broke)
        low, high = sorted(map(scale.level, search.spread))
        # The cause of a run of broke_at that broke (a repeat of it may have held).
        cause = next(
            (k.cause for k in reversed(self.levels) if k.level == broke_at and not k.held), ""
        )
        return Headroom(
            vary=scale.axis.vary,
            unit=scale.axis.unit,
            value=scale.level(search.value),
            spread=(low, high),
            broke_at=broke_at,
            cause=cause,
            levels=tuple(self.levels),
            up_to=scale.up_to,
            precision=scale.precision,
            deadline=self.deadline.to_dict(),
        )


async def ameasure(measurement: Measurement, load: LoadAt) -> Headroom:
    """Run the search to its end, each level's load by ``load``."""
    search = measurement.search
    while (k := search.next_level()) is not None:
        level = measurement.scale.level(k)
        record = measurement.fault_at(level)
        try:
            result = await load(*measurement.load_at(level))
        finally:
            if record is not None:
                log_of(measurement.faults).withdraw(record)
        search.tell(measurement.keep(level, result))
    return measurement.headroom()
