"""Redirects are followed as the official clients follow them: every one of them (openai,
anthropic, google-genai, ollama, huggingface_hub) builds its httpx client with
``follow_redirects=True``, so a stream behind a 301, 302, 303, 307 or 308 is read where the
redirect points (httpx's rules: 303, and 301/302 after a POST, go on as GET; 307 and 308 keep
the method and the body). The plugin's reader and the ``openai`` client, both against the replay
app (real uvicorn) on the same redirected route, must conclude the same."""

from __future__ import annotations

import pytest

from pytest_streamguard.judge import judge_trace
from pytest_streamguard.stream.client import StreamRecorder, StreamRequest, read_stream

CODES = (301, 302, 303, 307, 308)


def client_text(base_url: str) -> str:
    """What the openai client assembles from the chat stream under ``base_url`` (the SDK is
    imported here, not at collection, where it costs every xdist worker a second)."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=10)
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


@pytest.mark.parametrize("code", CODES)
def test_a_redirected_stream_is_read_where_the_redirect_points(replay_url: str, code: int) -> None:
    base = f"{replay_url}/redirect/{code}/openai/chat/v1"
    expected = client_text(base)
    assert expected  # the transcript has text: the comparison below can fail
    request = StreamRequest(
        "POST", base + "/chat/completions", {"stream": True, "messages": []}, format="openai"
    )
    trace = read_stream(StreamRecorder(request, "redirected"))
    assert trace.completed, trace.error
    assert trace.status_code == 200
    assert trace.text == expected
    # The request is stamped when the first request (the redirected one) left: TTFT includes
    # the redirect, as the client waited for it.
    assert trace.ttft is not None
    assert trace.ttft > 0
    judge_trace(trace, "openai")
    assert (trace.client, trace.reader_agrees) == ("openai", True), trace.judged


def test_a_300_is_not_followed_and_is_http(replay_url: str) -> None:
    # 300 Multiple Choices is no redirect httpx follows (even with a Location): the clients
    # raise on its status, and the reader says http.
    request = StreamRequest("POST", f"{replay_url}/redirect/300/x", {}, format="openai")
    trace = read_stream(StreamRecorder(request, "multiple choices"))
    assert not trace.completed
    assert trace.error_kind == "http"
    assert trace.status_code == 300
