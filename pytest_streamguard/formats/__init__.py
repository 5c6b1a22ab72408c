"""Stream formats: what a token, a clean end, a server error and a heartbeat are, per protocol.

One definition per protocol serves the sync client, the async client and the load transport
(they all feed :class:`~pytest_streamguard.stream.client.StreamRecorder`). ``format=`` on
``streamguard.stream()``, ``astream()``, ``load()`` or ``aload()`` takes a name of
:data:`BUILTIN_FORMATS`, ``auto`` (the default: recognised from the answer) or a
:class:`StreamFormat` instance; docs/protocols.md describes each.
"""

from __future__ import annotations

from pytest_streamguard.errors import ProtocolError, ServerError, StreamError
from pytest_streamguard.formats.anthropic import AnthropicFormat
from pytest_streamguard.formats.base import (
    KINDS,
    REASONING,
    REFUSAL,
    TEXT,
    TOOL,
    Frame,
    Piece,
    Reading,
    StreamFormat,
)
from pytest_streamguard.formats.detect import body_looks_like, detect, looks_like
from pytest_streamguard.formats.framing import Framed, Framer
from pytest_streamguard.formats.gemini import GeminiFormat
from pytest_streamguard.formats.generic import NDJSONFormat, RawFormat, SSEFormat
from pytest_streamguard.formats.ollama import OllamaFormat
from pytest_streamguard.formats.openai import OpenAIChatFormat, OpenAIResponsesFormat
from pytest_streamguard.formats.tgi import TGIFormat

__all__ = [
    "AUTO",
    "BUILTIN_FORMATS",
    "KINDS",
    "REASONING",
    "REFUSAL",
    "TEXT",
    "TOOL",
    "AnthropicFormat",
    "Frame",
    "Framed",
    "Framer",
    "GeminiFormat",
    "NDJSONFormat",
    "OllamaFormat",
    "OpenAIChatFormat",
    "OpenAIResponsesFormat",
    "Piece",
    "ProtocolError",
    "RawFormat",
    "Reading",
    "SSEFormat",
    "ServerError",
    "StreamError",
    "StreamFormat",
    "TGIFormat",
    "body_looks_like",
    "detect",
    "looks_like",
    "resolve_format",
]

AUTO = "auto"
"""The default ``format=``: recognise the format from the answer (any built-in but ``raw``; a
body that is neither events nor JSON lines is read as ``raw``)."""

BUILTIN_FORMATS: dict[str, StreamFormat] = {
    fmt.name: fmt
    for fmt in (
        SSEFormat("sse"),
        OpenAIChatFormat(),
        OpenAIResponsesFormat(),
        AnthropicFormat(),
        GeminiFormat(),
        OllamaFormat(),
        TGIFormat(),
        NDJSONFormat("ndjson"),
        RawFormat(),
    )
}
"""The built-in formats by name."""


def resolve_format(value: str | StreamFormat) -> StreamFormat | None:
    """The format named ``value`` (or ``value`` itself); None for ``"auto"`` (recognised from
    the answer); ValueError listing what is accepted."""
    if isinstance(value, StreamFormat):
        return value
    if value == AUTO:
        return None
    if isinstance(value, str) and value in BUILTIN_FORMATS:
        return BUILTIN_FORMATS[value]
    raise ValueError(
        f"format={value!r} is not supported: expected {AUTO} (the default), one of "
        f"{', '.join(BUILTIN_FORMATS)} "
        "or a pytest_streamguard.StreamFormat instance (e.g. SSEFormat(...))"
    )
