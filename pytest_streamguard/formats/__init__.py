"""Stream formats: what a token, a clean end, a server error and a heartbeat are, per protocol.

One definition per protocol serves the sync client, the async client and the load transport
(they all feed :class:`~pytest_streamguard.client.StreamRecorder`). Pass a built-in name or a
:class:`StreamFormat` instance as ``format=`` to ``streamguard.stream()``, ``astream()`` or
``load()``:

================  ==========================================================================
name              protocol
================  ==========================================================================
sse               the bundled target's events: JSON ``text`` tokens, ``event: done`` ends
openai            OpenAI Chat Completions / legacy Completions chunks, ``[DONE]``
openai-responses  OpenAI Responses API events, ``response.completed``
anthropic         Anthropic Messages events, ``message_stop``
gemini            Gemini ``streamGenerateContent?alt=sse``, ``finishReason``
ollama            Ollama NDJSON (generate and chat), ``"done": true``
tgi               Text Generation Inference ``/generate_stream``, ``generated_text``
ndjson            one JSON object per line; a clean close ends
raw               every network read is a chunk; a clean close ends
================  ==========================================================================
"""

from __future__ import annotations

from pytest_streamguard.formats.anthropic import AnthropicFormat
from pytest_streamguard.formats.base import (
    KINDS,
    REASONING,
    REFUSAL,
    TEXT,
    TOOL,
    Frame,
    Piece,
    ProtocolError,
    Reading,
    ServerError,
    StreamError,
    StreamFormat,
)
from pytest_streamguard.formats.framing import Framed, Framer
from pytest_streamguard.formats.gemini import GeminiFormat
from pytest_streamguard.formats.generic import NDJSONFormat, RawFormat, SSEFormat
from pytest_streamguard.formats.ollama import OllamaFormat
from pytest_streamguard.formats.openai import OpenAIChatFormat, OpenAIResponsesFormat
from pytest_streamguard.formats.tgi import TGIFormat

__all__ = [
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
    "resolve_format",
]

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


def resolve_format(value: str | StreamFormat) -> StreamFormat:
    """The format named ``value`` (or ``value`` itself); ValueError listing what is accepted."""
    if isinstance(value, StreamFormat):
        return value
    if isinstance(value, str) and value in BUILTIN_FORMATS:
        return BUILTIN_FORMATS[value]
    raise ValueError(
        f"format={value!r} is not supported: expected one of {', '.join(BUILTIN_FORMATS)} "
        "or a pytest_streamguard.formats.StreamFormat instance (e.g. SSEFormat(...))"
    )
