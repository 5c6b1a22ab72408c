"""OpenAI's streams: Chat Completions (and legacy Completions) chunks (``format="openai"``), and
the Responses API (``format="openai-responses"``); their tokens, ends and errors are
docs/protocols.md's. Named events are read as the openai client reads them: their data is a
chunk like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_streamguard.errors import ServerError
from pytest_streamguard.formats.base import (
    FINAL,
    NOTHING,
    REASONING,
    REFUSAL,
    TEXT,
    TOOL,
    Frame,
    Piece,
    Reading,
    StreamFormat,
    indexed,
    parse_object,
    reason_of,
)
from pytest_streamguard.formats.generic import error_message

_DONE = "[DONE]"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _content_pieces(content: Any, kind: str = TEXT) -> tuple[list[Piece], bool]:
    """A delta's ``content``: a string, or a list of parts (Mistral's content chunks, parts as
    in a request): a part's ``text`` is of ``kind``, a ``thinking`` part's parts are
    reasoning; whether a part without text (an image) arrived, which is output too."""
    if not isinstance(content, list):
        text = _text(content)
        return ([Piece(kind, text)] if text else []), False
    pieces: list[Piece] = []
    other = False
    for part in content:
        if isinstance(part, dict) and part.get("type") == "thinking":
            more, found = _content_pieces(part.get("thinking"), REASONING)
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            more, found = _content_pieces(part["text"], kind)
        else:
            more, found = [], part is not None
        pieces += more
        other = other or found
    return pieces, other


def _delta_pieces(delta: dict[str, Any]) -> tuple[list[Piece], bool]:
    """The delta's pieces, and whether it has output without text: the start of a tool call
    (output even with no arguments), an image (a content part, OpenRouter's ``images``)."""
    # Some servers send both spellings of the same reasoning text; count it once.
    reasoning = _text(delta.get("reasoning_content")) or _text(delta.get("reasoning"))
    pieces, started = _content_pieces(delta.get("content"))
    if reasoning:
        pieces.insert(0, Piece(REASONING, reasoning))
    if text := _text(delta.get("refusal")):
        pieces.append(Piece(REFUSAL, text))
    images = delta.get("images")
    started = started or (isinstance(images, list) and bool(images))
    # An audio answer's words are its transcript.
    audio = delta.get("audio")
    if isinstance(audio, dict) and (transcript := _text(audio.get("transcript"))):
        pieces.append(Piece(TEXT, transcript))
    calls = delta.get("tool_calls")
    calls = calls if isinstance(calls, list) else []
    functions = [call.get("function") if isinstance(call, dict) else None for call in calls]
    # The legacy field, unless the same delta carries tool_calls: llama.cpp's server repeats
    # every tool_calls piece in it (the openai client's tool_calls hold it once).
    for function in functions or [delta.get("function_call")]:
        if isinstance(function, dict):
            started = started or bool(_text(function.get("name")))
            if arguments := _text(function.get("arguments")):
                pieces.append(Piece(TOOL, arguments))
    return pieces, started


class OpenAIChatFormat(StreamFormat):
    """OpenAI Chat Completions and legacy Completions streaming (``format="openai"``)."""

    name = "openai"
    end_description = "data: [DONE], or a finish_reason on every choice"
    # The openai client stops at [DONE] (it closes the body, or drains it for 0.1 s and ignores
    # what it finds); after a finish_reason without [DONE] it reads on to the body's end.
    client_stop_data = "[DONE]"

    def read(self, frame: Frame) -> Reading:
        """Tokens from every choice's delta (or legacy text); the end on [DONE] or once every
        choice has a finish_reason; an error object or ``event: error`` fails.

        As the openai client does, the data of a named event (``event: completion``) is read
        like any other chunk, except the Assistants API's ``thread.*`` events."""
        if frame.data.strip() == _DONE:
            return FINAL
        if frame.event == "error":
            raise ServerError(f"server sent event: error: {frame.data}")
        if frame.event is not None and frame.event.startswith("thread."):
            return NOTHING
        obj = parse_object(frame.data, f"the {self.name} stream sent a data event")
        if obj.get("error"):
            raise ServerError(f"server sent an error: {error_message(obj)}")
        pieces: list[Piece] = []
        answers: list[int] = []
        finished: list[int] = []
        output = False
        reason: str | None = None
        for index, choice in indexed(obj.get("choices")):
            answers.append(index)
            delta = choice.get("delta")
            if isinstance(delta, dict):
                more, started = _delta_pieces(delta)
                pieces += more
                output = output or started
            if text := _text(choice.get("text")):
                pieces.append(Piece(TEXT, text))
            if choice.get("finish_reason"):
                finished.append(index)
                reason = reason_of(choice, ("finish_reason",)) or reason
        return Reading(
            pieces=tuple(pieces),
            data=obj,
            answers=tuple(answers),
            finished=tuple(finished),
            output=output,
            reason=reason,
        )


_RESPONSES_TOKENS = {
    "response.output_text.delta": TEXT,
    "response.reasoning_text.delta": REASONING,
    "response.reasoning_summary_text.delta": REASONING,
    "response.function_call_arguments.delta": TOOL,
    "response.custom_tool_call_input.delta": TOOL,
    "response.refusal.delta": REFUSAL,
}
_RESPONSES_ENDS = frozenset({"response.completed", "response.incomplete"})


_RESPONSES_DONE = {
    "response.output_text.done": ("text", TEXT),
    "response.reasoning_text.done": ("text", REASONING),
    "response.refusal.done": ("refusal", REFUSAL),
    "response.function_call_arguments.done": ("arguments", TOOL),
}


def _responses_reason(obj: dict[str, Any], kind: str) -> str:
    """The response's status (``completed``, ``incomplete``), or for an incomplete one the
    reason it gives (``max_output_tokens``, ``content_filter``), as the openai client's
    ``Response.status`` and ``incomplete_details.reason`` say."""
    response = obj.get("response")
    response = response if isinstance(response, dict) else {}
    status = response.get("status")
    status = status if isinstance(status, str) and status else kind.rsplit(".", 1)[1]
    if status == "incomplete":
        return reason_of(response.get("incomplete_details"), ("reason",)) or status
    return status


class OpenAIResponsesFormat(StreamFormat):
    """OpenAI Responses API streaming (``format="openai-responses"``)."""

    name = "openai-responses"
    end_description = "event: response.completed (or response.incomplete)"
    # The same client as chat's: it reads on after response.completed, but stops at [DONE].
    client_stop_data = "[DONE]"

    def read(self, frame: Frame) -> Reading:
        """One frame read without what came before it (see :meth:`reader`)."""
        return self.reader()(frame)

    def reader(self) -> Callable[[Frame], Reading]:
        """Token deltas by event type; a part's ``.done`` event when no delta of it came (its
        text sent whole); the end on response.completed/incomplete; response.failed and error
        fail. ``[DONE]`` is not the end: without response.completed the openai client's
        stream raises."""
        streamed: set[tuple[str, str]] = set()

        def read(frame: Frame) -> Reading:
            if frame.data.strip() == _DONE:
                return NOTHING
            obj = parse_object(frame.data, f"the {self.name} stream sent a data event")
            kind = obj.get("type") or frame.event
            part = (str(obj.get("item_id")), str(kind).rsplit(".", 1)[0])
            if kind in _RESPONSES_TOKENS:
                delta = _text(obj.get("delta"))
                streamed.add(part)
                pieces = (Piece(_RESPONSES_TOKENS[kind], delta),) if delta else ()
                return Reading(pieces=pieces, data=obj)
            if kind in _RESPONSES_DONE and part not in streamed:
                key, piece_kind = _RESPONSES_DONE[kind]
                text = _text(obj.get(key))
                return Reading(pieces=(Piece(piece_kind, text),) if text else (), data=obj)
            if kind == "response.output_item.added":
                item = obj.get("item")
                # Any call the model makes, not a *_call_output item.
                started = isinstance(item, dict) and str(item.get("type")).endswith("_call")
                return Reading(data=obj, output=started)
            if kind in _RESPONSES_ENDS:
                return Reading(end=True, last=True, data=obj, reason=_responses_reason(obj, kind))
            if kind == "response.failed":
                response = obj.get("response")
                error = response.get("error") if isinstance(response, dict) else None
                raise ServerError(f"server sent response.failed: {error_message(error or obj)}")
            if kind == "error":
                raise ServerError(f"server sent event: error: {error_message(obj)}")
            return NOTHING

        return read
