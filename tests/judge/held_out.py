"""Shapes real servers send, written by hand from their documentation and observed streams (not
from the generators, and kept apart from tuning), with what the call each names concludes.

Each :class:`Shape` is one answer: the request's path and JSON body, the content type, the body's
events, how the body ended, and what plain iteration of the official client's
``create(stream=True)`` (the default judge; the shape's ``client`` where it names another call)
concludes: completed or not, the text it yields, the end reason.

Sources: Azure OpenAI "Content filtering" (asynchronous filter: annotation chunks without
``delta``; ``prompt_filter_results`` before the first choice); vLLM's OpenAI-compatible server
(``stop_reason``, a completions stream on any route); LiteLLM's proxy (``choices: null`` usage
chunk, nulls in the final delta); OpenRouter "Streaming" (``: OPENROUTER PROCESSING``
comments, a mid-stream error chunk with ``finish_reason: "error"``); Groq (``x_groq``); Amazon
Bedrock's OpenAI-compatible endpoint; Anthropic "Streaming Messages" (``event: error`` mid-stream,
``ping``) and the shapes ``create(stream=True)`` reads but ``messages.stream()`` raises on;
Gemini ``streamGenerateContent`` (``finishReason: SAFETY``, a blocked prompt, code execution,
inline audio); Ollama ``/api/chat`` and ``/api/generate`` (``done_reason``: ``stop``,
``length``, ``load``); the Responses API (text only in ``response.completed``, an MCP approval
request).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SSE = "text/event-stream"
NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class Shape:
    """One answer and what its call concludes on it."""

    name: str
    format: str
    path: str
    events: list[str]
    completed: bool
    text: str = ""
    reason: str | None = None
    body: dict[str, Any] = field(default_factory=dict)
    content_type: str = SSE
    ending: str = "close"
    """``close``, or ``cut``: the connection closes before the chunked body's end."""
    client: str = "auto"

    @property
    def pieces(self) -> list[bytes]:
        """The body as the server wrote it, one write per event."""
        return [event.encode() for event in self.events]


def _d(obj: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(obj)}\n\n"


def _chunk(content: str | None = None, reason: str | None = None, **extra: Any) -> str:
    delta = {} if content is None else {"content": content}
    choice = {"index": 0, "delta": delta, "finish_reason": reason}
    return _d({"id": "c", "object": "chat.completion.chunk", "choices": [choice], **extra})


DONE = "data: [DONE]\n\n"
_FILTER = {"hate": {"filtered": False, "severity": "safe"}}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}

OPENAI = [
    Shape(
        "azure-async-content-filter",
        "openai",
        "/openai/deployments/gpt/chat/completions",
        [
            _d({"choices": [], "id": "", "object": "", "prompt_filter_results": [{}]}),
            _chunk("Hello"),
            _chunk(" world!"),
            _d(
                {
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": None,
                            "content_filter_offsets": {"check_offset": 0, "end_offset": 12},
                            "content_filter_results": _FILTER,
                        }
                    ],
                    "id": "",
                    "object": "",
                }
            ),
            _chunk(None, "stop"),
            DONE,
        ],
        True,
        "Hello world!",
        "stop",
        CHAT,
    ),
    Shape(
        "litellm-usage-choices-null",
        "openai",
        "/chat/completions",
        [
            _chunk("Hi", None),
            _chunk(None, "stop"),
            _d({"id": "c", "choices": None, "usage": {"prompt_tokens": 1, "total_tokens": 2}}),
            DONE,
        ],
        True,
        "Hi",
        "stop",
        CHAT,
    ),
    Shape(
        "litellm-final-delta-nulls",
        "openai",
        "/v1/chat/completions",
        [
            _chunk("Hi", None),
            _d(
                {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "delta": {
                                "content": None,
                                "role": None,
                                "function_call": None,
                                "tool_calls": None,
                                "audio": None,
                            },
                        }
                    ],
                }
            ),
            DONE,
        ],
        True,
        "Hi",
        "stop",
        CHAT,
    ),
    Shape(
        "vllm-chat-stop-reason",
        "openai",
        "/v1/chat/completions",
        [
            _chunk("", None),
            _chunk("Hi", None),
            _d(
                {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "choices": [
                        {"index": 0, "delta": {}, "finish_reason": "length", "stop_reason": None}
                    ],
                }
            ),
            DONE,
        ],
        True,
        "Hi",
        "length",
        CHAT,
    ),
    Shape(
        "vllm-completions-at-a-gateway-route",
        "openai",
        "/generate",
        [
            _d(
                {
                    "id": "x",
                    "object": "text_completion",
                    "choices": [
                        {"index": 0, "text": "Hi", "logprobs": None, "finish_reason": None}
                    ],
                }
            ),
            _d(
                {
                    "id": "x",
                    "object": "text_completion",
                    "choices": [
                        {"index": 0, "text": " there", "logprobs": None, "finish_reason": "length"}
                    ],
                }
            ),
            DONE,
        ],
        True,
        "Hi there",
        "length",
        {"model": "m", "prompt": "hi", "stream": True},
    ),
    Shape(
        "openrouter-processing-comments",
        "openai",
        "/api/v1/chat/completions",
        [
            ": OPENROUTER PROCESSING\n\n",
            ": OPENROUTER PROCESSING\n\n",
            _chunk("Hi"),
            _chunk(None, "stop"),
            DONE,
        ],
        True,
        "Hi",
        "stop",
        CHAT,
    ),
    Shape(
        "openrouter-mid-stream-error",
        "openai",
        "/api/v1/chat/completions",
        [
            _chunk("Hi"),
            _d(
                {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "error": {"code": "server_error", "message": "Provider disconnected"},
                    "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
                }
            ),
            DONE,
        ],
        False,
        "Hi",
        body=CHAT,
    ),
    Shape(
        "groq-x-groq-usage",
        "openai",
        "/openai/v1/chat/completions",
        [
            _chunk("Hi", x_groq={"id": "req_1"}),
            _chunk(None, "stop", x_groq={"id": "req_1", "usage": {"total_tokens": 3}}),
            DONE,
        ],
        True,
        "Hi",
        "stop",
        CHAT,
    ),
    Shape(
        "cut-after-done-groq-drains",
        "openai",
        "/openai/v1/chat/completions",
        [_chunk("Hi", "stop"), DONE, 'data: {"id":"c","obj'],
        False,
        "Hi",
        body=CHAT,
        ending="cut",
        client="groq",
    ),
    Shape(
        "cut-after-done-openai-stops",
        "openai",
        "/v1/chat/completions",
        [_chunk("Hi", "stop"), DONE, 'data: {"id":"c","obj'],
        True,
        "Hi",
        "stop",
        CHAT,
        ending="cut",
    ),
    Shape(
        "bedrock-openai-compatible",
        "openai",
        "/openai/v1/chat/completions",
        [_chunk("Hi", service_tier="default"), _chunk(None, "end_turn"), DONE],
        True,
        "Hi",
        "end_turn",
        CHAT,
    ),
    Shape(
        "responses-text-only-in-completed",
        "openai-responses",
        "/v1/responses",
        [
            _d(
                {
                    "type": "response.created",
                    "sequence_number": 0,
                    "response": {
                        "id": "r",
                        "object": "response",
                        "status": "in_progress",
                        "output": [],
                    },
                },
                "response.created",
            ),
            _d(
                {
                    "type": "response.completed",
                    "sequence_number": 1,
                    "response": {
                        "id": "r",
                        "object": "response",
                        "status": "completed",
                        "output": [
                            {
                                "id": "m",
                                "type": "message",
                                "role": "assistant",
                                "status": "completed",
                                "content": [
                                    {"type": "output_text", "text": "Hi", "annotations": []}
                                ],
                            }
                        ],
                    },
                },
                "response.completed",
            ),
        ],
        True,
        "Hi",
        "completed",
        {"model": "m", "input": "hi", "stream": True},
    ),
    Shape(
        "responses-mcp-approval-request",
        "openai-responses",
        "/v1/responses",
        [
            _d(
                {
                    "type": "response.created",
                    "sequence_number": 0,
                    "response": {
                        "id": "r",
                        "object": "response",
                        "status": "in_progress",
                        "output": [],
                    },
                },
                "response.created",
            ),
            _d(
                {
                    "type": "response.output_item.added",
                    "sequence_number": 1,
                    "output_index": 0,
                    "item": {
                        "id": "a",
                        "type": "mcp_approval_request",
                        "name": "roll",
                        "server_label": "dice",
                        "arguments": "{}",
                    },
                },
                "response.output_item.added",
            ),
            _d(
                {
                    "type": "response.completed",
                    "sequence_number": 2,
                    "response": {
                        "id": "r",
                        "object": "response",
                        "status": "completed",
                        "output": [],
                    },
                },
                "response.completed",
            ),
        ],
        True,
        "",
        "completed",
        {"model": "m", "input": "hi", "stream": True},
    ),
]


def _a(kind: str, **fields: Any) -> str:
    return _d({"type": kind, **fields}, kind)


_START = _a(
    "message_start",
    message={
        "id": "msg",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    },
)
_BLOCK = _a("content_block_start", index=0, content_block={"type": "text", "text": ""})
_HI = _a("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"})
_STOP = _a("message_stop")
MESSAGES = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}

ANTHROPIC = [
    Shape(
        "anthropic-overloaded-mid-stream",
        "anthropic",
        "/v1/messages",
        [
            _START,
            _BLOCK,
            _HI,
            _a("error", error={"type": "overloaded_error", "message": "Overloaded"}),
        ],
        False,
        "Hi",
        body=MESSAGES,
    ),
    Shape(
        "anthropic-ping-and-end-turn",
        "anthropic",
        "/v1/messages",
        [
            _START,
            _a("ping"),
            _BLOCK,
            _HI,
            _a("content_block_stop", index=0),
            _a(
                "message_delta",
                delta={"stop_reason": "end_turn", "stop_sequence": None},
                usage={"output_tokens": 2},
            ),
            _STOP,
        ],
        True,
        "Hi",
        "end_turn",
        MESSAGES,
    ),
    Shape(
        "anthropic-message-delta-without-usage",
        "anthropic",
        "/v1/messages",
        [
            _START,
            _BLOCK,
            _HI,
            _a("content_block_stop", index=0),
            _a("message_delta", delta={"stop_reason": "end_turn", "stop_sequence": None}),
            _STOP,
        ],
        True,
        "Hi",
        "end_turn",
        MESSAGES,
    ),
    Shape(
        "anthropic-no-message-start",
        "anthropic",
        "/v1/messages",
        [
            _BLOCK,
            _HI,
            _a("content_block_stop", index=0),
            _a("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 2}),
            _STOP,
        ],
        True,
        "Hi",
        "end_turn",
        MESSAGES,
    ),
    Shape(
        "anthropic-delta-before-block-start",
        "anthropic",
        "/v1/messages",
        [
            _START,
            _HI,
            _a("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 2}),
            _STOP,
        ],
        True,
        "Hi",
        "end_turn",
        MESSAGES,
    ),
    Shape(
        "anthropic-message-delta-without-usage-helper",
        "anthropic",
        "/v1/messages",
        [
            _START,
            _BLOCK,
            _HI,
            _a("content_block_stop", index=0),
            _a("message_delta", delta={"stop_reason": "end_turn", "stop_sequence": None}),
            _STOP,
        ],
        False,
        "Hi",
        client="anthropic.stream",
        body=MESSAGES,
    ),
]

GEMINI_PATH = "/v1beta/models/gemini:streamGenerateContent?alt=sse"


def _g(*parts: dict[str, Any], reason: str | None = None, **extra: Any) -> str:
    candidate: dict[str, Any] = {"index": 0}
    if parts:
        candidate["content"] = {"role": "model", "parts": list(parts)}
    if reason:
        candidate["finishReason"] = reason
    return f"data: {json.dumps({'candidates': [candidate], **extra})}\r\n\r\n"


GEMINI = [
    Shape(
        "gemini-safety-ending",
        "gemini",
        GEMINI_PATH,
        [_g({"text": "Once"}), _g(reason="SAFETY", usageMetadata={"totalTokenCount": 3})],
        True,
        "Once",
        "SAFETY",
    ),
    Shape(
        "gemini-blocked-prompt",
        "gemini",
        GEMINI_PATH,
        [f"data: {json.dumps({'promptFeedback': {'blockReason': 'SAFETY'}})}\r\n\r\n"],
        False,
        "",
        "SAFETY",
    ),
    Shape(
        "gemini-code-execution",
        "gemini",
        GEMINI_PATH,
        [
            _g({"executableCode": {"language": "PYTHON", "code": "print(1)"}}),
            _g({"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1\n"}}, reason="STOP"),
        ],
        True,
        "",
        "STOP",
    ),
    Shape(
        "gemini-inline-audio",
        "gemini",
        GEMINI_PATH,
        [_g({"inlineData": {"mimeType": "audio/pcm;rate=24000", "data": "AAAA"}}, reason="STOP")],
        True,
        "",
        "STOP",
    ),
]


def _o(obj: dict[str, Any]) -> str:
    return json.dumps({"model": "m", "created_at": "2025-01-01T00:00:00Z", **obj}) + "\n"


OLLAMA = [
    Shape(
        "ollama-chat-length",
        "ollama",
        "/api/chat",
        [
            _o({"message": {"role": "assistant", "content": "Hi"}, "done": False}),
            _o(
                {
                    "message": {"role": "assistant", "content": ""},
                    "done": True,
                    "done_reason": "length",
                }
            ),
        ],
        True,
        "Hi",
        "length",
        content_type=NDJSON,
    ),
    Shape(
        "ollama-generate-at-a-gateway-route",
        "ollama",
        "/generate",
        [
            _o({"response": "Hi", "done": False}),
            _o({"response": "", "done": True, "done_reason": "stop"}),
        ],
        True,
        "Hi",
        "stop",
        {"model": "m", "prompt": "hi"},
        NDJSON,
    ),
    Shape(
        "ollama-generate-load",
        "ollama",
        "/api/generate",
        [_o({"response": "", "done": True, "done_reason": "load"})],
        False,
        "",
        "load",
        {"model": "m", "prompt": ""},
        NDJSON,
    ),
]

SHAPES = [*OPENAI, *ANTHROPIC, *GEMINI, *OLLAMA]
"""Every held-out shape."""
