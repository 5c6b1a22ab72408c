"""The probe: a light request sent to the target every ``interval_s`` beside the streams.

A client's threshold cannot tell a blocked event loop from a full server; the server can. The
probe asks the target directly, never through the fault proxy: its ready path (``kind="http"``,
over one kept-alive connection) or a TCP connect (``kind="tcp"``); under a stack, each inner
service too (``ProbeSpec.inner``). What a sample is: :mod:`pytest_streamguard.verdict.probe`.
One probe per service is in flight at a time. :func:`probing` runs them as tasks on the running
loop (a load, an async stream); :class:`ProbeThread` on a loop in a thread of its own.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

import httpx

from pytest_streamguard.common.cpu import schedstat, stolen_ns
from pytest_streamguard.common.defaults import DEFAULT_PROBE_INTERVAL
from pytest_streamguard.common.tls import tls_context
from pytest_streamguard.verdict.probe import PROBE_KINDS, PROBE_WAIT_S, Probed, model_route

__all__ = ["DEFAULT_PROBE_INTERVAL", "ProbeSpec", "ProbeThread", "aprobe", "probing"]

#: The default probe's path where the ready path is a model route (:func:`model_route`): any
#: status is an answer from the app's loop (llama-cpp-python's is a 404, given without its
#: model).
PROBE_BESIDE_MODELS = "/health"

#: A probe without an answer after this many seconds is recorded as none (latency None): long
#: enough for any stall a finding names, short enough that the next probe still goes out.
PROBE_TIMEOUT_S = 2.0
# How long stopping waits for the thread's loop to end (its request is cancelled at once).
_STOP_S = 5.0


@dataclass(frozen=True)
class ProbeSpec:
    """Where and how often to probe: ``kind`` ``http`` (``GET url``) or ``tcp`` (connect to
    ``host``:``port`` of ``url``), ``target`` as shown (the ready path, or ``host:port``);
    ``hop``, under a stack, the service's name; ``inner``, the stack's inner services' own
    probes, sent beside this one."""

    kind: str
    url: str
    target: str
    interval_s: float = DEFAULT_PROBE_INTERVAL
    timeout_s: float = PROBE_TIMEOUT_S
    #: The target's process, where the plugin started it: its main thread's wait for a CPU
    #: is read beside each sample (:attr:`Probed.cpu_waits`). None for a target by URL.
    pid: int | None = None
    hop: str | None = None
    inner: tuple[ProbeSpec, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in PROBE_KINDS:
            raise ValueError(
                f"probe kind {self.kind!r} is not known: expected one of {', '.join(PROBE_KINDS)}"
            )
        if not self.interval_s > 0:
            raise ValueError(f"probe interval {self.interval_s!r}: expected seconds > 0")

    @classmethod
    def for_target(
        cls, setting: str, url: str, ready_path: str, interval_s: float, pid: int | None = None
    ) -> ProbeSpec:
        """The probe ``setting`` asks for (``tcp``, a path, or empty for ``ready_path``, or
        :data:`PROBE_BESIDE_MODELS` where that is a :func:`model_route`) on the target at base
        ``url`` (its process ``pid`` where the plugin started it); ``off`` is for the caller
        to handle (no probe)."""
        if setting == "tcp":
            address = url.split("://", 1)[-1].split("/", 1)[0]
            return cls("tcp", url, address, interval_s, pid=pid)
        path = setting or (PROBE_BESIDE_MODELS if model_route(ready_path) else ready_path)
        return cls("http", url.rstrip("/") + path, path, interval_s, pid=pid)

    def new(self) -> Probed:
        """An empty :class:`Probed` for this probe's samples (and its inner ones')."""
        inner = [spec.new() for spec in self.inner]
        return Probed(self.kind, self.target, self.interval_s, hop=self.hop, inner=inner)

    @property
    def host_port(self) -> tuple[str, int]:
        """The target's host and port (for a TCP probe)."""
        netloc = self.url.split("://", 1)[-1].split("/", 1)[0]
        host, _, port = netloc.rpartition(":")
        default = 443 if self.url.startswith("https") else 80
        return host.strip("[]") or netloc, int(port) if port.isdigit() else default


async def _connect(spec: ProbeSpec) -> None:
    host, port = spec.host_port
    _, writer = await asyncio.open_connection(host, port)
    writer.close()
    await writer.wait_closed()


def probe_id(stamp_ns: int) -> str:
    """The ``x-request-id`` of the sample sent at ``stamp_ns``: under a stack, a ready path
    that asks the hop behind it (forwarding the id, as nginx does) is found on that hop's tap."""
    return f"streamguard-probe-{stamp_ns}"


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it (``/proc/PID/task/PID/children``, read now)."""
    found, todo = [], [pid]
    while todo:
        found.append(one := todo.pop())
        with suppress(OSError, ValueError), open(f"/proc/{one}/task/{one}/children", "rb") as f:
            todo += [int(child) for child in f.read().split()]
    return found


#: The wakeups an answer takes on each side (a request read, an answer written, ...).
WAKEUPS = 3

Schedstats = dict[int, tuple[int, int, int]]


def cpu_waits_now(pid: int | None) -> Schedstats | None:
    """The :func:`~pytest_streamguard.common.cpu.schedstat` of the main threads of process
    ``pid`` and of each process below it (a wrapper's child, nginx's worker), by pid, of the
    calling thread under 0, and the clock and :func:`stolen_ns` under -1; None without a pid or
    with the process gone."""
    if pid is None:
        return None
    own = schedstat("/proc/thread-self/schedstat")
    stats = {one: schedstat(f"/proc/{one}/task/{one}/schedstat") for one in process_tree(pid)}
    if own is None or stats[pid] is None:
        return None
    now = (time.perf_counter_ns(), stolen_ns(), 0)
    return {one: ns for one, ns in stats.items() if ns is not None} | {0: own, -1: now}


def cpu_wait_ns(before: Schedstats | None, after: Schedstats | None) -> int | None:
    """How long the probe's thread and the process that answered waited for a CPU between two
    :func:`cpu_waits_now` in ways that held the answer up (the probe's, the longest of the
    processes', the host's steal). A free loop does not sleep while a request waits for it: a
    thread's waits count beyond the time it slept that the other side does not explain, and at
    least ``WAKEUPS`` of its average one (the naive target's loop, asleep in a blocking
    ``queue.get``, waited for a CPU at every token: that stretched the block, not the answer)."""
    if before is None or after is None:
        return None
    common = after.keys() & before.keys()
    spent = {one: [a - b for a, b in zip(after[one], before[one], strict=True)] for one in common}
    (elapsed, stolen, _), own = spent.pop(-1), spent.pop(0)

    def held_up(explained: int, ran: int, waited: int, runs: int) -> int:
        slept = max(0, elapsed - ran - waited - explained)
        return min(waited, max(WAKEUPS * waited // max(runs, 1), waited - slept))

    busiest = max(ran + waited for ran, waited, _ in spent.values())
    answered = max(held_up(own[1], *ns) for ns in spent.values())
    return held_up(busiest, *own) + answered + stolen


async def aprobe(spec: ProbeSpec, probed: Probed, stop: asyncio.Event) -> None:
    """Probe every ``spec.interval_s`` until ``stop`` is set, appending each sample to
    ``probed.samples`` (and the target's wait for a CPU meanwhile to ``probed.cpu_waits``)."""
    async with httpx.AsyncClient(timeout=spec.timeout_s, verify=tls_context()) as client:
        while not stop.is_set():
            before = cpu_waits_now(spec.pid)
            sent = time.perf_counter_ns()
            latency: int | None
            try:
                async with asyncio.timeout(spec.timeout_s):
                    if spec.kind == "http":
                        # Any status is an answer: the loop was free to give it.
                        await client.get(spec.url, headers={"x-request-id": probe_id(sent)})
                    else:
                        await _connect(spec)
                latency = time.perf_counter_ns() - sent
            except (httpx.HTTPError, OSError, TimeoutError):
                latency = None
            except asyncio.CancelledError:
                # Stopped while it waited: a wait for the loop as long as a stall's (less the
                # target's wait for a CPU, as an answer's) is what the streams saw (a loop
                # blocked until they ended): kept as a sample without an answer.
                cpu_ns = cpu_wait_ns(before, cpu_waits_now(spec.pid)) or 0
                if time.perf_counter_ns() - sent - cpu_ns >= PROBE_WAIT_S * 1e9:
                    probed.samples.append((sent, None))
                raise
            cpu = cpu_wait_ns(before, cpu_waits_now(spec.pid))
            if latency is not None and cpu is not None:
                probed.cpu_waits[sent] = cpu
            probed.samples.append((sent, latency))
            wait = sent / 1e9 + spec.interval_s - time.perf_counter_ns() / 1e9
            if wait > 0:
                with suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)


@asynccontextmanager
async def probing(
    spec: ProbeSpec | None, into: Probed | None = None
) -> AsyncIterator[Probed | None]:
    """Probe on the running loop while the block runs; yields the samples (``into``, or a new
    :class:`Probed`; None without a ``spec``). A probe still waiting when the block ends is
    kept as one without an answer where it had waited ``PROBE_WAIT_S`` or more (a loop blocked
    until the streams ended answers only after them), else dropped: it measured nothing yet."""
    if spec is None:
        yield None
        return
    probed = into if into is not None else spec.new()
    stop = asyncio.Event()
    pairs = zip((spec, *spec.inner), (probed, *probed.inner), strict=True)
    tasks = [asyncio.ensure_future(aprobe(one, into_one, stop)) for one, into_one in pairs]
    try:
        yield probed
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class ProbeThread:
    """The probe on a loop of its own in a thread, for as long as the ``with`` block runs:
    ``probed`` holds the samples (None without a ``spec``)."""

    def __init__(self, spec: ProbeSpec | None) -> None:
        self.spec = spec
        self.probed: Probed | None = spec.new() if spec is not None else None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    async def _main(self) -> None:
        async with probing(self.spec, self.probed):
            await asyncio.to_thread(self._stop.wait)

    def __enter__(self) -> ProbeThread:
        if self.spec is not None:
            main = (self._main(),)
            self._thread = threading.Thread(target=asyncio.run, args=main, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(_STOP_S)
