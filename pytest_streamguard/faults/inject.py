"""The fault vocabulary of a test, each word mapped to Toxiproxy toxics or proxy state (the
table of words and what each does is in docs/faults.md).

Every fault applies when called and is removed when the test ends; each is recorded as a
:class:`~pytest_streamguard.stream.trace.FaultRecord` with its on/off ``perf_counter_ns`` stamps,
which the test's traces carry. The chunk faults (``stall``, and ``cut`` and ``reset`` with
``after_chunks=N``) are toxics of the embedded server, which acts right after chunk N of each
stream itself (a real Toxiproxy has none, so there they are refused); with ``streams=`` they
are ``aimed`` at the test's streams that name them in an ``x-streamguard-aim`` header.

This module owns :class:`Faults`, the words a test calls, and :class:`FaultLog`, the plugin's
side of them (the hooks the client, the loads and the session call). Each word has the
module of its mechanism check its arguments and build one
:class:`~pytest_streamguard.faults.mechanism.Mechanism` (:mod:`~pytest_streamguard.faults.toxics`:
the proxy's toxics and state; :mod:`~pytest_streamguard.faults.chunks`: the chunk toxics;
:mod:`~pytest_streamguard.faults.signals`: freeze and restart), applies it, passes it the test's
streams while it is on, and undoes and judges it (:mod:`pytest_streamguard.faults.fired`) when
the test ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toxiproxy.proxy import Proxy

from pytest_streamguard.errors import ToxiproxyError
from pytest_streamguard.faults.chunks import AIM_HEADER, ChunkToxic, end_at_chunk, stall_at_chunk
from pytest_streamguard.faults.fired import judge
from pytest_streamguard.faults.mechanism import Mechanism, active_on
from pytest_streamguard.faults.profiles import Profile
from pytest_streamguard.faults.signals import ProcessSignal, Restart, freeze_fault, restart_fault
from pytest_streamguard.faults.toxics import (
    ProfileToxics,
    ProxyControl,
    ProxyDown,
    SlowReader,
    bandwidth_fault,
    blackhole_fault,
    cut_after_bytes,
    latency_fault,
    reset_after_ms,
    slicer_fault,
    slow_reader_fault,
)
from pytest_streamguard.faults.toxiproxy_client import ToxiproxyAPI
from pytest_streamguard.stream.trace import FaultRecord, StreamTrace

if TYPE_CHECKING:
    from pytest_streamguard.services.app import Target

__all__ = ["FaultLog", "Faults", "log_of"]


def _undo_order(on: list[Mechanism]) -> list[Mechanism]:
    """The faults on now, in the order :meth:`Faults.clear` undoes them: those the client sets
    off first, as applied (a frozen target continues, a restart under way is waited for), then
    the proxy's toxics newest first, and the proxy enabled again last."""
    triggered = [m for m in on if isinstance(m, ChunkToxic | ProcessSignal)]
    down = [m for m in on if isinstance(m, ProxyDown)]
    standing = [m for m in reversed(on) if m not in triggered and m not in down]
    return [*triggered, *standing, *down]


class FaultLog:
    """The faults of one test as the plugin drives them: which are on, which streams they aim
    at, the client's chunks and ends they hear, and how each is judged and undone when the test
    ends. The plugin owns it (:func:`log_of` finds it behind a test's :class:`Faults`); a test
    holds :class:`Faults`, whose words add faults to it."""

    def __init__(
        self,
        api: ToxiproxyAPI,
        proxy: Proxy,
        target_pid: int | None = None,
        seed: int = 0,
        target: Target | None = None,
        hop: str | None = None,
    ) -> None:
        self.control = ProxyControl(api, proxy)
        # A target the plugin started (for restart(); freeze() follows its process there).
        self.target = target
        # --streamguard-seed: which streams a fraction of streams= aims at.
        self.seed = seed
        # The process (and group) of a target the plugin started, for freeze(); None for one
        # given by URL.
        self.target_pid = target_pid
        #: Under a stack: the inner hop these faults act on (each record names it).
        self.hop = hop
        self.records: list[FaultRecord] = []
        #: The rate a slow reader paces the test's next streams to (None: full speed).
        self.slow_reader_bps: float | None = None
        # Every fault of the test (to judge them), and those not undone yet (which hear the
        # client's chunks).
        self._mechanisms: list[Mechanism] = []
        self._on: list[Mechanism] = []
        # The slow reader that the client's pacing is counted for (None once undone).
        self._slow: SlowReader | None = None

    def _register(self, mechanism: Mechanism) -> FaultRecord:
        if self.hop is not None:
            mechanism.record.hop = self.hop
        self.records.append(mechanism.record)
        self._mechanisms.append(mechanism)
        self._on.append(mechanism)
        return mechanism.record

    def add(self, mechanism: Mechanism) -> FaultRecord:
        """Apply ``mechanism`` as one of the test's faults (one applied in part is undone too)."""
        record = self._register(mechanism)
        mechanism.apply()
        return record

    def add_chunk(self, mechanism: ChunkToxic) -> FaultRecord:
        """Apply a chunk toxic first: one the proxy refused is not one of the test's faults."""
        mechanism.apply()
        return self._register(mechanism)

    def add_slow_reader(self, mechanism: SlowReader, bytes_per_second: float) -> FaultRecord:
        """Apply a slow reader: the test's later streams are read at ``bytes_per_second``."""
        self.slow_reader_bps = float(bytes_per_second)
        record = self.add(mechanism)
        self._slow = mechanism
        return record

    def _chunk_toxics(self) -> list[ChunkToxic]:
        return [m for m in self._on if isinstance(m, ChunkToxic)]

    def _aimed(self, index: int) -> list[ChunkToxic]:
        return [t for t in self._chunk_toxics() if t.streams is not None and t.aims(index)]

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
        for mechanism in self._mechanisms:
            if mechanism.record is record and isinstance(mechanism, ChunkToxic):
                return mechanism.covers(trace)
        return True

    @property
    def aimed_faults(self) -> list[FaultRecord]:
        """The faults on now that are aimed at streams with ``streams=``."""
        return [t.record for t in self._chunk_toxics() if t.streams is not None]

    def reached(self, trace: StreamTrace) -> None:
        """A stream read elsewhere (a shard process) has ended: note it for the chunk faults
        that the proxy applied to it."""
        for trigger in self._chunk_toxics():
            trigger.reached(trace)

    @property
    def pending_on_reader(self) -> list[FaultRecord]:
        """Faults that wait for this process's reader to see chunk N (``freeze`` and
        ``restart`` with ``after_chunks``, not set off yet)."""
        return [t.record for t in self._on if isinstance(t, ProcessSignal) and t.waiting]

    def before_stream(self) -> None:
        """Called before each stream opens: wait for a restart under way to be over."""
        for trigger in self._on:
            if isinstance(trigger, Restart):
                trigger.wait()

    def on_pace(self, seconds: float) -> None:
        """Called by the client each time a slow reader waits to keep to its rate."""
        if self._slow is not None:
            self._slow.waited += seconds

    def on_chunk(self, trace: StreamTrace) -> None:
        """Called by the client after each data event (drives client-triggered faults)."""
        for mechanism in self._on:
            mechanism.on_chunk(trace)

    def on_end(self, trace: StreamTrace) -> None:
        """Called when a stream has ended (passed on to the faults on now)."""
        for mechanism in self._on:
            mechanism.on_end(trace)

    def judge(self, traces: list[StreamTrace]) -> list[FaultRecord]:
        """Decide ``fired`` and ``evidence`` of every fault of the test from ``traces`` (see
        :mod:`pytest_streamguard.faults.fired`); return the faults that never fired."""
        mechanisms = {id(m.record): m for m in self._mechanisms}
        for record in self.records:
            mechanism = mechanisms.get(id(record))
            if mechanism is not None:
                record.fired, record.evidence = mechanism.judge(traces)
            else:
                # The ingress, which its StreamGuard applies and undoes.
                record.fired, record.evidence = judge(record, active_on(record, traces))
        return [r for r in self.records if not r.fired]

    def withdraw(self, record: FaultRecord) -> None:
        """Undo the fault of ``record`` now and drop it from the test's faults: one a headroom
        search applied for a level (the level's figures report it, not the test's verdict).
        Raise ToxiproxyError if it could not be undone."""
        mechanism = next(m for m in self._mechanisms if m.record is record)
        errors = mechanism.remove()
        self._mechanisms.remove(mechanism)
        self._on = [m for m in self._on if m is not mechanism]
        self.records = [r for r in self.records if r is not record]
        if errors:
            raise ToxiproxyError("could not undo the headroom level's fault: " + "; ".join(errors))

    def clear(self) -> None:
        """Undo every fault of this test (again: only those added since); raise
        ToxiproxyError if any could not be undone."""
        errors: list[str] = []
        for mechanism in _undo_order(self._on):
            errors.extend(mechanism.remove())
        # A proxy left disabled is enabled by the next clear() (a toxic that could not be
        # removed is left to reset_proxy() before the next test).
        self._on = [m for m in self._on if isinstance(m, ProxyDown) and m.control.disabled]
        # Streams opened from now on are read at full speed (one in flight keeps its pace).
        self.slow_reader_bps = None
        self._slow = None
        if errors:
            raise ToxiproxyError("could not undo every fault: " + "; ".join(errors))

    def reset_proxy(self) -> None:
        """Remove leftover toxics and re-enable the proxy (state from a test that crashed)."""
        self.control.reset()


class Faults:
    """Faults for one test (``streamguard.faults``): each word applies one fault and returns
    its :class:`~pytest_streamguard.stream.trace.FaultRecord`; all are undone when the test ends."""

    def __init__(self, log: FaultLog) -> None:
        self._log = log

    @property
    def records(self) -> list[FaultRecord]:
        """The test's faults so far, in the order they were applied."""
        return self._log.records

    def latency(self, ms: float, jitter: float = 0, stream: str = "downstream") -> FaultRecord:
        """Delay every chunk by ``ms`` milliseconds (± ``jitter`` milliseconds) on ``stream``.

        Toxiproxy's latency toxic takes whole milliseconds, so a delay between 0 and 1 ms (most
        likely seconds written where milliseconds are meant) is refused."""
        return self._log.add(latency_fault(self._log.control, ms, jitter, stream))

    def stall(self, after_chunks: int, seconds: float, *, streams: Any = None) -> FaultRecord:
        """Pause each stream for ``seconds`` right after its ``after_chunks``-th data event
        (the rest of it is held, not dropped, then sent in one write). ``streams``: only the
        test's streams at these indexes (0 first, in request order), or a seeded fraction of
        them (``0.3``)."""
        return self._log.add_chunk(
            stall_at_chunk(self._log.control, self._log.seed, after_chunks, seconds, streams)
        )

    def freeze(self, seconds: float, after_chunks: int | None = None) -> FaultRecord:
        """Stop the target process the plugin started (its whole process group, SIGSTOP) for
        ``seconds``, then continue it (SIGCONT): a blocked event loop, on any app. Right away,
        or once a stream of the test has ``after_chunks`` chunks. Needs a target the plugin
        starts (``--streamguard-target-cmd`` or the bundled one)."""
        target = self._log.target
        pid = target.pid if target is not None else self._log.target_pid
        return self._log.add(freeze_fault(seconds, after_chunks, pid))

    def restart(self, after_chunks: int | None = None) -> FaultRecord:
        """Kill the target process the plugin started (its whole process group, SIGKILL: a
        crash) and start it again with the same command on the same port (docs/faults.md).
        Right away (this returns once the target is ready again), or once a stream of the test
        has ``after_chunks`` chunks (it starts again in the background)."""
        return self._log.add(restart_fault(self._log.target, after_chunks))

    def slow_reader(self, bytes_per_second: float, *, tiny: bool = False) -> FaultRecord:
        """Read every later stream of the test at ``bytes_per_second`` (bytes, not KB, up to
        10 MB/s) through a receive buffer of about half a second of it, so backpressure reaches
        the server; the proxy is throttled too, a little above the rate (docs/faults.md, "Slow
        reader rate"). A rate under 64 bytes/s is refused as a likely unit slip unless
        ``tiny=True`` says it is meant."""
        mechanism = slow_reader_fault(self._log.control, bytes_per_second, tiny)
        return self._log.add_slow_reader(mechanism, bytes_per_second)

    def bandwidth(self, kb_per_second: float) -> FaultRecord:
        """Limit the downstream to ``kb_per_second`` KB/s (1 KB = 1000 bytes)."""
        return self._log.add(bandwidth_fault(self._log.control, kb_per_second))

    def slicer(self, average_size: int, size_variation: int = 0, delay_us: int = 0) -> FaultRecord:
        """Split response chunks into ~``average_size``-byte pieces, ``delay_us`` µs apart."""
        return self._log.add(
            slicer_fault(self._log.control, average_size, size_variation, delay_us)
        )

    def cut(
        self,
        after_bytes: int | None = None,
        *,
        after_chunks: int | None = None,
        streams: Any = None,
    ) -> FaultRecord:
        """Close each connection (a FIN) after ``after_bytes`` response bytes (headers
        included), or right after each stream's ``after_chunks``-th data event (a stream with
        fewer events is not cut). ``streams`` (with ``after_chunks``): as in :meth:`stall`."""
        if (after_bytes is None) == (after_chunks is None):
            raise ValueError(
                f"faults.cut(after_bytes={after_bytes!r}, after_chunks={after_chunks!r}): "
                "expected exactly one of after_bytes (an integer >= 0) or after_chunks "
                "(an integer >= 1)"
            )
        shown = f"after_bytes={after_bytes!r}, "
        at_chunk = self._end_at_chunk("cut", after_chunks, streams, shown)
        return at_chunk or self._log.add(cut_after_bytes(self._log.control, after_bytes))

    def reset(
        self, after_ms: float = 0, *, after_chunks: int | None = None, streams: Any = None
    ) -> FaultRecord:
        """Reset (RST) each new connection ``after_ms`` ms after its first response chunk, or,
        with ``after_chunks``, right after each stream's ``after_chunks``-th data event.
        ``streams`` (with ``after_chunks``): as in :meth:`stall`."""
        if after_chunks is not None and after_ms:
            raise ValueError(
                f"faults.reset(after_ms={after_ms!r}, after_chunks={after_chunks!r}): "
                "expected one of after_ms (a reset after the first response chunk) or "
                "after_chunks (a reset right after chunk N)"
            )
        at_chunk = self._end_at_chunk("reset", after_chunks, streams, "")
        return at_chunk or self._log.add(reset_after_ms(self._log.control, after_ms))

    def _end_at_chunk(
        self, kind: str, after_chunks: int | None, streams: Any, shown: str
    ) -> FaultRecord | None:
        """``kind`` (cut or reset) right after each stream's ``after_chunks``-th data event,
        when given; else None, and ``streams=`` (which only a chunk fault takes) is refused
        (``shown``: the call's other arguments, for the message)."""
        if after_chunks is not None:
            return self._log.add_chunk(
                end_at_chunk(self._log.control, self._log.seed, kind, after_chunks, streams)
            )
        if streams is not None:
            raise ValueError(
                f"faults.{kind}({shown}streams={streams!r}): streams= aims a {kind} at chunk N; "
                "use it with after_chunks"
            )
        return None

    def blackhole(self) -> FaultRecord:
        """Drop all data both ways while keeping connections open."""
        return self._log.add(blackhole_fault(self._log.control))

    def down(self) -> FaultRecord:
        """Disable the proxy: open connections are closed and new ones refused."""
        return self._log.add(ProxyDown(self._log.control))

    def apply_profile(self, profile: Profile) -> list[FaultRecord]:
        """Apply a named profile (see :mod:`pytest_streamguard.faults.profiles`): its toxics as one
        ``profile(name=...)`` fault, then its fault-vocabulary calls; undone by :meth:`clear`."""
        applied: list[FaultRecord] = []
        if profile.toxics:
            applied.append(self._log.add(ProfileToxics(self._log.control, profile)))
        for word, kwargs in profile.faults:
            applied.append(getattr(self, word)(**kwargs))
        return applied

    def judge(self, traces: list[StreamTrace]) -> list[FaultRecord]:
        """Judge now whether each fault of the test took effect on ``traces`` (the plugin
        judges them when the body ends); return the faults that never fired."""
        return self._log.judge(traces)

    def clear(self) -> None:
        """Undo every fault of this test so far (a fault added later is undone when the test
        ends); raise ToxiproxyError if any could not be undone."""
        self._log.clear()


def log_of(faults: Faults) -> FaultLog:
    """The plugin's side of a test's ``faults``: its :class:`FaultLog`."""
    return faults._log
