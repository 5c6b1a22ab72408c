"""Sharded loads on a Ray cluster: ``--streamguard-ray ADDRESS`` (the ``ray`` extra; what a
user sees is docs/scaling.md's).

The shards (:mod:`pytest_streamguard.load.shards`) run as Ray tasks, shard ``k`` pinned to
node ``k`` modulo the alive nodes. A small actor on the driver's node is the start line: each
task reports ``ready`` once its loop and client are set up, and the driver then gives one
wall-clock instant that every task turns into its own ``perf_counter_ns()`` (wall clocks only
place the start; every stamp stays on its host's monotonic clock). Tasks run with
``max_retries=0``, so no stream is read twice; a lost or overrunning task's streams stay in
the result as failed. Ray is imported only when a sharded load runs; the session's
connection is made then and shut down at the end of the session if this plugin made it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from pytest_streamguard.common.numbers import whole
from pytest_streamguard.judge import NONE
from pytest_streamguard.load import LoadPlan, LoadResult, _loop_factory
from pytest_streamguard.load.shards import Shard, aread_shard, lost_traces, merge, split
from pytest_streamguard.stream.request import StreamRequest
from pytest_streamguard.stream.trace import StreamTrace

RAY_MISSING = (
    "--streamguard-ray needs Ray, which is not installed: pip install 'pytest-streamguard[ray]'"
)
MAX_SHARDS = 1024
#: Seconds every task may take to be scheduled, start a worker and set up (a cold cluster).
READY_TIMEOUT = 120.0
#: From the driver's go to the origin: time for every task to hear it.
_GO_LEAD_S = 0.2
#: Beyond a shard's bound: time for a task to return a large result.
_RESULT_SLACK_S = 30.0
_POLL_S = 0.05


def check_shards(shards: object) -> int | None:
    """``shards`` as given to ``load()``, or a ValueError saying what is accepted."""
    if shards is None:
        return None
    if not whole(shards) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(
            f"load shards={shards!r} is not accepted: expected an int from 1 to {MAX_SHARDS} "
            "(Ray tasks that read the load's streams), or None for one per alive node"
        )
    return shards


class _StartLine:
    """A Ray actor: tasks wait on it for the one start instant (wall clock, ns)."""

    def __init__(self) -> None:
        self.nodes: dict[int, str] = {}
        self.origin_wall_ns = 0
        self.started = asyncio.Event()

    async def ready(self, index: int, node: str) -> int:
        """Shard ``index`` on ``node`` is ready; returns when the load starts."""
        self.nodes[index] = node
        await self.started.wait()
        return self.origin_wall_ns

    async def ready_nodes(self) -> dict[int, str]:
        """The shards ready so far and their nodes."""
        return dict(self.nodes)

    async def go(self, origin_wall_ns: int) -> None:
        """Start every shard at ``origin_wall_ns``."""
        self.origin_wall_ns = origin_wall_ns
        self.started.set()


def _read_on_node(shard: Shard, start_line: Any) -> dict[str, Any]:
    """The Ray task: read ``shard`` on this node, starting when ``start_line`` says."""
    import ray

    node = str(ray.get_runtime_context().get_node_id())

    async def origin() -> int:
        ref = start_line.ready.remote(shard.index, node)
        origin_wall_ns: int = await asyncio.wrap_future(ref.future())
        return time.perf_counter_ns() + (origin_wall_ns - time.time_ns())

    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(aread_shard(shard, origin, node=node))


class RayShards:
    """The session's way to a Ray cluster, connected on the first sharded load."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._connected_here = False
        self._remote: tuple[Any, Any] | None = None

    def _ray(self) -> Any:
        try:
            import ray
        except ImportError:
            raise RuntimeError(RAY_MISSING) from None
        if not ray.is_initialized():
            if self.address == "local":
                ray.init(include_dashboard=False)
            else:
                ray.init(address=self.address)
            self._connected_here = True
        if self._remote is None:
            task = ray.remote(num_cpus=0, max_retries=0)(_read_on_node)
            start_line = ray.remote(num_cpus=0, max_restarts=0)(_StartLine)
            self._remote = (task, start_line)
        return ray

    def run(
        self, plan: LoadPlan, request: StreamRequest, shards: int | None, client: str = NONE
    ) -> LoadResult:
        """Run ``plan`` as Ray tasks to its end (blocking), each task judging its streams by
        ``client`` on its node."""
        from ray.exceptions import GetTimeoutError, RayError
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self._ray()
        assert self._remote is not None
        task, start_line_class = self._remote
        nodes = sorted(str(n["NodeID"]) for n in ray.nodes() if n["Alive"])
        here = str(ray.get_runtime_context().get_node_id())
        # By default one shard per alive node; one per CPU for a cluster started here.
        local = self.address == "local"
        every = max(1, int(ray.cluster_resources().get("CPU", 1))) if local else len(nodes)
        # The embedded Toxiproxy's pid means nothing on another machine's nodes.
        request = request if local else dataclasses.replace(request, proxy_pid=None)
        parts = split(plan, request, shards or every, client)
        start_line = start_line_class.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)
        ).remote()
        refs: list[Any] = []
        try:
            refs = [
                task.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(
                        nodes[k % len(nodes)], soft=False
                    )
                ).remote(part, start_line)
                for k, part in enumerate(parts)
            ]
            ready = self._wait_ready(ray, start_line, refs)
            origin_ns = time.perf_counter_ns() + round(_GO_LEAD_S * 1e9)
            ray.get(start_line.go.remote(time.time_ns() + round(_GO_LEAD_S * 1e9)))
            end = time.monotonic() + _GO_LEAD_S + max(p.bound_s for p in parts) + _RESULT_SLACK_S
            results: list[dict[str, Any] | list[StreamTrace]] = []
            for k, (part, ref) in enumerate(zip(parts, refs, strict=True)):
                node = ready.get(part.index, nodes[k % len(nodes)])
                where = f"{part.describe()} on Ray node {node}"
                try:
                    results.append(ray.get(ref, timeout=max(end - time.monotonic(), 0.0)))
                except GetTimeoutError:
                    ray.cancel(ref, force=True)
                    error = f"{where} was still running past its bound; cancelled"
                    results.append(lost_traces(part, origin_ns, "timeout", error, node))
                except RayError as exc:
                    cause = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    error = f"{where} was lost ({type(exc).__name__}: {cause})"
                    results.append(lost_traces(part, origin_ns, "network", error, node))
        finally:
            # Interrupted (Ctrl-C) or failed: no task reads on after the load.
            pending = ray.wait(refs, num_returns=len(refs), timeout=0)[1] if refs else []
            for ref in pending:
                ray.cancel(ref, force=True)
            ray.kill(start_line)
        return merge(plan, results, origin_ns)

    def _wait_ready(self, ray: Any, start_line: Any, refs: list[Any]) -> dict[int, str]:
        """Wait until every task is ready or has already ended (failed), at most
        :data:`READY_TIMEOUT`; the ready shards' nodes."""
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            ready: dict[int, str] = ray.get(start_line.ready_nodes.remote())
            ended, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            finished = {i for i, ref in enumerate(refs) if ref in ended}
            if len(set(ready) | finished) >= len(refs) or time.monotonic() > deadline:
                return ready
            time.sleep(_POLL_S)

    async def arun(
        self, plan: LoadPlan, request: StreamRequest, shards: int | None, client: str = NONE
    ) -> LoadResult:
        """:meth:`run` in a thread, so the test's event loop keeps running."""
        return await asyncio.to_thread(self.run, plan, request, shards, client)

    def close(self) -> None:
        """Disconnect from Ray if this session connected (a ``local`` cluster stops)."""
        if self._connected_here:
            import ray

            ray.shutdown()
            self._connected_here = False
