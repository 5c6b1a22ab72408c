"""The reader (the fallback where no client judges) on the general classes the clients read:
a content type with parameters or sent twice, content sent as a list of parts (Mistral's content
chunks, thinking parts among them), output that is not text (an image part, OpenRouter's
``images``, a tool call without arguments, a refusal, an audio transcript), and reasoning a
vendor sends in two fields at once. Each stream is read by the plugin's recorder (sans-IO) and
replayed into the official clients (the product's judges: ``openai``, and ``mistralai`` for
content chunks), which must conclude the same: completed, and the text of every kind."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_streamguard.judge import JUDGES, judge_trace
from pytest_streamguard.stream.client import StreamRecorder, StreamRequest
from pytest_streamguard.stream.trace import StreamTrace

URL = "http://127.0.0.1:1/v1/chat/completions"
KINDS = ("text", "reasoning", "tool", "refusal")


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + json.dumps(body).encode() + b"\n\n"


END = chunk({}, "stop") + b"data: [DONE]\n\n"


CASES: dict[str, tuple[list[str], list[bytes]]] = {
    "parameterised content type": (
        ["text/event-stream; charset=utf-8"],
        [chunk({"content": "hi"})],
    ),
    "content type sent twice": (
        ["text/event-stream", "text/event-stream"],
        [chunk({"content": "hi"})],
    ),
    "content as a list of parts": (
        ["text/event-stream"],
        [chunk({"content": [{"type": "text", "text": "hi"}, {"type": "text", "text": " you"}]})],
    ),
    "thinking parts": (
        ["text/event-stream"],
        [
            chunk(
                {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]}]}
            ),
            chunk({"content": "hi"}),
        ],
    ),
    "an image part only": (
        ["text/event-stream"],
        [
            chunk(
                {
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}
                    ]
                }
            )
        ],
    ),
    "images only": (
        ["text/event-stream"],
        [chunk({"images": [{"type": "image_url", "image_url": {"url": "data:,"}}]})],
    ),
    "a tool call without arguments only": (
        ["text/event-stream"],
        [
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c",
                            "type": "function",
                            "function": {"name": "f", "arguments": ""},
                        }
                    ]
                }
            )
        ],
    ),
    "a refusal only": (["text/event-stream"], [chunk({"refusal": "no"})]),
    "reasoning in two fields": (
        ["text/event-stream"],
        [chunk({"reasoning_content": "hm", "reasoning": "hm"}), chunk({"content": "hi"})],
    ),
}


def read(types: list[str], body: list[bytes]) -> StreamTrace:
    recorder = StreamRecorder(StreamRequest("POST", URL, {}, format="openai"), "case")
    recorder.start()
    joined = ", ".join(types)
    recorder.response(200, joined, None, [("content-type", value) for value in types])
    for stamp, data in enumerate([*body, END], start=1000):
        recorder.feed(data, stamp)
    recorder.eof()
    recorder.finish()
    return recorder.trace


@pytest.mark.parametrize("name", CASES)
def test_the_reader_concludes_what_the_openai_client_does(name: str) -> None:
    trace = read(*CASES[name])
    assert trace.recorded is not None
    trace.recorded.format = "openai"
    client = JUDGES["openai"].judge(trace.recorded)
    assert client.completed, client.error
    assert trace.completed, trace.error
    parts = {kind: trace.text_of(kind) for kind in client.parts}
    assert parts == client.parts


@pytest.mark.parametrize("name", ["content as a list of parts", "thinking parts"])
def test_content_parts_are_read_as_mistralai_reads_them(name: str) -> None:
    trace = read(*CASES[name])
    assert trace.recorded is not None
    client = JUDGES["mistralai"].judge(trace.recorded)
    assert client.completed, client.error
    assert {kind: trace.text_of(kind) for kind in client.parts} == client.parts
    assert trace.text_of("reasoning") == ("hm" if name == "thinking parts" else "")


def test_bytes_the_openai_client_cannot_decode_fail_when_it_judges() -> None:
    # docs/protocols.md, the reader alone's row invalid-utf8: the reader replaces them (as
    # httpx's line iterator does), the openai client raises, and judged its failure stands.
    bad = chunk({"content": "hi"}).replace(b'"hi"', b'"h\xffi"')
    trace = read(["text/event-stream"], [bad])
    assert trace.completed, trace.error
    assert trace.text == "h\ufffdi"
    judge_trace(trace, "openai")
    assert (trace.completed, trace.error_kind, trace.reader_agrees) == (False, "client", False)
    assert trace.error is not None
    assert "UnicodeDecodeError" in trace.error


# Classes typedgen.py found (events from the SDKs' typed models; docs/protocols.md).


def test_tool_call_arguments_sent_as_an_object_are_no_text_for_reader_and_judge() -> None:
    # mistralai's typed FunctionCall allows arguments as an object; the openai client yields it
    # as sent. Neither the reader nor the judge counts it as text (the judge crashed joining it).
    call = {"index": 0, "id": "c", "type": "function"}
    call["function"] = {"name": "f", "arguments": {"city": "Paris"}}
    trace = read(["text/event-stream"], [chunk({"tool_calls": [call]})])
    assert trace.recorded is not None
    client = JUDGES["openai"].judge(trace.recorded)
    assert (client.completed, client.calls, client.text_of("tool")) == (True, 1, "")
    assert (trace.completed, trace.text_of("tool")) == (True, "")


def test_tgi_generated_text_is_not_compared_with_the_tokens() -> None:
    # huggingface_hub yields every event and never compares generated_text with the tokens it
    # yielded (a server may send the prompt in it: return_full_text); neither does the judge.
    def event(text: str, special: bool, generated: str | None) -> bytes:
        token = {"id": 1, "text": text, "logprob": 0.0, "special": special}
        body = {"index": 1, "token": token, "generated_text": generated, "details": None}
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    recorder = StreamRecorder(StreamRequest("POST", "http://127.0.0.1:1/", {}, format="tgi"), "t")
    recorder.start()
    recorder.response(200, "text/event-stream")
    recorder.feed(event("Hi", False, None), 1000)
    recorder.feed(event("</s>", True, "prompt Hi"), 2000)
    recorder.eof()
    recorder.finish()
    trace = recorder.trace
    assert (trace.completed, trace.text) == (True, "Hi"), trace.error
    assert trace.recorded is not None
    client = JUDGES["huggingface_hub"].judge(trace.recorded)
    assert (client.completed, client.text_of("text")) == (True, "Hi"), client.error


def _sse(*events: tuple[str | None, dict[str, Any]]) -> bytes:
    out = b""
    for name, data in events:
        head = f"event: {name}\n".encode() if name else b""
        out += head + b"data: " + json.dumps(data).encode() + b"\n\n"
    return out


def _read_as(fmt: str, path: str, body: bytes) -> StreamTrace:
    request = StreamRequest("POST", f"http://127.0.0.1:1{path}", {}, format=fmt)
    recorder = StreamRecorder(request, fmt)
    recorder.start()
    recorder.response(200, "text/event-stream")
    recorder.feed(body, 1000)
    recorder.eof()
    recorder.finish()
    return recorder.trace


_RESPONSE = {"id": "r", "object": "response", "output": []}
_PART_IDS = {"item_id": "i", "output_index": 0, "sequence_number": 1}

TYPED_CASES: dict[str, tuple[str, str, str, bytes]] = {
    # (format, path, judge, body)
    "legacy function_call only": (
        "openai",
        "/v1/chat/completions",
        "openai",
        chunk({"function_call": {"name": "f", "arguments": '{"a":1}'}}) + END,
    ),
    "custom tool call input": (
        "openai-responses",
        "/v1/responses",
        "openai",
        _sse(
            ("response.created", {"type": "response.created", "response": _RESPONSE}),
            (
                "response.custom_tool_call_input.delta",
                {"type": "response.custom_tool_call_input.delta", "delta": "x", **_PART_IDS},
            ),
            ("response.completed", {"type": "response.completed", "response": _RESPONSE}),
        ),
    ),
    "a call item other than function_call": (
        "openai-responses",
        "/v1/responses",
        "openai",
        _sse(
            ("response.created", {"type": "response.created", "response": _RESPONSE}),
            (
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "sequence_number": 1,
                    "item": {"id": "w", "type": "web_search_call", "status": "completed"},
                },
            ),
            (
                "response.completed",
                {"type": "response.completed", "response": {**_RESPONSE, "status": "completed"}},
            ),
        ),
    ),
    "a server tool's call only": (
        "anthropic",
        "/v1/messages",
        "anthropic",
        _sse(
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "m",
                        "type": "message",
                        "role": "assistant",
                        "model": "m",
                        "content": [],
                        "usage": {"input_tokens": 1, "output_tokens": 1},
                    },
                },
            ),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {
                        "type": "server_tool_use",
                        "id": "s",
                        "name": "web_search",
                        "input": {},
                    },
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_stop", {"type": "message_stop"}),
        ),
    ),
    "a part with text and a function call": (
        "gemini",
        "/v1beta/models/g:streamGenerateContent",
        "google-genai",
        _sse(
            (
                None,
                {
                    "candidates": [
                        {
                            "content": {
                                "role": "model",
                                "parts": [{"text": "hi", "functionCall": {"name": "f"}}],
                            },
                            "finishReason": "STOP",
                        }
                    ]
                },
            )
        ),
    ),
    "an unspecified finish reason beside a blocked prompt": (
        "gemini",
        "/v1beta/models/g:streamGenerateContent",
        "google-genai",
        _sse(
            (
                None,
                {"candidates": [{"content": {"parts": [{"text": "a"}]}, "finishReason": "OTHER"}]},
            ),
            (
                None,
                {
                    "candidates": [{"finishReason": "FINISH_REASON_UNSPECIFIED"}],
                    "promptFeedback": {"blockReason": "SAFETY"},
                },
            ),
        ),
    ),
}


@pytest.mark.parametrize("name", TYPED_CASES)
def test_the_reader_concludes_what_the_judge_does_on_typed_model_shapes(name: str) -> None:
    # Shapes the SDKs' own typed models allow (typedgen.py found each): the reader and the
    # official client judging the same bytes conclude the same: completed, text of every kind,
    # whether a tool call or other output came, and the end reason.
    fmt, path, judge, body = TYPED_CASES[name]
    trace = _read_as(fmt, path, body)
    assert trace.recorded is not None
    client = JUDGES[judge].judge(trace.recorded)
    assert client.completed, client.error
    assert trace.completed, trace.error
    assert {kind: trace.text_of(kind) for kind in KINDS} == {
        kind: client.text_of(kind) for kind in KINDS
    }
    assert trace.end_reason == client.end_reason


def test_a_gemini_continuation_token_does_not_make_the_judge_read_the_replay_twice() -> None:
    # google-genai resumes an answer whose candidate carries a continuationToken (and no final
    # finishReason) with a follow-up request; the replay of one recorded response answered it
    # with the same bytes, and the judge concluded the text twice.
    candidate = {
        "content": {"role": "model", "parts": [{"text": "a"}]},
        "continuationToken": "MQ==",
    }
    trace = _read_as(
        "gemini",
        "/v1beta/models/g:streamGenerateContent",
        _sse((None, {"candidates": [candidate]})),
    )
    assert trace.recorded is not None
    client = JUDGES["google-genai"].judge(trace.recorded)
    assert client.text_of("text") == trace.text == "a", client.error
