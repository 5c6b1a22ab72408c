"""The OpenAI-compatible vendors' own clients as judges (``mistralai``, ``groq``): picked by
name only, and each concludes on a chat stream what its client does: the text, tool calls and
end reason of a whole stream, the exception of a cut one and of an error event."""

from __future__ import annotations

import json

import pytest

from pytest_streamguard.judge import AUTO, JUDGES, check_client, judge_for
from pytest_streamguard.stream.recorded import Recorded

VENDORS = ("mistralai", "groq")


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()


WHOLE = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"content": "hel"}),
    _chunk(
        {
            "content": "lo",
            "tool_calls": [
                {
                    "index": 0,
                    "id": "t",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"a":1}'},
                }
            ],
        }
    ),
    _chunk({}, "tool_calls") + b"data: [DONE]\n\n",
]


def _recorded(reads: list[bytes], ending: str = "close") -> Recorded:
    recorded = Recorded("POST", "http://h/v1/chat/completions", {"stream": True}, "openai")
    recorded.answered(200, [("content-type", "text/event-stream")])
    for index, data in enumerate(reads):
        recorded.keep(data, 1000 + index)
    recorded.broke(ending, "the connection broke")
    return recorded


@pytest.mark.parametrize("name", VENDORS)
def test_a_vendor_client_is_picked_by_name_only(name: str) -> None:
    assert check_client(name) == name
    assert judge_for(name, "openai") is JUDGES[name]
    assert judge_for(name, "anthropic") is None
    judge = judge_for(AUTO, "openai")
    assert judge is not None
    assert judge.name == "openai"


@pytest.mark.parametrize("name", VENDORS)
def test_a_whole_stream_is_what_the_client_assembles(name: str) -> None:
    conclusion = JUDGES[name].judge(_recorded(WHOLE))
    assert conclusion.completed, conclusion.error
    assert (conclusion.client, conclusion.text_of("text")) == (name, "hello")
    assert (conclusion.calls, conclusion.text_of("tool")) == (1, '{"a":1}')
    assert conclusion.end_reason == "tool_calls"
    # Each output is stamped by the read that let the client yield it.
    assert [output.stamp_ns for output in conclusion.outputs] == [1001, 1002, 1002]


@pytest.mark.parametrize("name", VENDORS)
def test_a_cut_stream_is_the_exception_the_client_raises(name: str) -> None:
    conclusion = JUDGES[name].judge(_recorded(WHOLE[:2], "cut"))
    assert not conclusion.completed
    assert conclusion.error is not None
    assert conclusion.error.startswith("RemoteProtocolError")


@pytest.mark.parametrize("name", VENDORS)
def test_an_error_event_fails_the_stream(name: str) -> None:
    error = b'data: {"error": {"message": "boom", "type": "server_error"}}\n\n'
    conclusion = JUDGES[name].judge(_recorded([*WHOLE[:2], error]))
    assert not conclusion.completed
    assert conclusion.error is not None
    # One line, whatever the client's message (pydantic's validation errors run to several).
    assert "\n" not in conclusion.describe()
