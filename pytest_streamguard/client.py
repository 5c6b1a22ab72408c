"""The streaming HTTP client: reads a token stream and records a :class:`StreamTrace`.

Each network read is stamped with ``time.perf_counter_ns()`` as it returns; each frame of the
stream's format carries the stamp of the read that completed it. What a frame means (a token, the
clean end, a heartbeat, a server error) is the format's call (:mod:`pytest_streamguard.formats`),
so the sync client, the async client and the load transport read every protocol the same way.

Every stream ends in exactly one outcome: ``completed`` (the format's end arrived), or an
``error_kind``: ``truncated`` (a clean close without the end), ``protocol`` (not a stream of this
format), ``server`` (an error inside the stream), ``http`` (a non-2xx answer), ``cut``,
``reset``, ``timeout``, ``connect``, ``network``, or ``interrupted`` (pytest was interrupted, or
the reading task cancelled, mid-stream). Nothing is raised and nothing hangs: the
wait for the first token, for each next token and for the whole stream each have a limit
(from the test's deadline, ``read_timeout``, or ``--streamguard-max-stream-seconds``), enforced
on the clock even when heartbeats keep the socket busy.

Parsing is sans-IO (:class:`StreamRecorder`); the sync entry point runs the async reader on a
private event loop, so both twins share one reading loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from pytest_streamguard.deadlines import Deadline
from pytest_streamguard.formats import (
    TEXT,
    Frame,
    Framer,
    Reading,
    StreamError,
    StreamFormat,
    resolve_format,
)
from pytest_streamguard.settings import DEFAULT_MAX_STREAM_SECONDS
from pytest_streamguard.trace import Chunk, StreamTrace

T = TypeVar("T")

# Limits when no deadline says otherwise: long enough for a cold model, short enough that a
# blackholed stream ends the test instead of hanging CI.
DEFAULT_READ_LIMIT = 30.0
CONNECT_TIMEOUT = 10.0
# Bytes of an error response body kept in the trace's error message.
_ERROR_BODY_LIMIT = 500
# Receive buffer asked for by a slow reader, so backpressure reaches the server quickly.
SLOW_READER_RCVBUF = 4096
# How much later than a limit the client's timer is set (see _aread's deadline()).
_TIMER_SLACK_S = 0.002
# Failures of the connection itself; after the format's end arrived they cost nothing.
_TRANSPORT_KINDS = frozenset({"cut", "reset", "timeout", "network"})


def read_limit(bound: float | None) -> float:
    """How long the client waits for something bounded by ``bound`` before giving up.

    Longer than the bound itself, so that a violated deadline is measured (how late the chunk
    was) rather than only detected.
    """
    if bound is None:
        return DEFAULT_READ_LIMIT
    return max(2 * bound, bound + 1.0)


@dataclass(frozen=True)
class ReadLimits:
    """Seconds the client waits for the first token, between tokens, and for the whole stream.

    ``total_reason`` names where the total limit comes from, for the timeout message.
    """

    first: float = DEFAULT_READ_LIMIT
    gap: float = DEFAULT_READ_LIMIT
    total: float = DEFAULT_MAX_STREAM_SECONDS
    total_reason: str = "--streamguard-max-stream-seconds"

    @classmethod
    def for_deadline(
        cls, deadline: Deadline | None, max_stream: float = DEFAULT_MAX_STREAM_SECONDS
    ) -> ReadLimits:
        """Limits that let ``deadline`` be measured without waiting forever; a stream without
        a ``total`` deadline is bounded by ``max_stream`` seconds."""
        if deadline is None:
            return cls(total=max_stream)
        gap = read_limit(deadline.chunk)
        if deadline.percentile is not None:
            # Single gaps may exceed a percentile bound legitimately; keep reading longer.
            gap = max(gap, 10.0)
        if deadline.total is None:
            return cls(first=read_limit(deadline.ttft), gap=gap, total=max_stream)
        return cls(
            first=read_limit(deadline.ttft),
            gap=gap,
            total=read_limit(deadline.total),
            total_reason="client read limit",
        )

    @property
    def socket_read(self) -> float:
        """The per-read socket timeout: the longest wait any event may need."""
        return max(self.first, self.gap)


@dataclass
class StreamRequest:
    """What to send and how to read the answer (``format``: a built-in name or a
    :class:`~pytest_streamguard.formats.StreamFormat`)."""

    method: str
    url: str
    json_body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    format: str | StreamFormat = "sse"
    limits: ReadLimits = field(default_factory=ReadLimits)
    slow_reader_bps: float | None = None

    def __post_init__(self) -> None:
        self.stream_format = resolve_format(self.format)

    def request_headers(self) -> dict[str, str]:
        """Headers to send: the caller's, plus an Accept that fits the format."""
        headers = {"user-agent": "pytest-streamguard", "accept": self.stream_format.accept}
        headers.update({k.lower(): v for k, v in self.headers.items()})
        return headers

    def socket_options(self) -> list[tuple[int, int, int]]:
        """A small receive buffer for a slow reader."""
        if self.slow_reader_bps is None:
            return []
        return [(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_READER_RCVBUF)]


class StreamRecorder:
    """Sans-IO state of one stream: feed it reads, it builds the trace and decides when to stop."""

    def __init__(
        self,
        request: StreamRequest,
        name: str,
        on_chunk: Callable[[StreamTrace], None] | None = None,
    ) -> None:
        self.request = request
        self.format = request.stream_format
        self.trace = StreamTrace(
            name=name,
            method=request.method,
            url=request.url,
            format=self.format.name,
            request_ns=0,
        )
        self._on_chunk = on_chunk
        self._framer = Framer(self.format.framing)
        self._ended = False
        self.stopped = False

    def start(self) -> None:
        """Stamp the moment the request is sent."""
        self.trace.request_ns = time.perf_counter_ns()

    def response(self, status_code: int, content_type: str | None = None) -> None:
        """Record the response headers' arrival; a non-2xx answer, or a 200 that is not a
        stream of this format, stops the stream (see :meth:`add_body`)."""
        self.trace.response_ns = time.perf_counter_ns()
        self.trace.status_code = status_code
        if not 200 <= status_code < 300:
            self.fail("http", f"HTTP {status_code}")
            return
        problem = self.format.not_a_stream(content_type or "")
        if problem is not None:
            self.fail("protocol", problem)

    def add_body(self, body: bytes) -> None:
        """Append the start of a rejected answer's body to its error message."""
        snippet = body[:_ERROR_BODY_LIMIT].decode("utf-8", "replace").strip()
        if snippet and self.trace.error is not None:
            separator = ": " if self.trace.error_kind == "http" else "; body: "
            self.trace.error += separator + snippet

    def fail(self, kind: str, message: str) -> None:
        """Record how the stream failed and stop reading it (the first outcome wins). A broken
        connection after the format's end arrived leaves the stream completed."""
        if self.stopped:
            return
        if self._ended and kind in _TRANSPORT_KINDS:
            self._complete()
            return
        self.trace.error = message
        self.trace.error_kind = kind
        self.trace.completed = False
        self.stopped = True

    def _complete(self) -> None:
        self.trace.completed = True
        self.trace.error = None
        self.trace.error_kind = None
        self.stopped = True

    def finish(self) -> None:
        """Stamp the end of the stream. Reading that stopped without an outcome (the task was
        cancelled, pytest interrupted) is recorded as abandoned, never as completed."""
        if not self.stopped:
            self.fail("interrupted", "interrupted (Ctrl-C or cancelled) while reading the stream")
        if self.trace.end_ns is None:
            self.trace.end_ns = time.perf_counter_ns()

    def eof(self) -> None:
        """The body ended cleanly: completed if the format's end arrived (or a clean close is
        its end), else truncated."""
        if self.stopped:
            return
        now = time.perf_counter_ns()
        for framed in self._framer.close(now):
            self._apply(framed.frame, framed.start_ns, framed.stamp_ns, framed.nbytes)
            if self.stopped:
                return
        if self._ended or self.format.end_on_eof:
            self._complete()
            return
        if self.trace.chunks:
            last = self.trace.chunks[-1]
            where = f"after {len(self.trace.chunks)} token(s), {(now - last.stamp_ns) / 1e9:.3f} s "
            where += f"after chunk {last.index}"
        else:
            where = "before any token"
        self.fail(
            "truncated",
            f"the connection closed cleanly {where}, without the {self.format.name} stream's "
            f"end ({self.format.end_description})",
        )

    def seconds_left(self, now_ns: int) -> float:
        """How long the next token may still take before the stream is abandoned."""
        limits = self.request.limits
        if self.trace.chunks:
            left = limits.gap - (now_ns - self.trace.chunks[-1].stamp_ns) / 1e9
        else:
            left = limits.first - (now_ns - self.trace.request_ns) / 1e9
        return min(left, limits.total - (now_ns - self.trace.request_ns) / 1e9)

    def check_limits(self, now_ns: int, *, expired: bool = False) -> None:
        """Abandon the stream as ``timeout`` when a limit has run out, or ``expired`` says the
        client's timer for it fired (the message gives the true time waited and the limit)."""
        if self.stopped or (not expired and self.seconds_left(now_ns) > 0):
            return
        limits = self.request.limits
        elapsed = (now_ns - self.trace.request_ns) / 1e9
        if self.trace.chunks:
            token_left = limits.gap - (now_ns - self.trace.chunks[-1].stamp_ns) / 1e9
        else:
            token_left = limits.first - elapsed
        # The limit that ran out is the one with the least time left (a timer may fire a hair
        # before the clock the limits are computed on says it is due).
        if limits.total - elapsed <= token_left:
            what = f"stream still open {elapsed:.3f} s after the request"
            limit = f"{limits.total_reason} {limits.total:g} s"
        elif self.trace.chunks:
            last = self.trace.chunks[-1]
            waited = (now_ns - last.stamp_ns) / 1e9
            what = f"no token for {waited:.3f} s after chunk {last.index}"
            limit = f"client read limit {limits.gap:.3f} s"
        else:
            what = f"no token {elapsed:.3f} s after the request"
            limit = f"client read limit {limits.first:.3f} s"
        self.fail("timeout", f"{what} ({limit})")

    def feed(self, data: bytes, stamp_ns: int) -> None:
        """Account for one network read that returned ``data`` at ``stamp_ns``."""
        if not data or self.stopped:
            return
        self.trace.reads.append((stamp_ns, len(data)))
        for framed in self._framer.feed(data, stamp_ns):
            self._apply(framed.frame, framed.start_ns, framed.stamp_ns, framed.nbytes)
            if self.stopped:
                return
        self.check_limits(stamp_ns)

    def _apply(self, frame: Frame | None, start_ns: int, stamp_ns: int, nbytes: int) -> None:
        if frame is None:
            self._heartbeat(stamp_ns)
            return
        try:
            reading: Reading = self.format.read(frame)
        except StreamError as exc:
            self.fail(exc.kind, str(exc))
            return
        if reading.heartbeat:
            self._heartbeat(stamp_ns)
        if reading.pieces:
            self._add_chunk(reading, start_ns, stamp_ns, nbytes)
        if reading.end:
            self._ended = True
            if reading.last:
                self._complete()

    def _heartbeat(self, stamp_ns: int) -> None:
        self.trace.heartbeats += 1
        self.trace.heartbeat_ns.append(stamp_ns)

    def _add_chunk(self, reading: Reading, start_ns: int, stamp_ns: int, nbytes: int) -> None:
        pieces = reading.pieces
        parts: dict[str, str] | None = None
        if len(pieces) > 1 or pieces[0].kind != TEXT:
            parts = {}
            for piece in pieces:
                parts[piece.kind] = parts.get(piece.kind, "") + piece.text
        chunk = Chunk(
            index=len(self.trace.chunks),
            stamp_ns=stamp_ns,
            first_byte_ns=start_ns,
            nbytes=nbytes,
            text="".join(piece.text for piece in pieces),
            data=reading.data,
            parts=parts,
        )
        self.trace.chunks.append(chunk)
        if self._on_chunk is not None:
            self._on_chunk(self.trace)


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost exception under ``exc`` (httpx wraps the OS error in several layers)."""
    seen = {id(exc)}
    while (inner := exc.__cause__ or exc.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        exc = inner
    return exc


def _classify(exc: Exception) -> tuple[str, str]:
    """(error kind, message) for an httpx failure, naming the OS error underneath it."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    root = _root_cause(exc)
    if root is not exc and isinstance(root, OSError):
        text += f" ({type(root).__name__}: {root})"
    if isinstance(root, ConnectionResetError):
        return "reset", text
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", text
    if isinstance(exc, httpx.ConnectError):
        return "connect", text
    if isinstance(exc, httpx.RemoteProtocolError):
        return "cut", text
    if "reset" in text.lower():
        return "reset", text
    return "network", text


def _timeout(limits: ReadLimits) -> httpx.Timeout:
    return httpx.Timeout(connect=CONNECT_TIMEOUT, read=limits.socket_read, write=10.0, pool=10.0)


def _pace(recorder: StreamRecorder) -> float:
    """Seconds a slow reader waits before its next read to keep to its byte rate, never past
    the stream's own read deadline; 0 for a normal reader."""
    rate = recorder.request.slow_reader_bps
    if rate is None:
        return 0.0
    now = time.perf_counter_ns()
    wait = recorder.trace.nbytes / rate - (now - recorder.trace.request_ns) / 1e9
    if wait <= 0:
        return 0.0
    return min(wait, max(recorder.seconds_left(now), 0))


def run_blocking(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the coroutine ``make()`` to its end from sync code: on a private event loop in this
    thread, or in a helper thread when this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        in_loop = False
    else:
        in_loop = True
    # Outside the except block, so the reader's own exceptions do not chain to this one.
    if not in_loop:
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="streamguard") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def read_stream(recorder: StreamRecorder) -> StreamTrace:
    """Send the request and read the stream to its end (or until a limit), synchronously."""
    return run_blocking(lambda: aread_stream(recorder))


async def aread_stream(
    recorder: StreamRecorder, client: httpx.AsyncClient | None = None
) -> StreamTrace:
    """The async twin of :func:`read_stream`.

    ``client``: a shared ``httpx.AsyncClient`` (many concurrent streams share one connection
    pool, see :mod:`pytest_streamguard.load`); by default the stream gets its own.
    """
    if client is not None:
        return await _aread(client, recorder)
    request = recorder.request
    transport = httpx.AsyncHTTPTransport(socket_options=request.socket_options())
    async with httpx.AsyncClient(transport=transport, timeout=_timeout(request.limits)) as own:
        return await _aread(own, recorder)


async def _read_some(response: httpx.Response) -> bytes:
    body = b""
    async for data in response.aiter_bytes():
        body += data
        if len(body) >= _ERROR_BODY_LIMIT:
            break
    return body


async def _aread(client: httpx.AsyncClient, recorder: StreamRecorder) -> StreamTrace:
    """Read one stream with ``client``, every wait bounded by the recorder's limits."""
    request = recorder.request
    loop = asyncio.get_running_loop()

    def deadline() -> float:
        # A hair past the limit: the loop's timer may run a little early on its own clock, and
        # a stream is only over a limit once perf_counter says the limit has passed.
        left = max(recorder.seconds_left(time.perf_counter_ns()), 0.0)
        return loop.time() + left + _TIMER_SLACK_S

    recorder.start()
    try:
        async with asyncio.timeout(deadline()) as limit:
            try:
                async with client.stream(
                    request.method,
                    request.url,
                    json=request.json_body,
                    headers=request.request_headers(),
                    timeout=_timeout(request.limits),
                ) as response:
                    recorder.response(response.status_code, response.headers.get("content-type"))
                    if recorder.stopped:
                        recorder.add_body(await _read_some(response))
                        return recorder.trace
                    async for data in response.aiter_bytes():
                        # A transport that stamps reads on arrival (load.transport) knows better.
                        recorder.feed(data, getattr(data, "stamp_ns", 0) or time.perf_counter_ns())
                        if recorder.stopped:
                            break
                        limit.reschedule(deadline())
                        wait = _pace(recorder)
                        if wait > 0:
                            await asyncio.sleep(wait)
                    recorder.eof()
            except httpx.HTTPError as exc:
                recorder.fail(*_classify(exc))
    except TimeoutError:
        recorder.check_limits(time.perf_counter_ns(), expired=True)
    finally:
        recorder.finish()
    return recorder.trace
