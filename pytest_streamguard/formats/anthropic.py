"""Anthropic's Messages streaming (``format="anthropic"``); its events, tokens, end and errors
are docs/protocols.md's ("anthropic"). Unknown event types are ignored, as Anthropic asks of
clients."""

from __future__ import annotations

from typing import Any

from pytest_streamguard.errors import ServerError
from pytest_streamguard.formats.base import (
    FINAL,
    HEARTBEAT,
    NOTHING,
    REASONING,
    TEXT,
    TOOL,
    Frame,
    Piece,
    Reading,
    StreamFormat,
    parse_json,
    reason_of,
)
from pytest_streamguard.formats.generic import error_message

_DELTAS = {
    "text_delta": ("text", TEXT),
    "thinking_delta": ("thinking", REASONING),
    "input_json_delta": ("partial_json", TOOL),
}


class AnthropicFormat(StreamFormat):
    """Anthropic Messages API server-sent events."""

    name = "anthropic"
    end_description = "event: message_stop"

    def read(self, frame: Frame) -> Reading:
        """Deltas are tokens, and so is the text a content block starts with; a tool_use
        block's start is output (its input may be empty); ping a heartbeat, message_stop the
        end, error a failure. As the anthropic client does, an event without an ``event:``
        name is skipped, and a named one is read by its data's ``type``."""
        if frame.event is None:
            return NOTHING
        if frame.event == "ping":
            return HEARTBEAT
        if frame.event == "error":
            raise ServerError(f"server sent event: error: {frame.data}")
        obj: Any = parse_json(frame.data, "the anthropic stream sent a data event")
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind == "ping":
            return HEARTBEAT
        if kind == "message_stop":
            return FINAL
        if kind == "error":
            raise ServerError(f"server sent an error: {error_message(obj)}")
        if kind == "content_block_start" and isinstance(obj, dict):
            return _block_start(obj)
        if kind == "message_delta" and isinstance(obj, dict):
            return Reading(data=obj, reason=reason_of(obj.get("delta"), ("stop_reason",)))
        if kind != "content_block_delta" or not isinstance(obj, dict):
            return NOTHING
        delta = obj.get("delta")
        if not isinstance(delta, dict) or delta.get("type") not in _DELTAS:
            return NOTHING
        field, piece_kind = _DELTAS[str(delta["type"])]
        text = delta.get(field)
        if not isinstance(text, str) or not text:
            return Reading(data=obj)
        return Reading(pieces=(Piece(piece_kind, text),), data=obj)


def _block_start(obj: dict[str, Any]) -> Reading:
    """A content block's start: the text or thinking it already carries (the client's message
    begins with it), or a tool call (output even when its input stays empty)."""
    block = obj.get("content_block")
    if not isinstance(block, dict):
        return NOTHING
    kind = block.get("type")
    if kind in ("tool_use", "server_tool_use"):
        return Reading(data=obj, output=True)
    field, piece_kind = {"text": ("text", TEXT), "thinking": ("thinking", REASONING)}.get(
        str(kind), ("", TEXT)
    )
    text = block.get(field) if field else None
    if not isinstance(text, str) or not text:
        return NOTHING
    return Reading(pieces=(Piece(piece_kind, text),), data=obj)
