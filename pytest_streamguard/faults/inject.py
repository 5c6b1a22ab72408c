"""The fault vocabulary of a test, each word mapped to Toxiproxy toxics or proxy state.

Every fault applies when called and is removed when the test ends; each is recorded as a
:class:`~pytest_streamguard.stream.trace.FaultRecord` with its on/off ``perf_counter_ns`` stamps,
which the test's traces carry. ``stall``, and ``cut`` and ``reset`` with ``after_chunks=N``, are
chunk toxics of the embedded server, which acts right after chunk N of each stream itself (a real
Toxiproxy has none, so there they are refused); ``slow_reader`` makes the client read slowly
through a small receive buffer, ``freeze`` stops the target's process group and ``restart``
kills it and starts it again. When the test's body ends, :meth:`Faults.judge` says of each
fault whether it took effect (:mod:`pytest_streamguard.faults.fired`).

=================  =====================================================================
word               what the proxy does
=================  =====================================================================
latency            ``latency`` toxic (latency ms, jitter ms) on the chosen stream
stall              ``chunk_stall`` downstream (embedded server only): right after each
                   stream's chunk N the rest waits S s (held, not dropped)
slow_reader        client reads paced to the rate through a receive buffer of ~0.5 s of it,
                   and ``bandwidth`` downstream at 1.25 times the rate
bandwidth          ``bandwidth`` toxic downstream, KB/s (1 KB = 1000 bytes)
slicer             ``slicer`` toxic downstream (average_size, size_variation, delay µs)
cut                ``limit_data`` downstream: N bytes (headers included), then a FIN; or,
                   with ``after_chunks``, ``chunk_cut`` (embedded server only): a FIN right
                   after each stream's chunk N
reset              ``reset_peer`` downstream: new connections lose their first response
                   chunk and get an RST after ``after_ms``; or, with ``after_chunks``,
                   ``chunk_reset`` (embedded server only): an RST right after chunk N
blackhole          ``timeout`` 0 both ways: data is dropped, the connection stays open
down               the proxy is disabled: connections are closed, new ones refused
freeze             not the proxy: SIGSTOP to the target's process group for S s, then SIGCONT
                   (right away or after N chunks of a stream)
restart            not the proxy: SIGKILL to the target's process group, then its command
                   started again on the same port (right away or after N chunks of a stream)
apply_profile      a named profile's toxics (``profile(name=...)``) and fault words
=================  =====================================================================

The chunk faults take ``streams=``: indexes of the test's streams in request order (``[6]``:
its 7th stream) or a fraction drawn from ``--streamguard-seed`` and each index (``0.3``).
The toxic is then ``aimed``: the embedded proxy acts only on connections whose request names
it in an ``x-streamguard-aim`` header, which the plugin sends on the streams aimed at.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import math
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from toxiproxy.proxy import Proxy

from pytest_streamguard._moved import moved_name
from pytest_streamguard.common.display import counted
from pytest_streamguard.errors import ToxiproxyError
from pytest_streamguard.faults.fired import judge
from pytest_streamguard.faults.profiles import Profile, Toxic
from pytest_streamguard.faults.toxiproxy_client import ToxiproxyAPI
from pytest_streamguard.stream.trace import FaultRecord, StreamTrace

if TYPE_CHECKING:
    from pytest_streamguard.services.app import Target

STREAMS = ("upstream", "downstream")
# The fastest slow reader measured to keep its rate within 10 % (benchmarks/slow_reader_rate.py,
# docs/faults.md); a faster one is refused rather than silently slower than asked.
SLOW_READER_MAX_BPS = 10_000_000
# The slow reader's toxic runs this much faster than the reader, so the client's pacing (exact
# to the byte) sets the rate and the toxic's 100 ms steps cannot pull it below the rate asked.
SLOW_READER_TOXIC_HEADROOM = 1.25


def _number(
    fault: str,
    name: str,
    value: Any,
    *,
    minimum: float,
    integer: bool = False,
    unit: str = "",
) -> float:
    kind = ("an integer" if integer else "a number") + (f" of {unit}" if unit else "")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"faults.{fault}({name}={value!r}): expected {kind} >= {minimum:g}")
    if not math.isfinite(value) or value < minimum or (integer and value != int(value)):
        raise ValueError(f"faults.{fault}({name}={value!r}): expected {kind} >= {minimum:g}")
    return float(value)


#: The request header that aims a chunk toxic of the embedded server at a stream: it names
#: the toxics aimed at that stream (``aimed`` toxics act on no other request; see
#: :mod:`pytest_streamguard.toxiproxy_server.events`).
AIM_HEADER = "x-streamguard-aim"

_STREAMS_ACCEPTED = (
    "expected a list of the test's stream indexes (0 is its first stream, in request order "
    "across stream(), astream(), load() and aload()), such as [2, 7], or a fraction of its "
    "streams above 0 and at most 1, such as 0.3"
)

#: What ``streams=`` holds once checked: indexes, a fraction, or None for every stream.
Aim = tuple[int, ...] | float | None


def _aim(call: str, streams: Any) -> Aim:
    """Check a chunk fault's ``streams=`` (``call`` names the fault for the error)."""
    where = f"faults.{call}(streams={streams!r})"
    if streams is None:
        return None
    if isinstance(streams, bool):
        raise ValueError(f"{where}: {_STREAMS_ACCEPTED}")
    if isinstance(streams, int):
        raise ValueError(
            f"{where}: {_STREAMS_ACCEPTED}; for the stream at index {streams} alone write "
            f"streams=[{streams}]"
        )
    if isinstance(streams, float):
        if not math.isfinite(streams) or not 0 < streams <= 1:
            raise ValueError(
                f"{where}: a fraction must be above 0 and at most 1; {_STREAMS_ACCEPTED}"
            )
        return streams
    if isinstance(streams, list | tuple | set | frozenset | range):
        indexes = list(streams)
        if not indexes:
            raise ValueError(f"{where}: an empty list aims at no stream; {_STREAMS_ACCEPTED}")
        for index in indexes:
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise ValueError(
                    f"{where}: {index!r} is not a stream index (an integer >= 0); "
                    f"{_STREAMS_ACCEPTED}"
                )
        return tuple(sorted(set(indexes)))
    raise ValueError(f"{where}: {_STREAMS_ACCEPTED}")


def chosen(seed: int, index: int, fraction: float) -> bool:
    """Whether ``streams=fraction`` aims at the stream at ``index``: a draw from the session's
    seed (``--streamguard-seed``) and the index alone, so a rerun with the same seed aims at
    the same streams, whatever else the test does."""
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2**64


#: Below this a slow reader's rate is more likely KB/s written as bytes/s than meant: a 1 KB
#: event then takes over 15 s to read. ``slow_reader(rate, tiny=True)`` says it is meant.
SLOW_READER_TINY_BPS = 64


class _ProxyChunk:
    """A chunk toxic of the embedded server (``chunk_stall``, ``chunk_cut``, ``chunk_reset``):
    the proxy acts right after the Nth chunk of every response, counted as ``trace.chunks``
    counts (:mod:`pytest_streamguard.toxiproxy_server.events`), holding nothing before it.
    The client only notes the streams that reached chunk N, for the judgement; ``on_ns`` is
    when the first of them received it."""

    def __init__(
        self, faults: Faults, record: FaultRecord, after_chunks: int, streams: Aim = None
    ) -> None:
        self.faults = faults
        self.record = record
        self.after_chunks = after_chunks
        self.hits: dict[int, StreamTrace] = {}
        # streams=: which of the test's streams it is aimed at (None: all), and the traces
        # (by id) of those opened while it was on.
        self.streams = streams
        self.aimed: set[int] = set()

    def aims(self, index: int) -> bool:
        """Whether this fault is aimed at the test's stream at ``index``."""
        if self.streams is None:
            return True
        if isinstance(self.streams, float):
            return chosen(self.faults.seed, index, self.streams)
        return index in self.streams

    def covers(self, trace: StreamTrace) -> bool:
        """Whether the fault can act on ``trace`` (every stream, or one it was aimed at)."""
        return self.streams is None or id(trace) in self.aimed

    @property
    def triggered(self) -> list[StreamTrace]:
        """The streams that reached chunk N."""
        return list(self.hits.values())

    def on_chunk(self, trace: StreamTrace) -> None:
        if len(trace.chunks) != self.after_chunks:
            return
        self.reached(trace)

    def reached(self, trace: StreamTrace) -> None:
        """Note ``trace`` if it reached chunk N (also for a stream read in a shard process)."""
        if len(trace.chunks) < self.after_chunks or id(trace) in self.hits:
            return
        if not self.covers(trace):
            return
        self.hits[id(trace)] = trace
        stamp = trace.chunks[self.after_chunks - 1].stamp_ns
        if self.record.on_ns is None or stamp < self.record.on_ns:
            self.record.on_ns = stamp

    def on_end(self, trace: StreamTrace) -> None:
        """The toxic acts on each response by itself; nothing to undo per stream."""

    def stop(self) -> BaseException | None:
        error: BaseException | None = None
        if self.record.toxics:
            try:
                self.faults.api.remove_toxic(self.faults.proxy, self.record.toxics[0])
            except ToxiproxyError as exc:
                error = exc
        if self.record.off_ns is None:
            self.record.off_ns = time.perf_counter_ns()
        return error


# Process groups stopped by a freeze right now: continued at exit whatever happens (Ctrl-C, a
# crash), so no target is ever left stopped.
_FROZEN: set[int] = set()
_FROZEN_LOCK = threading.Lock()


def _continue(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGCONT)
    with _FROZEN_LOCK:
        _FROZEN.discard(pgid)


@atexit.register
def _continue_all() -> None:
    for pgid in list(_FROZEN):
        _continue(pgid)


class _Freeze:
    """``freeze(seconds, after_chunks)``: SIGSTOP to the target's process group (its whole
    group: workers included), SIGCONT ``seconds`` later; right away, or once a stream of the
    test has ``after_chunks`` chunks (once per call)."""

    def __init__(
        self,
        faults: Faults,
        record: FaultRecord,
        pgid: int,
        after_chunks: int | None,
        seconds: float,
    ) -> None:
        self.faults = faults
        self.record = record
        self.pgid = pgid
        self.after_chunks = after_chunks
        self.seconds = seconds
        self.cancel = threading.Event()
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.hit: StreamTrace | None = None

    @property
    def triggered(self) -> list[StreamTrace]:
        """The stream that reached the chunk (none for a freeze applied at once)."""
        return [self.hit] if self.hit is not None else []

    def start(self) -> None:
        """Stop the group now (in this thread, so the stop is in place when this returns)
        and continue it from a thread after the seconds."""
        with _FROZEN_LOCK:
            _FROZEN.add(self.pgid)
        try:
            os.killpg(self.pgid, signal.SIGSTOP)
        except OSError as exc:
            _continue(self.pgid)
            self.error = exc
            return
        self.record.on_ns = time.perf_counter_ns()
        self.thread = threading.Thread(target=self._run, name="streamguard-freeze", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.cancel.wait(self.seconds)
        finally:
            _continue(self.pgid)
            self.record.off_ns = time.perf_counter_ns()

    def on_chunk(self, trace: StreamTrace) -> None:
        if self.after_chunks is None or self.hit is not None:
            return
        if len(trace.chunks) >= self.after_chunks:
            self.hit = trace
            self.start()

    def on_end(self, trace: StreamTrace) -> None:
        """A freeze holds for its seconds whatever the streams do."""

    def stop(self) -> BaseException | None:
        self.cancel.set()
        if self.thread is not None:
            self.thread.join(5)
        _continue(self.pgid)
        if self.record.on_ns is not None and self.record.off_ns is None:
            self.record.off_ns = time.perf_counter_ns()
        return self.error


class _Restart:
    """``restart(after_chunks)``: SIGKILL to the target's process group (a crash: its open
    connections end), then the same command started again on the same port, in a thread; right
    away, or once a stream of the test has ``after_chunks`` chunks (once per call). ``on_ns``
    is the kill, ``off_ns`` when the target answered its ready path again."""

    def __init__(
        self, faults: Faults, record: FaultRecord, target: Target, after_chunks: int | None
    ) -> None:
        self.faults = faults
        self.record = record
        self.target = target
        self.after_chunks = after_chunks
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.hit: StreamTrace | None = None

    @property
    def triggered(self) -> list[StreamTrace]:
        """The stream that reached the chunk (none for a restart applied at once)."""
        return [self.hit] if self.hit is not None else []

    def start(self) -> None:
        """Kill the group now (in this thread: the streams in flight are cut right here) and
        start the target again from a thread."""
        self.target.kill()
        self.record.on_ns = time.perf_counter_ns()
        self.thread = threading.Thread(target=self._run, name="streamguard-restart", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.target.restart()
        except BaseException as exc:  # reported by stop(), when the test's faults are undone
            self.error = exc
        finally:
            self.record.off_ns = time.perf_counter_ns()

    def wait(self) -> None:
        """Return once a restart under way is over (the target is ready, or failed to be)."""
        if self.thread is not None:
            self.thread.join(self.target.startup_timeout + 10)

    def on_chunk(self, trace: StreamTrace) -> None:
        if self.after_chunks is None or self.hit is not None:
            return
        if len(trace.chunks) >= self.after_chunks:
            self.hit = trace
            self.start()

    def on_end(self, trace: StreamTrace) -> None:
        """A restart goes on whatever the streams do."""

    def stop(self) -> BaseException | None:
        self.wait()
        return self.error


_Trigger = _ProxyChunk | _Freeze | _Restart


class Faults:
    """Faults for one test (``streamguard.faults``); all are undone when the test ends."""

    def __init__(
        self,
        api: ToxiproxyAPI,
        proxy: Proxy,
        target_pid: int | None = None,
        seed: int = 0,
        target: Target | None = None,
    ) -> None:
        self.api = api
        self.proxy = proxy
        # A target the plugin started (for restart(); freeze() follows its process there).
        self.target = target
        # --streamguard-seed: which streams a fraction of streams= aims at.
        self.seed = seed
        # The process (and group) of a target the plugin started, for freeze(); None for one
        # given by URL.
        self.target_pid = target_pid
        self.records: list[FaultRecord] = []
        self.slow_reader_bps: float | None = None
        self._triggers: list[_Trigger] = []
        # Seconds the reader waited under each slow_reader fault (by the record's id).
        self._paced: dict[int, float] = {}
        self._slow_record: FaultRecord | None = None
        # Triggers undone by clear(), still needed to judge their faults.
        self._spent: list[_Trigger] = []
        # The toxics of each profile record, by the record's id (to judge them by type).
        self._profile_toxics: dict[int, tuple[Toxic, ...]] = {}
        self._down = False
        self._counter = 0

    def _name(self, kind: str) -> str:
        self._counter += 1
        return f"streamguard_{kind}_{self._counter}"

    def _toxics(
        self, kind: str, params: dict[str, Any], toxics: list[tuple[str, str, dict[str, Any]]]
    ) -> FaultRecord:
        record = FaultRecord(kind=kind, params=params, toxics=[])
        self.records.append(record)
        # Before the first call: a toxic may act on an open stream before the call returns.
        record.on_ns = time.perf_counter_ns()
        for type_, stream, attributes in toxics:
            name = self._name(type_)
            self.api.add_toxic(self.proxy, name, type_, stream, attributes)
            record.toxics.append(name)
        return record

    def _end_at_chunk(self, kind: str, type_: str, after_chunks: int, streams: Any) -> FaultRecord:
        """``cut``/``reset`` right after chunk ``after_chunks``: the embedded server's
        ``type_`` toxic, aimed at ``streams`` when given."""
        _number(kind, "after_chunks", after_chunks, minimum=1, integer=True)
        return self._proxy_chunk(
            kind,
            {"after_chunks": after_chunks},
            type_,
            {"after_chunks": int(after_chunks)},
            _aim(kind, streams),
        )

    def _proxy_chunk(
        self,
        kind: str,
        params: dict[str, Any],
        type_: str,
        attributes: dict[str, int],
        streams: Aim = None,
    ) -> FaultRecord:
        """Add a chunk toxic (the embedded server's extension); refuse the fault where the
        server does not know the type (a real Toxiproxy), as nothing there lands at chunk N.
        Aimed at ``streams``, the toxic acts only on requests that name it (:data:`AIM_HEADER`)."""
        if streams is not None:
            params["streams"] = list(streams) if isinstance(streams, tuple) else streams
            attributes = {**attributes, "aimed": 1}
        name = self._name(type_)
        armed = time.perf_counter_ns()
        try:
            self.api.add_toxic(self.proxy, name, type_, "downstream", attributes)
        except ToxiproxyError as exc:
            if "invalid toxic type" not in str(exc).lower():
                raise
            call = ", ".join(f"{k}={v!r}" for k, v in params.items())
            raise ValueError(
                f"faults.{kind}({call}) needs the embedded Toxiproxy server (the default, "
                f"without --streamguard-toxiproxy URL): it acts right after chunk N itself, "
                f"and this Toxiproxy ({self.api.url}) has no such toxic (its answer: {exc}); "
                "a toxic the client adds once it has seen chunk N lands chunks late on a fast "
                "stream, so it is refused rather than late"
            ) from None
        record = FaultRecord(kind=kind, params=params, toxics=[name], armed_ns=armed)
        if streams is not None:
            record.streams = []
        self.records.append(record)
        self._triggers.append(_ProxyChunk(self, record, int(attributes["after_chunks"]), streams))
        return record

    def _aimed(self, index: int) -> list[_ProxyChunk]:
        return [
            t
            for t in self._triggers
            if isinstance(t, _ProxyChunk) and t.streams is not None and t.aims(index)
        ]

    def aim_headers(self, index: int) -> dict[str, str]:
        """The request headers of the test's stream at ``index`` (0 first): the names of the
        chunk toxics aimed at it with ``streams=`` (none: no header)."""
        names = [t.record.toxics[0] for t in self._aimed(index)]
        return {AIM_HEADER: ", ".join(names)} if names else {}

    def opened(self, trace: StreamTrace, index: int) -> None:
        """The test's stream at ``index`` was opened as ``trace`` (with :meth:`aim_headers`)."""
        for trigger in self._aimed(index):
            trigger.aimed.add(id(trace))
            assert trigger.record.streams is not None
            trigger.record.streams.append(index)

    def aims_at(self, record: FaultRecord, trace: StreamTrace) -> bool:
        """Whether ``record`` could act on ``trace``: False for a fault aimed with
        ``streams=`` at other streams."""
        for trigger in [*self._triggers, *self._spent]:
            if trigger.record is record and isinstance(trigger, _ProxyChunk):
                return trigger.covers(trace)
        return True

    @property
    def aimed_faults(self) -> list[FaultRecord]:
        """The faults on now that are aimed at streams with ``streams=``."""
        return [
            t.record for t in self._triggers if isinstance(t, _ProxyChunk) and t.streams is not None
        ]

    def latency(self, ms: float, jitter: float = 0, stream: str = "downstream") -> FaultRecord:
        """Delay every chunk by ``ms`` milliseconds (± ``jitter`` milliseconds) on ``stream``.

        Toxiproxy's latency toxic takes whole milliseconds, so a delay between 0 and 1 ms (most
        likely seconds written where milliseconds are meant) is refused."""
        _number("latency", "ms", ms, minimum=0, unit="milliseconds")
        _number("latency", "jitter", jitter, minimum=0, unit="milliseconds")
        for name, value in (("ms", ms), ("jitter", jitter)):
            if 0 < value < 1:
                raise ValueError(
                    f"faults.latency({name}={value!r}): the latency is in milliseconds, and "
                    f"Toxiproxy applies whole milliseconds ({value!r} ms would be 0); "
                    f"for {value!r} seconds write {round(value * 1000)}"
                )
        if stream not in STREAMS:
            raise ValueError(
                f"faults.latency(stream={stream!r}): expected one of {', '.join(STREAMS)}"
            )
        return self._toxics(
            "latency",
            {"ms": ms, "jitter": jitter, "stream": stream},
            [("latency", stream, {"latency": round(ms), "jitter": round(jitter)})],
        )

    def stall(self, after_chunks: int, seconds: float, *, streams: Any = None) -> FaultRecord:
        """Pause each stream for ``seconds`` right after its ``after_chunks``-th data event
        (the rest of it is held, not dropped). ``streams``: only the test's streams at these
        indexes (0 first, in request order), or a seeded fraction of them (``0.3``); the others
        are untouched."""
        _number("stall", "after_chunks", after_chunks, minimum=1, integer=True)
        _number("stall", "seconds", seconds, minimum=0, unit="seconds")
        if seconds <= 0:
            raise ValueError(f"faults.stall(seconds={seconds!r}): expected a number > 0")
        return self._proxy_chunk(
            "stall",
            {"after_chunks": after_chunks, "seconds": seconds},
            "chunk_stall",
            {"after_chunks": int(after_chunks), "duration": round(seconds * 1000)},
            _aim("stall", streams),
        )

    def freeze(self, seconds: float, after_chunks: int | None = None) -> FaultRecord:
        """Stop the target process the plugin started (its whole process group, SIGSTOP) for
        ``seconds``, then continue it (SIGCONT): a blocked event loop, on any app. Right away,
        or once a stream of the test has ``after_chunks`` chunks. Needs a target the plugin
        starts (``--streamguard-target-cmd`` or the bundled one)."""
        _number("freeze", "seconds", seconds, minimum=0)
        if seconds <= 0:
            raise ValueError(f"faults.freeze(seconds={seconds!r}): expected a number > 0")
        if after_chunks is not None:
            _number("freeze", "after_chunks", after_chunks, minimum=1, integer=True)
        pid = self.target.pid if self.target is not None else self.target_pid
        if pid is None:
            raise ValueError(
                "faults.freeze() stops the target process the plugin started, but this run's "
                "target is given by URL (--streamguard-target-url): start it with "
                "--streamguard-target-cmd (or use the bundled target) to freeze it"
            )
        record = FaultRecord(
            kind="freeze",
            params={"seconds": seconds, "after_chunks": after_chunks},
            toxics=[],
            armed_ns=time.perf_counter_ns(),
            applied_by="client",
        )
        self.records.append(record)
        trigger = _Freeze(
            self,
            record,
            pid,
            None if after_chunks is None else int(after_chunks),
            float(seconds),
        )
        self._triggers.append(trigger)
        if after_chunks is None:
            trigger.start()
            if trigger.error is not None:
                raise ValueError(
                    f"faults.freeze(): could not stop the target's process group "
                    f"{pid}: {trigger.error}"
                )
        return record

    def restart(self, after_chunks: int | None = None) -> FaultRecord:
        """Kill the target process the plugin started (its whole process group, SIGKILL: a
        crash) and start it again with the same command on the same port. Streams in flight
        are cut; a stream opened while it starts again waits until it is ready. Right away
        (this returns once the target is ready again), or once a stream of the test has
        ``after_chunks`` chunks (it starts again in the background). Needs a target the plugin
        starts (``--streamguard-target-cmd`` or the bundled one)."""
        if after_chunks is not None:
            _number("restart", "after_chunks", after_chunks, minimum=1, integer=True)
        target = self.target
        if target is None or target.process is None:
            raise ValueError(
                "faults.restart() kills and starts again the target process the plugin "
                "started, but this run's target is given by URL (--streamguard-target-url): "
                "start it with --streamguard-target-cmd (or use the bundled target) to "
                "restart it"
            )
        record = FaultRecord(
            kind="restart",
            params={} if after_chunks is None else {"after_chunks": after_chunks},
            toxics=[],
            armed_ns=time.perf_counter_ns(),
            applied_by="client",
        )
        self.records.append(record)
        trigger = _Restart(
            self, record, target, None if after_chunks is None else int(after_chunks)
        )
        self._triggers.append(trigger)
        if after_chunks is None:
            trigger.start()
            trigger.wait()
            if trigger.error is not None:
                raise ValueError(f"faults.restart(): {trigger.error}")
        return record

    def reached(self, trace: StreamTrace) -> None:
        """A stream read elsewhere (a shard process) has ended: note it for the chunk faults
        that the proxy applied to it."""
        for trigger in self._triggers:
            if isinstance(trigger, _ProxyChunk):
                trigger.reached(trace)

    @property
    def pending_on_reader(self) -> list[FaultRecord]:
        """Faults that wait for this process's reader to see chunk N (``freeze`` and
        ``restart`` with ``after_chunks``, not set off yet)."""
        return [
            t.record
            for t in self._triggers
            if isinstance(t, _Freeze | _Restart) and t.after_chunks is not None and t.hit is None
        ]

    def before_stream(self) -> None:
        """Called before each stream opens: wait for a restart under way to be over."""
        for trigger in self._triggers:
            if isinstance(trigger, _Restart):
                trigger.wait()

    def slow_reader(self, bytes_per_second: float, *, tiny: bool = False) -> FaultRecord:
        """Read every later stream of the test at ``bytes_per_second`` (bytes, not KB) through a
        receive buffer of about half a second of it, so backpressure reaches the server; the
        proxy is throttled too, a little above the rate. Up to 10 MB/s
        (``SLOW_READER_MAX_BPS``). A rate under 64 bytes/s is refused as a likely unit slip
        unless ``tiny=True`` says it is meant."""
        _number("slow_reader", "bytes_per_second", bytes_per_second, minimum=1, unit="bytes/s")
        if bytes_per_second < SLOW_READER_TINY_BPS and not tiny:
            raise ValueError(
                f"faults.slow_reader(bytes_per_second={bytes_per_second!r}): the rate is in "
                f"bytes per second, so a 1 KB event would take "
                f"{1000 / bytes_per_second:.0f} s to read; for {bytes_per_second!r} KB/s write "
                f"slow_reader({bytes_per_second * 1000:g}), or pass tiny=True if "
                f"{bytes_per_second!r} bytes/s is meant"
            )
        if bytes_per_second > SLOW_READER_MAX_BPS:
            raise ValueError(
                f"faults.slow_reader(bytes_per_second={bytes_per_second!r}): at most "
                f"{SLOW_READER_MAX_BPS:,} (10 MB/s), the fastest rate measured to be kept "
                "within 10 %; for a faster link use faults.bandwidth(kb_per_second)"
            )
        self.slow_reader_bps = float(bytes_per_second)
        rate = max(1, math.ceil(bytes_per_second * SLOW_READER_TOXIC_HEADROOM / 1000))
        self._slow_record = self._toxics(
            "slow_reader",
            {"bytes_per_second": bytes_per_second},
            [("bandwidth", "downstream", {"rate": rate})],
        )
        self._slow_record.applied_by = "client"
        return self._slow_record

    def on_pace(self, seconds: float) -> None:
        """Called by the client each time a slow reader waits to keep to its rate."""
        if self._slow_record is not None:
            key = id(self._slow_record)
            self._paced[key] = self._paced.get(key, 0.0) + seconds

    def bandwidth(self, kb_per_second: float) -> FaultRecord:
        """Limit the downstream to ``kb_per_second`` KB/s (1 KB = 1000 bytes)."""
        _number("bandwidth", "kb_per_second", kb_per_second, minimum=1, integer=True, unit="KB/s")
        return self._toxics(
            "bandwidth",
            {"kb_per_second": kb_per_second},
            [("bandwidth", "downstream", {"rate": int(kb_per_second)})],
        )

    def slicer(self, average_size: int, size_variation: int = 0, delay_us: int = 0) -> FaultRecord:
        """Split response chunks into ~``average_size``-byte pieces, ``delay_us`` µs apart."""
        _number("slicer", "average_size", average_size, minimum=1, integer=True)
        _number("slicer", "size_variation", size_variation, minimum=0, integer=True)
        _number("slicer", "delay_us", delay_us, minimum=0, integer=True)
        if size_variation >= average_size:
            raise ValueError(
                f"faults.slicer(size_variation={size_variation!r}): expected less than "
                f"average_size ({average_size!r})"
            )
        return self._toxics(
            "slicer",
            {"average_size": average_size, "size_variation": size_variation, "delay_us": delay_us},
            [
                (
                    "slicer",
                    "downstream",
                    {
                        "average_size": int(average_size),
                        "size_variation": int(size_variation),
                        "delay": int(delay_us),
                    },
                )
            ],
        )

    def cut(
        self,
        after_bytes: int | None = None,
        *,
        after_chunks: int | None = None,
        streams: Any = None,
    ) -> FaultRecord:
        """Close each connection (a FIN) after ``after_bytes`` response bytes (headers
        included), or right after each stream's ``after_chunks``-th data event, whatever the
        stream's length (a stream with fewer events is not cut; see :class:`_ProxyChunk`).
        ``streams`` (with ``after_chunks``): only the test's streams at these indexes (0
        first, in request order), or a seeded fraction of them; the others are untouched."""
        if (after_bytes is None) == (after_chunks is None):
            raise ValueError(
                f"faults.cut(after_bytes={after_bytes!r}, after_chunks={after_chunks!r}): "
                "expected exactly one of after_bytes (an integer >= 0) or after_chunks "
                "(an integer >= 1)"
            )
        if after_chunks is not None:
            return self._end_at_chunk("cut", "chunk_cut", after_chunks, streams)
        if streams is not None:
            raise ValueError(
                f"faults.cut(after_bytes={after_bytes!r}, streams={streams!r}): streams= aims "
                "a cut at chunk N; use it with after_chunks instead of after_bytes"
            )
        limit = int(_number("cut", "after_bytes", after_bytes, minimum=0, integer=True))
        return self._toxics(
            "cut",
            {"after_bytes": after_bytes},
            [("limit_data", "downstream", {"bytes": limit})],
        )

    def reset(
        self, after_ms: float = 0, *, after_chunks: int | None = None, streams: Any = None
    ) -> FaultRecord:
        """Reset (RST) each new connection ``after_ms`` ms after its first response chunk, or,
        with ``after_chunks``, right after each stream's ``after_chunks``-th data event (the
        embedded server's ``chunk_reset``). ``streams`` (with ``after_chunks``): only the
        test's streams at these indexes (0 first, in request order), or a seeded fraction of
        them; the others are untouched."""
        if after_chunks is not None:
            if after_ms:
                raise ValueError(
                    f"faults.reset(after_ms={after_ms!r}, after_chunks={after_chunks!r}): "
                    "expected one of after_ms (a reset after the first response chunk) or "
                    "after_chunks (a reset right after chunk N)"
                )
            return self._end_at_chunk("reset", "chunk_reset", after_chunks, streams)
        if streams is not None:
            raise ValueError(
                f"faults.reset(streams={streams!r}): streams= aims a reset at chunk N; use it "
                "with after_chunks"
            )
        _number("reset", "after_ms", after_ms, minimum=0)
        return self._toxics(
            "reset",
            {"after_ms": after_ms},
            [("reset_peer", "downstream", {"timeout": round(after_ms)})],
        )

    def blackhole(self) -> FaultRecord:
        """Drop all data both ways while keeping connections open."""
        return self._toxics(
            "blackhole",
            {},
            [("timeout", "upstream", {"timeout": 0}), ("timeout", "downstream", {"timeout": 0})],
        )

    def down(self) -> FaultRecord:
        """Disable the proxy: open connections are closed and new ones refused."""
        # Stamped before the call: open connections close while it runs, and a stream cut
        # by it must count it among its faults.
        record = FaultRecord(kind="down", params={}, toxics=[], on_ns=time.perf_counter_ns())
        self.records.append(record)
        self.api.set_enabled(self.proxy, False)
        self._down = True
        return record

    def apply_profile(self, profile: Profile) -> list[FaultRecord]:
        """Apply a named profile (see :mod:`pytest_streamguard.faults.profiles`): its toxics as one
        ``profile(name=...)`` fault, then its fault-vocabulary calls; undone by :meth:`clear`."""
        applied: list[FaultRecord] = []
        if profile.toxics:
            record = FaultRecord(
                kind="profile",
                params={"name": profile.name},
                toxics=[],
                on_ns=time.perf_counter_ns(),
            )
            self.records.append(record)
            self._profile_toxics[id(record)] = profile.toxics
            for toxic in profile.toxics:
                name = toxic.name or self._name(toxic.type)
                # Through the API wrapper's call(), with the toxicity a profile file may set.
                self.api.call(
                    f"add toxic {name!r} ({toxic.type}, {toxic.stream}) of profile "
                    f"{profile.name!r} to proxy {self.proxy.name!r}",
                    functools.partial(
                        self.proxy.add_toxic,
                        name=name,
                        type=toxic.type,
                        stream=toxic.stream,
                        toxicity=toxic.toxicity,
                        attributes=dict(toxic.attributes),
                    ),
                )
                record.toxics.append(name)
            applied.append(record)
        for word, kwargs in profile.faults:
            applied.append(getattr(self, word)(**kwargs))
        return applied

    def on_chunk(self, trace: StreamTrace) -> None:
        """Called by the client after each data event (drives client-triggered faults)."""
        for trigger in self._triggers:
            trigger.on_chunk(trace)

    def on_end(self, trace: StreamTrace) -> None:
        """Called when a stream has ended (a chunk cut takes its toxic off)."""
        for trigger in self._triggers:
            trigger.on_end(trace)

    def judge(self, traces: list[StreamTrace]) -> list[FaultRecord]:
        """Decide ``fired`` and ``evidence`` of every fault of the test from ``traces`` (see
        :mod:`pytest_streamguard.faults.fired`); return the faults that never fired."""
        triggered = {id(t.record): t.triggered for t in [*self._spent, *self._triggers]}
        for record in self.records:
            active = [t for t in traces if any(f is record for f in t.faults)]
            if record.streams is not None and not active:
                record.fired = False
                record.evidence = (
                    f"aimed at streams={record.params['streams']!r}, but no stream it aimed "
                    f"at was read while it was on (the test read {counted(len(traces), 'stream')})"
                )
                continue
            record.fired, record.evidence = judge(
                record,
                active,
                triggered=triggered.get(id(record), ()),
                toxics=self._profile_toxics.get(id(record), ()),
                waited=self._paced.get(id(record), 0.0),
            )
        return [r for r in self.records if not r.fired]

    def clear(self) -> None:
        """Undo every fault of this test (again: only those added since); raise
        ToxiproxyError if any could not be undone."""
        errors: list[str] = []
        for trigger in self._triggers:
            error = trigger.stop()
            if error is not None:
                errors.append(f"{trigger.record.kind}: {error}")
        triggered = {id(t.record) for t in self._triggers}
        for record in reversed(self.records):
            # Client-triggered faults undo themselves, the ingress is undone by its
            # StreamGuard, and a fault with an off stamp was undone by an earlier clear().
            if id(record) in triggered or record.kind == "ingress" or record.off_ns is not None:
                continue
            for name in reversed(record.toxics):
                try:
                    self.api.remove_toxic(self.proxy, name)
                except ToxiproxyError as exc:
                    errors.append(str(exc))
            if record.off_ns is None and record.on_ns is not None and record.kind != "down":
                record.off_ns = time.perf_counter_ns()
        if self._down:
            try:
                self.api.set_enabled(self.proxy, True)
                self._down = False
            except ToxiproxyError as exc:
                errors.append(str(exc))
            for record in self.records:
                if record.kind == "down" and record.off_ns is None:
                    record.off_ns = time.perf_counter_ns()
        self._spent.extend(self._triggers)
        self._triggers.clear()
        # Streams opened from now on are read at full speed (one in flight keeps its pace).
        self.slow_reader_bps = None
        self._slow_record = None
        if errors:
            raise ToxiproxyError("could not undo every fault: " + "; ".join(errors))

    def reset_proxy(self) -> None:
        """Remove leftover toxics and re-enable the proxy (state from a test that crashed)."""
        with contextlib.suppress(ToxiproxyError):
            for name in self.api.toxic_names(self.proxy):
                self.api.remove_toxic(self.proxy, name)
        if not self.api.is_enabled(self.proxy):
            self.api.set_enabled(self.proxy, True)


def __getattr__(name: str) -> object:
    """Names that moved out of this module (:mod:`pytest_streamguard._moved`)."""
    return moved_name(__name__, name)
