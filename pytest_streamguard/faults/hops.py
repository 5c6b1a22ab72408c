"""Faults on a stack's inner hops: ``streamguard.hop(NAME).faults`` (what a user sees is
docs/stacks.md's "Faults on the inner hop" and "Did it fire").

:class:`Hop` is one such hop of a test: the service, the proxy in front of it, and ``faults``
(:class:`HopFaults`, the vocabulary of ``streamguard.faults`` acting on that proxy, or on that
service's process for ``freeze`` and ``restart``). The client's streams are the ones that cross
every hop, so :class:`AllHops` passes them to the faults of every hop (a hop's
``after_chunks=N`` signal is set off by the client's chunk N), gives each stream the faults of
every hop that were on while it was read, and each hop's faults are judged on them
(:class:`HopLog`).
"""

from __future__ import annotations

from dataclasses import dataclass

from toxiproxy.proxy import Proxy

from pytest_streamguard.faults.chunks import AIM_HEADER
from pytest_streamguard.faults.inject import FaultLog, Faults
from pytest_streamguard.faults.mechanism import active_on
from pytest_streamguard.faults.toxiproxy_client import ToxiproxyAPI
from pytest_streamguard.services.app import Target
from pytest_streamguard.services.tap import Tap
from pytest_streamguard.stream.trace import FaultRecord, StreamTrace

#: Faults that end the streams they act on, and how a client stream ends when the service in
#: front of the hop answers the broken upstream instead of passing the break on.
_ENDS_STREAMS = frozenset({"cut", "reset", "down", "blackhole", "restart"})
_PASSED_ON = frozenset({"http", "server", "protocol", "empty"})
#: Faults that hold an inner hop's bytes, and how a client stream ends when the service in
#: front timed out while they held it (cut it, or answered an error instead of the stream).
_HOLDS = frozenset({"stall", "freeze", "latency"})
_CUT_IN_FRONT = frozenset({"cut", "reset", "network", "truncated", "http", "server", "empty"})

__all__ = ["AllHops", "Hop", "HopFaults", "HopLog", "InnerHop", "StackHops", "cut_in_front"]


def cut_in_front(record: FaultRecord, traces: list[StreamTrace], hop: str) -> str | None:
    """The evidence that a fault holding ``hop``'s bytes (``stall``, ``freeze``, ``latency``)
    took effect through the service in front: a client stream it was active on ended in an
    error while it held them (a ``stall``: after the stream's chunk N, before the next), as
    when nginx's read timeout gave up waiting and cut or failed the stream; else None."""
    if record.kind not in _HOLDS:
        return None
    after = int(record.params.get("after_chunks", 0))
    since = record.on_ns if record.on_ns is not None else 0
    for trace in active_on(record, traces):
        if trace.completed or trace.error_kind not in _CUT_IN_FRONT or trace.end_ns is None:
            continue
        if trace.end_ns < since or (record.kind == "stall" and len(trace.chunks) != after):
            continue
        return (
            f"{trace.name} ended {trace.error_kind} after {trace.nbytes:,} bytes while it held "
            f"{hop}'s answer: the service in front cut or failed the stream"
        )
    return None


class HopLog(FaultLog):
    """The faults of one inner hop of a stack as the plugin drives them: each fault's record
    names the hop, and a fault that ends streams is judged on what the service in front made
    of it too."""

    def __init__(
        self, api: ToxiproxyAPI, proxy: Proxy, *, hop: str, target: Target, seed: int = 0
    ) -> None:
        super().__init__(api, proxy, target_pid=target.pid, seed=seed, target=target, hop=hop)
        self.name = hop

    def judge(self, traces: list[StreamTrace]) -> list[FaultRecord]:
        """Judge each fault as on the client's hop (:mod:`~pytest_streamguard.faults.fired`),
        and as fired too where the service in front turned it into a cut, a failed stream or an
        error answer (docs/stacks.md, "Did it fire"); return the faults that never fired."""
        super().judge(traces)
        for record in self.records:
            cut = None if record.fired else cut_in_front(record, traces, self.name)
            if cut is not None:
                record.fired, record.evidence = True, cut
            if record.fired or record.kind not in _ENDS_STREAMS:
                continue
            since = record.on_ns if record.on_ns is not None else 0
            for trace in active_on(record, traces):
                if trace.completed or trace.error_kind not in _PASSED_ON:
                    continue
                if trace.end_ns is not None and trace.end_ns >= since:
                    record.fired = True
                    record.evidence = (
                        f"{trace.name} ended {trace.error_kind} after {trace.nbytes:,} bytes: "
                        f"the service in front of {self.name} answered the broken upstream so"
                    )
                    break
        return [r for r in self.records if not r.fired]


class HopFaults(Faults):
    """The fault vocabulary on one inner hop of a stack (``streamguard.hop(NAME).faults``)."""

    def __init__(self, log: HopLog) -> None:
        super().__init__(log)
        self.hop = log.hop

    def slow_reader(self, bytes_per_second: float, *, tiny: bool = False) -> FaultRecord:
        """Refused: the reader of an inner hop is the service in front of it, which the plugin
        cannot make read slowly (a ValueError says what to use)."""
        raise ValueError(
            f"hop({self.hop!r}).faults.slow_reader({bytes_per_second!r}): a slow reader is the "
            "plugin's client reading slowly, and the reader of an inner hop is the service in "
            f"front of {self.hop}; use streamguard.faults.slow_reader() for the client's hop, "
            f"or hop({self.hop!r}).faults.bandwidth(KB_PER_SECOND) to throttle this one"
        )


@dataclass
class Hop:
    """One hop of a stack for one test: ``name`` (the service's), ``faults`` (on the proxy in
    front of it), ``target`` (the service itself, its direct URL), ``proxy`` (in front of it)
    and ``address`` (``host:port`` the service in front dials, what ``{NAME}`` became in later
    commands: a tap that stamps the answers, then the proxy). The entry's hop
    is the test's own: its ``faults`` are ``streamguard.faults``."""

    name: str
    faults: Faults
    target: Target
    proxy: Proxy
    address: str


@dataclass(frozen=True)
class InnerHop:
    """An inner service of a started stack: the proxy in front of it, the service itself, and
    the tap between that proxy and the service in front (:mod:`~pytest_streamguard.services.tap`),
    whose address is what ``{NAME}`` became in later commands."""

    proxy: Proxy
    target: Target
    tap: Tap

    @property
    def address(self) -> str:
        """``host:port`` the service in front dials (the tap's)."""
        return self.tap.address


@dataclass(frozen=True)
class StackHops:
    """A started stack as a test's guard needs it: the entry's service name, each inner
    service by name (in start order), and the entry service."""

    entry: str
    inner: dict[str, InnerHop]
    #: The entry service itself (the guards of this target get the hops).
    target: Target


class AllHops:
    """The faults of every hop of a test, as the test's streams meet them: the entry's
    (``streamguard.faults``) and each inner hop's, in that order."""

    def __init__(self, every: list[FaultLog]) -> None:
        #: The entry's faults, then each inner hop's.
        self.every = every

    @property
    def entry(self) -> FaultLog:
        """The entry's faults (``streamguard.faults``): a slow reader paces the client there."""
        return self.every[0]

    @property
    def records(self) -> list[FaultRecord]:
        """Every fault of every hop, the entry's first."""
        return [record for faults in self.every for record in faults.records]

    def before_stream(self) -> None:
        """A stream is about to open (a restart under way on any hop is waited for)."""
        for faults in self.every:
            faults.before_stream()

    def aim_headers(self, index: int) -> dict[str, str]:
        """The aim header of the stream at ``index``, naming the aimed chunk toxics of every
        hop (an inner hop sees it when the services forward the header)."""
        names = [
            name
            for faults in self.every
            for header in faults.aim_headers(index).values()
            for name in header.split(", ")
        ]
        return {AIM_HEADER: ", ".join(names)} if names else {}

    def opened(self, trace: StreamTrace, index: int) -> None:
        """The stream at ``index`` was opened as ``trace``."""
        for faults in self.every:
            faults.opened(trace, index)

    def on_chunk(self, trace: StreamTrace) -> None:
        """The client read a data event of ``trace``."""
        for faults in self.every:
            faults.on_chunk(trace)

    def on_end(self, trace: StreamTrace) -> None:
        """``trace`` has ended."""
        for faults in self.every:
            faults.on_end(trace)

    def reached(self, trace: StreamTrace) -> None:
        """A stream read elsewhere (a shard) has ended."""
        for faults in self.every:
            faults.reached(trace)

    def aims_at(self, record: FaultRecord, trace: StreamTrace) -> bool:
        """Whether ``record`` (of any hop) could act on ``trace``."""
        for faults in self.every:
            if any(r is record for r in faults.records):
                return faults.aims_at(record, trace)
        return True
