"""The pipes between toxic stages: chunks, bounded channels and the socket-side sink.

A chunk is one socket read (at most 32 KiB) with the monotonic time it was read, as in
Toxiproxy's ``StreamChunk``. Items stay inside a channel until the consuming task actually
runs and pops them, so cancelling a stage task never loses data: a re-wiring of the chain
(adding or removing a toxic) can always collect every in-flight chunk synchronously.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Final, Protocol

Item = tuple[bytes, int]
"""A chunk: the bytes of one read and the ``time.monotonic_ns()`` it was read at."""

EOF: Final[Item] = (b"", -1)
"""The end-of-stream marker; compared by identity."""


def _nothing() -> None:
    """A released sink's end of stream: nothing left to finish."""


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class Outlet(Protocol):
    """Where a stage writes: the next stage's channel or the destination socket."""

    on_space: Callable[[], None] | None

    def writable(self) -> bool:
        """Whether a push now stays within the outlet's bound."""

    async def wait_writable(self) -> None:
        """Wait until :meth:`writable` is true."""

    def push(self, item: Item) -> None:
        """Add an item (always accepted; the bound is enforced by the writer waiting)."""


class Channel:
    """A FIFO between two stages; its capacity bounds the writer, not :meth:`push`."""

    __slots__ = ("_items", "_reader", "_writer", "capacity", "on_space")

    def __init__(self, capacity: int) -> None:
        self._items: deque[Item] = deque()
        self._reader: asyncio.Future[None] | None = None
        self._writer: asyncio.Future[None] | None = None
        self.capacity = max(1, capacity)
        self.on_space: Callable[[], None] | None = None

    def __len__(self) -> int:
        return len(self._items)

    def writable(self) -> bool:
        """Whether the channel is below its capacity."""
        return len(self._items) < self.capacity

    async def wait_writable(self) -> None:
        """Wait until the reader has made room."""
        while len(self._items) >= self.capacity:
            waiter = asyncio.get_running_loop().create_future()
            self._writer = waiter
            await waiter

    def push(self, item: Item) -> None:
        """Append an item and wake the reader."""
        self._items.append(item)
        waiter, self._reader = self._reader, None
        _wake(waiter)

    async def wait_readable(self) -> None:
        """Wait until an item is available (the caller then pops it synchronously)."""
        while not self._items:
            waiter = asyncio.get_running_loop().create_future()
            self._reader = waiter
            await waiter

    def first(self) -> Item | None:
        """The oldest item, left in place; None when the channel is empty."""
        return self._items[0] if self._items else None

    def pop(self) -> Item:
        """Take the oldest item, waking the writer when room appears."""
        item = self._items.popleft()
        if len(self._items) < self.capacity:
            waiter, self._writer = self._writer, None
            _wake(waiter)
            if self.on_space is not None:
                self.on_space()
        return item

    def drain(self) -> list[Item]:
        """Remove and return every item, oldest first."""
        items = list(self._items)
        self._items.clear()
        return items


class Sink:
    """The destination socket of a link, with the transport's flow control as its bound."""

    __slots__ = ("_on_eof", "_waiter", "on_space", "paused", "sent", "transport")

    def __init__(self, transport: asyncio.Transport, on_eof: Callable[[], None]) -> None:
        self.transport = transport
        self._on_eof = on_eof
        self._waiter: asyncio.Future[None] | None = None
        self.on_space: Callable[[], None] | None = None
        self.paused = False
        self.sent = 0

    def writable(self) -> bool:
        """False while the transport's write buffer is above its high-water mark."""
        return not self.paused

    async def wait_writable(self) -> None:
        """Wait until the transport has drained below its low-water mark."""
        while self.paused:
            waiter = asyncio.get_running_loop().create_future()
            self._waiter = waiter
            await waiter

    def push(self, item: Item) -> None:
        """Write a chunk to the socket, or end the link on EOF."""
        if item is EOF:
            self._on_eof()
            return
        self.write(item[0])

    def write(self, data: bytes) -> None:
        """Write bytes to the socket (unless it is closing)."""
        if not self.transport.is_closing():
            self.transport.write(data)
            self.sent += len(data)

    def detach(self) -> None:
        """Forget the link's callbacks (it is released): an EOF pushed later is dropped."""
        self._on_eof = _nothing
        self.on_space = None

    def pause(self) -> None:
        """Called by the protocol's ``pause_writing``."""
        self.paused = True

    def resume(self) -> None:
        """Called by the protocol's ``resume_writing`` (and when the socket is gone)."""
        self.paused = False
        waiter, self._waiter = self._waiter, None
        _wake(waiter)
        if self.on_space is not None:
            self.on_space()
