"""Configurable formats: server-sent events, JSON lines and raw bytes.

:class:`SSEFormat` and :class:`NDJSONFormat` cover most home-grown protocols without a subclass:
name the events (or write the small functions) that make a token, an end and an error.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from pytest_streamguard.errors import ServerError
from pytest_streamguard.formats.base import (
    FINAL,
    HEARTBEAT,
    NDJSON_TYPES,
    NOTHING,
    SSE_TYPES,
    Frame,
    Reading,
    StreamFormat,
    parse_json,
    reason_of,
    text_reading,
)

TEXT_KEYS = ("text", "content", "response", "token")
"""Where :class:`NDJSONFormat` looks for a line's text by default, in this order."""


def error_message(payload: Any) -> str:
    """A readable message from an error payload: ``{"error": {"message": ...}}``,
    ``{"error": "..."}``, ``{"message": ...}`` or the payload itself."""
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    if isinstance(error, dict):
        message = error.get("message") or error.get("error")
        kind = error.get("type") or error.get("status") or error.get("code")
        if message is not None:
            return f"{message} ({kind})" if kind else str(message)
    return str(error)


def default_text(data: Any) -> str | None:
    """The text of an SSE data payload: its ``text`` field when it is a JSON object with one,
    else the data itself when it is not JSON (a plain-text token)."""
    if isinstance(data, dict):
        text = data.get("text")
        return text if isinstance(text, str) else None
    return data if isinstance(data, str) else None


def _first_text(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    return next((v for key in TEXT_KEYS if isinstance(v := obj.get(key), str)), None)


def _line_error(obj: Any) -> str | None:
    return error_message(obj) if isinstance(obj, dict) and obj.get("error") else None


class SSEFormat(StreamFormat):
    """Server-sent events with named token, end, error and heartbeat events.

    ``token_events``: event types whose data is a token (``message`` is the type of an event
    without an ``event:`` line). ``end_events``: event types that end the stream cleanly.
    ``error_events``: event types that fail it (the message is read from the data).
    ``heartbeat_events``: event types that only keep the connection alive (``:`` comments
    always count as heartbeats). ``done_data``: a data payload that ends the stream, such as
    ``[DONE]``. ``json``: True requires every token event's data to be JSON, False keeps it a
    string, None (default) parses it when it is JSON. ``text(data)``: the token's text from the
    (parsed) data, None or "" for an event that carries none; by default a JSON object's
    ``text`` field, or the data itself when it is not JSON. ``end_on_eof``: a clean close is
    the end (for protocols that have no end event)."""

    framing = "sse"

    def __init__(
        self,
        name: str,
        *,
        token_events: tuple[str, ...] = ("message",),
        end_events: tuple[str, ...] = ("done",),
        error_events: tuple[str, ...] = ("error",),
        heartbeat_events: tuple[str, ...] = (),
        done_data: str | None = None,
        json: bool | None = None,
        text: Callable[[Any], str | None] | None = None,
        end_on_eof: bool = False,
        content_types: tuple[str, ...] = SSE_TYPES,
    ) -> None:
        self.name = name
        self.token_events = frozenset(token_events)
        self.end_events = frozenset(end_events)
        self.error_events = frozenset(error_events)
        self.heartbeat_events = frozenset(heartbeat_events)
        self.done_data = done_data
        self.json = json
        self.text = text or default_text
        self.end_on_eof = end_on_eof
        self.content_types = content_types
        ends = [f"event: {name}" for name in end_events]
        if done_data is not None:
            ends.append(f"data: {done_data}")
        self.end_description = " or ".join(ends) or "a clean close"

    def _payload(self, data: str) -> Any:
        if self.json is False:
            return data
        if self.json:
            return parse_json(data, f"the {self.name} stream sent a data event")
        try:
            return json.loads(data)
        except ValueError:
            return data

    def read(self, frame: Frame) -> Reading:
        """Token, end, error or heartbeat by the frame's event type (see the class)."""
        event = frame.event or "message"
        if self.done_data is not None and frame.data.strip() == self.done_data:
            return FINAL
        if event in self.end_events:
            return Reading(end=True, last=True, reason=_end_reason(frame.data))
        if event in self.error_events:
            message = error_message(self._payload(frame.data))
            raise ServerError(f"server sent event: {event}: {message}")
        if event in self.heartbeat_events:
            return HEARTBEAT
        if event not in self.token_events or not frame.data:
            return NOTHING
        payload = self._payload(frame.data)
        return text_reading(self.text(payload) or "", payload)


def _end_reason(data: str) -> str | None:
    """Why generation ended, when an end event's data is a JSON object that says (the bundled
    target's ``event: done`` carries ``finish_reason``); an end event's data is never an error."""
    try:
        return reason_of(json.loads(data)) if data else None
    except ValueError:
        return None


class NDJSONFormat(StreamFormat):
    """One JSON value per line (NDJSON / JSON Lines).

    ``text(obj)``: the line's token text (default: the first string among ``text``,
    ``content``, ``response``, ``token``). ``end(obj)``: whether this line is the end (default:
    none is). ``error(obj)``: an error message when the line reports a failure (default: a
    truthy ``error`` field). ``end_on_eof``: whether a clean close is the end (default: when no
    ``end`` is given, since plain NDJSON has no end marker). A line that is not JSON is a
    protocol error."""

    framing = "lines"

    def __init__(
        self,
        name: str,
        *,
        text: Callable[[Any], str | None] | None = None,
        end: Callable[[Any], bool] | None = None,
        error: Callable[[Any], str | None] | None = None,
        end_on_eof: bool | None = None,
        content_types: tuple[str, ...] = (*NDJSON_TYPES, "application/json", "text/plain"),
    ) -> None:
        self.name = name
        self.text = text or _first_text
        self.end = end
        self.error = error or _line_error
        self.end_on_eof = end is None if end_on_eof is None else end_on_eof
        self.accept = "application/x-ndjson"
        self.content_types = content_types
        self.end_description = "its end line" if end is not None else "a clean close"

    def read(self, frame: Frame) -> Reading:
        """Parse the line; error, token and end by the configured functions."""
        if not frame.data.strip():
            return NOTHING
        obj = parse_json(frame.data, f"the {self.name} stream sent a line")
        message = self.error(obj)
        if message:
            raise ServerError(f"server sent an error: {message}")
        done = self.end is not None and bool(self.end(obj))
        reading = text_reading(self.text(obj) or "", obj, end=done, last=done)
        return dataclasses.replace(reading, reason=reason_of(obj)) if done else reading


class RawFormat(StreamFormat):
    """Every network read is one chunk of text; a clean close is the end."""

    name = "raw"
    framing = "raw"
    accept = "*/*"
    content_types = ()
    end_on_eof = True
    end_description = "a clean close"

    def read(self, frame: Frame) -> Reading:
        """The read's text is a token."""
        return text_reading(frame.data)
