"""The streaming HTTP client: reads a token stream and records a :class:`StreamTrace`.

Plain ``http`` streams, single or in a load, are read by the lean transport of
:mod:`pytest_streamguard.stream.transport`: the request is stamped when its last byte left and each
read when its bytes arrived (the kernel's stamps on Linux, as ``time.perf_counter_ns()`` values),
and the trace names its connection (``local``). ``https`` goes through httpx's own transport,
each read stamped with ``time.perf_counter_ns()`` as the client takes it. Each frame of the
stream's format carries the stamp of the read that completed it. What a frame means (a token, the
clean end, a heartbeat, a server error) is the format's call (:mod:`pytest_streamguard.formats`),
so the sync client, the async client and the load transport read every protocol the same way.

Every stream ends in exactly one outcome: ``completed`` (the format's end arrived after at least
one token), or an ``error_kind``: ``empty`` (the end arrived before any token; a test that
expects that passes ``allow_empty=True``), ``truncated`` (a clean close without the end),
``protocol`` (not a stream of this format), ``server`` (an error inside the stream), ``http``
(a non-2xx answer), ``cut``, ``reset``, ``timeout``, ``connect``, ``network``, or
``interrupted`` (pytest was interrupted, or the reading task cancelled, mid-stream). A stream
with several answers (OpenAI ``n>1`` choices, Gemini candidates) has ended once every answer
that appeared has finished. Nothing is raised and nothing hangs: the wait for the first token,
for each next token and for the whole stream each have a limit (from the test's deadline,
``read_timeout``, or ``--streamguard-max-stream-seconds``), enforced on the clock even when
heartbeats keep the socket busy.

Parsing is sans-IO (:class:`StreamRecorder`); the sync entry point runs the async reader on a
private event loop, so both twins share one reading loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

import httpx

from pytest_streamguard.common.tls import tls_context
from pytest_streamguard.errors import ProtocolError, StreamError
from pytest_streamguard.formats import AUTO, TEXT, Framed, Reading, StreamFormat
from pytest_streamguard.formats.detect import ARRIVAL_LABELS, label
from pytest_streamguard.stream.endings import (
    AfterEnd,
    empty_message,
    timeout_message,
    truncated_message,
)
from pytest_streamguard.stream.recognize import ERROR_BODY_LIMIT, Recognizer
from pytest_streamguard.stream.recorded import Recorded
from pytest_streamguard.stream.request import CONNECT_TIMEOUT, ReadLimits, StreamRequest
from pytest_streamguard.stream.trace import Chunk, StreamTrace
from pytest_streamguard.stream.transport import LoadTransport

T = TypeVar("T")

# A slow reader takes what arrived in pieces of this many seconds of its rate, each when its
# rate allows, so its bytes never run ahead of the rate by more than one piece.
SLOW_READER_PIECE_SECONDS = 0.02
# How much later than a limit the client's timer is set (see _aread's deadline()).
_TIMER_SLACK_S = 0.002
# Failures of the connection itself; after the format's end arrived they cost nothing.
_TRANSPORT_KINDS = frozenset({"cut", "reset", "timeout", "network"})


class StreamRecorder(AfterEnd):
    """Sans-IO state of one stream: feed it reads, it builds the trace and decides when to stop.

    With ``format="auto"`` the framing comes from the content type (or, without a telling
    one, from how the body begins) and the format from the first data frame; the trace's
    ``format`` then names the format recognised."""

    def __init__(
        self,
        request: StreamRequest,
        name: str,
        on_chunk: Callable[[StreamTrace], None] | None = None,
    ) -> None:
        self.request = request
        fmt = request.stream_format
        self.trace = StreamTrace(
            name=name,
            method=request.method,
            url=request.url,
            format=AUTO if fmt is None else fmt.name,
            format_auto=fmt is None,
            request_ns=0,
            expect=request.expect,
        )
        self._on_chunk = on_chunk
        # The response as it arrived, for a client judge to replay after the stream.
        self.recorded = Recorded(
            request.method, request.url, request.json_body, allow_empty=request.allow_empty
        )
        self.trace.recorded = self.recorded
        # The body's framing and format, and what it looks like when it is not one.
        self._body = Recognizer(fmt, self.trace)
        # What arrived before the first token, for the message of an empty stream.
        self._arrived: list[str] = []
        self._arrived_more = False
        # Output without text (a tool call with empty arguments) arrived: the stream answered.
        self._output = False
        self._answers: set[int] = set()
        self._finished: set[int] = set()
        self._ended = False
        # Whether the format's terminal frame arrived (its last frame, such as [DONE]).
        self._terminal = False
        # When the protocol's end arrived without stopping the read (a finish on every answer,
        # before the terminal frame): from then on the body is held open until it ends.
        self._end_seen_ns: int | None = None
        # Whether the data the protocol's official client stops at (openai's [DONE]) arrived.
        self._client_stopped = False
        self.stopped = False

    @property
    def format(self) -> StreamFormat | None:
        """The stream's format; None until a ``format="auto"`` stream's is recognised."""
        return self._body.format

    @property
    def ended(self) -> bool:
        """Whether the format's end has arrived: its end frame, or a finish on every answer
        that appeared (OpenAI choices, Gemini candidates). With ``require_done``, only its
        terminal frame."""
        if self.request.require_done:
            return self._terminal
        return self._ended or bool(self._answers and self._answers <= self._finished)

    def start(self) -> None:
        """Stamp the moment the request is sent."""
        self.trace.request_ns = time.perf_counter_ns()

    def response(
        self,
        status_code: int,
        content_type: str | None = None,
        stamp_ns: int | None = None,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        """Record the response headers' arrival (``stamp_ns``: the stamp of the read that
        completed them, where the transport knows it, else now; ``headers``: all of them, kept
        for a replay); a non-2xx answer, or a 200 that is not a stream of this format, stops
        the stream (see :meth:`add_body`)."""
        self.trace.response_ns = stamp_ns or time.perf_counter_ns()
        self.recorded.answered(status_code, headers or [])
        self.trace.status_code = status_code
        self._body.answered(content_type)
        if not 200 <= status_code < 300:
            self.fail("http", f"HTTP {status_code}")
            return
        problem = self._body.refuses(content_type)
        if problem is not None:
            self.fail("protocol", problem)

    def add_body(self, body: bytes, keep: bool = True) -> None:
        """Append the start of a rejected answer's body to its error message (and, for an
        answer that is not a stream of the format, what it looks like); ``keep``: record it
        (not where its reads are recorded already)."""
        if body and keep:
            self.recorded.keep(body, time.perf_counter_ns())
        snippet = body[:ERROR_BODY_LIMIT].decode("utf-8", "replace").strip()
        if self.trace.error is None:
            return
        if self.trace.error_kind == "protocol":
            self.trace.error += self._body.body_note(body)
        if snippet:
            separator = ": " if self.trace.error_kind == "http" else "; body: "
            self.trace.error += separator + snippet

    def fail(self, kind: str, message: str) -> None:
        """Record how the stream failed and stop reading it (the first outcome wins). A broken
        connection after the format's end arrived leaves the stream completed."""
        if self.stopped:
            return
        if self.ended and kind in _TRANSPORT_KINDS:
            # After a finish without its terminal frame the official clients read on for it:
            # they wait on a body held open, and raise on a connection that breaks.
            now = time.perf_counter_ns()
            self._complete()
            if self.stopped and self.trace.completed:
                if kind == "timeout":
                    self.held_past_limit(now, self._end_seen_ns or now)
                else:
                    self.cut_after_end(kind, message)
            return
        self.recorded.broke(kind, message)
        self.trace.error = message
        self.trace.error_kind = kind
        self.trace.completed = False
        self.stopped = True

    @property
    def reads_past_end(self) -> bool:
        """Whether the stream completed and its protocol's client reads on to the body's end,
        as every official client does except at a terminal frame it stops at."""
        return self.trace.completed and not self._client_stopped

    @property
    def measures_past_end(self) -> bool:
        """Whether the stream completed at a terminal frame its client stops at (openai's
        ``data: [DONE]``): the verdict is that client's, but other clients (the Node SDK, a
        proxy that waits for the close) wait for the body's end, so the reader reads on, bounded,
        only to measure how long the body stayed open (``held_open_s``)."""
        return self.trace.completed and self._client_stopped

    def _complete(self) -> None:
        if not self.trace.chunks and not self._output and not self.request.allow_empty:
            note = self._body.looks_note()
            self.fail(
                "empty", empty_message(self.trace.format, self._arrived, self._arrived_more, note)
            )
            return
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

    def eof(self, end_ns: int | None = None) -> None:
        """The body ended cleanly (its last read stamped ``end_ns``, where the transport knows):
        completed if the format's end arrived (or a clean close is its end), ``empty`` if that
        end came before any token, else truncated."""
        if self.stopped:
            return
        now = time.perf_counter_ns()
        for framed in self._body.close(now):
            self._apply(framed)
            if self.stopped:
                return
        fmt, require_done = self.format, self.request.require_done
        if fmt is not None and (self.ended or (fmt.end_on_eof and not require_done)):
            if self._end_seen_ns is not None:
                self.held_open(((end_ns or now) - self._end_seen_ns) / 1e9)
            self._complete()
            return
        note = self._body.looks_note()
        self.fail("truncated", truncated_message(self.trace, fmt, require_done, now, note))

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
        client's timer for it fired (the message gives the true time waited and the limit).
        Once the protocol's end has arrived, the message says the body was held open past the
        end (:meth:`held_past_limit`)."""
        if self.stopped or (not expired and self.seconds_left(now_ns) > 0):
            return
        if self._end_seen_ns is not None:
            self._complete()
            if self.trace.completed:
                self.held_past_limit(now_ns, self._end_seen_ns)
            return
        request = self.request
        self.fail(
            "timeout", timeout_message(self.trace, request.limits, now_ns, request.slow_reader_bps)
        )

    def feed(self, data: bytes, stamp_ns: int) -> None:
        """Account for one network read that returned ``data`` at ``stamp_ns``."""
        if not data or self.stopped:
            return
        self.recorded.keep(data, stamp_ns)
        self.trace.reads.append((stamp_ns, len(data)))
        if self._body.started:
            self._frame(data, stamp_ns)
        else:
            try:
                head = self._body.begin(data, stamp_ns)
            except ProtocolError as exc:
                self.fail(exc.kind, str(exc))
                head = []
            for held, held_ns in head:
                self._frame(held, held_ns)
                if self.stopped:
                    return
        if self._end_seen_ns is None and self.ended:
            self._end_seen_ns = stamp_ns
        self.check_limits(stamp_ns)

    def _frame(self, data: bytes, stamp_ns: int) -> None:
        for framed in self._body.frames(data, stamp_ns):
            self._apply(framed)
            if self.stopped:
                return

    def _apply(self, framed: Framed) -> None:
        frame = framed.frame
        if frame is None:
            self._heartbeat(framed.stamp_ns)
            return
        try:
            reading = self._body.read(frame)
        except StreamError as exc:
            note = self._body.looks_note() if exc.kind == "protocol" else ""
            self.fail(exc.kind, f"{exc}{note}")
            return
        if reading.heartbeat:
            self._heartbeat(framed.stamp_ns)
        if reading.pieces:
            self._add_chunk(reading, framed)
        elif not self.trace.chunks and not reading.heartbeat:
            if len(self._arrived) < ARRIVAL_LABELS:
                assert self._body.framer is not None
                self._arrived.append(label(frame, self._body.framer.framing))
            else:
                self._arrived_more = True
        self._output = self._output or reading.output
        if reading.reason is not None:
            self.trace.end_reason = reading.reason
        self._answers.update(reading.answers, reading.finished)
        self._finished.update(reading.finished)
        stop = self.format.client_stop_data if self.format is not None else None
        if stop is not None and frame.data.strip() == stop:
            self._client_stopped = True
        if reading.end:
            self._ended = True
            if reading.last:
                self._terminal = True
                if self._end_seen_ns is not None:
                    self.held_open((framed.stamp_ns - self._end_seen_ns) / 1e9)
                self._complete()

    def _heartbeat(self, stamp_ns: int) -> None:
        self.trace.heartbeats += 1
        self.trace.heartbeat_ns.append(stamp_ns)

    def _add_chunk(self, reading: Reading, framed: Framed) -> None:
        pieces = reading.pieces
        parts: dict[str, str] | None = None
        if len(pieces) > 1 or pieces[0].kind != TEXT:
            parts = {}
            for piece in pieces:
                parts[piece.kind] = parts.get(piece.kind, "") + piece.text
        text = "".join(piece.text for piece in pieces)
        index, data = len(self.trace.chunks), reading.data
        chunk = Chunk(index, framed.stamp_ns, framed.start_ns, framed.nbytes, text, data, parts)
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
    longest_event_wait = max(limits.first, limits.gap)
    return httpx.Timeout(connect=CONNECT_TIMEOUT, read=longest_event_wait, write=10.0, pool=10.0)


def _pieces(recorder: StreamRecorder, data: bytes) -> list[bytes]:
    """A network read as the reader takes it: whole, or for a slow reader in pieces of
    SLOW_READER_PIECE_SECONDS of its rate, each handed over when the rate allows."""
    rate = recorder.request.slow_reader_bps
    if rate is None:
        return [data]
    size = max(1, int(rate * SLOW_READER_PIECE_SECONDS))
    return [data[start : start + size] for start in range(0, len(data), size)]


def _pace(recorder: StreamRecorder, nbytes: int) -> float:
    """Seconds a slow reader waits before taking ``nbytes`` more, so that the bytes it has
    taken never run ahead of its rate since the request; never past the stream's own read
    deadline; 0 for a normal reader."""
    rate = recorder.request.slow_reader_bps
    if rate is None:
        return 0.0
    now = time.perf_counter_ns()
    wait = (recorder.trace.nbytes + nbytes) / rate - (now - recorder.trace.request_ns) / 1e9
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
    pool, see :mod:`pytest_streamguard.load`); by default the stream gets its own."""
    if client is not None:
        return await _aread(client, recorder)
    request = recorder.request
    # The load's lean transport for plain HTTP (the request stamped when its last byte left,
    # reads at the kernel's receive stamp, the connection's local port), httpx's own for https.
    transport = LoadTransport(1, request.socket_options(), verify=tls_context())
    async with httpx.AsyncClient(transport=transport, timeout=_timeout(request.limits)) as own:
        return await _aread(own, recorder)


async def _keep_refused(response: httpx.Response, recorder: StreamRecorder) -> None:
    """A 200 answer that is not a stream of its format, read to its end (within the stream's
    read limit) and kept read by read for its judge: an event stream under a wrong content type
    is the client's to read. Its start goes to the error message (:meth:`~StreamRecorder.
    add_body`)."""
    head = b""
    try:
        async with asyncio.timeout(max(recorder.seconds_left(time.perf_counter_ns()), 0.0)):
            async for data in response.aiter_bytes():
                if len(head) < ERROR_BODY_LIMIT:
                    head += data
                recorder.recorded.keep(data, getattr(data, "stamp_ns", 0) or time.perf_counter_ns())
    except (TimeoutError, httpx.HTTPError):
        pass  # the verdict is the reader's protocol failure; the judge reads what came
    recorder.add_body(head, keep=False)


async def _read_some(response: httpx.Response) -> bytes:
    body = b""
    async for data in response.aiter_bytes():
        body += data
        if len(body) >= ERROR_BODY_LIMIT:
            break
    return body


async def _to_body_end(
    body: AsyncIterator[bytes], recorder: StreamRecorder, last: bytes = b"", wire: Any = None
) -> None:
    """After the protocol's end, read on to the end of the body, as the official SDK clients
    do (:attr:`StreamRecorder.reads_past_end`; ``last`` is the read that carried the end),
    until the body ends or the stream's read limit runs out: a body that ends ``HELD_OPEN_S``
    or more after the end is held open for the real time it stayed open (such a client waits
    there); one still open when the limit runs out is a ``timeout`` (such a client's read
    timeout), and a connection cut before the body's end (an incomplete chunked body) a cut
    (such a client raises). A body that ends at once costs no wait. Bytes after the end are
    not the stream's: they are drained, not read as events."""
    since = recorder.trace.reads[-1][0] if recorder.trace.reads else time.perf_counter_ns()
    grace = max(recorder.seconds_left(time.perf_counter_ns()), 0.0)
    stop = recorder.format.client_stop_data if recorder.format is not None else None
    # Where the client stops on its own (openai's data: [DONE] after a Responses stream's end);
    # the bytes are scanned, not framed, so a marker split across two reads is found too.
    marker = None if stop is None else f"data: {stop}".encode()
    # The read that carried the end may carry the client's stop after it too.
    if marker is not None and marker in last:
        return
    seen, ended = last, None
    try:
        async with asyncio.timeout(grace):
            async for data in body:
                recorder.recorded.keep(data, getattr(data, "stamp_ns", 0) or time.perf_counter_ns())
                if marker is not None:
                    seen = seen[-len(marker) :] + data
                    if marker in seen:
                        ended = getattr(data, "stamp_ns", None)
                        break
    except TimeoutError:
        recorder.held_past_limit(time.perf_counter_ns(), since)
    except httpx.HTTPError as exc:
        kind, message = _classify(exc)
        if kind == "timeout":
            recorder.held_past_limit(time.perf_counter_ns(), since)
        else:
            recorder.cut_after_end(kind, message)
    else:
        recorder.held_open(((ended or _body_end_ns(wire)) - since) / 1e9)


def _body_end_ns(wire: Any) -> int:
    """The read that ended the body's stamp, or now (a busy reader came to it over 1 s late)."""
    return getattr(wire, "end_ns", None) or time.perf_counter_ns()


async def _held_past_stop(
    body: AsyncIterator[bytes], recorder: StreamRecorder, wire: Any = None
) -> None:
    """After a terminal frame the stream's client stops at, read on to the body's end (or the
    stream's read limit) only to measure how long the body stayed open: the verdict stays the
    client's (completed), and a body still open at the limit is held open at least that long.
    A body that ends at once costs no wait; the bytes are drained, not read as events. How the
    body ended is recorded, for a judge whose client drains it (groq's raises on a cut there)."""
    since = recorder.trace.reads[-1][0] if recorder.trace.reads else time.perf_counter_ns()
    grace = max(recorder.seconds_left(time.perf_counter_ns()), 0.0)
    try:
        async with asyncio.timeout(grace):
            async for data in body:
                recorder.recorded.keep(data, getattr(data, "stamp_ns", 0) or time.perf_counter_ns())
    except TimeoutError:
        recorder.recorded.broke("timeout", "the body stayed open after data: [DONE]")
    except httpx.HTTPError as exc:
        recorder.recorded.broke(*_classify(exc))
    recorder.held_open((_body_end_ns(wire) - since) / 1e9)


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
    wire: Any = None
    try:
        async with asyncio.timeout(deadline()) as limit:
            try:
                async with client.stream(
                    request.method,
                    request.url,
                    json=request.json_body,
                    headers=request.request_headers(),
                    timeout=_timeout(request.limits),
                    # As every official client does (httpx's rules: 303, and 301/302 after a
                    # POST, go on as GET; 307/308 keep the method and body; at most 20).
                    follow_redirects=True,
                    extensions={"streamguard_proxy_pid": request.proxy_pid},
                ) as response:
                    wire = _wire_stamps(recorder.trace, response)
                    recorder.response(
                        response.status_code,
                        response.headers.get("content-type"),
                        response.extensions.get("streamguard_head_ns"),
                        response.headers.multi_items(),
                    )
                    if recorder.stopped and recorder.trace.error_kind == "protocol":
                        # Every read kept: a client may read it as a stream all the same.
                        await _keep_refused(response, recorder)
                        return recorder.trace
                    if recorder.stopped:
                        recorder.add_body(await _read_some(response))
                        return recorder.trace
                    body = response.aiter_bytes()
                    async for data in body:
                        # A transport that stamps reads on arrival (load.transport) knows better.
                        stamp = getattr(data, "stamp_ns", 0) or time.perf_counter_ns()
                        for piece in _pieces(recorder, data):
                            wait = _pace(recorder, len(piece))
                            if wait > 0:
                                if request.on_pace is not None:
                                    request.on_pace(wait)
                                await asyncio.sleep(wait)
                                # A slow reader takes the bytes now, not when they arrived.
                                stamp = time.perf_counter_ns()
                            recorder.feed(piece, stamp)
                            if recorder.stopped:
                                break
                            limit.reschedule(deadline())
                        if recorder.stopped:
                            break
                    if recorder.reads_past_end:
                        # The wait for the body's end has the same limit as a token's.
                        limit.reschedule(deadline())
                        await _to_body_end(body, recorder, data, wire)
                    elif recorder.measures_past_end:
                        limit.reschedule(deadline())
                        await _held_past_stop(body, recorder, wire)
                    recorder.eof(_body_end_ns(wire))
            except httpx.HTTPError as exc:
                recorder.fail(*_classify(exc))
    except TimeoutError:
        recorder.check_limits(time.perf_counter_ns(), expired=True)
    finally:
        recorder.finish()
        _read_delays(recorder.trace, wire)
    return recorder.trace


def _wire_stamps(trace: StreamTrace, response: httpx.Response) -> Any:
    """What a transport that knows the wire (load.transport) says: the request is stamped when
    its last byte was written (the first request's, when redirects were followed: the client
    waited for them too) and the coroutine's start becomes ``queued_ns``; the connection's
    local address is kept. Returns that transport's connection (None from another)."""
    extensions = response.extensions
    first = response.history[0].extensions if response.history else extensions
    sent = first.get("streamguard_sent_ns")
    if sent is None:
        # httpx's own transport (https): stamps are the reader's, the connection its stream's.
        trace.stamps = "client"
        stream = extensions.get("network_stream")
        client_addr = None if stream is None else stream.get_extra_info("client_addr")
        if isinstance(client_addr, tuple) and len(client_addr) >= 2:
            address, port = client_addr[:2]
            trace.local = f"[{address}]:{port}" if ":" in str(address) else f"{address}:{port}"
        return None
    trace.queued_ns = int(first.get("streamguard_queued_ns", trace.request_ns))
    trace.request_ns = int(sent)
    trace.local = extensions.get("streamguard_local")
    return extensions.get("streamguard_connection")


def _read_delays(trace: StreamTrace, wire: Any) -> None:
    """The client's own delay on each socket read (kernel stamp to the read) and where the
    stamps came from: ``kernel``, or ``loop`` where the platform gave none."""
    if wire is None:
        return
    trace.stamps = "kernel" if wire.kernel else "loop"
    trace.read_delay_ns = list(wire.read_delay_ns)
    trace.proxy_waits = list(wire.proxy_waits)
    trace.reader_held = list(wire.held)
