"""Cutting a body into frames as its bytes arrive, keeping each frame's arrival stamps.

Sans-IO: feed each network read with its ``perf_counter_ns`` stamp, get back the frames it
completed. A frame's ``stamp_ns`` is the stamp of the read that completed it, ``start_ns`` that
of the read that brought its first byte (they differ when the network splits a frame).

- ``sse``: the WHATWG event-stream rules: lines end with CRLF, LF or a lone CR (also when
  a CRLF is split across two reads), a blank line dispatches the event, ``data`` lines are
  joined with newlines, ``event`` names the type, ``:`` lines are comments (a heartbeat
  each), other fields are ignored, and an event cut off by the end of the body is discarded.
  With ``raw_json`` (Gemini), a JSON object written on raw lines between events (a line that
  begins with ``{``, up to the line where its braces balance) is a frame of its own, as the
  Gemini client reads it. With ``unterminated_last_event`` (Gemini, TGI), an event the body
  ends inside is still dispatched at the end when its data is whole JSON, as their clients
  read it.
- ``lines``: one frame per line (LF, or CRLF); a last line without its newline still counts
  at the end.
- ``raw``: one frame per read (text decoded incrementally, so a character split across reads
  is not garbled).
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass

from pytest_streamguard.formats.base import Frame, Framing

_SSE_LINE_END = re.compile(rb"\r\n|\r|\n")
_LF = re.compile(rb"\n")


@dataclass(frozen=True, slots=True)
class Framed:
    """A frame with its stamps and size; ``frame`` is None for an SSE comment (a heartbeat)."""

    frame: Frame | None
    start_ns: int
    stamp_ns: int
    nbytes: int


class Framer:
    """Frames of one body, for one framing (see the module docstring)."""

    def __init__(
        self, framing: Framing, *, raw_json: bool = False, unterminated_last_event: bool = False
    ) -> None:
        self.framing = framing
        self.raw_json = raw_json
        self.unterminated_last_event = unterminated_last_event
        self._raw: list[str] = []
        self._raw_depth = 0
        self._raw_start_ns = 0
        self._raw_bytes = 0
        self._buffer = b""
        self._buffer_start_ns = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._event: str | None = None
        self._data: list[str] = []
        self._event_start_ns: int | None = None
        self._event_bytes = 0
        self._first_line = True
        self._skip_lf = False

    def feed(self, data: bytes, stamp_ns: int) -> list[Framed]:
        """The frames completed by one read of ``data`` that arrived at ``stamp_ns``."""
        if self.framing == "raw":
            text = self._decoder.decode(data)
            return [Framed(Frame(text), stamp_ns, stamp_ns, len(data))] if text else []
        if self._skip_lf:
            # The CR that ended the previous read's last line was the first half of a CRLF.
            self._skip_lf = False
            data = data.removeprefix(b"\n")
        if not data:
            return []
        if not self._buffer:
            self._buffer_start_ns = stamp_ns
        self._buffer += data
        out: list[Framed] = []
        line_end = _SSE_LINE_END if self.framing == "sse" else _LF
        pos = 0
        while (match := line_end.search(self._buffer, pos)) is not None:
            line_start = self._buffer_start_ns
            body, nbytes = self._buffer[pos : match.start()], match.end() - pos
            pos = match.end()
            if len(self._buffer) - pos <= len(data):
                self._buffer_start_ns = stamp_ns
            # A lone CR ends a line (WHATWG), and an LF in the next read may complete it.
            self._skip_lf = match.group() == b"\r" and pos == len(self._buffer)
            framed = self._line(body, nbytes, line_start, stamp_ns)
            if framed is not None:
                out.append(framed)
        self._buffer = self._buffer[pos:]
        return out

    def close(self, stamp_ns: int) -> list[Framed]:
        """Frames the end of the body completes: a last line without its newline (``lines``)."""
        rest, self._buffer = self._buffer, b""
        if self._raw:
            text = "\n".join(self._raw)
            if rest.strip():
                text += "\n" + rest.decode("utf-8", "replace")
            size, self._raw = self._raw_bytes + len(rest), []
            return [Framed(Frame(text), self._raw_start_ns, stamp_ns, size)]
        if self.framing == "sse" and self.unterminated_last_event:
            out: list[Framed] = []
            if rest and (framed := self._line(rest, len(rest), self._buffer_start_ns, stamp_ns)):
                out.append(framed)  # the last line, without its line end
            if self._raw:
                out.append(Framed(Frame("\n".join(self._raw)), self._raw_start_ns, stamp_ns, 0))
                self._raw = []
            whole = bool(self._data) and _is_json("\n".join(self._data))
            if whole and (framed := self._dispatch(stamp_ns, 0)) is not None:
                out.append(framed)
            return out
        if self.framing == "lines" and rest.strip():
            text = rest.decode("utf-8", "replace").rstrip("\r")
            return [Framed(Frame(text), self._buffer_start_ns, stamp_ns, len(rest))]
        return []

    def _line(self, body: bytes, nbytes: int, start_ns: int, stamp_ns: int) -> Framed | None:
        text = body.decode("utf-8", "replace").removesuffix("\r")
        if self._first_line:
            self._first_line = False
            text = text.removeprefix("\ufeff")
        if self.framing == "lines":
            return Framed(Frame(text), start_ns, stamp_ns, nbytes) if text.strip() else None
        if self.raw_json and (self._raw or (not self._data and text.startswith("{"))):
            return self._raw_line(text, nbytes, start_ns, stamp_ns)
        if not text:
            return self._dispatch(stamp_ns, nbytes)
        if self._event_start_ns is None:
            self._event_start_ns = start_ns
        self._event_bytes += nbytes
        if text.startswith(":"):
            framed = Framed(None, self._event_start_ns, stamp_ns, self._event_bytes)
            self._event_start_ns, self._event_bytes = None, 0
            return framed
        name, _, value = text.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None

    def _raw_line(self, text: str, nbytes: int, start_ns: int, stamp_ns: int) -> Framed | None:
        """One line of a raw JSON object; the object as a frame once its braces balance."""
        if not self._raw:
            self._raw_start_ns, self._raw_bytes, self._raw_depth = start_ns, 0, 0
        self._raw.append(text)
        self._raw_bytes += nbytes
        self._raw_depth += _brace_balance(text)
        if self._raw_depth > 0:
            return None
        frame = Frame("\n".join(self._raw))
        self._raw = []
        return Framed(frame, self._raw_start_ns, stamp_ns, self._raw_bytes)

    def _dispatch(self, stamp_ns: int, nbytes: int) -> Framed | None:
        event, data = self._event, self._data
        start_ns = self._event_start_ns if self._event_start_ns is not None else stamp_ns
        size = self._event_bytes + nbytes
        self._event, self._data = None, []
        self._event_start_ns, self._event_bytes = None, 0
        if not data:
            return None
        return Framed(Frame("\n".join(data), event or None), start_ns, stamp_ns, size)


def _brace_balance(line: str) -> int:
    """Opening minus closing braces of ``line``, outside JSON strings."""
    depth, in_string, escaped = 0, False, False
    for char in line:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
    return depth


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
