"""The ASGI response of a generation request: admission, streaming, heartbeats, cleanup.

One object per request owns the stream slot from admission to the end, so every way a request
can end (done, error, disconnect, slow reader, stall, shutdown) releases it in one ``finally``
that never awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .engines.base import GenerationRequest
from .engines.naive import NaiveGeneration, NaiveStreamerTimeout
from .faults import FaultKnobs
from .formats import PING, StreamFormat
from .protocol import CONNECTION_EXTENSION
from .slow_reader import DrainWatch
from .state import TargetState
from .stream import Done, StreamItem, Token, TokenStream, now_ns

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

SLOW_READER_GOODBYE_S = 0.4
"""How long the error event to a slow reader may take before the connection is dropped."""

CONNECTION_END_S = 0.2
"""After a slow reader's goodbye, how long closing may wait for the flush before the
connection is aborted: the socket is gone within ``SLOW_READER_GOODBYE_S`` + this of the end."""

SHUTTING_DOWN = "server is shutting down"
"""The error every stream still open when the shutdown drain runs out ends with."""


class _StreamerTimeout(Exception):
    """No item from the engine for ``--stream-timeout`` seconds."""


class _SlowReader(Exception):
    """The client did not take what was written within the bounds; the message says which."""


async def send_json(
    send: Send, status: int, payload: object, headers: dict[str, str] | None = None
) -> None:
    """Send a complete JSON response."""
    body = json.dumps(payload).encode()
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _until_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class GenerationResponse:
    """Streams (SSE) or collects (JSON) one generation, within the admission bound."""

    def __init__(
        self,
        state: TargetState,
        request: GenerationRequest,
        fmt: StreamFormat,
        *,
        streaming: bool,
        fault: FaultKnobs,
        arrival: float,
    ) -> None:
        self._state = state
        self._request = request
        self._fmt = fmt
        self._streaming = streaming
        self._fault = fault
        self._arrival = arrival
        self._stream = TokenStream(request.request_id, state.config.max_backlog)
        self._naive: NaiveGeneration | None = None
        self._last_write = 0.0
        self._last_token_at: float | None = None
        self._end_connection: Callable[[float], Awaitable[None]] | None = None
        self._watch: DrainWatch | None = None
        self._ending: str | None = None
        """The outcome once the writer has chosen to end the connection itself: the
        disconnect that follows is then its doing, not the client's."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Admit, start generation, race the body against the client's disconnect, clean up."""
        state = self._state
        config = state.config
        metrics = state.metrics
        extension = scope.get("extensions", {}).get(CONNECTION_EXTENSION, {})
        self._end_connection = extension.get("end")
        progress = extension.get("progress")
        if progress is not None:
            self._watch = DrainWatch(progress, config.send_timeout, config.max_unsent_bytes)
        if state.draining:
            metrics.rejected.labels("shutting_down").inc()
            await send_json(
                send,
                503,
                {
                    "error": f"{SHUTTING_DOWN}: no new streams are admitted",
                    "field": None,
                    "accepted": "a new request to another instance, or here after a restart",
                },
                {"Retry-After": "1"},
            )
            return
        if state.active >= config.max_concurrency:
            metrics.rejected.labels("busy").inc()
            await send_json(
                send,
                503,
                {
                    "error": (
                        f"server busy: {state.active} of {config.max_concurrency} streams active"
                    ),
                    "field": None,
                    "accepted": f"at most {config.max_concurrency} concurrent streams "
                    "(--max-concurrency); retry later",
                },
                {"Retry-After": "1"},
            )
            return
        state.admit(self._stream)
        outcome = "shutdown"
        try:
            problem = self._start_generation()
            if problem is not None:
                metrics.rejected.labels("not_ready").inc()
                outcome = "rejected"
                await send_json(send, 503, {"error": problem}, {"Retry-After": "1"})
                return
            body = self._write_stream(send) if self._streaming else self._write_whole(send)
            outcome = await self._race_disconnect(body, receive)
        finally:
            if outcome == "disconnect" and self._fault.keep_generating:
                self._stream.abandon()
            else:
                self._stream.cancel()
            state.release(self._stream)
            self._count(outcome)

    def _start_generation(self) -> str | None:
        state = self._state
        if state.naive is not None:
            self._naive = state.naive.open(self._request)
            return None
        engine = state.engine
        if engine is None:
            return "model is not loaded"
        failure = engine.failure()
        if failure is not None:
            return failure
        engine.submit(self._request, self._stream)
        return None

    async def _race_disconnect(self, body: Awaitable[str], receive: Receive) -> str:
        writer = asyncio.ensure_future(body)
        listener = asyncio.ensure_future(_until_disconnect(receive))
        try:
            await asyncio.wait({writer, listener}, return_when=asyncio.FIRST_COMPLETED)
            if writer.done():
                return writer.result()
            return self._ending or "disconnect"
        finally:
            # No await here: this also runs when the server cancels the request task.
            for task in (writer, listener):
                if not task.done():
                    task.cancel()

    def _count(self, outcome: str) -> None:
        metrics = self._state.metrics
        if outcome == "completed":
            metrics.completed.inc()
        elif outcome in ("disconnect", "shutdown"):
            metrics.cancelled.labels(outcome).inc()
        elif outcome == "streamer_timeout":
            metrics.streamer_timeouts.inc()
            metrics.failed.inc()
        elif outcome == "failed":
            metrics.failed.inc()

    # -- streaming ---------------------------------------------------------------------------

    async def _write_stream(self, send: Send) -> str:
        loop = asyncio.get_running_loop()
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
        ]
        if self._fault.accel_header:
            headers.append((b"x-accel-buffering", b"no"))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        self._last_write = loop.time()
        try:
            if self._fault.cold_start_s:
                await self._hold(send, self._fault.cold_start_s)
            while True:
                item = await self._next_item(send)
                if isinstance(item, Token):
                    await self._write_token(send, item)
                    if item.index == self._fault.stall_after:
                        await self._hold(send, self._fault.stall_s)
                elif isinstance(item, Done):
                    await self._write(send, self._fmt.done(item), more=False)
                    return "completed"
                elif self._stream.shut_down:
                    await self._write(
                        send,
                        self._fmt.error(item.message),
                        more=False,
                        limit_s=SLOW_READER_GOODBYE_S,
                    )
                    return "shutdown"
                elif self._stream.overflowed:
                    return await self._end_slow_reader(send, item.message)
                else:
                    await self._write(send, self._fmt.error(item.message), more=False)
                    return "failed"
        except _StreamerTimeout:
            self._stream.cancel()
            message = (
                f"generation stalled: no token for {self._state.config.stream_timeout:g} s "
                "(--stream-timeout)"
            )
            await self._write(send, self._fmt.error(message), more=False)
            return "streamer_timeout"
        except _SlowReader as slow:
            self._stream.cancel()
            return await self._end_slow_reader(send, str(slow))

    async def _end_slow_reader(self, send: Send, message: str) -> str:
        """Send the error event if it fits within the goodbye bound, then end the connection.

        Counted here, when the stream is ended, rather than once the connection is gone."""
        self._ending = "slow_reader"
        self._state.metrics.cancelled.labels("slow_reader").inc()
        with contextlib.suppress(_SlowReader):
            await self._write(
                send, self._fmt.error(message), more=False, limit_s=SLOW_READER_GOODBYE_S
            )
        # A reader this slow would hold the socket and its buffers until it read them; the
        # connection ends now, flushed if it can be, aborted if not. (Without the extension,
        # returning with the response unfinished makes uvicorn close it.)
        if self._end_connection is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CONNECTION_END_S + SLOW_READER_GOODBYE_S):
                    await self._end_connection(CONNECTION_END_S)
        return "slow_reader"

    async def _write_token(self, send: Send, token: Token) -> None:
        event = self._fmt.token(token)
        if self._fault.pad_bytes:
            # An SSE field with an unknown name is ignored by clients (WHATWG SSE, "Otherwise,
            # the field is ignored"), so the padding adds bytes but changes no event.
            event = b"pad: " + b"x" * self._fault.pad_bytes + b"\n" + event
        await self._write(send, event)
        metrics = self._state.metrics
        written = time.perf_counter()
        if self._last_token_at is None:
            metrics.ttft.observe(written - self._arrival)
        else:
            metrics.inter_token.observe(written - self._last_token_at)
        self._last_token_at = written
        metrics.streamer_token_latency.observe(max(0, now_ns() - token.produced_ns) / 1e9)

    async def _write(
        self, send: Send, data: bytes, *, more: bool = True, limit_s: float | None = None
    ) -> None:
        """Send one piece of the body; raises ``_SlowReader`` when the client is too far
        behind (``DrainWatch``) or, with ``limit_s``, when this write takes longer."""
        message = {"type": "http.response.body", "body": data, "more_body": more}
        self._stream.in_send = True
        try:
            if limit_s is not None or self._watch is None:
                limit = limit_s or self._state.config.send_timeout
                try:
                    async with asyncio.timeout(limit):
                        await send(message)
                except TimeoutError:
                    raise _SlowReader(
                        f"slow reader: a write did not complete within {limit:g} s"
                    ) from None
            else:
                await self._watched_send(send, message, self._watch)
        finally:
            self._stream.in_send = False
        self._last_write = asyncio.get_running_loop().time()

    async def _watched_send(self, send: Send, message: Message, watch: DrainWatch) -> None:
        """``send``, waiting in it only while the client keeps taking bytes in time.

        uvicorn's ``send`` waits for its transport buffer to drain before it writes anything,
        so cancelling a wait that ran out writes nothing and the same message can be offered
        again; it is, whenever the oldest waiting byte was taken meanwhile."""
        loop = asyncio.get_running_loop()
        watch.offer(loop.time())
        while True:
            problem = watch.problem(loop.time())
            if problem is not None:
                raise _SlowReader(problem)
            try:
                async with asyncio.timeout(max(watch.time_left(loop.time()), 0.001)):
                    await send(message)
                break
            except TimeoutError:
                continue
        watch.written()
        # After the last write the response is complete: there is nothing left to end.
        problem = watch.problem(loop.time()) if message["more_body"] else None
        if problem is not None:
            raise _SlowReader(problem)

    async def _next_item(self, send: Send | None) -> StreamItem:
        """The next item, sending heartbeats while waiting; every wait has a deadline."""
        if self._naive is not None:
            try:
                return self._naive.next_item()
            except NaiveStreamerTimeout:
                raise _StreamerTimeout from None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._state.config.stream_timeout
        beat = self._state.config.heartbeat if send is not None else 0.0
        while True:
            now = loop.time()
            if now >= deadline:
                raise _StreamerTimeout
            wait = deadline - now
            if beat > 0:
                wait = min(wait, max(0.0, self._last_write + beat - now))
            try:
                return await self._stream.get(wait)
            except TimeoutError:
                if send is not None and beat > 0 and loop.time() >= self._last_write + beat:
                    await self._write(send, PING)

    async def _hold(self, send: Send | None, seconds: float) -> None:
        """Pause the stream on purpose (fault knobs), still sending heartbeats."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        beat = self._state.config.heartbeat if send is not None else 0.0
        while (now := loop.time()) < end and not self._stream.shut_down:
            wait = end - now
            if beat > 0:
                wait = min(wait, max(0.0, self._last_write + beat - now))
            await self._stream.pause(wait)
            if send is not None and beat > 0 and loop.time() >= self._last_write + beat:
                await self._write(send, PING)

    # -- non-streaming -----------------------------------------------------------------------

    async def _write_whole(self, send: Send) -> str:
        if self._fault.cold_start_s:
            await self._hold(None, self._fault.cold_start_s)
        pieces: list[str] = []
        try:
            while True:
                item = await self._next_item(None)
                if isinstance(item, Token):
                    pieces.append(item.text)
                    if item.index == self._fault.stall_after:
                        await self._hold(None, self._fault.stall_s)
                elif isinstance(item, Done):
                    await send_json(send, 200, self._fmt.complete("".join(pieces), item))
                    return "completed"
                elif self._stream.shut_down:
                    await send_json(
                        send,
                        503,
                        {"error": {"message": item.message, "type": "server_error"}},
                        {"Retry-After": "1"},
                    )
                    return "shutdown"
                else:
                    await send_json(
                        send, 500, {"error": {"message": item.message, "type": "server_error"}}
                    )
                    return "failed"
        except _StreamerTimeout:
            self._stream.cancel()
            message = f"generation stalled: no token for {self._state.config.stream_timeout:g} s"
            await send_json(send, 504, {"error": {"message": message, "type": "server_error"}})
            return "streamer_timeout"
