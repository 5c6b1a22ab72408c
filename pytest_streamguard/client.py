"""The streaming HTTP client: reads a token stream and records a :class:`StreamTrace`.

Each network read is stamped with ``time.perf_counter_ns()`` as it returns; each parsed data
event carries the stamp of the read that completed it. The client never hangs: every read waits
at most a limit derived from the deadline (or a generous default), and the stream is abandoned
when no data event arrives in time even if heartbeats keep the socket busy. Whatever happens (an
HTTP error, a cut, a reset, a timeout, an ``event: error``) is recorded on the trace, never
raised and never dropped.

Parsing is sans-IO (:class:`StreamRecorder`) so the sync and async twins share it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from pytest_streamguard.deadlines import Deadline
from pytest_streamguard.trace import Chunk, StreamTrace

FORMATS = ("sse", "openai", "ndjson", "raw")
# Limits when no deadline says otherwise: long enough for a cold model, short enough that a
# blackholed stream ends the test instead of hanging CI.
DEFAULT_READ_LIMIT = 30.0
CONNECT_TIMEOUT = 10.0
# Bytes of an error response body kept in the trace's error message.
_ERROR_BODY_LIMIT = 500
# Receive buffer asked for by a slow reader, so backpressure reaches the server quickly.
SLOW_READER_RCVBUF = 4096


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
    """Seconds the client waits for the first data event, between data events, and in total."""

    first: float = DEFAULT_READ_LIMIT
    gap: float = DEFAULT_READ_LIMIT
    total: float | None = None

    @classmethod
    def for_deadline(cls, deadline: Deadline | None) -> ReadLimits:
        """Limits that let ``deadline`` be measured without waiting forever."""
        if deadline is None:
            return cls()
        gap = read_limit(deadline.chunk)
        if deadline.percentile is not None:
            # Single gaps may exceed a percentile bound legitimately; keep reading longer.
            gap = max(gap, 10.0)
        total = read_limit(deadline.total) if deadline.total is not None else None
        return cls(first=read_limit(deadline.ttft), gap=gap, total=total)

    @property
    def socket_read(self) -> float:
        """The per-read socket timeout: the longest wait any event may need."""
        return max(self.first, self.gap)


@dataclass
class StreamRequest:
    """What to send and how to read the answer."""

    method: str
    url: str
    json_body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    format: str = "sse"
    limits: ReadLimits = field(default_factory=ReadLimits)
    slow_reader_bps: float | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(
                f"format={self.format!r} is not supported: expected one of {', '.join(FORMATS)}"
            )

    def request_headers(self) -> dict[str, str]:
        """Headers to send: the caller's, plus an Accept that fits the format."""
        headers = {"user-agent": "pytest-streamguard"}
        if self.format in ("sse", "openai"):
            headers["accept"] = "text/event-stream"
        elif self.format == "ndjson":
            headers["accept"] = "application/x-ndjson"
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
        self.trace = StreamTrace(
            name=name,
            method=request.method,
            url=request.url,
            format=request.format,
            request_ns=0,
        )
        self._on_chunk = on_chunk
        self._buffer = b""
        self._buffer_start_ns = 0
        self._event_start_ns: int | None = None
        self._event_type: str | None = None
        self._event_data: list[str] = []
        self._event_bytes = 0
        self.stopped = False

    def start(self) -> None:
        """Stamp the moment the request is sent."""
        self.trace.request_ns = time.perf_counter_ns()

    def response(self, status_code: int) -> None:
        """Record the response headers' arrival."""
        self.trace.response_ns = time.perf_counter_ns()
        self.trace.status_code = status_code

    def fail(self, kind: str, message: str) -> None:
        """Record how the stream failed and stop reading it (the first failure wins)."""
        if self.trace.error is None:
            self.trace.error = message
            self.trace.error_kind = kind
        self.trace.completed = False
        self.stopped = True

    def finish(self) -> None:
        """Stamp the end of the stream."""
        if self.trace.end_ns is None:
            self.trace.end_ns = time.perf_counter_ns()

    def eof(self) -> None:
        """The body ended cleanly."""
        if self.request.format == "ndjson" and self._buffer.strip():
            self._ndjson_line(self._buffer, self._buffer_start_ns, time.perf_counter_ns())
            self._buffer = b""
        if self.trace.error is None:
            self.trace.completed = True
        self.stopped = True

    def seconds_left(self, now_ns: int) -> float:
        """How long the next data event may still take before the stream is abandoned."""
        limits = self.request.limits
        if self.trace.chunks:
            left = limits.gap - (now_ns - self.trace.chunks[-1].stamp_ns) / 1e9
        else:
            left = limits.first - (now_ns - self.trace.request_ns) / 1e9
        if limits.total is not None:
            left = min(left, limits.total - (now_ns - self.trace.request_ns) / 1e9)
        return left

    def check_limits(self, now_ns: int) -> None:
        """Abandon the stream when no data event arrived within the limit."""
        if self.stopped or self.seconds_left(now_ns) > 0:
            return
        limits = self.request.limits
        if self.trace.chunks:
            waited = (now_ns - self.trace.chunks[-1].stamp_ns) / 1e9
            what = f"no data event for {waited:.3f} s after chunk {self.trace.chunks[-1].index}"
            limit = limits.gap
        else:
            waited = (now_ns - self.trace.request_ns) / 1e9
            what = f"no data event {waited:.3f} s after the request"
            limit = limits.first
        if limits.total is not None and (now_ns - self.trace.request_ns) / 1e9 >= limits.total:
            what = f"stream still open {waited:.3f} s after the request"
            limit = limits.total
        self.fail("timeout", f"{what} (client read limit {limit:.3f} s)")

    def feed(self, data: bytes, stamp_ns: int) -> None:
        """Account for one network read that returned ``data`` at ``stamp_ns``."""
        if not data or self.stopped:
            return
        self.trace.reads.append((stamp_ns, len(data)))
        fmt = self.request.format
        if fmt == "raw":
            self._add_chunk(stamp_ns, stamp_ns, len(data), data.decode("utf-8", "replace"), None)
        else:
            if not self._buffer:
                self._buffer_start_ns = stamp_ns
            self._buffer += data
            while not self.stopped:
                newline = self._buffer.find(b"\n")
                if newline < 0:
                    break
                line, self._buffer = self._buffer[: newline + 1], self._buffer[newline + 1 :]
                line_start = self._buffer_start_ns
                if len(self._buffer) <= len(data):
                    self._buffer_start_ns = stamp_ns
                if fmt == "ndjson":
                    self._ndjson_line(line, line_start, stamp_ns)
                else:
                    self._sse_line(line, line_start, stamp_ns)
        self.check_limits(stamp_ns)

    def _ndjson_line(self, raw: bytes, start_ns: int, stamp_ns: int) -> None:
        line = raw.decode("utf-8", "replace").strip()
        if not line:
            return
        parsed = _json_or_none(line)
        text = line
        if isinstance(parsed, dict):
            if parsed.get("error"):
                self.fail("server", f"server sent an error: {parsed['error']}")
                return
            for key in ("text", "content", "response", "token"):
                if isinstance(parsed.get(key), str):
                    text = parsed[key]
                    break
        if text:
            self._add_chunk(stamp_ns, start_ns, len(raw), text, parsed)

    def _sse_line(self, raw: bytes, start_ns: int, stamp_ns: int) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            self._dispatch(stamp_ns)
            return
        if self._event_start_ns is None:
            self._event_start_ns = start_ns
        self._event_bytes += len(raw)
        if line.startswith(":"):
            self.trace.heartbeats += 1
            self.trace.heartbeat_ns.append(stamp_ns)
            self._event_start_ns = None
            self._event_bytes = 0
            return
        field_name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field_name == "data":
            self._event_data.append(value)
        elif field_name == "event":
            self._event_type = value

    def _dispatch(self, stamp_ns: int) -> None:
        event_type, data = self._event_type, "\n".join(self._event_data)
        start_ns = self._event_start_ns if self._event_start_ns is not None else stamp_ns
        nbytes = self._event_bytes + 1
        had_data = bool(self._event_data)
        self._event_type, self._event_data = None, []
        self._event_start_ns, self._event_bytes = None, 0
        if not had_data:
            return
        if event_type == "error":
            parsed = _json_or_none(data)
            message = parsed.get("error", data) if isinstance(parsed, dict) else data
            self.fail("server", f"server sent event: error: {message}")
            return
        if event_type == "done":
            self.trace.completed = True
            return
        if event_type not in (None, "", "message"):
            return
        if self.request.format == "openai":
            self._openai_event(data, start_ns, stamp_ns, nbytes)
            return
        parsed = _json_or_none(data)
        text = data
        if isinstance(parsed, dict) and isinstance(parsed.get("text"), str):
            text = parsed["text"]
        if data:
            self._add_chunk(stamp_ns, start_ns, nbytes, text, parsed)

    def _openai_event(self, data: str, start_ns: int, stamp_ns: int, nbytes: int) -> None:
        if data.strip() == "[DONE]":
            self.trace.completed = True
            return
        parsed = _json_or_none(data)
        if not isinstance(parsed, dict):
            self.fail("protocol", f"openai stream sent a data line that is not JSON: {data[:80]!r}")
            return
        if parsed.get("error"):
            self.fail("server", f"server sent an error: {parsed['error']}")
            return
        text = ""
        for choice in parsed.get("choices") or []:
            delta = choice.get("delta") or {}
            text += delta.get("content") or choice.get("text") or ""
        # Role-only and empty deltas are not tokens (README metric definitions).
        if text:
            self._add_chunk(stamp_ns, start_ns, nbytes, text, parsed)

    def _add_chunk(self, stamp_ns: int, start_ns: int, nbytes: int, text: str, data: Any) -> None:
        chunk = Chunk(
            index=len(self.trace.chunks),
            stamp_ns=stamp_ns,
            first_byte_ns=start_ns,
            nbytes=nbytes,
            text=text,
            data=data,
        )
        self.trace.chunks.append(chunk)
        if self._on_chunk is not None:
            self._on_chunk(self.trace)


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _classify(exc: Exception) -> tuple[str, str]:
    """(error kind, message) for an httpx failure."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", text
    if isinstance(exc, httpx.ConnectError):
        return "connect", text
    if isinstance(exc, httpx.RemoteProtocolError):
        return "cut", text
    if "reset" in text.lower():
        return "reset", text
    return "network", text


def _http_error(status_code: int, body: bytes) -> str:
    snippet = body[:_ERROR_BODY_LIMIT].decode("utf-8", "replace").strip()
    return f"HTTP {status_code}: {snippet}" if snippet else f"HTTP {status_code}"


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


def read_stream(recorder: StreamRecorder) -> StreamTrace:
    """Send the request and read the stream to its end (or until a limit), synchronously."""
    request = recorder.request
    transport = httpx.HTTPTransport(socket_options=request.socket_options())
    with httpx.Client(transport=transport, timeout=_timeout(request.limits)) as client:
        recorder.start()
        try:
            with client.stream(
                request.method,
                request.url,
                json=request.json_body,
                headers=request.request_headers(),
            ) as response:
                recorder.response(response.status_code)
                if not response.is_success:
                    body = b""
                    for data in response.iter_bytes():
                        body += data
                        if len(body) >= _ERROR_BODY_LIMIT:
                            break
                    recorder.fail("http", _http_error(response.status_code, body))
                else:
                    for data in response.iter_bytes():
                        recorder.feed(data, time.perf_counter_ns())
                        if recorder.stopped:
                            break
                        wait = _pace(recorder)
                        if wait > 0:
                            time.sleep(wait)
                    if not recorder.stopped:
                        recorder.eof()
        except httpx.HTTPError as exc:
            recorder.fail(*_classify(exc))
        finally:
            recorder.finish()
    return recorder.trace


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


async def _aread(client: httpx.AsyncClient, recorder: StreamRecorder) -> StreamTrace:
    """Read one stream with ``client`` (its timeouts come from the request's limits)."""
    request = recorder.request
    recorder.start()
    try:
        async with client.stream(
            request.method,
            request.url,
            json=request.json_body,
            headers=request.request_headers(),
            timeout=_timeout(request.limits),
        ) as response:
            recorder.response(response.status_code)
            if not response.is_success:
                body = b""
                async for data in response.aiter_bytes():
                    body += data
                    if len(body) >= _ERROR_BODY_LIMIT:
                        break
                recorder.fail("http", _http_error(response.status_code, body))
            else:
                async for data in response.aiter_bytes():
                    # A transport that stamps reads on arrival (load_transport) knows better.
                    recorder.feed(data, getattr(data, "stamp_ns", 0) or time.perf_counter_ns())
                    if recorder.stopped:
                        break
                    wait = _pace(recorder)
                    if wait > 0:
                        await asyncio.sleep(wait)
                if not recorder.stopped:
                    recorder.eof()
    except httpx.HTTPError as exc:
        recorder.fail(*_classify(exc))
    finally:
        recorder.finish()
    return recorder.trace
