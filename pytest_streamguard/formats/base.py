"""What a stream format is: the frames it reads, and what each frame means.

A format turns the body of a 200 answer into *readings*. The bytes are first cut into frames by
the format's framing (``sse``: WHATWG server-sent events; ``lines``: one frame per line, as in
NDJSON; ``raw``: one frame per network read), then :meth:`StreamFormat.read` says what a frame
is: generated output (one or more :class:`Piece` of a kind: answer text, reasoning, tool-call
arguments, refusal), the stream's clean end, a heartbeat, or nothing. A server error in the
stream is raised as :class:`ServerError`; a frame that cannot belong to this format as
:class:`ProtocolError`. The format also names the content types it accepts and what its end
looks like, for the messages of a stream that is not one, or that ended without it.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pytest_streamguard.errors import ProtocolError

Framing = Literal["sse", "lines", "raw"]

TEXT = "text"
REASONING = "reasoning"
TOOL = "tool"
REFUSAL = "refusal"
KINDS = (TEXT, REASONING, TOOL, REFUSAL)
"""What a token can be: answer text, reasoning, tool-call arguments, a refusal."""

SSE_TYPES = ("text/event-stream",)
NDJSON_TYPES = ("application/x-ndjson", "application/jsonl", "application/json-seq")


@dataclass(frozen=True, slots=True)
class Frame:
    """One unit of the stream as framed: an SSE event (``event`` name or None, ``data`` lines
    joined by newlines), a line (``data``, without its line end), or a raw read."""

    data: str
    event: str | None = None


@dataclass(frozen=True, slots=True)
class Piece:
    """Generated output carried by a frame: its ``kind`` (one of :data:`KINDS`) and text."""

    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class Reading:
    """What one frame means.

    ``pieces``: the generated output it carries (a frame with pieces is a token and becomes a
    chunk of the trace). ``end``: the format's clean end has arrived. ``last``: nothing more is
    expected, stop reading (a sentinel such as ``[DONE]``); ``end`` without ``last`` means more
    frames may still come (usage chunks after an OpenAI ``finish_reason``) and a clean close then
    is fine. ``heartbeat``: a keep-alive the format defines (comments are always heartbeats).
    ``data``: the frame's parsed payload, kept on the chunk. ``output``: the frame carries
    generated output that has no text of its own (the start of a tool call, whose arguments may
    be empty): a stream with such output and no token still answered, so its end completes it.

    A protocol that streams several answers at once (OpenAI ``n>1`` choices, Gemini
    candidates) says which ones a frame carries (``answers``, their indexes) and which of them
    it finishes (``finished``) instead of setting ``end``: the stream's end has arrived once
    every answer that appeared has finished.

    ``reason``: why generation ended, as the protocol names it (OpenAI's ``finish_reason``,
    Anthropic's ``stop_reason``, Ollama's ``done_reason``, Gemini's ``finishReason``, TGI's
    ``details.finish_reason``, the Responses API's status), on the frame that carries it, which
    may carry no token at all (llama.cpp's server, transformers serve and the OpenAI API send the
    reason in an otherwise empty chunk)."""

    pieces: tuple[Piece, ...] = ()
    end: bool = False
    last: bool = False
    heartbeat: bool = False
    data: Any = None
    answers: tuple[int, ...] = ()
    finished: tuple[int, ...] = ()
    output: bool = False
    reason: str | None = None


NOTHING = Reading()
HEARTBEAT = Reading(heartbeat=True)
FINAL = Reading(end=True, last=True)


def text_reading(text: str, data: Any = None, *, end: bool = False, last: bool = False) -> Reading:
    """A reading with one piece of answer text (none when ``text`` is empty)."""
    pieces = (Piece(TEXT, text),) if text else ()
    return Reading(pieces=pieces, end=end, last=last, data=data)


#: The fields that name why generation ended, in the protocols that put it at the top of an
#: object (the bundled target's ``done`` event, Ollama's last line, an NDJSON end line).
REASON_FIELDS = ("finish_reason", "stop_reason", "done_reason", "finishReason")


def reason_of(obj: Any, fields: tuple[str, ...] = REASON_FIELDS) -> str | None:
    """The first non-empty string among ``fields`` of ``obj`` (a dict), else None."""
    if not isinstance(obj, dict):
        return None
    return next((v for name in fields if isinstance(v := obj.get(name), str) and v), None)


def indexed(items: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    """The objects of a ``choices`` or ``candidates`` list, each with its ``index`` (its
    position in the list where it has no integer ``index``)."""
    for position, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, dict):
            index = item.get("index", position)
            yield (index if isinstance(index, int) else position), item


def parse_json(data: str, what: str) -> Any:
    """``data`` parsed as JSON; :class:`ProtocolError` saying what arrived otherwise."""
    try:
        return json.loads(data)
    except ValueError:
        snippet = data if len(data) <= 80 else data[:77] + "..."
        raise ProtocolError(f"{what} that is not JSON: {snippet!r}") from None


def parse_object(data: str, what: str) -> dict[str, Any]:
    """``data`` parsed as a JSON object; :class:`ProtocolError` saying what arrived otherwise."""
    parsed = parse_json(data, what)
    if not isinstance(parsed, dict):
        raise ProtocolError(f"{what} that is not a JSON object: {type(parsed).__name__}")
    return parsed


def media_type(content_type: str | None) -> str:
    """``text/event-stream`` of ``text/event-stream; charset=utf-8`` (lower case); of a
    repeated header (httpx joins the values: ``text/event-stream, text/event-stream``), the
    first value's, as the clients, which read a stream whatever its content type says."""
    return (content_type or "").split(",", 1)[0].split(";", 1)[0].strip().lower()


def not_a_stream(kind: str) -> str:
    """``answered {kind}, not a stream``, with a hint for a JSON answer or an HTML page."""
    hint = ""
    if kind == "application/json":
        hint = ': did you send "stream": true?'
    elif kind == "text/html":
        hint = ": an HTML page (a proxy's or framework's error page, or the wrong path?)"
    return f"answered {kind}, not a stream{hint}"


class StreamFormat(ABC):
    """A stream protocol: how frames are cut, what they mean, and how the stream ends.

    Subclass it for a protocol the built-in formats do not cover (or configure an
    :class:`~pytest_streamguard.formats.SSEFormat` or
    :class:`~pytest_streamguard.formats.NDJSONFormat`), and pass the instance as ``format=``
    to ``streamguard.stream()``, ``astream()`` or ``load()``.
    Instances must be immutable: one may read many streams at once."""

    name: str = "custom"
    framing: Framing = "sse"
    accept: str = "text/event-stream"
    """The ``Accept`` header sent with the request (the caller's own header wins)."""
    content_types: tuple[str, ...] = SSE_TYPES
    """Media types a 200 answer may have; empty accepts any. A missing content type is let
    through (the frames decide)."""
    end_on_eof: bool = False
    """Whether a clean close of the connection is this format's end (else it is ``truncated``)."""
    client_stop_data: str | None = None
    """The data at which the protocol's official client stops reading (the openai client's
    ``[DONE]``, also after a Responses stream's end). Most clients read on to the end of the
    body, so a body held open after the end makes them wait and a connection cut before the
    body's end makes them raise: the plugin reads on after the end likewise, until this data
    arrives."""
    end_description: str = "its end event"
    """How the end looks, for the message of a stream that was cut short (``event: done``)."""
    raw_json_lines: bool = False
    """Whether JSON written on raw lines between the events (not as ``data:`` fields) is read
    as a frame (Gemini's servers send an error object so, and its client raises it)."""

    unterminated_last_event: bool = False
    """Whether a last event that the body ends inside (no blank line after it) is still read
    when its data is whole JSON, as the Gemini and TGI clients read it (WHATWG discards it)."""

    def reader(self) -> Callable[[Frame], Reading]:
        """What reads one stream's frames: :meth:`read` for a format without state; a format
        whose meaning depends on earlier frames returns a fresh function per stream."""
        return self.read

    @abstractmethod
    def read(self, frame: Frame) -> Reading:
        """What ``frame`` means; raise :class:`ServerError` or :class:`ProtocolError` to end
        the stream as that failure."""

    def not_a_stream(self, content_type: str) -> str | None:
        """Why a 200 answer with ``content_type`` is not a stream of this format, or None."""
        kind = media_type(content_type)
        if not kind or not self.content_types or kind in self.content_types:
            return None
        accepted = ", ".join(self.content_types)
        return f"{not_a_stream(kind)} (the {self.name} format reads {accepted})"

    def __repr__(self) -> str:
        return f"<stream format {self.name!r}>"
