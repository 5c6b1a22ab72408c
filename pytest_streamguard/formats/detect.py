"""What a stream looks like: recognising its format (``format="auto"``), and naming what a
stream that does not read as its format looks like instead.

The shapes are the protocols' own markers: OpenAI's ``choices`` (and ``data: [DONE]``), the
Responses API's ``response.*`` types, Anthropic's message event types, Gemini's
``candidates`` (or another field of its response), TGI's ``token``/``generated_text``,
Ollama's ``done`` lines. The bundled ``sse`` format (a ``text`` field, ``event: done``) is what
an event stream without any of them is read as; a JSON-lines stream without Ollama's shape is
``ndjson``; a body that is neither events nor JSON is ``raw`` text.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pytest_streamguard.formats.base import Frame, Framing
from pytest_streamguard.formats.framing import Framer

Start = Literal["sse", "object", "array", "html", "text"]
"""How a body begins: SSE fields, a JSON object (JSON lines, or one JSON document), a JSON
array, an HTML page, or anything else (plain text)."""

_STARTS: dict[str, Start] = {"{": "object", "[": "array", "<": "html"}
_SSE_FIELDS = ("data:", "event:", ":", "id:", "retry:", "data\n", "data\r")
_ANTHROPIC_TYPES = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
    }
)
# GenerateContentResponse's fields on the wire (google-genai's model): a first event may carry
# only usage, the model's version or the response's id before any candidate.
_GEMINI_FIELDS = (
    "candidates",
    "promptFeedback",
    "usageMetadata",
    "modelVersion",
    "responseId",
    "createTime",
    "modelStatus",
)
_DONE = "[DONE]"
# Labels kept of what arrived before the first token, for the message of an empty stream.
ARRIVAL_LABELS = 20


def body_start(head: bytes) -> Start | None:
    """How a body that begins with ``head`` begins; None while it is only whitespace (or the
    start of an SSE field name)."""
    text = head.decode("utf-8", "replace").removeprefix("\ufeff").lstrip()
    if not text:
        return None
    if text.startswith(_SSE_FIELDS):
        return "sse"
    if any(field.startswith(text) for field in _SSE_FIELDS):
        return None  # the start of a field name: the next read tells
    return _STARTS.get(text[0], "text")


def _json(text: str) -> Any:
    if not text.startswith("{"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def shape_of(obj: Any) -> str | None:
    """The built-in format whose JSON payload ``obj`` is, when its shape says so."""
    if not isinstance(obj, dict):
        return None
    kind = obj.get("type")
    if isinstance(kind, str):
        if kind.startswith("response."):
            return "openai-responses"
        if kind in _ANTHROPIC_TYPES:
            return "anthropic"
        if kind == "error":
            return "anthropic" if isinstance(obj.get("error"), dict) else "openai-responses"
    if "choices" in obj or obj.get("object") in ("chat.completion.chunk", "text_completion"):
        return "openai"
    if any(name in obj for name in _GEMINI_FIELDS):
        return "gemini"
    if isinstance(obj.get("token"), dict) or "generated_text" in obj or "error_type" in obj:
        return "tgi"
    if isinstance(obj.get("done"), bool) and ("response" in obj or "message" in obj):
        return "ollama"
    return None


def looks_like(frame: Frame, framing: Framing) -> str | None:
    """The built-in format ``frame`` belongs to, when it says so (None when it could be any)."""
    data = frame.data.strip()
    if framing == "sse" and data == _DONE:
        return "openai"
    obj = _json(data)
    found = shape_of(obj)
    if framing == "lines":
        return found if found == "ollama" else ("ndjson" if isinstance(obj, dict) else None)
    if found is None and (frame.event == "done" or isinstance(_get(obj, "text"), str)):
        return "sse"
    return found


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


def detect(frame: Frame, framing: Framing) -> str:
    """The built-in format to read a stream by, from its first data frame."""
    found = looks_like(frame, framing)
    if found is not None:
        return found
    if framing == "lines":
        return "ndjson"
    # OpenAI-compatible servers that fail at once send a bare error object as their only event.
    if frame.event is None and _get(_json(frame.data.strip()), "error"):
        return "openai"
    return "sse"


def body_looks_like(head: bytes) -> str | None:
    """What a body that begins with ``head`` looks like: a built-in format's name, ``JSON``
    or ``an HTML page``; None when it is none of these."""
    start = body_start(head)
    text = head.decode("utf-8", "replace").removeprefix("\ufeff").strip()
    if start == "html":
        return "an HTML page"
    if start == "array":
        return "JSON"
    if start == "object":
        lines = text.splitlines()
        first = lines[0].strip() if lines else ""
        if len(lines) > 1 and _json(first) is not None:
            return looks_like(Frame(first), "lines")
        return "JSON"
    if start == "sse":
        for framed in Framer("sse").feed(head, 0):
            if framed.frame is not None and (found := looks_like(framed.frame, "sse")):
                return found
    return None


def label(frame: Frame, framing: Framing) -> str:
    """A short name for a frame that carried no generated output (``role chunk``,
    ``usage chunk``, ``[DONE]``, an event type), for the message of an empty stream."""
    data = frame.data.strip()
    if data == _DONE:
        return _DONE
    obj = _json(data)
    if shape_of(obj) == "openai":
        choices = obj.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(first, dict):
            return "usage chunk" if obj.get("usage") else "chunk without choices"
        if first.get("finish_reason"):
            return "finish_reason chunk"
        delta = first.get("delta")
        if isinstance(delta, dict) and delta.get("role"):
            return "role chunk"
        return "chunk without output"
    kind = _get(obj, "type")
    if isinstance(kind, str):
        return kind
    if frame.event is not None:
        return f"event: {frame.event}"
    return "data event without output" if framing == "sse" else "line without output"
