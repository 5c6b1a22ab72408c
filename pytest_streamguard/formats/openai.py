"""OpenAI's streams: Chat Completions (and legacy Completions) chunks, and the Responses API.

Chat chunks (``chat.completion.chunk``): a token is any non-empty ``delta.content``,
``delta.reasoning_content`` / ``delta.reasoning`` (reasoning models, vLLM, OpenRouter),
``delta.refusal`` or ``delta.tool_calls[].function.arguments``; legacy completions carry
``choices[].text``. Role-only and usage-only chunks are not tokens. The end is ``data: [DONE]``,
or a ``finish_reason`` on every choice that appeared (``n>1`` streams several; more chunks,
such as usage, may follow). An ``error`` object fails the stream. Named events are read as the
openai client reads them: their data is a chunk like any other.

Responses API (``POST /v1/responses`` with ``stream: true``): typed events; the ``*.delta``
events of output text, reasoning text or summary, function-call arguments and refusals are
tokens; ``response.completed`` and ``response.incomplete`` end it; ``response.failed`` and
``error`` fail it.
"""

from __future__ import annotations

from typing import Any

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
    ServerError,
    StreamFormat,
    parse_object,
)
from pytest_streamguard.formats.generic import error_message

_DONE = "[DONE]"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _delta_pieces(delta: dict[str, Any]) -> list[Piece]:
    pieces: list[Piece] = []
    # Some servers send both spellings of the same reasoning text; count it once.
    reasoning = _text(delta.get("reasoning_content")) or _text(delta.get("reasoning"))
    if reasoning:
        pieces.append(Piece(REASONING, reasoning))
    for key, kind in (("content", TEXT), ("refusal", REFUSAL)):
        if text := _text(delta.get(key)):
            pieces.append(Piece(kind, text))
    calls = delta.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and (arguments := _text(function.get("arguments"))):
            pieces.append(Piece(TOOL, arguments))
    legacy = delta.get("function_call")
    if isinstance(legacy, dict) and (arguments := _text(legacy.get("arguments"))):
        pieces.append(Piece(TOOL, arguments))
    return pieces


class OpenAIChatFormat(StreamFormat):
    """OpenAI Chat Completions and legacy Completions streaming (``format="openai"``)."""

    name = "openai"
    end_description = "data: [DONE], or a finish_reason on every choice"
    # The openai client stops at [DONE] (it closes the body, or drains it for 0.1 s and ignores
    # what it finds); after a finish_reason without [DONE] it reads on to the body's end.
    client_stops_at_terminal = True

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
        choices = obj.get("choices")
        for position, choice in enumerate(choices if isinstance(choices, list) else []):
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", position)
            index = index if isinstance(index, int) else position
            answers.append(index)
            delta = choice.get("delta")
            if isinstance(delta, dict):
                pieces += _delta_pieces(delta)
            if text := _text(choice.get("text")):
                pieces.append(Piece(TEXT, text))
            if choice.get("finish_reason"):
                finished.append(index)
        return Reading(
            pieces=tuple(pieces), data=obj, answers=tuple(answers), finished=tuple(finished)
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


class OpenAIResponsesFormat(StreamFormat):
    """OpenAI Responses API streaming (``format="openai-responses"``)."""

    name = "openai-responses"
    end_description = "event: response.completed (or response.incomplete)"

    def read(self, frame: Frame) -> Reading:
        """Token deltas by event type; the end on response.completed/incomplete;
        response.failed and error fail."""
        if frame.data.strip() == _DONE:
            return FINAL
        obj = parse_object(frame.data, f"the {self.name} stream sent a data event")
        kind = obj.get("type") or frame.event
        if kind in _RESPONSES_TOKENS:
            delta = _text(obj.get("delta"))
            pieces = (Piece(_RESPONSES_TOKENS[kind], delta),) if delta else ()
            return Reading(pieces=pieces, data=obj)
        if kind in _RESPONSES_ENDS:
            return Reading(end=True, last=True, data=obj)
        if kind == "response.failed":
            response = obj.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            raise ServerError(f"server sent response.failed: {error_message(error or obj)}")
        if kind == "error":
            raise ServerError(f"server sent event: error: {error_message(obj)}")
        return NOTHING
