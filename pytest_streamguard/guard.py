"""``StreamGuard``: what the ``streamguard`` fixture gives a test.

Streams are read through the session's Toxiproxy proxy, faults are added on that proxy, and
every trace is kept so the plugin can check it against the test's ``token_deadline``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from toxiproxy.proxy import Proxy

from pytest_streamguard.common.defaults import DEFAULT_MAX_STREAM_SECONDS, DEFAULT_PROXY_HOST
from pytest_streamguard.errors import IngressError
from pytest_streamguard.faults.inject import Faults
from pytest_streamguard.faults.profiles import Profile
from pytest_streamguard.faults.toxiproxy_client import ToxiproxyAPI, proxy_url
from pytest_streamguard.formats import StreamFormat
from pytest_streamguard.load import LoadPlan, LoadResult, arun, run
from pytest_streamguard.load.cluster import RayShards, check_shards
from pytest_streamguard.load.pool import (
    arun_processes,
    check_processes,
    resolve_processes,
    run_processes,
)
from pytest_streamguard.services.app import Target
from pytest_streamguard.services.ingress import Ingress
from pytest_streamguard.stream.client import (
    ReadLimits,
    StreamRecorder,
    StreamRequest,
    aread_stream,
    read_stream,
)
from pytest_streamguard.stream.probe import ProbeSpec, ProbeThread, probing
from pytest_streamguard.stream.trace import FaultRecord, StreamTrace
from pytest_streamguard.verdict.deadlines import Deadline
from pytest_streamguard.verdict.probe import Probed, merge


class StreamGuard:
    """Per-test handle: open streams through the proxy, add faults, read traces.

    ``url`` is the base URL through the proxy, ``proxy`` the toxiproxy-python ``Proxy``,
    ``target`` the app itself (direct URL, ``metrics()``), ``traces`` every stream of this
    test, ``faults`` the fault vocabulary, ``deadline`` the test's marker (None if unmarked),
    ``ingress()`` a real nginx hop between the proxy and the target, ``max_stream_seconds`` the
    bound on a stream without a ``total`` deadline (``--streamguard-max-stream-seconds``),
    ``probe`` the samples of the probe sent to the target beside every stream and load of the
    test (``probe_spec``, ``--streamguard-probe``; None when it is off).
    """

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
    ) -> None:
        self.api = api
        self.probe_spec = probe_spec
        self.probe: Probed | None = None
        # --streamguard-seed: open-loop arrival times drawn with it unless a load gives its own.
        self.seed = seed
        # --streamguard-ray: loads are sharded over that Ray cluster.
        self.ray = ray
        self.max_stream_seconds = max_stream_seconds
        self.proxy = proxy
        self.target = target
        self.deadline = deadline
        # Where the proxy reaches the target (--streamguard-upstream-host), restored after an
        # ingress hop.
        self.upstream = upstream if upstream is not None else target.address
        self.url = proxy_url(str(proxy.listen), proxy_host, api.host)
        self.faults = Faults(
            api,
            proxy,
            target_pid=target.pid,
            seed=seed or 0,
            target=target if target.process is not None else None,
        )
        self.traces: list[StreamTrace] = []
        self._opened = 0
        self._ingress: tuple[Ingress, FaultRecord] | None = None
        # Under @pytest.mark.streamguard_matrix: the item's profile (name, toxics, faults),
        # applied by the plugin before the body; None otherwise.
        self.profile: Profile | None = None

    def _request(
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
        """Validate a stream's arguments into the request to send through the proxy."""
        if not path.startswith("/"):
            raise ValueError(f"stream path {path!r} must start with '/', such as /generate")
        if read_timeout is not None:
            if (
                isinstance(read_timeout, bool)
                or not isinstance(read_timeout, int | float)
                or read_timeout <= 0
            ):
                raise ValueError(f"read_timeout={read_timeout!r}: expected a number of seconds > 0")
            limits = ReadLimits(
                first=float(read_timeout), gap=float(read_timeout), total=self.max_stream_seconds
            )
        else:
            limits = ReadLimits.for_deadline(self.deadline, self.max_stream_seconds)
        return StreamRequest(
            method=method.upper(),
            url=self.url + path,
            json_body=json,
            headers=dict(headers or {}),
            format=format,
            limits=limits,
            slow_reader_bps=self.faults.slow_reader_bps,
            allow_empty=allow_empty,
            expect=expect,
            require_done=require_done,
            on_pace=self.faults.on_pace,
        )

    def _recorder(self, request: StreamRequest) -> StreamRecorder:
        """A recorder for one stream, numbered in the order streams are opened (concurrent
        streams of one test get distinct names); a stream that chunk faults are aimed at
        (``streams=``) names them in its request."""
        self.faults.before_stream()
        index = self._opened
        aim = self.faults.aim_headers(index)
        if aim:
            request = dataclasses.replace(request, headers={**request.headers, **aim})
        recorder = StreamRecorder(request, self._next_name(request), on_chunk=self.faults.on_chunk)
        self.faults.opened(recorder.trace, index)
        return recorder

    def _next_name(self, request: StreamRequest) -> str:
        self._opened += 1
        path = request.url[len(self.url) :]
        return f"stream {self._opened} ({request.method} {path})"

    def _prepare(
        self,
        path: str,
        json: Any,
        method: str,
        headers: dict[str, str] | None,
        format: str | StreamFormat,
        read_timeout: float | None,
        allow_empty: bool,
        require_done: bool,
        expect: str | None = None,
    ) -> StreamRecorder:
        return self._recorder(
            self._request(
                path,
                json,
                method,
                headers,
                format,
                read_timeout,
                allow_empty,
                require_done,
                expect,
            )
        )

    def _keep(self, trace: StreamTrace) -> StreamTrace:
        self.faults.on_end(trace)
        end = trace.end_ns if trace.end_ns is not None else trace.request_ns
        trace.faults = [
            f
            for f in self.faults.records
            if f.active_during(trace.request_ns, end) and self.faults.aims_at(f, trace)
        ]
        self.traces.append(trace)
        return trace

    def _keep_interrupted(self, recorder: StreamRecorder) -> None:
        # Ctrl-C mid-stream: keep what was read so far for the summary and the reports. The
        # recorder's finish() records a read that stopped without an outcome as interrupted.
        recorder.finish()
        self._keep(recorder.trace)

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
    ) -> StreamTrace:
        """Send a request through the proxy and read the streamed answer into a StreamTrace.

        ``format``: the stream's protocol: ``auto`` (the default: recognised from the content
        type and the first events, and recorded as ``trace.format``), a built-in name
        (``sse``, ``openai``, ``openai-responses``, ``anthropic``, ``gemini``, ``ollama``,
        ``tgi``, ``ndjson``, ``raw``) or a :class:`~pytest_streamguard.formats.StreamFormat`
        such as ``SSEFormat(...)``. A stream whose end arrives before any token is ``empty``,
        a violation, unless ``allow_empty=True`` says the test expects that. ``require_done=True``
        accepts only the protocol's terminal frame as its end (openai's ``data: [DONE]``,
        anthropic's ``message_stop``, ollama's ``"done": true``): a ``finish_reason`` followed
        by a close without it is ``truncated``, and a server that holds the stream open after
        it ends as ``timeout``; a format without a terminal frame (``raw``) refuses it with a
        ValueError. ``expect="cut"`` says the stream is meant to be cut (by a cut or reset
        fault): a cut is then no violation under any marker, and a stream that completes is
        one. ``read_timeout`` overrides how long the client waits for each token (default:
        from the test's deadline, or 30 s); every stream ends within the ``total`` deadline's
        read limit or ``--streamguard-max-stream-seconds``. Never raises for a failed stream:
        the outcome is on the trace (``completed``, or ``error_kind`` and ``error``).
        """
        recorder = self._prepare(
            path, json, method, headers, format, read_timeout, allow_empty, require_done, expect
        )
        try:
            with ProbeThread(self.probe_spec) as probe:
                trace = read_stream(recorder)
        except KeyboardInterrupt:
            self._keep_interrupted(recorder)
            raise
        self._keep_probe(probe.probed)
        return self._keep(trace)

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
    ) -> StreamTrace:
        """The async twin of :meth:`stream`."""
        recorder = self._prepare(
            path, json, method, headers, format, read_timeout, allow_empty, require_done, expect
        )
        try:
            async with probing(self.probe_spec) as probed:
                trace = await aread_stream(recorder)
        except (KeyboardInterrupt, asyncio.CancelledError):
            self._keep_interrupted(recorder)
            raise
        self._keep_probe(probed)
        return self._keep(trace)

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
    ) -> LoadResult:
        """Read many streams at once through the proxy and return a :class:`LoadResult`.

        Closed loop (default): ``n`` concurrent streams; with ``duration`` each of the ``n``
        keeps sending a new request as its stream ends until ``duration`` seconds are over.
        Open loop (``rate`` requests/s, ``arrival`` ``constant`` or ``poisson`` with ``seed``):
        up to ``n`` requests, stopping early when ``duration`` is over. Every stream's trace is
        also added to :attr:`traces`, so the test's ``token_deadline`` checks them (with
        ``percentile``, on the pooled gaps). ``format``, ``allow_empty``, ``require_done`` and
        ``expect`` are as in :meth:`stream`. Runs on a private event loop; in an async test
        use :meth:`aload`.

        ``processes``: read the streams in that many processes of their own (shards, see
        :mod:`pytest_streamguard.load.pool`) to use every core; the result holds every trace
        as a local load would, and its percentiles are pooled over every sample.
        ``processes="auto"``: one per core this process may use (its CPU affinity), never more
        than the streams; on one core, or for one stream, the load is read in this process. With
        ``--streamguard-ray`` the load is sharded over that Ray cluster instead (``shards``:
        how many Ray tasks, by default one per alive node; see
        :mod:`pytest_streamguard.load.cluster`), each trace naming its ``node``.
        """
        seed = self.seed if seed is None else seed
        plan = LoadPlan(n=n, rate=rate, duration=duration, arrival=arrival, seed=seed)
        request = self._request(
            path, json, method, headers, format, read_timeout, allow_empty, require_done, expect
        )
        processes = self._processes(processes, plan)
        if self._check_sharded(processes, shards) and self.ray is not None:
            with ProbeThread(self.probe_spec) as probe:
                result = self.ray.run(plan, request, shards)
            return self._keep_sharded(request, result, probe.probed)
        if processes is not None:
            with ProbeThread(self.probe_spec) as probe:
                result = run_processes(plan, request, processes)
            return self._keep_sharded(request, result, probe.probed)
        started: list[StreamRecorder] = []
        try:
            result = run(
                plan, self._tracking(request, started), request.socket_options(), self.probe_spec
            )
        except KeyboardInterrupt:
            self._keep_started(started)
            raise
        return self._keep_load(result)

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
    ) -> LoadResult:
        """The async twin of :meth:`load`, on the test's own event loop."""
        seed = self.seed if seed is None else seed
        plan = LoadPlan(n=n, rate=rate, duration=duration, arrival=arrival, seed=seed)
        request = self._request(
            path, json, method, headers, format, read_timeout, allow_empty, require_done, expect
        )
        processes = self._processes(processes, plan)
        if self._check_sharded(processes, shards) and self.ray is not None:
            async with probing(self.probe_spec) as probed:
                result = await self.ray.arun(plan, request, shards)
            return self._keep_sharded(request, result, probed)
        if processes is not None:
            async with probing(self.probe_spec) as probed:
                result = await arun_processes(plan, request, processes)
            return self._keep_sharded(request, result, probed)
        started: list[StreamRecorder] = []
        try:
            result = await arun(
                plan,
                self._tracking(request, started),
                request.socket_options(),
                probe=self.probe_spec,
            )
        except (KeyboardInterrupt, asyncio.CancelledError):
            self._keep_started(started)
            raise
        return self._keep_load(result)

    def _tracking(
        self, request: StreamRequest, started: list[StreamRecorder]
    ) -> Callable[[int], StreamRecorder]:
        """A load's ``make_recorder`` that also lists each recorder in ``started``."""

        def make(_: int) -> StreamRecorder:
            recorder = self._recorder(request)
            started.append(recorder)
            return recorder

        return make

    def _keep_started(self, started: list[StreamRecorder]) -> None:
        # Ctrl-C (or a cancelled task) mid-load: keep every stream it started, as stream()
        # does, those still open recorded as interrupted.
        for recorder in started:
            self._keep_interrupted(recorder)

    def _keep_load(self, result: LoadResult) -> LoadResult:
        for trace in result.traces:
            self._keep(trace)
        self._keep_probe(result.probe)
        return result

    def _keep_probe(self, probed: Probed | None) -> None:
        """Add a stream's or a load's probe samples to the test's."""
        self.probe = merge([self.probe, probed])

    def _processes(self, processes: int | str | None, plan: LoadPlan) -> int | str | None:
        """``processes="auto"`` as a count for this machine (None: in this process, on one
        usable core or for a single stream); left as given under Ray, which refuses it."""
        if self.ray is not None:
            return processes
        return resolve_processes(processes, plan.n)

    def _check_sharded(self, processes: int | str | None, shards: int | None) -> bool:
        """Whether the load is sharded (``processes``, or ``--streamguard-ray``). Bad
        arguments, or a fault that only this process's reader can set off, are a ValueError
        before anything starts."""
        if processes is not None:
            check_processes(processes)
            if self.ray is not None:
                raise ValueError(
                    f"load processes={processes!r}: this session shards every load over Ray "
                    "(--streamguard-ray); use shards= for the number of Ray tasks"
                )
        if shards is not None:
            check_shards(shards)
            if self.ray is None:
                raise ValueError(
                    f"load shards={shards!r} needs a Ray cluster (--streamguard-ray); on this "
                    "machine use processes="
                )
        if processes is None and self.ray is None:
            return False
        aimed = self.faults.aimed_faults
        if aimed:
            how = "with processes=" if processes is not None else "over Ray"
            raise ValueError(
                f"faults.{aimed[0].describe()} aims at streams by their index in this test's "
                f"request order, which a load {how} does not keep (its shards number their "
                "own streams): read the load without processes= (or --streamguard-ray), or "
                "aim the fault without streams="
            )
        pending = self.faults.pending_on_reader
        if pending:
            raise ValueError(
                f"faults.{pending[0].describe()} is set off by this process's reader counting "
                "chunks, which a load with processes= reads elsewhere: read it without "
                "processes=, or set it off without after_chunks"
            )
        return True

    def _keep_sharded(
        self, request: StreamRequest, result: LoadResult, probed: Probed | None
    ) -> LoadResult:
        # Shards name their streams on their own; the test's numbering goes by send order.
        for trace in result.traces:
            trace.name = self._next_name(request)
            # The proxy's chunk faults acted on the shards' streams: note which reached chunk N.
            self.faults.reached(trace)
        result.probe = probed
        return self._keep_load(result)

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
        shown in verdicts and reports). Raises IngressError when nginx is missing or fails.
        """
        if self._ingress is not None:
            raise IngressError(
                f"streamguard.ingress() is already on for this test ({self._ingress[0]!r})"
            )
        hop = Ingress(
            self.target.address,
            read_timeout=read_timeout,
            send_timeout=send_timeout,
            buffering=buffering,
            gzip=gzip,
        )
        params = {
            "read_timeout": read_timeout,
            "buffering": buffering,
            "gzip": gzip,
            "send_timeout": send_timeout,
        }
        record = FaultRecord(kind="ingress", params=params, toxics=[])
        hop.start()
        # Before the call: re-pointing the proxy closes its open connections while it runs.
        record.on_ns = time.perf_counter_ns()
        try:
            self.api.set_upstream(self.proxy, hop.address)
        except BaseException:
            hop.stop()
            raise
        self.faults.records.append(record)
        self._ingress = (hop, record)
        return hop

    def close(self) -> None:
        """Undo this test's faults and ingress (proxy pointed back at the target, nginx
        stopped)."""
        try:
            self.faults.clear()
        finally:
            if self._ingress is not None:
                hop, record = self._ingress
                self._ingress = None
                try:
                    self.api.set_upstream(self.proxy, self.upstream)
                finally:
                    hop.stop()
                    record.off_ns = time.perf_counter_ns()
