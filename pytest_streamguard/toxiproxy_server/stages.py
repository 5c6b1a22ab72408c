"""The per-connection runtime of each toxic type: one asyncio task per active toxic and link.

Each stage reads chunks from its input channel and writes to its outlet, following the Go
source of the toxic (``toxics/*.go``). The chunk a stage is working on is kept in
``pending`` (what is left of it), and every hand-off to the outlet happens synchronously
after the wait, so a stage task can be cancelled at any await without losing or repeating
bytes: the link re-feeds ``pending`` to the re-wired chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from .channels import EOF, Channel, Item, Outlet
from .events import ChunkCounter, RequestAims
from .toxics import ProxyToxic

_MS: int = 1_000_000
STALL_HELD_BYTES: int = 256 * 1024  #: What a ``chunk_stall`` holding a response takes in.


@dataclass
class ToxicState:
    """What one toxic keeps per link across re-wirings (Go's stub state plus the draw)."""

    toxic: ProxyToxic
    active: bool
    closed: bool = False
    transmitted: int = 0
    idle_since: int = 0
    reset_at: int | None = None
    # The chunk toxics: the count of the connection's responses, the end of a stall under
    # way, and how to make the link's close an RST.
    counter: ChunkCounter | None = None
    stall_until: int | None = None
    on_reset: Callable[[], None] | None = None
    # The connection's request heads (an aimed chunk toxic acts only on requests naming it).
    requests: RequestAims | None = None


class Stage:
    """The task running one active toxic on one link."""

    def __init__(self, state: ToxicState, outlet: Outlet, rng: random.Random) -> None:
        self.state = state
        self.toxic = state.toxic
        self.inp = Channel(state.toxic.type.buffer_size)
        self.out: Outlet = outlet
        self.rng = rng
        self.pending: Item | None = None
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the stage's task."""
        self.task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        """Cancel the stage's task; in-flight data stays in ``pending`` and ``inp``. The task
        is dropped: its frames hold the stage, and a cycle would wait for the collector."""
        task, self.task = self.task, None
        if task is not None:
            task.cancel()

    async def _run(self) -> None:
        if self.state.closed:
            await asyncio.get_running_loop().create_future()
        await self.pipe()

    async def pipe(self) -> None:
        """Move chunks from ``inp`` to ``out``, applying the toxic."""
        while (item := await self.next_data()) is not None:
            await self.emit(item)

    async def next_item(self) -> Item:
        """The chunk in hand, or the next one from the input channel."""
        if self.pending is None:
            inp = self.inp
            if not len(inp):
                await inp.wait_readable()
            self.pending = inp.pop()
        return self.pending

    async def next_data(self) -> Item | None:
        """The next chunk of data in hand; None once the stream's end is handed on."""
        item = await self.next_item()
        if item is EOF:
            await self.emit(item)
            return None
        return item

    async def emit(self, item: Item, rest: Item | None = None) -> None:
        """Hand ``item`` on once the outlet has room; ``rest`` is what is still in hand."""
        out = self.out
        if not out.writable():
            await out.wait_writable()
        self.pending = rest
        out.push(item)

    async def close_output(self) -> None:
        """End the stream here (Go's ``stub.Close()``): later input is never read."""
        await self.emit(EOF, self.pending)
        self.state.closed = True
        await asyncio.get_running_loop().create_future()


class LatencyStage(Stage):
    """Each chunk leaves at its read time + latency ± jitter; the stream is shifted.

    A chunk's jitter is drawn from the link's seed and the chunk's byte offset in the stream,
    not from the next draw of a shared sequence: under -seed the same bytes get the same delay
    in every run, even when the network reads them in other pieces (a response's head and first
    event in one read or two)."""

    async def pipe(self) -> None:
        """Delay every chunk relative to its own timestamp, never reordering."""
        latency = self.toxic.attr("latency") * _MS
        jitter = self.toxic.attr("jitter")
        key = self.rng.getrandbits(64)
        offset = 0
        while (item := await self.next_data()) is not None:
            delay = latency
            if jitter > 0:
                draw = random.Random(key ^ offset).randrange(2 * jitter)
                delay += (draw - jitter) * _MS
            offset += len(item[0])
            due = item[1] + delay
            # uvloop's timers are whole milliseconds from the loop's cached time, so a sleep may
            # end up to a millisecond early: sleep again until the delay has really passed.
            while (wait := due - time.monotonic_ns()) > 0:  # noqa: ASYNC110 (a timer, no event)
                await asyncio.sleep(wait / 1e9)
            # Moving the timestamp makes stacked latency toxics add up (Toxiproxy PR #94).
            await self.emit((item[0], due))


class BandwidthStage(Stage):
    """Throttle to ``rate`` KB/s by sleeping before hand-off, so backpressure reaches the sender."""

    async def pipe(self) -> None:
        """Go's bandwidth toxic: a sleep debt per chunk, big chunks cut into 100 ms pieces."""
        rate = self.toxic.attr("rate")
        debt = 0
        while (item := await self.next_data()) is not None:
            if rate <= 0:
                # rate 0 holds the data until the toxic is changed or removed.
                await asyncio.get_running_loop().create_future()
            data, stamp = item
            debt += len(data) * _MS // rate
            piece = rate * 100
            while len(data) > piece:
                await asyncio.sleep(0.1)
                await self.emit((data[:piece], stamp), (data[piece:], stamp))
                data = data[piece:]
                debt -= 100 * _MS
            started = time.monotonic_ns()
            if debt > 0:
                await asyncio.sleep(debt / 1e9)
            debt -= time.monotonic_ns() - started
            await self.emit((data, stamp))


class SlowCloseStage(Stage):
    """Pass data through; hold the end of the stream for ``delay`` ms."""

    async def pipe(self) -> None:
        """Forward chunks; sleep before forwarding EOF."""
        delay = self.toxic.attr("delay") / 1000
        while True:
            item = await self.next_item()
            if item is EOF:
                await asyncio.sleep(delay)
                await self.emit(item)
                return
            await self.emit(item)


class TimeoutStage(Stage):
    """Drop every chunk; close after ``timeout`` ms without input (0: never close)."""

    async def pipe(self) -> None:
        """An idle timer re-armed by every chunk that arrives (and is dropped)."""
        timeout = self.toxic.attr("timeout") * _MS
        while True:
            if timeout > 0 and self.pending is None and not len(self.inp):
                left = self.state.idle_since + timeout - time.monotonic_ns()
                try:
                    async with asyncio.timeout(max(left, 0) / 1e9):
                        await self.inp.wait_readable()
                except TimeoutError:
                    await self.close_output()
            item = await self.next_item()
            self.pending = None
            self.state.idle_since = time.monotonic_ns()
            if item is EOF:
                await self.close_output()


class ResetPeerStage(Stage):
    """Drop the first chunk, wait ``timeout`` ms, then end the stream (an RST with linger 0)."""

    async def pipe(self) -> None:
        """Once triggered the reset happens even if the chain is re-wired meanwhile."""
        if self.state.reset_at is None:
            await self.next_item()
            self.pending = None
            self.state.reset_at = time.monotonic_ns() + self.toxic.attr("timeout") * _MS
        wait = self.state.reset_at - time.monotonic_ns()
        if wait > 0:
            await asyncio.sleep(wait / 1e9)
        await self.close_output()


class SlicerStage(Stage):
    """Cut each chunk into pieces around ``average_size`` bytes, ``delay`` µs after each."""

    def cuts(self, size: int) -> list[int]:
        """End offsets of the pieces, by Go's jittered recursive bisection."""
        average = self.toxic.attr("average_size")
        variation = self.toxic.attr("size_variation")
        ends: list[int] = []
        spans = [(0, size)]
        while spans:
            start, end = spans.pop()
            if (end - start) - average <= variation:
                ends.append(end)
                continue
            mid = start + (end - start) // 2
            if variation > 0:
                mid += self.rng.randrange(2 * variation) - variation
            mid = min(max(mid, start + 1), end - 1)
            spans.append((mid, end))
            spans.append((start, mid))
        return ends

    async def pipe(self) -> None:
        """Emit the pieces one by one with the delay after every piece."""
        delay = self.toxic.attr("delay") / 1e6
        while (item := await self.next_data()) is not None:
            data, stamp = item
            start = 0
            for end in self.cuts(len(data)):
                rest = (data[end:], stamp) if end < len(data) else None
                await self.emit((data[start:end], stamp), rest)
                start = end
                if delay > 0:
                    await asyncio.sleep(delay)


class LimitDataStage(Stage):
    """Forward at most ``bytes`` bytes on this link, then end the stream (a FIN)."""

    async def pipe(self) -> None:
        """The count lives in the link's toxic state, so it survives updates."""
        limit = self.toxic.attr("bytes")
        state = self.state
        while (item := await self.next_data()) is not None:
            data = item[0][: max(limit - state.transmitted, 0)]
            if data:
                await self.emit((data, item[1]))
                state.transmitted += len(data)
            else:
                self.pending = None
            if limit - state.transmitted <= 0:
                await self.close_output()


class ChunkStage(Stage):
    """``chunk_stall``, ``chunk_cut``, ``chunk_reset``: act right after the Nth chunk of each
    response on the link (:mod:`.events`), holding nothing before it."""

    async def act(self) -> None:
        """What the toxic does at the boundary (the bytes after it are in ``pending``)."""

    async def pipe(self) -> None:
        """Forward each read; at the boundary, split the read there and act."""
        state = self.state
        if state.counter is None:
            aim = self.toxic.name if self.toxic.attributes.get("aimed") else None
            state.counter = ChunkCounter(self.toxic.attr("after_chunks"), aim, state.requests)
        counter = state.counter
        if state.stall_until is not None:
            # A stall under way when the chain was re-wired goes on for its time.
            await self._hold()
        while (item := await self.next_data()) is not None:
            data, stamp = item
            offset = counter.boundary(data)
            if offset is None:
                await self.emit(item)
                continue
            rest = (data[offset:], stamp) if offset < len(data) else None
            await self.emit((data[:offset], stamp), rest)
            await self.act()

    async def _hold(self) -> None:
        """Wait out the stall, joining what arrives meanwhile (up to :data:`STALL_HELD_BYTES`) into
        ``pending`` (a re-wiring finds it there) to leave in one write, as from a holding hop."""
        state, inp = self.state, self.inp
        assert state.stall_until is not None
        while (wait := state.stall_until - time.monotonic_ns()) > 0:
            held = self.pending
            if inp.first() is EOF or (held is not None and len(held[0]) >= STALL_HELD_BYTES):
                await asyncio.sleep(wait / 1e9)
            elif len(inp):
                item = inp.pop()
                self.pending = item if held is None else (held[0] + item[0], held[1])
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait / 1e9):
                        await inp.wait_readable()
        state.stall_until = None


class ChunkStallStage(ChunkStage):
    """Hold the rest of the response for ``duration`` ms after its Nth chunk."""

    async def act(self) -> None:
        """Stall: the bytes after the boundary wait, then leave together (:meth:`_hold`)."""
        self.state.stall_until = time.monotonic_ns() + self.toxic.attr("duration") * _MS
        await self._hold()


class ChunkCutStage(ChunkStage):
    """End the connection (a FIN) right after the response's Nth chunk."""

    async def act(self) -> None:
        """Cut: nothing after the boundary is sent."""
        self.pending = None
        await self.close_output()


class ChunkResetStage(ChunkStage):
    """Reset the connection (an RST) right after the response's Nth chunk."""

    async def act(self) -> None:
        """Reset: linger 0 on the client's socket, then close it."""
        self.pending = None
        if self.state.on_reset is not None:
            self.state.on_reset()
        await self.close_output()


STAGES: dict[str, type[Stage]] = {
    "noop": Stage,
    "latency": LatencyStage,
    "bandwidth": BandwidthStage,
    "slow_close": SlowCloseStage,
    "timeout": TimeoutStage,
    "reset_peer": ResetPeerStage,
    "slicer": SlicerStage,
    "limit_data": LimitDataStage,
    "chunk_stall": ChunkStallStage,
    "chunk_cut": ChunkCutStage,
    "chunk_reset": ChunkResetStage,
}
"""The stage class for each toxic type name."""
