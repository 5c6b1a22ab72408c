"""One direction of a proxied connection: source socket, chain of toxic stages, sink socket.

While the chain is empty (no toxic, or none active on this link) a read is written to the
destination socket in the same callback, unstamped and without a hop through a channel: the
direct path, where the proxy's own delay is the event loop's alone. Only the connection's
request heads are parsed on it (an aimed chunk toxic added later needs the latest one); the
downstream bytes are decoded only by a chunk toxic's stage, which counts from where it was
added, so nothing is counted while no chunk toxic exists.

Re-wiring (a toxic added, updated or removed) is synchronous: every stage task is cancelled,
every in-flight chunk is collected from where it sits and re-fed at the same place in the new
chain, and the new stage tasks start. So when the API call that triggered it returns, every
open connection already runs the new chain, and no byte is lost or repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import time
from collections.abc import Callable, Sequence

from .channels import EOF, Outlet, Sink
from .events import RequestAims
from .stages import STAGES, Stage, ToxicState
from .toxics import Direction, ProxyToxic


def _ignore(link: Link) -> None:
    """What a released link calls when it ends: nothing."""


class Link:
    """Copies one socket into another through the toxics of one direction."""

    __slots__ = (
        "__weakref__",
        "_on_finished",
        "_rng",
        "_seed",
        "direction",
        "eof",
        "finished",
        "head",
        "order",
        "paused",
        "received",
        "requests",
        "sink",
        "source",
        "source_reset",
        "stages",
        "states",
    )

    def __init__(
        self,
        direction: Direction,
        source: asyncio.Transport,
        dest: asyncio.Transport,
        seed: str,
        on_finished: Callable[[Link], None],
        requests: RequestAims | None = None,
    ) -> None:
        self.direction = direction
        # The connection's request heads: fed by the upstream link, read by chunk toxics.
        self.requests = requests
        self.source = source
        self.sink = Sink(dest, self._finish)
        self._seed = seed
        self._rng: random.Random | None = None
        self._on_finished = on_finished
        self.stages: list[Stage] = []
        self.states: dict[str, ToxicState] = {}
        self.order: list[str] = []
        self.head: Outlet = self.sink
        self.sink.on_space = self._source_space
        self.paused = False
        self.eof = False
        self.finished = False
        self.source_reset = False
        self.received = 0

    @property
    def rng(self) -> random.Random:
        """The link's own generator, seeded from ``seed`` when a toxic first draws from it
        (seeding costs more than the rest of a connection's set-up; most links never draw)."""
        if self._rng is None:
            self._rng = random.Random(self._seed)
        return self._rng

    def feed(self, data: bytes) -> None:
        """Take one read from the source socket into the head of the chain."""
        if self.eof:
            return
        self.received += len(data)
        if self.requests is not None and self.direction is Direction.UPSTREAM:
            self.requests.feed(data)
        head = self.head
        if head is self.sink:
            # The direct path: no stage wants the chunk's stamp.
            self.sink.write(data)
        else:
            head.push((data, time.monotonic_ns()))
        if not self.paused and not head.writable():
            self.paused = True
            self.source.pause_reading()

    def feed_eof(self, reset: bool = False) -> None:
        """The source socket will give no more data; ``reset``: it ended with a reset."""
        if not self.eof:
            self.eof = True
            self.source_reset = reset
            self.head.push(EOF)

    def _source_space(self) -> None:
        if self.paused and not self.eof and self.head.writable():
            self.paused = False
            if not self.source.is_closing():
                self.source.resume_reading()

    def _reset_sink(self) -> None:
        """Make the close of the destination socket an RST (linger 0)."""
        sock = self.sink.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def _finish(self) -> None:
        if not self.finished:
            self.stop()
            self._on_finished(self)

    def stop(self) -> None:
        """Stop every stage; nothing more flows on this link."""
        self.finished = True
        self.eof = True
        for stage in self.stages:
            stage.stop()
        self.stages = []

    def release(self) -> None:
        """Drop the callbacks that point back at this link and its connection, once it is
        stopped: late socket events find nothing to call."""
        self._on_finished = _ignore
        self.states = {}
        self.head.on_space = None
        self.sink.detach()

    def configure(self, toxics: Sequence[ProxyToxic], redraw: str | None = None) -> None:
        """Re-wire for ``toxics`` (this direction's, in order); ``redraw`` was added or updated."""
        if self.finished or not (toxics or self.stages or self.states):
            return  # no toxic before or after: the chain is the sink alone, as it was
        rank = {name: index for index, name in enumerate(self.order)}
        for toxic in toxics:
            rank.setdefault(toxic.name, len(rank))
        states = self._next_states(toxics, redraw)
        old_stages = self.stages
        for stage in old_stages:
            stage.stop()
        new_stages: list[Stage] = []
        outlet: Outlet = self.sink
        for toxic in reversed(toxics):
            state = states[toxic.name]
            if state.active and toxic.type.name != "noop":
                stage = STAGES[toxic.type.name](state, outlet, self.rng)
                new_stages.append(stage)
                outlet = stage.inp
        new_stages.reverse()
        self.stages = new_stages
        self.states = states
        self.order = [toxic.name for toxic in toxics]
        self.head.on_space = None
        self.head = outlet
        outlet.on_space = self._source_space
        self._move_in_flight(old_stages, new_stages, rank)
        if self.finished:
            return
        for stage in new_stages:
            stage.start()
        if self.eof:
            return
        if self.paused and self.head.writable():
            self._source_space()
        elif not self.paused and not self.head.writable():
            self.paused = True
            self.source.pause_reading()

    def _next_states(
        self, toxics: Sequence[ProxyToxic], redraw: str | None
    ) -> dict[str, ToxicState]:
        states: dict[str, ToxicState] = {}
        now = time.monotonic_ns()
        for toxic in toxics:
            state = self.states.get(toxic.name)
            if state is None or toxic.name == redraw:
                # Toxicity is drawn when a toxic starts on a link: at connect, add or update.
                fresh = ToxicState(toxic, active=self.rng.random() < toxic.toxicity)
                fresh.idle_since = now
                fresh.on_reset = self._reset_sink
                fresh.requests = self.requests
                if state is not None:
                    fresh.transmitted = state.transmitted
                    fresh.closed = state.closed
                    fresh.reset_at = state.reset_at
                    fresh.counter = state.counter
                    fresh.stall_until = state.stall_until
                state = fresh
            states[toxic.name] = state
        return states

    def _move_in_flight(
        self, old_stages: list[Stage], new_stages: list[Stage], rank: dict[str, int]
    ) -> None:
        ranked = [(rank[stage.toxic.name], stage.inp) for stage in new_stages]

        def outlet_at(position: int) -> Outlet:
            return next((channel for at, channel in ranked if at >= position), self.sink)

        # Oldest data sits nearest the sink, so walk the old chain from its end.
        for old in reversed(old_stages):
            position = rank[old.toxic.name]
            items = [old.pending] if old.pending is not None else []
            items.extend(old.inp.drain())
            removed = old.toxic.name not in self.states
            if removed and old.toxic.type.name == "timeout" and not old.state.closed:
                # Removing a timeout closes what it affected: the bytes it dropped would
                # leave a corrupted stream (Toxiproxy PR #168).
                self.eof = True
                outlet_at(position).push(EOF)
                return
            target = outlet_at(position)
            for item in items:
                target.push(item)
