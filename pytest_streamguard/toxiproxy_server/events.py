"""Counting a stream's chunks in the raw downstream bytes of a connection, for the chunk toxics
(``chunk_stall``, ``chunk_cut``, ``chunk_reset``; docs/toxiproxy.md, "Chunk toxics").

A chunk is counted exactly as the plugin's client counts ``trace.chunks``: the response's body
is decoded (``Transfer-Encoding: chunked``, ``Content-Length`` or up to the close), cut into
frames by its framing (chosen from the content type or the body's start as the client chooses
it), and a frame counts when the built-in format recognised from the first frame reads a piece
of answer text from it. A user's own ``format=`` object is not known to the proxy; such a
stream is counted with the built-in format its first frame looks like.

The body is fed to the framer one line at a time (split after each LF), so a frame completed
by a line ends exactly at that line's end; with HTTP chunked encoding, the CRLF that closes the
HTTP chunk right after it is counted in, so the client's HTTP parser sees a whole HTTP chunk.

A body with a ``Content-Encoding`` (:mod:`pytest_streamguard.common.codings`) is counted in a
decoded copy, and the original bytes are forwarded untouched. The boundary is then the shortest
prefix of the coded bytes that decodes to the Nth chunk's end (found on copies of the decoder,
or a byte at a time for a decoder that cannot be copied); a back-reference that spans the
chunk's end brings the bytes it covers along, as no coded byte splits it. A body in a coding
not installed here is not counted: the fault never lands, and its record names the coding.
"""

from __future__ import annotations

from pytest_streamguard.common.codings import BodyDecoder, body_decoder
from pytest_streamguard.errors import StreamError
from pytest_streamguard.formats import BUILTIN_FORMATS
from pytest_streamguard.formats.base import NDJSON_TYPES, SSE_TYPES, media_type
from pytest_streamguard.formats.detect import body_start, detect
from pytest_streamguard.formats.framing import Framer

_HEAD_END = b"\r\n\r\n"
_HEAD_LIMIT = 64 * 1024


class _EventBody:
    """The chunk count of one response body, fed with its decoded bytes line by line."""

    def __init__(self, content_type: str) -> None:
        media = media_type(content_type)
        self.framing: str | None = (
            "sse" if media in SSE_TYPES else "lines" if media in NDJSON_TYPES else None
        )
        self.framer: Framer | None = None
        self.format_name: str | None = None
        self.head = b""
        self.chunks = 0
        self.failed = False

    def feed(self, data: bytes) -> int:
        """Feed body bytes ending at a line end (or not); return the chunks they completed."""
        if self.failed:
            return 0
        if self.framer is None:
            self.head += data
            framing = self.framing
            if framing is None:
                start = body_start(self.head)
                if start is None:
                    return 0
                framing = "sse" if start == "sse" else "lines" if start == "object" else "raw"
            self.framer = Framer(framing)  # type: ignore[arg-type]
            data, self.head = self.head, b""
        before = self.chunks
        for framed in self.framer.feed(data, 0):
            frame = framed.frame
            if frame is None:
                continue
            if self.format_name is None:
                self.format_name = detect(frame, self.framer.framing)
            try:
                reading = BUILTIN_FORMATS[self.format_name].read(frame)
            except StreamError:
                self.failed = True
                break
            if reading.pieces:
                self.chunks += 1
        return self.chunks - before


class _Http1:
    """A parser of one connection's HTTP/1 bytes: ``head`` holds the head (or the line) a read
    left unfinished; ``opaque``: the bytes are not HTTP/1 as we know it, parse no more."""

    def __init__(self) -> None:
        self.head = b""
        self.opaque = False

    def _head_lines(self, data: bytes, pos: int) -> tuple[list[bytes] | None, int]:
        """The lines of the head ``data[pos:]`` completes (None if not yet), and where it ends."""
        before = len(self.head)
        self.head += data[pos:]
        end = self.head.find(_HEAD_END, max(before - 3, 0))
        if end < 0:
            if len(self.head) > _HEAD_LIMIT:
                self.opaque, self.head = True, b""
            return None, len(data)
        head, rest = self.head[:end], self.head[end + 4 :]
        self.head = b""
        return head.split(b"\r\n"), len(data) - len(rest)

    def _line(self, data: bytes, pos: int) -> tuple[bytes | None, int]:
        """The line ``data[pos:]`` completes (None if it does not), and where it ends."""
        end = data.find(b"\n", pos)
        if end < 0:
            self.head += data[pos:]
            return None, len(data)
        line, self.head = self.head + data[pos:end], b""
        return line, end + 1

    def _size_line(self, data: bytes, pos: int) -> tuple[int | None, int]:
        """The size in the HTTP chunk's size line ``data[pos:]`` completes (None if it does
        not, or gives none: opaque), and where it ends."""
        line, after = self._line(data, pos)
        if line is None:
            return None, after
        try:
            return int(line.split(b";")[0].strip(), 16), after
        except ValueError:
            self.opaque = True
            return None, len(data)


def _skip(left: int, pos: int, n: int) -> tuple[int, int]:
    """Pass over up to ``left`` bytes from ``pos`` of a read of ``n``: what is left to pass
    over, and where the read goes on."""
    take = min(left, n - pos)
    return left - take, pos + take


AIM_HEADER = b"x-streamguard-aim"


class RequestAims(_Http1):
    """The toxic names in the ``x-streamguard-aim`` header of the latest request head in one
    connection's upstream bytes (``latest``), fed with every read the client sent.

    Request bodies are skipped by their ``Content-Length`` or chunked encoding; bytes that are
    not HTTP/1 requests as we know them (an upgrade, ``CONNECT``, a head over 64 KiB) stop the
    parsing, and ``latest`` keeps what it had."""

    def __init__(self) -> None:
        super().__init__()
        self.latest: frozenset[str] = frozenset()
        self.state = "head"
        self.left = 0

    def feed(self, data: bytes) -> None:
        """Consume one read of the client's bytes."""
        pos, n = 0, len(data)
        while pos < n and not self.opaque:
            if self.state == "head":
                pos = self._head(data, pos)
            elif self.state == "body":
                self.left, pos = _skip(self.left, pos, n)
                if self.left == 0:
                    self.state = "head"
            else:  # a chunked body: "size", "data" (with its CRLF) or "trailer" lines
                pos = self._chunked(data, pos)

    def _head(self, data: bytes, pos: int) -> int:
        if not self.head:
            # A request head may follow a CRLF left over from the previous body.
            while pos < len(data) and data[pos] in b"\r\n":
                pos += 1
        lines, after = self._head_lines(data, pos)
        if lines is None:
            return after
        method = lines[0].split(b" ", 1)[0]
        aims: set[str] = set()
        length = 0
        chunked = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == AIM_HEADER:
                aims.update(p.strip() for p in value.decode("latin-1").split(",") if p.strip())
            elif name == b"content-length" and value.strip().isdigit():
                length = int(value.strip())
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"upgrade":
                self.opaque = True
        self.latest = frozenset(aims)
        if method == b"CONNECT":
            self.opaque = True
        if chunked:
            self.state, self.left = "size", 0
        elif length:
            self.state, self.left = "body", length
        return after

    def _chunked(self, data: bytes, pos: int) -> int:
        if self.state == "data":
            self.left, pos = _skip(self.left, pos, len(data))
            if self.left == 0:
                self.state = "size"
            return pos
        if self.state == "trailer":
            line, after = self._line(data, pos)
            if line is not None and not line.strip():
                self.state = "head"
            return after
        size, after = self._size_line(data, pos)
        if size == 0:
            self.state = "trailer"
        elif size is not None:
            # The chunk's data and the CRLF that closes it.
            self.state, self.left = "data", size + 2
        return after


class ChunkCounter(_Http1):
    """The HTTP responses in one connection's downstream bytes and each one's chunk count.

    :meth:`boundary` says where in a read the response under way reaches its Nth chunk. With
    ``aim`` (an aimed toxic's name), only the responses to requests that name it in
    ``requests`` (the connection's :class:`RequestAims`) are counted."""

    def __init__(
        self, after_chunks: int, aim: str | None = None, requests: RequestAims | None = None
    ) -> None:
        super().__init__()
        self.after_chunks = after_chunks
        # An aimed toxic's name: only responses to requests naming it count (and are hit).
        self.aim = aim
        self.requests = requests
        self.state = "head"
        self.body: _EventBody | None = None
        self.decoder: BodyDecoder | None = None
        self.chunked = False
        self.left: int | None = None  # body bytes left (Content-Length), or of the HTTP chunk
        self.crlf_left = 0
        self.reached = False
        self.hits = 0

    def boundary(self, data: bytes) -> int | None:
        """Consume one read; the offset in it right after the Nth chunk of the response under
        way (once per response), or None. The bytes after the offset are not consumed: feed
        them again (``data[offset:]``) once the fault has acted."""
        pos = 0
        n = len(data)
        while pos < n and not self.opaque:
            if self.state == "head":
                pos = self._head(data, pos)
            elif self.state == "size":
                pos = self._size(data, pos)
            elif self.state == "crlf":
                self.crlf_left, pos = _skip(self.crlf_left, pos, n)
                if self.crlf_left == 0:
                    self.state = "size"
            elif self.state == "trailer":
                pos = self._trailer(data, pos)
            else:  # "body"
                end = n if self.left is None else min(n, pos + self.left)
                hit = self._body(data, pos, end)
                if hit is not None:
                    if self.chunked and self.left == 0 and data[hit : hit + 2] == b"\r\n":
                        # The HTTP chunk closes right here: hand its CRLF on with the event.
                        self.state = "size"
                        return hit + 2
                    return hit
                pos = end
                self._body_done()
        return None

    def _head(self, data: bytes, pos: int) -> int:
        lines, consumed = self._head_lines(data, pos)
        if lines is None:
            return consumed
        status = lines[0].split(b" ")
        if not status[0].startswith(b"HTTP/") or len(status) < 2 or not status[1].isdigit():
            self.opaque = True
            return len(data)
        code = int(status[1])
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if 100 <= code < 200:
            return consumed
        self.reached = False
        self.body = _EventBody(headers.get(b"content-type", b"").decode("latin-1"))
        self.chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        length = headers.get(b"content-length")
        if code in (204, 304):
            self.body = None
            return consumed
        if self.aim is not None and (self.requests is None or self.aim not in self.requests.latest):
            self.body = None  # not aimed at: framed through, never counted
        coding = headers.get(b"content-encoding", b"").decode("latin-1").strip().lower()
        plain = coding in ("", "identity")
        self.decoder = None if plain else body_decoder(coding)
        if not plain and self.decoder is None:
            self.body = None  # a coding not installed here: its events cannot be counted
        if self.chunked:
            self.state = "size"
        else:
            self.left = int(length) if length is not None and length.isdigit() else None
            self.state = "body"
            if self.left == 0:
                self._end_response()
        return consumed

    def _size(self, data: bytes, pos: int) -> int:
        size, after = self._size_line(data, pos)
        if size == 0:
            self.state = "trailer"
        elif size is not None:
            self.left, self.state = size, "body"
        return after

    def _trailer(self, data: bytes, pos: int) -> int:
        line, after = self._line(data, pos)
        if line is not None and not line.strip():
            self._end_response()
        return after

    def _body(self, data: bytes, pos: int, end: int) -> int | None:
        """Count data[pos:end]; the offset right after the Nth chunk, if reached (what was
        fed up to it is consumed, and ``left`` accounts for it)."""
        hit = None
        if self.body is not None and not self.reached:
            hit = self._decoded(data, pos, end) if self.decoder else self._lines(data, pos, end)
        if self.left is not None:
            self.left -= (end if hit is None else hit) - pos
        return hit

    def _lines(self, data: bytes, start: int, end: int) -> int | None:
        """Feed data[start:end] to the body line by line; the offset right after the line
        that completes the Nth chunk, or None."""
        assert self.body is not None
        while start < end:
            cut = data.find(b"\n", start, end)
            stop = end if cut < 0 else cut + 1
            self.body.feed(data[start:stop])
            if self.body.chunks >= self.after_chunks:
                self.reached = True
                self.hits += 1
                return stop
            start = stop
        return None

    def _decoded(self, data: bytes, pos: int, end: int) -> int | None:
        """Feed the decoded data[pos:end]; the offset right after the shortest prefix of it
        that decodes to the Nth chunk's end, or None."""
        decoder, body = self.decoder, self.body
        assert decoder is not None
        assert body is not None
        piece = data[pos:end]
        steps = [piece] if decoder.copyable else [piece[i : i + 1] for i in range(len(piece))]
        for step in steps:
            before = decoder.copy() if decoder.copyable else None
            plain = decoder.decode(step)
            if plain is None:
                body.failed = True  # not in its coding after all: count nothing
                return None
            reach = self._lines(plain, 0, len(plain))
            if reach is None:
                pos += len(step)
                continue
            low, high = 1, len(step)
            while before is not None and low < high:
                mid = (low + high) // 2
                if len(before.copy().decode(step[:mid]) or b"") >= reach:
                    high = mid
                else:
                    low = mid + 1
            return pos + high
        return None

    def _body_done(self) -> None:
        if self.left == 0:
            if self.chunked:
                self.state, self.crlf_left = "crlf", 2
            else:
                self._end_response()

    def _end_response(self) -> None:
        self.state, self.head, self.body, self.left = "head", b"", None, None
