"""The shard protocol: one load split into parts that are read apart and merged exactly (what
a user sees is docs/load.md's "Several processes").

A :class:`Shard` is what one reader (a local process, or a Ray task) reads: its share of the
load's concurrent streams (closed loop), or its share of the load's arrival schedule (open loop:
drawn once for the whole load and dealt round-robin, so the union of the shards' arrivals is
exactly the process asked for). Each shard reads with the plugin's own client on its own host's
clock, starting at one origin, judges its streams where their recorded bytes are, and returns
its traces as builtin-typed dicts; :func:`merge` puts them into one
:class:`~pytest_streamguard.load.LoadResult` in the order sent, and :func:`lost_traces` stands
in for a shard that never returned, so no stream is ever dropped.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pytest_streamguard.common.display import counted
from pytest_streamguard.formats import AUTO
from pytest_streamguard.judge import AUTO as AUTO_CLIENT
from pytest_streamguard.judge import JUDGES, NONE, judge_for, judge_trace
from pytest_streamguard.judge.registry import is_builtin
from pytest_streamguard.load import LoadPlan, LoadResult, arun
from pytest_streamguard.stream.client import StreamRecorder
from pytest_streamguard.stream.recorded import Recorded
from pytest_streamguard.stream.request import StreamRequest
from pytest_streamguard.stream.trace import StreamTrace


@dataclass(frozen=True)
class Shard:
    """One reader's part of a load: its own ``plan``, its start ``offsets`` out of the whole
    load's open-loop schedule (None for a closed loop), how many shards the load has (``of``),
    the judge of its streams (``client``) and whether to send back the bytes of a stream no
    built-in judge judged there (``ship``: a judge the user registered lives in the parent)."""

    index: int
    of: int
    plan: LoadPlan
    request: StreamRequest
    offsets: tuple[float, ...] | None = None
    client: str = NONE
    ship: bool = False

    @property
    def bound_s(self) -> float:
        """Seconds after the origin by which every stream of the shard has ended: each stream
        is bounded by its read limits (``total``), and the last one starts at the end of the
        schedule or of the duration."""
        last_start = 0.0
        if self.offsets:
            last_start = self.offsets[-1]
        elif self.plan.duration is not None:
            last_start = self.plan.duration
        return last_start + self.request.limits.total

    def describe(self) -> str:
        """``shard 2 of 4 (25 streams)``."""
        return f"shard {self.index + 1} of {self.of} ({counted(self.plan.n, 'stream')})"


def split(plan: LoadPlan, request: StreamRequest, count: int, client: str = NONE) -> list[Shard]:
    """``plan`` in at most ``count`` shards (never an empty one), each judged by ``client``.

    Closed loop: the ``n`` concurrent streams (or workers, with ``duration``) spread as evenly
    as they go. Open loop: the load's schedule (:meth:`LoadPlan.start_offsets`, drawn once)
    dealt round-robin, so shard ``k`` sends arrivals ``k``, ``k + count``, ..."""
    # A shard is read in another process or on another node: the slow reader's pace callback
    # (bound to this session's faults) stays here.
    request = dataclasses.replace(request, on_pace=None)
    ship = client != NONE and not all(is_builtin(judge) for judge in JUDGES.values())
    if plan.rate is None:
        count = min(count, plan.n)
        sizes = [plan.n // count + (k < plan.n % count) for k in range(count)]
        parts = [LoadPlan(n=size, duration=plan.duration) for size in sizes]
        return [
            Shard(k, count, part, request, client=client, ship=ship) for k, part in enumerate(parts)
        ]
    schedule = plan.start_offsets()
    count = min(count, len(schedule))
    shards = []
    for k in range(count):
        offsets = tuple(schedule[k::count])
        part = dataclasses.replace(plan, n=len(offsets), rate=plan.rate / count)
        shards.append(Shard(k, count, part, request, offsets=offsets, client=client, ship=ship))
    return shards


async def aread_shard(
    shard: Shard, origin: Callable[[], Awaitable[int]], node: str | None = None
) -> dict[str, Any]:
    """Read ``shard``'s streams on the running loop. ``origin`` is awaited once the shard's
    client is ready and returns the instant the load starts (this host's
    ``perf_counter_ns()``). Each stream is judged here by the shard's ``client``
    (:func:`judged_here`). The result is builtin-typed data: ``shard``, ``node``, ``wall_s``
    and ``traces`` (each :meth:`~pytest_streamguard.stream.trace.StreamTrace.to_dict`, with
    its recorded response under ``recorded`` where reader and client disagree unexplained)."""
    request = shard.request

    def recorder(i: int) -> StreamRecorder:
        return StreamRecorder(request, f"shard {shard.index + 1} stream {i + 1}")

    result = await arun(
        shard.plan, recorder, request.socket_options(), offsets=shard.offsets, origin=origin
    )
    traces = []
    for trace in result.traces:
        trace.node = node
        send = judged_here(trace, shard.client) or (shard.ship and trace.client is None)
        raw = trace.to_dict()
        if send and trace.recorded is not None:
            raw["recorded"] = dataclasses.asdict(trace.recorded)
        traces.append(raw)
    return {"shard": shard.index, "node": node, "wall_s": result.wall_s, "traces": traces}


def judged_here(trace: StreamTrace, client: str) -> bool:
    """Judge ``trace`` by ``client`` in the shard, where its recorded bytes are (``auto`` on a
    node without the format's client, or a named client not installed there, leaves the
    reader's verdict); whether the reader and the client disagree with no rule to explain it,
    so the bytes go back with the trace (for ``streamguard_transcripts``)."""
    if client not in JUDGES and client != AUTO_CLIENT:
        return False  # none, or the user's own judge (registered in the parent only)
    judge = judge_for(client, trace.format)
    if judge is None or not judge.available() or not is_builtin(judge):
        return False
    judge_trace(trace, client)
    judged = trace.judged
    return trace.reader_agrees is False and judged is not None and judged["rule"] is None


def lost_traces(
    shard: Shard, origin_ns: int, kind: str, error: str, node: str | None = None
) -> list[StreamTrace]:
    """Every stream ``shard`` was given, as failed traces (``kind``, ``error``): what a shard
    that never returned leaves in the result. With ``duration`` a closed-loop shard's workers
    may have read several streams each; one failed trace stands for each worker."""
    request = shard.request
    now = time.perf_counter_ns()
    starts = shard.offsets if shard.offsets is not None else (0.0,) * shard.plan.n
    return [
        StreamTrace(
            name=f"shard {shard.index + 1} stream {i + 1}",
            method=request.method,
            url=request.url,
            format=AUTO if request.stream_format is None else request.stream_format.name,
            request_ns=origin_ns + round(offset * 1e9),
            end_ns=max(now, origin_ns + round(offset * 1e9)),
            error_kind=kind,
            error=error,
            node=node,
        )
        for i, offset in enumerate(starts)
    ]


def merge(
    plan: LoadPlan, results: list[dict[str, Any] | list[StreamTrace]], origin_ns: int
) -> LoadResult:
    """One :class:`LoadResult` for the whole load from each shard's result: the dict it
    returned, or the failed traces :func:`lost_traces` made for it (``origin_ns`` on this
    host's clock). Every trace is kept, in the order sent."""
    traces: list[StreamTrace] = []
    wall_s = 0.0
    for result in results:
        if isinstance(result, list):
            traces.extend(result)
            ends = (t.end_ns for t in result if t.end_ns is not None)
            wall_s = max(wall_s, (max(ends, default=origin_ns) - origin_ns) / 1e9)
            continue
        for raw in result["traces"]:
            trace = StreamTrace.from_dict(raw)
            if raw.get("recorded") is not None:
                trace.recorded = _recorded(raw["recorded"])
            traces.append(trace)
        wall_s = max(wall_s, float(result["wall_s"]))
    traces.sort(key=lambda trace: trace.request_ns)
    return LoadResult(plan, traces, wall_s)


def _recorded(raw: dict[str, Any]) -> Recorded:
    """A recorded response sent back by a shard (``dataclasses.asdict`` of it)."""
    raw = dict(raw)
    raw["headers"] = [(name, value) for name, value in raw["headers"]]
    raw["reads"] = [(stamp_ns, data) for stamp_ns, data in raw["reads"]]
    return Recorded(**raw)
