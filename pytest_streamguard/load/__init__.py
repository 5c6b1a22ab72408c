"""Many concurrent streams in one test: closed-loop and open-loop load (docs/load.md), with
pooled statistics.

Every stream is read by the plugin's async client
(:func:`~pytest_streamguard.stream.client.aread_stream`) over one shared ``httpx.AsyncClient``: one
connection pool sized for the load, ``TCP_NODELAY``, and no per-chunk work beyond stamping and
parsing, so hundreds of streams are stamped within a millisecond of their arrival
(``benchmarks/run.py`` measures how many). The sync entry point runs the load on a private event
loop (uvloop when installed), so it works in plain sync tests.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from pytest_streamguard.common.display import counted
from pytest_streamguard.common.numbers import finite
from pytest_streamguard.common.tls import tls_context
from pytest_streamguard.stream.client import StreamRecorder, aread_stream
from pytest_streamguard.stream.probe import ProbeSpec, probing
from pytest_streamguard.stream.request import CONNECT_TIMEOUT
from pytest_streamguard.stream.trace import StreamTrace
from pytest_streamguard.stream.transport import LoadTransport
from pytest_streamguard.verdict.deadlines import Deadline, assert_traces, check_units
from pytest_streamguard.verdict.findings import Finding, findings_of
from pytest_streamguard.verdict.findings.base import sent_stamp
from pytest_streamguard.verdict.hops import at_hops
from pytest_streamguard.verdict.probe import Probed
from pytest_streamguard.verdict.stats import percentile

MAX_STREAMS = 5000
MAX_RATE = 10_000.0
MAX_DURATION = 3600.0
ARRIVALS = ("constant", "poisson")
METRICS = ("gap", "ttft", "total", "delivery")
# Error kinds that mean the connection was cut under the stream (client.py's _classify).
CUT_KINDS = frozenset({"cut", "reset"})
T = TypeVar("T")


@dataclass(frozen=True)
class LoadPlan:
    """A validated load: how many streams, and when each one starts."""

    n: int
    rate: float | None = None
    duration: float | None = None
    arrival: str = "constant"
    seed: int | None = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.n, bool)
            or not isinstance(self.n, int)
            or not 1 <= self.n <= MAX_STREAMS
        ):
            raise ValueError(
                f"load n={self.n!r} is not accepted: expected an int from 1 to {MAX_STREAMS} "
                "(concurrent streams, or with rate= the number of requests to send)"
            )
        for name, value, top in (
            ("rate", self.rate, MAX_RATE),
            ("duration", self.duration, MAX_DURATION),
        ):
            if value is None:
                continue
            if not finite(value) or not 0 < value <= top:
                unit = "requests per second" if name == "rate" else "seconds"
                raise ValueError(
                    f"load {name}={value!r} is not accepted: expected a number of {unit}, "
                    f"> 0 and <= {top:g}, or None"
                )
        if self.arrival not in ARRIVALS:
            raise ValueError(
                f"load arrival={self.arrival!r} is not accepted: expected one of "
                f"{', '.join(ARRIVALS)}"
            )
        if self.arrival != "constant" and self.rate is None:
            raise ValueError(
                f"load arrival={self.arrival!r} needs rate= (requests per second): arrivals "
                "only apply to an open-loop load"
            )
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise ValueError(f"load seed={self.seed!r} is not accepted: expected an int or None")

    @property
    def mode(self) -> str:
        """``closed`` (n at once) or ``open`` (arrivals at a rate)."""
        return "closed" if self.rate is None else "open"

    def describe(self) -> str:
        """``closed loop, 30 streams for 5 s`` or ``open loop, 20/s poisson (seed 1), ...``."""
        if self.rate is None:
            text = f"closed loop, {counted(self.n, 'concurrent stream')}"
        else:
            seed = f" (seed {self.seed})" if self.seed is not None else ""
            upto = counted(self.n, "request")
            text = f"open loop, {self.rate:g}/s {self.arrival}{seed}, up to {upto}"
        if self.duration is not None:
            text += f" for {self.duration:g} s"
        return text

    def start_offsets(self) -> list[float]:
        """Open loop: seconds after the start at which each request is sent."""
        assert self.rate is not None
        rng = random.Random(self.seed)
        offsets: list[float] = []
        at = 0.0
        while len(offsets) < self.n and (self.duration is None or at < self.duration):
            offsets.append(at)
            at += rng.expovariate(self.rate) if self.arrival == "poisson" else 1 / self.rate
        return offsets


@dataclass
class LoadResult:
    """What a load measured: every stream's trace (in the order they were sent) and pooled
    statistics over them. Streams that errored or were cut stay in the statistics and count
    as violations in :meth:`assert_deadline`. ``probe``: the samples of the probe sent to the
    target beside the streams (:mod:`pytest_streamguard.stream.probe`; None when it was off)."""

    plan: LoadPlan
    traces: list[StreamTrace] = field(default_factory=list)
    wall_s: float = 0.0
    probe: Probed | None = None

    @property
    def ttft(self) -> list[float]:
        """Every stream's TTFT (seconds; streams without a data event have none)."""
        return [t.ttft for t in self.traces if t.ttft is not None]

    @property
    def gaps(self) -> list[float]:
        """Every gap of every stream, pooled (seconds)."""
        return [g for t in self.traces for g in t.gaps]

    @property
    def totals(self) -> list[float]:
        """Every stream's total time (seconds)."""
        return [t.total for t in self.traces if t.total is not None]

    @property
    def delivery(self) -> list[float]:
        """Seconds from the server's send stamp to the client's stamp, per data event.

        Only for events that carry ``sent_ns`` (``time.perf_counter_ns()`` just before the
        server's write, as the bundled target sends): on one machine it is the same monotonic
        clock, so this is the network hop plus how late the client stamped the event."""
        sent = ((c.stamp_ns, sent_stamp(c)) for t in self.traces for c in t.chunks)
        return [(stamp - at) / 1e9 for stamp, at in sent if at is not None]

    @property
    def completed(self) -> int:
        """Streams that ended cleanly."""
        return sum(t.completed for t in self.traces)

    @property
    def cut(self) -> int:
        """Streams whose connection was cut or reset under them."""
        return sum(not t.completed and t.error_kind in CUT_KINDS for t in self.traces)

    @property
    def errored(self) -> int:
        """Streams that failed any other way (HTTP error, server error event, timeout, ...)."""
        return len(self.traces) - self.completed - self.cut

    @property
    def outcomes(self) -> dict[str, int]:
        """How many streams ended in each outcome: ``completed`` or an ``error_kind``
        (``empty``, ``truncated``, ``protocol``, ``server``, ``http``, ``cut``, ``reset``,
        ``timeout``, ``connect``, ``network``, ``interrupted``)."""
        return dict(Counter("completed" if t.completed else str(t.error_kind) for t in self.traces))

    @property
    def findings(self) -> list[Finding]:
        """The named incidents the load's streams show, each stream's own (``buffered``,
        ``idle_cut``, ``held_open``) and those only seen across streams (``blocked_loop``,
        ``queued``, ``cold_start``; read with the probe's samples), with their evidence; see
        docs/findings.md; under a stack, the hop each was seen at."""
        return at_hops(findings_of(self.traces, self.probe), self.traces)

    def samples(self, metric: str = "gap") -> list[float]:
        """The pooled samples of ``metric``: gap, ttft, total or delivery (seconds)."""
        if metric not in METRICS:
            raise ValueError(
                f"metric={metric!r} is not known: expected one of {', '.join(METRICS)}"
            )
        pooled: list[float] = getattr(self, {"gap": "gaps", "total": "totals"}.get(metric, metric))
        return pooled

    def percentile(self, q: float, metric: str = "gap") -> float | None:
        """The nearest-rank ``q``-th percentile of the pooled ``metric`` samples."""
        return percentile(self.samples(metric), q)

    def assert_deadline(
        self,
        ttft: float | None = None,
        chunk: float | None = None,
        total: float | None = None,
        percentile: float | None = None,
        *,
        long: bool = False,
    ) -> None:
        """Raise :class:`~pytest_streamguard.verdict.deadlines.DeadlineViolation` on a broken bound.

        ``chunk`` with ``percentile`` bounds that percentile of the pooled gaps; without it,
        every gap. ``ttft`` and ``total`` bound every stream. A stream that did not complete
        always violates. Bounds are seconds: one above 60 s is a ValueError unless
        ``long=True`` says it is meant."""
        deadline = Deadline(ttft=ttft, chunk=chunk, total=total, percentile=percentile)
        check_units(deadline, long=long, call="assert_deadline")
        assert_traces(self.traces, deadline, self.probe)

    def summary(self) -> dict[str, Any]:
        """Counts and pooled percentiles, in seconds."""
        figures: dict[str, Any] = {
            "load": self.plan.describe(),
            "streams": len(self.traces),
            "completed": self.completed,
            "errored": self.errored,
            "cut": self.cut,
            "outcomes": self.outcomes,
            "wall_s": self.wall_s,
            "findings": [f.to_dict() for f in self.findings],
        }
        for metric in ("ttft", "gap"):
            for q in (50, 95, 99):
                figures[f"{metric}_p{q}_s"] = self.percentile(q, metric)
        return figures


async def arun(
    plan: LoadPlan,
    make_recorder: Callable[[int], StreamRecorder],
    socket_options: list[tuple[int, int, int]] | None = None,
    *,
    offsets: Sequence[float] | None = None,
    origin: Callable[[], Awaitable[int]] | None = None,
    probe: ProbeSpec | None = None,
) -> LoadResult:
    """Run ``plan`` on the running event loop; ``make_recorder(i)`` prepares the i-th stream.
    A shard of a bigger load (:mod:`pytest_streamguard.load.shards`) passes ``origin``,
    awaited once its client is ready (the ``perf_counter_ns()`` at which the whole load
    starts), and for an open loop its own ``offsets``. ``probe``: probe the target beside the
    streams, on the same loop, into ``result.probe``."""
    # A full collection over the heap of a big load's traces stalls the loop for tens of ms
    # (measured at 200 streams: p99 stamp error 87 ms with the collector on, 1 ms with it
    # paused); the load's objects are freed by reference counting anyway.
    collecting = gc.isenabled()
    gc.disable()
    try:
        async with probing(probe) as probed:
            result = await _arun(plan, make_recorder, socket_options, offsets, origin)
        result.probe = probed
        return result
    finally:
        if collecting:
            gc.enable()


async def _arun(
    plan: LoadPlan,
    make_recorder: Callable[[int], StreamRecorder],
    socket_options: list[tuple[int, int, int]] | None,
    offsets: Sequence[float] | None = None,
    origin: Callable[[], Awaitable[int]] | None = None,
) -> LoadResult:
    result = LoadResult(plan)
    transport = LoadTransport(plan.n, socket_options or [], verify=tls_context())
    # Per-request timeouts come from each stream's read limits; this one covers the rest.
    async with httpx.AsyncClient(
        transport=transport, timeout=httpx.Timeout(CONNECT_TIMEOUT)
    ) as client:

        async def read_one() -> StreamTrace:
            made = make_recorder(len(result.traces))
            result.traces.append(made.trace)
            # Resolved before the stream's request stamp: one-time set-up, not its time.
            await transport.prepare(made.request.url)
            return await aread_stream(made, client)

        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        start = loop.time()
        if origin is not None:
            origin_ns = await origin()
            # Only a difference crosses clocks, so the loop clock's own origin does not matter.
            start = loop.time() + (origin_ns - time.perf_counter_ns()) / 1e9
            started = origin_ns / 1e9
            await asyncio.sleep(max(start - loop.time(), 0.0))
        if plan.rate is None:
            stop_at = None if plan.duration is None else start + plan.duration

            async def worker() -> None:
                while True:
                    await read_one()
                    if stop_at is None or loop.time() >= stop_at:
                        return

            await asyncio.gather(*(worker() for _ in range(plan.n)))
        else:
            tasks: list[asyncio.Task[StreamTrace]] = []
            for offset in plan.start_offsets() if offsets is None else offsets:
                wait = start + offset - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                tasks.append(asyncio.ensure_future(read_one()))
            await asyncio.gather(*tasks)
        result.wall_s = time.perf_counter() - started
    return result


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(
    plan: LoadPlan,
    make_recorder: Callable[[int], StreamRecorder],
    socket_options: list[tuple[int, int, int]] | None = None,
    probe: ProbeSpec | None = None,
) -> LoadResult:
    """Run ``plan`` to the end on a private event loop (for sync tests); ``probe`` as in
    :func:`arun`."""
    return run_private(lambda: arun(plan, make_recorder, socket_options, probe=probe))


def run_private(make: Callable[[], Coroutine[Any, Any, T]], call: str = "load") -> T:
    """Run the coroutine ``make()`` of ``streamguard.<call>()`` to its end on a private event
    loop (uvloop when installed); a clear error when this thread already runs a loop (an async
    test)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(
            f"streamguard.{call}() was called while an event loop is running in this thread; "
            f"in an async test use 'await streamguard.a{call}(...)'"
        )
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(make())
