"""A gateway in front of a model server (docs/stacks.md): faults on the inner hop."""

import pytest

CHAT = {"messages": [{"role": "user", "content": "hi"}], "stream": True, "max_new_tokens": 8}


@pytest.mark.token_deadline(ttft=2.0, chunk=1.0)
def test_stack_streams(streamguard):
    trace = streamguard.stream("/v1/chat/completions", json=CHAT, format="openai")
    assert trace.completed, trace.error


def test_model_cut_reaches_the_client(streamguard):
    cut = streamguard.hop("model").faults.cut(after_chunks=3)
    trace = streamguard.stream("/v1/chat/completions", json=CHAT, format="openai")
    assert not trace.completed
    assert len(trace.chunks) == 3
    assert cut.hop == "model"


def test_next_test_streams_whole(streamguard):
    trace = streamguard.stream("/v1/chat/completions", json=CHAT, format="openai")
    assert trace.completed, trace.error
    assert len(trace.chunks) == 8
