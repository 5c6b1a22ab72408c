"""The per-request channel between an engine and the response writer.

Engines run generation off the event loop and hand results over with
``loop.call_soon_threadsafe``; everything in this module runs on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Token:
    """One generated token: its 0-based index in the stream and the text it adds."""

    index: int
    text: str
    produced_ns: int


@dataclass(frozen=True)
class Done:
    """Generation ended normally."""

    tokens: int
    finish_reason: str


@dataclass(frozen=True)
class Failed:
    """Generation ended with an error; ``message`` is safe to send to the client."""

    message: str


StreamItem = Token | Done | Failed


class SlowReaderError(Exception):
    """The client fell further behind than the server is willing to buffer."""


class TokenStream:
    """A bounded queue of stream items plus the cancel hook of the engine that fills it.

    The queue is bounded by ``max_backlog`` unsent tokens: past that the client is a slow reader,
    generation is cancelled, the buffered tokens are dropped and the stream ends with an error,
    so server memory per stream stays bounded however slowly the client reads.
    """

    def __init__(self, request_id: str, max_backlog: int) -> None:
        self.request_id = request_id
        self._max_backlog = max_backlog
        self._queue: asyncio.Queue[StreamItem] = asyncio.Queue()
        self._cancel: Callable[[], None] | None = None
        self.closed = False
        self.overflowed = False
        self.shut_down = False
        """True once ``end_for_shutdown`` replaced the rest of the stream with its error."""
        self._ended = asyncio.Event()
        self.in_send = False
        """True while the writer waits in ``send``. Items only arrive while the writer is
        suspended, and a send to a keeping-up client does not suspend; so a full backlog seen
        during a send means the client is not reading. A backlog built while the writer sits
        in a fault knob's stall is not the client's fault and drains once the stall ends."""

    def bind_cancel(self, cancel: Callable[[], None]) -> None:
        """Set how to stop the engine's generation for this stream."""
        self._cancel = cancel

    def push(self, item: StreamItem) -> None:
        """Queue an item from the engine (on the loop); drops it once the stream is closed."""
        if self.closed:
            return
        if isinstance(item, Token) and self.in_send and self._queue.qsize() >= self._max_backlog:
            self.overflowed = True
            self.cancel()
            while not self._queue.empty():
                self._queue.get_nowait()
            self._queue.put_nowait(
                Failed(
                    f"slow reader: the client fell more than {self._max_backlog} tokens behind; "
                    "the stream was ended"
                )
            )
            return
        self._queue.put_nowait(item)

    async def get(self, wait_s: float) -> StreamItem:
        """Next item; raises ``TimeoutError`` when none arrives within ``wait_s`` seconds."""
        async with asyncio.timeout(wait_s):
            return await self._queue.get()

    def backlog(self) -> int:
        """Items queued and not yet taken by the writer."""
        return self._queue.qsize()

    def end_for_shutdown(self, message: str) -> None:
        """Stop generation and make ``message`` the stream's next and last item."""
        if self.shut_down:
            return
        self.shut_down = True
        self.cancel()
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queue.put_nowait(Failed(message))
        self._ended.set()

    async def pause(self, seconds: float) -> None:
        """Sleep ``seconds`` (a fault knob's stall), cut short when shutdown ends the stream."""
        if self._ended.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._ended.wait()

    def abandon(self) -> None:
        """Drop anything that still arrives but let generation go on (the ``keep_generating``
        fault knob: a server that does not stop for a client who left)."""
        self.closed = True

    def cancel(self) -> None:
        """Stop generation and drop anything that still arrives (idempotent)."""
        if self.closed:
            return
        self.closed = True
        if self._cancel is not None:
            self._cancel()


def now_ns() -> int:
    """The clock every timestamp in the target uses (CLOCK_MONOTONIC on Linux)."""
    return time.perf_counter_ns()
