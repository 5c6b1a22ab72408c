"""The stream shapes that issue 26 found the plugin judging unlike the official clients, each
read by the plugin (its format and ``auto``) and by the client on the same bytes: the
plugin's verdict is the client's conclusion, with the text it counts."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import differential
import httpx
import pytest
from streamgen import Transcript


def _sse(*events: tuple[str | None, Any]) -> bytes:
    out = ""
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out += (f"event: {name}\n" if name else "") + f"data: {text}\n\n"
    return out.encode()


def _read(protocol: str, body: bytes) -> tuple[list[differential.Verdict], differential.Verdict]:
    """The plugin's verdicts (its format, then auto) and the client's, on ``body``."""
    ndjson = protocol == "ollama"
    transcript = Transcript(
        protocol, 0, 0, [body], "application/x-ndjson" if ndjson else "text/event-stream"
    )
    transport = differential.ReplayTransport()
    transport.transcripts["case"] = transcript
    base = "http://replay.invalid/t/case"
    theirs = differential.client_verdict(transcript, base, transport)

    async def ours(fmt: str) -> differential.Verdict:
        async with httpx.AsyncClient(transport=transport.of(httpx)) as client:
            return await differential.plugin_verdict(base + transcript.suffix, fmt, client)

    return [asyncio.run(ours(fmt)) for fmt in (protocol, "auto")], theirs


# An Anthropic message_start's message.
_MESSAGE = {
    "id": "m",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [],
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def _chat(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _agree(protocol: str, body: bytes, completed: bool, **parts: str) -> list[differential.Verdict]:
    mine, theirs = _read(protocol, body)
    assert theirs.completed is completed, theirs
    for verdict in mine:
        assert verdict.completed is completed, verdict
        for kind, text in parts.items():
            assert verdict.parts[kind] == text == theirs.parts[kind], (kind, verdict, theirs)
    return mine


def test_openai_tool_call_with_empty_arguments_completes() -> None:
    start = {
        "tool_calls": [
            {
                "index": 0,
                "id": "c",
                "type": "function",
                "function": {"name": "now", "arguments": ""},
            }
        ]
    }
    body = _sse(
        (None, _chat({"role": "assistant"})),
        (None, _chat(start)),
        (None, _chat({}, "tool_calls")),
        (None, "[DONE]"),
    )
    _agree("openai", body, True, tool="")


def test_anthropic_tool_use_with_empty_input_completes() -> None:
    block = {"type": "tool_use", "id": "t", "name": "now", "input": {}}
    body = _sse(
        ("message_start", {"type": "message_start", "message": _MESSAGE}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 1},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    )
    _agree("anthropic", body, True, tool="", text="")


def test_audio_transcript_is_the_answer_text() -> None:
    audio = [
        _chat({"audio": {"id": "a", "transcript": w, "data": "AAAA"}}) for w in ("Hi", " there")
    ]
    body = _sse(*((None, chunk) for chunk in audio), (None, _chat({}, "stop")), (None, "[DONE]"))
    _agree("openai", body, True, text="Hi there")


def test_anthropic_text_only_in_the_start_event() -> None:
    block = {"type": "text", "text": "Hello"}
    body = _sse(
        ("message_start", {"type": "message_start", "message": _MESSAGE}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 1},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    )
    _agree("anthropic", body, True, text="Hello")


def _responses(text_deltas: list[str], text: str, end: str | None) -> bytes:
    item = {
        "id": "i",
        "type": "message",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    ids = {"item_id": "i", "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "text": "", "annotations": []}
    events: list[tuple[str | None, Any]] = [
        ("response.created", {"type": "response.created", "response": {"id": "r", "output": []}}),
        (
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 0, "item": item},
        ),
        (
            "response.content_part.added",
            {"type": "response.content_part.added", **ids, "part": part},
        ),
    ]
    events += [
        ("response.output_text.delta", {"type": "response.output_text.delta", **ids, "delta": d})
        for d in text_deltas
    ]
    events.append(
        ("response.output_text.done", {"type": "response.output_text.done", **ids, "text": text})
    )
    if end is not None:
        final = {
            "id": "r",
            "status": "completed",
            "output": [{**item, "content": [{**part, "text": text}]}],
        }
        events.append((end, {"type": end, "response": final}))
    return _sse(*events, (None, "[DONE]"))


def test_responses_text_only_in_the_done_event() -> None:
    _agree("openai-responses", _responses([], "Hello", "response.completed"), True, text="Hello")


def test_responses_done_sentinel_without_response_completed_is_not_completed() -> None:
    mine = _agree("openai-responses", _responses(["Hel", "lo"], "Hello", None), False)
    assert all(v.why.startswith("truncated") and "response.completed" in v.why for v in mine)


def test_gemini_raw_multiline_json_error_is_the_server_error() -> None:
    chunk = {"candidates": [{"index": 0, "content": {"role": "model", "parts": [{"text": "Hi"}]}}]}
    error = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    body = _sse((None, chunk)) + json.dumps(error, indent=2).encode() + b"\n"
    mine, theirs = _read("gemini", body)
    assert not theirs.completed, theirs
    assert "503" in theirs.why, theirs
    for verdict in mine:
        assert not verdict.completed, verdict
        assert verdict.why.startswith("server"), verdict
        assert "The model is overloaded" in verdict.why, verdict


def test_llama_cpp_legacy_function_call_beside_tool_calls_counts_once() -> None:
    pieces = ['{"city"', ':"Paris"}']
    start = {
        "tool_calls": [
            {"index": 0, "id": "c", "type": "function", "function": {"name": "w", "arguments": ""}}
        ]
    }
    chunks = [_chat(start)] + [
        _chat(
            {
                "tool_calls": [{"index": 0, "function": {"arguments": p}}],
                "function_call": {"arguments": p},
            }
        )
        for p in pieces
    ]
    body = _sse(*((None, c) for c in chunks), (None, _chat({}, "tool_calls")), (None, "[DONE]"))
    _agree("openai", body, True, tool='{"city":"Paris"}')


@pytest.mark.parametrize("n", [1, 3])
def test_bare_done_without_finish_reason_follows_the_client(n: int) -> None:
    """llama.cpp ends a running answer with a bare [DONE] and no finish_reason when another
    request arrives: the openai client reads it as a whole answer, and so does the plugin
    (docs/protocols.md says why it does not guess from the missing finish_reason)."""
    words = ["The", " answer", " is"][:n]
    body = _sse(*((None, _chat({"content": w})) for w in words), (None, "[DONE]"))
    _agree("openai", body, True, text="".join(words))


def _reasons(protocol: str, body: bytes) -> tuple[list[str | None], str | None]:
    mine, theirs = _read(protocol, body)
    return [verdict.reason for verdict in mine], theirs.reason


def test_the_end_reason_in_an_otherwise_empty_chunk_is_the_clients() -> None:
    """llama.cpp's server, transformers serve and the OpenAI API send the finish_reason in a
    chunk with an empty delta, after the last token: the trace's end_reason is read from it, as
    the openai client's last chunk says it."""
    body = _sse(
        (None, _chat({"role": "assistant", "content": ""})),
        (None, _chat({"content": "Hi"})),
        (None, _chat({}, "length")),
        (None, {"object": "chat.completion.chunk", "choices": [], "usage": {"total_tokens": 3}}),
        (None, "[DONE]"),
    )
    assert _reasons("openai", body) == (["length", "length"], "length")


@pytest.mark.parametrize(
    ("protocol", "body", "reason"),
    [
        (
            "anthropic",
            _sse(
                ("message_start", {"type": "message_start", "message": _MESSAGE}),
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                ),
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": "Hi"},
                    },
                ),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                (
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                        "usage": {"output_tokens": 1},
                    },
                ),
                ("message_stop", {"type": "message_stop"}),
            ),
            "max_tokens",
        ),
        (
            "gemini",
            _sse(
                (
                    None,
                    {
                        "candidates": [
                            {"index": 0, "content": {"role": "model", "parts": [{"text": "Hi"}]}}
                        ]
                    },
                ),
                (
                    None,
                    {
                        "candidates": [
                            {
                                "index": 0,
                                "content": {"role": "model", "parts": []},
                                "finishReason": "MAX_TOKENS",
                            }
                        ]
                    },
                ),
            ),
            "MAX_TOKENS",
        ),
        (
            "ollama",
            b'{"model":"m","created_at":"2026-01-01T00:00:00Z","message":{"role":"assistant",'
            b'"content":"Hi"},"done":false}\n'
            b'{"model":"m","created_at":"2026-01-01T00:00:00Z","message":{"role":"assistant",'
            b'"content":""},"done":true,"done_reason":"length"}\n',
            "length",
        ),
    ],
)
def test_each_protocols_end_reason_is_the_clients(protocol: str, body: bytes, reason: str) -> None:
    assert _reasons(protocol, body) == ([reason, reason], reason)
