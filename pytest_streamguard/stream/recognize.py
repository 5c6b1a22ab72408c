"""What a stream's body is: its framing, its format, and what it looks like when it is not one.

A :class:`Recognizer` serves one :class:`~pytest_streamguard.stream.client.StreamRecorder`. With
a format given, the framing is the format's; with ``format="auto"`` it comes from the content
type or, without a telling one, from how the body begins, and the format from the first data
frame that is not an empty object (then named on the trace). A body that is JSON or an HTML
page where events were expected is refused as ``protocol``; the first frames are checked for
what the stream looks like (a built-in format's name, JSON, an HTML page), so that a stream
read as the wrong format says which one it resembles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from pytest_streamguard.errors import ProtocolError
from pytest_streamguard.formats import (
    BUILTIN_FORMATS,
    Framed,
    Framer,
    Reading,
    StreamFormat,
    body_looks_like,
    detect,
    looks_like,
)
from pytest_streamguard.formats.base import (
    NDJSON_TYPES,
    NOTHING,
    SSE_TYPES,
    Frame,
    media_type,
    not_a_stream,
)
from pytest_streamguard.formats.detect import body_start
from pytest_streamguard.stream.trace import StreamTrace

# Bytes of an error response body kept in the trace's error message.
ERROR_BODY_LIMIT = 500
# format="auto": the content types that are never a stream.
_AUTO_REFUSED = frozenset({"application/json", "text/html"})
# Data frames whose shape is checked for what the stream looks like (the first one almost
# always tells).
_SNIFF_FRAMES = 8


class Recognizer:
    """The framing and format of one stream's body, recognised as its reads arrive; the format
    recognised is written to ``trace.format``."""

    def __init__(self, fmt: StreamFormat | None, trace: StreamTrace) -> None:
        # None until an "auto" stream's format is recognised.
        self.format = fmt
        self._trace = trace
        self.framer = (
            None
            if fmt is None
            else Framer(
                fmt.framing,
                raw_json=fmt.raw_json_lines,
                unterminated_last_event=fmt.unterminated_last_event,
            )
        )
        self._read: Callable[[Frame], Reading] | None = None if fmt is None else fmt.reader()
        # The body's first reads, held until its start shows what it is.
        self._head: list[tuple[bytes, int]] = []
        self.started = False
        self.content_type = ""
        # What the stream looks like (a built-in format's name, JSON, an HTML page), for the
        # messages of a stream that does not read as its format.
        self._looks: str | None = None
        self._sniffed = 0

    def answered(self, content_type: str | None) -> None:
        """Note the answer's content type (its media type)."""
        self.content_type = media_type(content_type)

    def refuses(self, content_type: str | None) -> str | None:
        """Why a 2xx answer with ``content_type`` is not a stream of the format (None when it
        may be one); with ``format="auto"`` a telling content type sets the framing."""
        if self.format is not None:
            return self.format.not_a_stream(content_type or "")
        if self.content_type in _AUTO_REFUSED or self.content_type.endswith("+json"):
            problem = f'{not_a_stream(self.content_type)} (format="auto" reads event streams, '
            return problem + "JSON lines or text)"
        if self.content_type in SSE_TYPES:
            self.framer = Framer("sse")
        elif self.content_type in NDJSON_TYPES:
            self.framer = Framer("lines")
        return None

    def body_note(self, body: bytes) -> str:
        """What a refused answer's ``body`` looks like, when that says more than its content
        type (see :meth:`looks_note`)."""
        looks = body_looks_like(body[:ERROR_BODY_LIMIT])
        # The content type already said JSON or HTML; a format's name says more.
        said = {"JSON": "json" in self.content_type, "an HTML page": "html" in self.content_type}
        self._looks = None if said.get(looks or "") else looks
        return self.looks_note()

    def looks_note(self) -> str:
        """``; it looks like anthropic (format="anthropic")`` when the stream looks like
        something other than the format it was read as."""
        looks = self._looks
        if looks is None or looks == self._trace.format:
            return ""
        if looks in BUILTIN_FORMATS:
            return f'; it looks like {looks} (format="{looks}")'
        return f"; it looks like {looks}"

    def begin(self, data: bytes, stamp_ns: int) -> list[tuple[bytes, int]]:
        """Hold the body's read ``data`` until its start shows what it is, then return every
        read held (in order) to be framed; a body that is JSON or HTML where events were
        expected is a ProtocolError."""
        self._head.append((data, stamp_ns))
        if not self._begin():
            return []
        head, self._head = self._head, []
        return head

    def _begin(self) -> bool:
        framing = self.framer.framing if self.framer is not None else None
        if framing in ("raw", "lines"):
            # Any first byte may begin these; a line that is not JSON is the format's to judge.
            self.started = True
            return True
        head = b"".join(data for data, _ in self._head)
        start = body_start(head)
        if start is None:
            return False
        if framing is None:
            # format="auto" without a telling content type: the body's start decides.
            if start == "sse":
                framing = "sse"
            elif start == "object":
                framing = "lines"
            elif start == "text":
                self._use_format(BUILTIN_FORMATS["raw"])
                framing = "raw"
            self.framer = Framer(framing) if framing is not None else None
        if framing is None or (framing == "sse" and start in ("object", "array", "html")):
            kind = "JSON" if start in ("object", "array") else "an HTML page"
            looks = body_looks_like(head)
            self._looks = looks if looks not in (None, kind) else None
            answered = self.content_type or "no content type"
            reads = "server-sent events" if framing == "sse" else "a stream"
            snippet = head[:ERROR_BODY_LIMIT].decode("utf-8", "replace").strip()
            raise ProtocolError(
                f"answered {answered}, but the body is {kind}, not {reads}"
                f"{self.looks_note()}; body: {snippet}"
            )
        self.started = True
        return True

    def frames(self, data: bytes, stamp_ns: int) -> Iterator[Framed]:
        """The frames one read completes, for a body that has :attr:`started`."""
        assert self.framer is not None
        # Until the format is recognised, a line at a time: the format may change how the
        # lines after its first frame are framed (Gemini's raw JSON lines).
        pieces = [data] if self.format is not None else data.splitlines(keepends=True)
        for piece in pieces:
            yield from self.framer.feed(piece, stamp_ns)

    def close(self, stamp_ns: int) -> list[Framed]:
        """The frames the body's clean end completes (none for a body never started)."""
        if self.framer is None or not self.started:
            return []
        return self.framer.close(stamp_ns)

    def read(self, frame: Frame) -> Reading:
        """What ``frame`` means in the stream's format (recognised from it under
        ``format="auto"``); a frame that ends the stream as a failure is a StreamError."""
        assert self.framer is not None
        framing = self.framer.framing
        if self._sniffed < _SNIFF_FRAMES and self._looks not in BUILTIN_FORMATS:
            self._sniffed += 1
            self._looks = looks_like(frame, framing) or self._looks
        if self.format is None:
            if frame.data.strip().replace(" ", "") == "{}":
                # An empty object (a typed response with every field unset) has no shape to
                # recognise: the next data frame decides.
                return NOTHING
            self._use_format(BUILTIN_FORMATS[detect(frame, framing)])
        assert self._read is not None
        return self._read(frame)

    def _use_format(self, fmt: StreamFormat) -> None:
        self.format = fmt
        self._read = fmt.reader()
        if self.framer is not None:
            self.framer.raw_json = fmt.raw_json_lines
            self.framer.unterminated_last_event = fmt.unterminated_last_event
        self._trace.format = fmt.name
