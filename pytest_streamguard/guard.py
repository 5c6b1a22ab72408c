"""``StreamGuard``: what the ``streamguard`` fixture gives a test.

Streams are read through the session's Toxiproxy proxy, faults are added on that proxy, and
every trace is kept so the plugin can check it against the test's ``token_deadline``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from toxiproxy.proxy import Proxy

from pytest_streamguard.common.defaults import DEFAULT_MAX_STREAM_SECONDS, DEFAULT_PROXY_HOST
from pytest_streamguard.errors import IngressError, ToxiproxyError
from pytest_streamguard.faults.hops import AllHops, Hop, HopFaults, HopLog, StackHops
from pytest_streamguard.faults.inject import FaultLog, Faults
from pytest_streamguard.faults.profiles import Profile
from pytest_streamguard.faults.toxiproxy_client import ToxiproxyAPI, proxy_url
from pytest_streamguard.formats import StreamFormat
from pytest_streamguard.headroom.measure import Measurement, ameasure
from pytest_streamguard.headroom.result import Headroom
from pytest_streamguard.judge import AUTO, NONE, check_client, judge_trace, save_disagreement
from pytest_streamguard.judge.ruling import collector_paused
from pytest_streamguard.judge.team import TeamCall
from pytest_streamguard.load import LoadPlan, LoadResult, arun, run_private
from pytest_streamguard.load.cluster import RayShards
from pytest_streamguard.load.sharding import sharding
from pytest_streamguard.services.app import Target
from pytest_streamguard.services.ingress import Ingress, IngressHop
from pytest_streamguard.services.output import OutputLog
from pytest_streamguard.stream.client import StreamRecorder, aread_stream, read_stream
from pytest_streamguard.stream.endings import stopped_mid_stream
from pytest_streamguard.stream.probe import ProbeSpec, ProbeThread, probe_id, probing
from pytest_streamguard.stream.request import StreamRequest, read_limits, stream_url
from pytest_streamguard.stream.trace import StackStamps, StreamTrace
from pytest_streamguard.verdict.deadlines import Deadline
from pytest_streamguard.verdict.findings.said import LATE_S, Said, bounded, fold
from pytest_streamguard.verdict.probe import Probed, merge


class _Streams:
    """The streams of one test, in the order they were opened: each read with the probe beside
    it (a load in shards where it asks for them) through the entry's proxy, named by its
    number, aimed at by the faults on, judged, and kept (in :attr:`traces`) with the faults
    active during it; the samples of the probe are kept in :attr:`probe`, the test's headroom
    searches in :attr:`headrooms` (their levels are read the same way, but judged by none and
    not kept)."""

    def __init__(
        self,
        faults: AllHops,
        url: str,
        deadline: Deadline | None,
        max_stream_seconds: float,
        ray: RayShards | None = None,
        probe: ProbeSpec | None = None,
        seed: int | None = None,
        client: str = AUTO,
        transcripts: Path | None = None,
    ) -> None:
        self.faults = faults
        # The base URL through the entry's proxy, and what bounds each stream's reads.
        self.url, self.deadline, self.max_stream_seconds = url, deadline, max_stream_seconds
        # --streamguard-ray: loads are sharded over that Ray cluster.
        self.ray = ray
        # --streamguard-probe: what is sent to the target beside each stream (None: nothing).
        self.probe_spec = probe
        # --streamguard-seed: open-loop arrival times drawn with it unless a load gives its own.
        self.seed = seed
        # --streamguard-client: which client judges a stream whose call names none.
        self.client = client
        # streamguard_transcripts: this test's folder for the bytes of disagreements.
        self.transcripts = transcripts
        self.traces: list[StreamTrace] = []
        #: The samples of the probe sent beside the test's streams and loads (None: it was off).
        self.probe: Probed | None = None
        self.headrooms: list[Headroom] = []
        self._opened = 0
        # Streams opened and not kept yet, and (under a stack) what pairs a kept stream with
        # the inner hops' stamps, given how many other streams were open beside it.
        self._open = 0
        self.pair: Callable[[StreamTrace, int], None] | None = None
        self.pair_probe: Callable[[Probed], None] = lambda probed: None
        # What gives a stream that ended early the lines the hops wrote while it was open.
        self.hear: Callable[[Sequence[StreamTrace]], None] | None = None
        # The embedded Toxiproxy's pid (None for one by URL): see StreamRequest.proxy_pid.
        self.proxy_pid: int | None = None

    def recorder(self, request: StreamRequest, path: str) -> StreamRecorder:
        """A recorder for one stream, numbered in the order streams are opened (concurrent
        streams of one test get distinct names); a stream that chunk faults are aimed at
        (``streams=``) names them in its request."""
        self.faults.before_stream()
        index = self._opened
        aim = self.faults.aim_headers(index)
        # Under a stack each stream carries an id that gateways commonly forward, so the
        # inner hops' taps can tell its answer from the others' (x-request-id, traceparent).
        ids = stream_ids() if self.pair is not None else {}
        if aim or ids:
            request = dataclasses.replace(request, headers={**request.headers, **aim, **ids})
        recorder = StreamRecorder(request, self.name(request, path), on_chunk=self.faults.on_chunk)
        if ids:
            recorder.trace.stack = StackStamps("", request_id=ids["x-request-id"])
        self.faults.opened(recorder.trace, index)
        self._open += 1
        return recorder

    def name(self, request: StreamRequest, path: str) -> str:
        """The next stream's name: ``stream 3 (POST /generate)``."""
        self._opened += 1
        return f"stream {self._opened} ({request.method} {path})"

    def keep_probe(self, probed: Probed | None) -> None:
        """Add a stream's or a load's probe samples to the test's, paired with a stack's taps."""
        if probed is not None:
            self.pair_probe(probed)
        self.probe = merge([self.probe, probed])

    def judged(self, trace: StreamTrace, client: str | TeamCall | None) -> StreamTrace:
        """``trace`` judged by the client ``client`` names (None: the session's choice), after
        the stream ended (:mod:`pytest_streamguard.judge`). Blocking: async callers use a thread."""
        judge_trace(trace, self.choice(client))
        if self.transcripts is not None:
            save_disagreement(trace, self.transcripts)
        return trace

    def choice(self, client: str | TeamCall | None) -> str:
        """The client that judges a stream whose call passes ``client`` (None: the session's)."""
        return self.client if client is None else check_client(client)

    def judged_load(self, result: LoadResult, client: str | TeamCall | None) -> LoadResult:
        """Every stream of a local load judged, as :meth:`judged` judges one."""
        with collector_paused():
            for trace in result.traces:
                self.judged(trace, client)
        return result

    def keep(self, trace: StreamTrace) -> StreamTrace:
        """Keep a stream that ended, with the faults that were on while it was read."""
        self.faults.on_end(trace)
        end = trace.end_ns if trace.end_ns is not None else trace.request_ns
        trace.faults = [
            f
            for f in self.faults.records
            if f.active_during(trace.request_ns, end) and self.faults.aims_at(f, trace)
        ]
        self._open = max(self._open - 1, 0)
        if self.pair is not None:
            beside = [t for t in self.traces if (t.end_ns or t.request_ns) >= trace.request_ns]
            self.pair(trace, self._open + len(beside))
        if self.hear is not None and not trace.completed:
            self.hear([trace])  # what has arrived by now, for an assert in the test's body
        self.traces.append(trace)
        return trace

    @contextlib.contextmanager
    def stopping(self, *recorders: StreamRecorder) -> Iterator[list[StreamRecorder]]:
        """Ctrl-C, a cancelled task, or a pytest outcome raised by a signal handler
        (pytest-timeout's signal method) while the block reads: keep what every stream it
        started (``recorders`` and those it adds to the list yielded) read so far, for the
        summary, the reports and the faults' judging, then let the stop go on. A stream still
        open is ``timeout`` under pytest-timeout's stop, else ``interrupted`` (as the recorder's
        finish() records a read that stopped without an outcome)."""
        started = list(recorders)
        try:
            yield started
        except (KeyboardInterrupt, asyncio.CancelledError, pytest.fail.Exception) as exc:
            for recorder in started:
                recorder.finish()
                ended = stopped_mid_stream(exc, recorder.trace)
                if ended is not None and recorder.trace.error_kind == "interrupted":
                    # The reader's own cleanup (asyncio.run cancelling it) recorded the stop
                    # first, without knowing what stopped it.
                    recorder.trace.error_kind, recorder.trace.error = ended
                self.keep(recorder.trace)
            raise

    def keep_load(self, result: LoadResult) -> LoadResult:
        """Keep every stream of a load that ended, and the probe's samples beside it."""
        for trace in result.traces:
            self.keep(trace)
        self.keep_probe(result.probe)
        return result

    def from_shards(
        self, request: StreamRequest, path: str, result: LoadResult, client: str
    ) -> LoadResult:
        """A sharded load's streams named in this test's numbering and judged by ``client``
        where their shards did not judge them."""
        # Shards name their streams on their own; the test's numbering goes by send order.
        for trace in result.traces:
            trace.name = self.name(request, path)
            # The proxy's chunk faults acted on the shards' streams: note which reached chunk N.
            self.faults.reached(trace)
            # Judged in its shard (the bytes came back where reader and client disagree), or
            # here, by a judge the user registered in this process.
            if trace.client is None and trace.recorded is not None:
                judge_trace(trace, client)
            if self.transcripts is not None:
                save_disagreement(trace, self.transcripts)
        # Opened in the shards, not by this process's recorders: open together all the same.
        self._open += len(result.traces)
        return result

    def read(self, recorder: StreamRecorder, client: str | TeamCall | None) -> StreamTrace:
        """Read one stream to its end with the probe beside it (a thread of its own), have
        ``client`` judge it (:meth:`judged`) and keep both."""
        with self.stopping(recorder), ProbeThread(self.probe_spec) as probe:
            trace = read_stream(recorder)
        self.keep_probe(probe.probed)
        return self.keep(self.judged(trace, client))

    async def aread(self, recorder: StreamRecorder, client: str | TeamCall | None) -> StreamTrace:
        """The async twin of :meth:`read`: the probe is a task on the running loop, and the
        judging (blocking: an SDK reads the replay) runs in a thread."""
        with self.stopping(recorder):
            async with probing(self.probe_spec) as probed:
                trace = await aread_stream(recorder)
        self.keep_probe(probed)
        return self.keep(await asyncio.to_thread(self.judged, trace, client))

    def request(
        self,
        path: str,
        json: Any,
        method: str,
        headers: dict[str, str] | None,
        format: str | StreamFormat,
        read_timeout: float | None,
        allow_empty: bool = False,
        require_done: bool = False,
        expect: str | None = None,
    ) -> StreamRequest:
        """Validate a stream's arguments into the request to send through the proxy (the
        entry's slow reader, if any, paces it)."""
        url = stream_url(self.url, path)
        limits = read_limits(read_timeout, self.deadline, self.max_stream_seconds)
        return StreamRequest(
            method=method.upper(),
            url=url,
            json_body=json,
            headers=dict(headers or {}),
            format=format,
            limits=limits,
            slow_reader_bps=self.faults.entry.slow_reader_bps,
            allow_empty=allow_empty,
            expect=expect,
            require_done=require_done,
            on_pace=self.faults.entry.on_pace,
            proxy_pid=self.proxy_pid,
        )

    async def load(
        self,
        plan: LoadPlan,
        request: StreamRequest,
        path: str,
        shards: tuple[int | str | None, int | None],
        client: str | TeamCall | None,
        started: list[StreamRecorder],
    ) -> LoadResult:
        """Read a load with the probe beside it, in shards where ``shards`` (its ``processes=``
        and ``shards=``) ask for them, its streams named in the test's order and judged by
        ``client`` (a headroom level's by none), each recorder it starts here listed in
        ``started``. The caller keeps a test's load (:meth:`keep_load`)."""
        if plan.seed is None:
            plan = dataclasses.replace(plan, seed=self.seed)
        sharded = sharding(plan, *shards, self.ray, self.faults.entry)
        if sharded is None:

            def make(_: int) -> StreamRecorder:
                started.append(self.recorder(request, path))
                return started[-1]

            result = await arun(plan, make, request.socket_options(), probe=self.probe_spec)
            return await asyncio.to_thread(self.judged_load, result, client)
        choice = self.choice(client)
        async with probing(self.probe_spec) as probed:
            result = await sharded.arun(plan, request, choice)
        result.probe = probed
        return self.from_shards(request, path, result, choice)

    async def search(
        self,
        measurement: Measurement,
        request: StreamRequest,
        path: str,
        shards: tuple[int | str | None, int | None],
    ) -> Headroom:
        """A headroom search run to its end and kept, each level a load judged by none and
        not kept."""

        async def load(n: int, rate: float | None) -> LoadResult:
            return await self.load(LoadPlan(n=n, rate=rate), request, path, shards, NONE, [])

        found = await ameasure(measurement, load)
        self.headrooms.append(found)
        return found


#: How long after its end a stream that did not complete waits for the inner hops' connections
#: to end.
_SETTLE_S = 0.2


class Route:
    """The way one test's streams go from the client to the app, which the plugin owns beside
    the test's :class:`StreamGuard`: the entry's proxy, an ingress put in for the test (a real
    nginx, :meth:`ingress`), and a stack's inner services (``--streamguard-service``), each
    behind a proxy of its own with faults of its own (:mod:`pytest_streamguard.faults.hops`).
    It pairs each stream with the inner hops' stamps, gives it what every hop wrote while it
    was open, and undoes every hop's faults when the test ends."""

    def __init__(
        self,
        api: ToxiproxyAPI,
        proxy: Proxy,
        target: Target,
        upstream: str | None,
        stack: StackHops | None,
        seed: int,
    ) -> None:
        self.api, self.proxy, self.target = api, proxy, target
        # Where the proxy reaches the target (--streamguard-upstream-host), restored after an
        # ingress hop.
        self.upstream = upstream if upstream is not None else target.address
        self._ingress: IngressHop | None = None
        started = target if target.process is not None else None
        entry = FaultLog(api, proxy, target_pid=target.pid, seed=seed, target=started)
        #: The test's ``streamguard.faults``, on the entry's proxy.
        self.faults = Faults(entry)
        #: The plugin's side of every hop's faults: the entry's first, then each inner hop's
        #: in start order (the streams pass their chunks to all of them).
        self.fault_logs = [entry]
        #: The stack's hops by service name, the entry's last (none without a stack).
        self.hops: dict[str, Hop] = {}
        self._stack = stack
        if stack is None:
            return
        for name, inner in stack.inner.items():
            log = HopLog(self.api, inner.proxy, hop=name, target=inner.target, seed=seed)
            log.reset_proxy()
            self.hops[name] = Hop(name, HopFaults(log), inner.target, inner.proxy, inner.address)
            self.fault_logs.append(log)
        self.hops[stack.entry] = Hop(stack.entry, self.faults, target, proxy, str(proxy.listen))

    def hop(self, name: str) -> Hop:
        """The hop of the stack's service ``name`` (see :meth:`StreamGuard.hop`)."""
        found = self.hops.get(name)
        if found is None:
            if not self.hops:
                raise ValueError(
                    f"streamguard.hop({name!r}): this session has no stack, so no hop but the "
                    "client's own (streamguard.faults); a stack is started from "
                    "--streamguard-service NAME=COMMAND (ini streamguard_services)"
                )
            raise ValueError(
                f"streamguard.hop({name!r}): no such service; the stack's services are "
                f"{', '.join(self.hops)}"
            )
        return found

    def output_logs(self) -> dict[str, OutputLog]:
        """What each hop wrote (its process's output, or its followed log files), by name."""
        if self._stack is None:
            return self.target.logs("target")
        return {
            n: log for name, hop in self.hops.items() for n, log in hop.target.logs(name).items()
        }

    def hear(self, traces: Sequence[StreamTrace], *, wait: bool = False) -> None:
        """Give each of ``traces`` what every hop wrote while it was open (``trace.said``,
        :mod:`pytest_streamguard.verdict.findings.said`). ``wait``: first let
        :data:`~pytest_streamguard.verdict.findings.said.LATE_S` pass after the last end when
        a stream ended early, so that a traceback still on its way is read."""
        logs = self.output_logs()
        # A stream read on a Ray node has that node's clock: its window is not the logs'.
        traces = [t for t in traces if t.node is None]
        if not traces or not logs:
            return
        late = int(LATE_S * 1e9)
        ends = [(t.end_ns or t.request_ns) + late for t in traces]
        if wait and not all(t.completed for t in traces):
            time.sleep(max(max(ends) - time.perf_counter_ns(), 0) / 1e9)
        start = min(t.request_ns for t in traces)
        # Folded once per hop, then cut to each stream's window.
        folded = {name: fold(name, log.between(start, max(ends))) for name, log in logs.items()}
        for name, log in logs.items():
            if log.lost_before(start):  # said where the window's first lines would have been
                gone = f"streamguard: {log.losses()}: the first lines of this window are gone"
                folded[name].insert(0, Said(name, start, gone))
        for trace, end in zip(traces, ends, strict=True):
            trace.said = [
                said
                for hop in folded.values()
                for said in bounded([s for s in hop if trace.request_ns <= s.stamp_ns <= end])
            ]
            trace.said.sort(key=lambda s: s.stamp_ns)

    def pair_trace(self, trace: StreamTrace, beside: int) -> None:
        """Under a stack (the streams call it as each is kept): name the entry on ``trace``,
        and give it each inner hop's stamps of its answer (the taps'), found by the request id
        it sent, else by time when no other stream was open beside it (``beside``: how many
        were); else a note saying why it has none."""
        if self._stack is None:
            return
        sent = trace.stack.request_id if trace.stack is not None else None
        stamps = trace.stack = StackStamps(self._stack.entry, request_id=sent)
        end = trace.end_ns if trace.end_ns is not None else trace.request_ns
        for name, hop in self._stack.inner.items():
            found = hop.tap.exchange(
                sent, trace.request_ns, end, alone=not beside, method=trace.method
            )
            if found is None:
                stamps.inner, stamps.ended = {}, {}
                stamps.note = (
                    f"not paired with the inner hops: {name}'s requests carried no id of this "
                    f"stream (x-request-id, traceparent), and {beside + 1} streams were open "
                    "at once, so which inner answer was whose is not known"
                    if beside
                    else f"not paired with the inner hops: no {trace.method} request reached "
                    f"{name} while this stream was open, or more than one did, and none "
                    "carried its id"
                )
                return
            # A cut's close reaches the inner hops a little after the client saw it (counted
            # from the stream's end: a load's streams, kept after all ended, wait no more).
            settled = end + int(_SETTLE_S * 1e9)
            while not trace.completed and found.ended is None:
                if time.perf_counter_ns() >= settled:
                    break
                time.sleep(0.005)
            stamps.inner[name] = list(found.reads)
            if found.ended is not None:
                stamps.ended[name] = found.ended

    def pair_probe(self, probed: Probed) -> None:
        """Each answered probe sample whose id came through an inner hop's tap (a ready path
        that asks the hop behind it) gets how long the longest such answer took (``behind``)."""
        assert self._stack is not None
        took: dict[str, int] = {}
        for hop in self._stack.inner.values():
            for sent, ns in hop.tap.took_by_id().items():
                took[sent] = max(ns, took.get(sent, 0))
        for one in probed.hops:
            for stamp, latency in one.samples:
                if latency is not None and (sent := probe_id(stamp)) in took:
                    one.behind[stamp] = took[sent]

    def ingress(self, **settings: Any) -> Ingress:
        """Put a real nginx in for the test with ``settings`` (see :meth:`StreamGuard.ingress`)."""
        if self._ingress is not None:
            raise IngressError(
                f"streamguard.ingress() is already on for this test ({self._ingress.ingress!r})"
            )
        hop = IngressHop(
            self.target.address,
            functools.partial(self.api.set_upstream, self.proxy),
            **settings,
        ).start()
        self.fault_logs[0].records.append(hop.record)
        self._ingress = hop
        return hop.ingress

    def close(self) -> None:
        """Undo this test's faults on every hop and its ingress (proxy pointed back at the
        target, nginx stopped)."""
        if self._stack is not None:
            # Paired already (the record is made before): later tests need none of them.
            for inner in self._stack.inner.values():
                inner.tap.forget_before(time.perf_counter_ns())
        try:
            _clear_all(self.fault_logs)
        finally:
            if self._ingress is not None:
                hop, self._ingress = self._ingress, None
                hop.remove(self.upstream)


def stream_ids() -> dict[str, str]:
    """A new stream's id headers: ``x-request-id`` and a W3C ``traceparent`` with the same id
    as its trace id (a gateway that traces keeps the trace id and changes the parent)."""
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    return {"x-request-id": trace_id, "traceparent": f"00-{trace_id}-{parent}-01"}


class StreamGuard:
    """Per-test handle (the ``streamguard`` fixture): open streams through the proxy, add
    faults, read traces. ``url`` is the base URL through the proxy, ``proxy`` the
    toxiproxy-python ``Proxy``, ``target`` the app itself (direct URL, ``metrics()``),
    ``deadline`` the test's marker (None if unmarked)."""

    def __init__(
        self,
        *,
        api: ToxiproxyAPI,
        proxy: Proxy,
        target: Target,
        deadline: Deadline | None,
        max_stream_seconds: float = DEFAULT_MAX_STREAM_SECONDS,
        proxy_host: str = DEFAULT_PROXY_HOST,
        upstream: str | None = None,
        ray: RayShards | None = None,
        seed: int | None = None,
        probe_spec: ProbeSpec | None = None,
        client: str = AUTO,
        transcripts: Path | None = None,
        stack: StackHops | None = None,
        proxy_pid: int | None = None,
    ) -> None:
        self.api = api
        #: --streamguard-seed: what the test's faults and loads draw with.
        self.seed = seed
        self.proxy = proxy
        self.target = target
        self.deadline = deadline
        self.url = proxy_url(str(proxy.listen), proxy_host, api.host)
        self._route = Route(api, proxy, target, upstream, stack, seed or 0)
        self.faults = self._route.faults
        hops = AllHops(self._route.fault_logs)
        self._streams = _Streams(
            hops, self.url, deadline, max_stream_seconds, ray, probe_spec, seed, client, transcripts
        )
        if stack is not None:
            self._streams.pair = self._route.pair_trace
            self._streams.pair_probe = self._route.pair_probe
        self._streams.hear = self._route.hear
        self._streams.proxy_pid = proxy_pid
        # Under @pytest.mark.streamguard_matrix: the item's profile (name, toxics, faults),
        # applied by the plugin before the body; None otherwise.
        self.profile: Profile | None = None

    @property
    def traces(self) -> list[StreamTrace]:
        """Every stream of this test, in the order they were opened (a load's too)."""
        return self._streams.traces

    @property
    def headrooms(self) -> list[Headroom]:
        """Every headroom search of this test, in the order run (the reports show them)."""
        return self._streams.headrooms

    @property
    def probe(self) -> Probed | None:
        """The samples of the probe sent beside this test's streams and loads (None: off)."""
        return self._streams.probe

    def headroom(
        self,
        path: str = "/generate",
        json: Any = None,
        *,
        vary: str = "streams",
        up_to: float | None = None,
        precision: float | None = None,
        streams: int = 1,
        format: str | StreamFormat = "auto",
        method: str = "POST",
        headers: dict[str, str] | None = None,
        read_timeout: float | None = None,
        processes: int | str | None = None,
        shards: int | None = None,
    ) -> Headroom:
        """How far this stream is from breaking the test's ``token_deadline``: the largest
        level of ``vary`` that still holds it (at the deadline's ``percentile``), found by a
        search that grows, then bisects to ``precision`` (docs/headroom.md).

        ``vary``: ``streams``, ``rate``, ``latency``, ``jitter``, ``bandwidth`` or ``freeze``;
        ``up_to`` and ``precision`` default per ``vary``. ``streams``: each level's concurrent
        streams when ``vary`` is not ``streams``. ``processes`` and ``shards``: each level's
        load is read as :meth:`load` reads it with them. The rest is as in :meth:`stream`. The
        :class:`~pytest_streamguard.headroom.result.Headroom` is also kept in
        :attr:`headrooms`, for the reports and the ``headroom`` marker."""
        request = self._streams.request(path, json, method, headers, format, read_timeout)
        measurement = Measurement.of(
            self.deadline, self.faults, vary=vary, up_to=up_to, precision=precision, streams=streams
        )
        return run_private(
            lambda: self._streams.search(measurement, request, path, (processes, shards)),
            "headroom",
        )

    async def aheadroom(
        self,
        path: str = "/generate",
        json: Any = None,
        *,
        vary: str = "streams",
        up_to: float | None = None,
        precision: float | None = None,
        streams: int = 1,
        format: str | StreamFormat = "auto",
        method: str = "POST",
        headers: dict[str, str] | None = None,
        read_timeout: float | None = None,
        processes: int | str | None = None,
        shards: int | None = None,
    ) -> Headroom:
        """The async twin of :meth:`headroom`, on the test's own event loop."""
        request = self._streams.request(path, json, method, headers, format, read_timeout)
        measurement = Measurement.of(
            self.deadline, self.faults, vary=vary, up_to=up_to, precision=precision, streams=streams
        )
        return await self._streams.search(measurement, request, path, (processes, shards))

    def hop(self, name: str) -> Hop:
        """The hop of the stack's service ``name`` for this test: its ``faults`` act on the
        proxy in front of that service (the entry's are ``streamguard.faults``), its ``target``
        is the service itself. A ValueError names the hops there are."""
        return self._route.hop(name)

    def ingress(
        self,
        read_timeout: float = 60.0,
        buffering: bool = False,
        gzip: bool = False,
        send_timeout: float = 60.0,
    ) -> Ingress:
        """Put a real nginx between the proxy and the target until the test ends.

        Starts :class:`~pytest_streamguard.services.ingress.Ingress` (``proxy_read_timeout``,
        ``proxy_buffering``, ``gzip`` for event streams, ``send_timeout``; seconds) in front of
        the target and points the Toxiproxy proxy's upstream at it, so every stream and fault
        of the test goes client → proxy → nginx → target. Recorded like a fault (on/off stamps,
        shown in verdicts and reports). Raises IngressError when nginx is missing or fails."""
        return self._route.ingress(
            read_timeout=read_timeout, buffering=buffering, gzip=gzip, send_timeout=send_timeout
        )

    def close(self) -> None:
        """Undo this test's faults on every hop and its ingress (proxy pointed back at the
        target, nginx stopped)."""
        self._route.close()

    def stream(
        self,
        path: str = "/generate",
        json: Any = None,
        method: str = "POST",
        headers: dict[str, str] | None = None,
        format: str | StreamFormat = "auto",
        *,
        read_timeout: float | None = None,
        allow_empty: bool = False,
        require_done: bool = False,
        expect: str | None = None,
        client: str | TeamCall | None = None,
    ) -> StreamTrace:
        """Send a request through the proxy and read the streamed answer into a StreamTrace
        (docs/getting-started.md; what each outcome means is docs/protocols.md's).

        ``format``: the stream's protocol: ``auto`` (the default: recognised from the answer,
        and recorded as ``trace.format``), a built-in name or a
        :class:`~pytest_streamguard.formats.StreamFormat`. ``allow_empty=True``: an end before
        any token is expected, not ``empty``. ``require_done=True``: only the protocol's
        terminal frame is its end (``data: [DONE]``, ``message_stop``, ...). ``expect="cut"``:
        the stream is meant to be cut, and one that completes is the violation.
        ``read_timeout``: how long the client waits for each token (default: from the test's
        deadline, or 30 s). ``client``: who judges it once read (``auto``, a call's name,
        ``none``, or a function of your own). Never raises for a failed stream: the outcome is
        on the trace (``completed``, or ``error_kind`` and ``error``)."""
        request = self._streams.request(
            path, json, method, headers, format, read_timeout, allow_empty, require_done, expect
        )
        return self._streams.read(self._streams.recorder(request, path), client)

    async def astream(
        self,
        path: str = "/generate",
        json: Any = None,
        method: str = "POST",
        headers: dict[str, str] | None = None,
        format: str | StreamFormat = "auto",
        *,
        read_timeout: float | None = None,
        allow_empty: bool = False,
        require_done: bool = False,
        expect: str | None = None,
        client: str | TeamCall | None = None,
    ) -> StreamTrace:
        """The async twin of :meth:`stream`."""
        request = self._streams.request(
            path, json, method, headers, format, read_timeout, allow_empty, require_done, expect
        )
        return await self._streams.aread(self._streams.recorder(request, path), client)

    def load(
        self,
        n: int,
        path: str = "/generate",
        json: Any = None,
        *,
        rate: float | None = None,
        duration: float | None = None,
        arrival: str = "constant",
        seed: int | None = None,
        method: str = "POST",
        headers: dict[str, str] | None = None,
        format: str | StreamFormat = "auto",
        read_timeout: float | None = None,
        allow_empty: bool = False,
        require_done: bool = False,
        expect: str | None = None,
        processes: int | str | None = None,
        shards: int | None = None,
        client: str | TeamCall | None = None,
    ) -> LoadResult:
        """Read many streams at once through the proxy and return a :class:`LoadResult`
        (docs/load.md).

        Closed loop (default): ``n`` concurrent streams; with ``duration`` each of the ``n``
        keeps sending a new request as its stream ends until ``duration`` seconds are over.
        Open loop (``rate`` requests/s, ``arrival`` ``constant`` or ``poisson`` with ``seed``):
        up to ``n`` requests, stopping early when ``duration`` is over. Every stream's trace is
        also added to :attr:`traces`, so the test's ``token_deadline`` checks them (with
        ``percentile``, on the pooled gaps). ``format``, ``allow_empty``, ``require_done`` and
        ``expect`` are as in :meth:`stream`. Runs on a private event loop; in an async test
        use :meth:`aload`. ``processes``: read the streams in that many processes of their own
        (``"auto"``: one per usable core); under ``--streamguard-ray``, ``shards`` Ray tasks
        read them instead (docs/scaling.md), each trace naming its ``node``."""
        plan = LoadPlan(n=n, rate=rate, duration=duration, arrival=arrival, seed=seed)
        request = self._streams.request(
            path, json, method, headers, format, read_timeout, allow_empty, require_done, expect
        )
        with self._streams.stopping() as started:
            result = run_private(
                lambda: self._streams.load(
                    plan, request, path, (processes, shards), client, started
                )
            )
        return self._streams.keep_load(result)

    async def aload(
        self,
        n: int,
        path: str = "/generate",
        json: Any = None,
        *,
        rate: float | None = None,
        duration: float | None = None,
        arrival: str = "constant",
        seed: int | None = None,
        method: str = "POST",
        headers: dict[str, str] | None = None,
        format: str | StreamFormat = "auto",
        read_timeout: float | None = None,
        allow_empty: bool = False,
        require_done: bool = False,
        expect: str | None = None,
        processes: int | str | None = None,
        shards: int | None = None,
        client: str | TeamCall | None = None,
    ) -> LoadResult:
        """The async twin of :meth:`load`, on the test's own event loop."""
        plan = LoadPlan(n=n, rate=rate, duration=duration, arrival=arrival, seed=seed)
        request = self._streams.request(
            path, json, method, headers, format, read_timeout, allow_empty, require_done, expect
        )
        with self._streams.stopping() as started:
            result = await self._streams.load(
                plan, request, path, (processes, shards), client, started
            )
        return self._streams.keep_load(result)


def route_of(guard: StreamGuard) -> Route:
    """The plugin's side of ``guard``: the way its test's streams go (:class:`Route`)."""
    return guard._route


def _clear_all(every: list[FaultLog]) -> None:
    """Undo the faults of every hop, each whatever the others raised (the first error is
    raised once all were tried)."""
    errors: list[ToxiproxyError] = []
    for faults in every:
        try:
            faults.clear()
        except ToxiproxyError as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
