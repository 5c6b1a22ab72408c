"""Ollama's streaming API (``format="ollama"``): NDJSON from ``/api/generate`` and ``/api/chat``;
its tokens, end and errors are docs/protocols.md's ("ollama")."""

from __future__ import annotations

import json
from typing import Any

from pytest_streamguard.errors import ServerError
from pytest_streamguard.formats.base import (
    NDJSON_TYPES,
    REASONING,
    TEXT,
    TOOL,
    Frame,
    Piece,
    Reading,
    StreamFormat,
    parse_object,
    reason_of,
)
from pytest_streamguard.formats.generic import error_message


def _pieces(holder: dict[str, Any], text_key: str) -> list[Piece]:
    pieces: list[Piece] = []
    thinking = holder.get("thinking")
    if isinstance(thinking, str) and thinking:
        pieces.append(Piece(REASONING, thinking))
    text = holder.get(text_key)
    if isinstance(text, str) and text:
        pieces.append(Piece(TEXT, text))
    calls = holder.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            arguments = function.get("arguments", {})
            pieces.append(Piece(TOOL, json.dumps(arguments, separators=(",", ":"))))
    return pieces


class OllamaFormat(StreamFormat):
    """Ollama's NDJSON stream of generate or chat responses."""

    name = "ollama"
    framing = "lines"
    accept = "application/x-ndjson"
    content_types = NDJSON_TYPES
    end_description = 'a line with "done": true'

    def read(self, frame: Frame) -> Reading:
        """Text, thinking and tool calls are tokens; ``done: true`` is the end."""
        if not frame.data.strip():
            return Reading()
        obj = parse_object(frame.data, "the ollama stream sent a line")
        if obj.get("error"):
            raise ServerError(f"server sent an error: {error_message(obj)}")
        message = obj.get("message")
        if isinstance(message, dict):
            pieces = _pieces(message, "content")
        else:
            pieces = _pieces(obj, "response")
        done = obj.get("done") is True
        reason = reason_of(obj, ("done_reason",)) if done else None
        return Reading(pieces=tuple(pieces), end=done, last=done, data=obj, reason=reason)
