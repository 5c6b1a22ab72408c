"""The streaming client against the example app on real uvicorn (no proxy): stamps, formats,
failures recorded rather than raised, and per-read limits that stop a silent stream."""

from __future__ import annotations

import statistics

import pytest

from pytest_streamguard.stream.client import StreamRecorder, aread_stream, read_stream
from pytest_streamguard.stream.request import ReadLimits, StreamRequest
from pytest_streamguard.stream.trace import StreamTrace


def run(
    app_url: str,
    path: str,
    body: dict[str, object],
    fmt: str = "sse",
    limits: ReadLimits | None = None,
) -> StreamTrace:
    request = StreamRequest(
        "POST", app_url + path, json_body=body, format=fmt, limits=limits or ReadLimits()
    )
    return read_stream(StreamRecorder(request, "stream 1"))


def test_sse_stream_is_stamped_per_event(app_url: str) -> None:
    trace = run(app_url, "/generate", {"max_new_tokens": 5, "interval_s": 0.05})
    assert trace.completed, trace.error
    assert trace.status_code == 200
    assert [c.text for c in trace.chunks] == [f"tok{i} " for i in range(5)]
    assert trace.chunks[2].data == {"index": 2, "text": "tok2 "}
    stamps = [c.stamp_ns for c in trace.chunks]
    assert stamps == sorted(stamps)
    assert all(c.first_byte_ns <= c.stamp_ns for c in trace.chunks)
    # Paced 50 ms apart by the app, so stamped at each event's arrival the stream spans 0.2 s
    # (1 ms for the app's timer) and a typical gap is 50 ms, where stamps taken per read of a
    # burst would be ~0 apart. The median, not each gap: on a busy machine one late event
    # shortens the gap after it by as much.
    assert stamps[-1] - stamps[0] >= (4 * 0.05 - 0.001) * 1e9, trace.gaps
    assert statistics.median(trace.gaps) > 0.05 / 2, trace.gaps
    assert trace.ttft is not None
    assert trace.ttft < 1.0
    assert trace.end_ns is not None
    assert trace.end_ns >= stamps[-1]


def test_heartbeats_are_not_tokens(app_url: str) -> None:
    trace = run(
        app_url, "/generate", {"max_new_tokens": 2, "first_token_s": 0.3, "heartbeat_s": 0.05}
    )
    assert trace.completed
    assert len(trace.chunks) == 2
    assert trace.heartbeats >= 3
    # TTFT counts from the request to the first data event, not to the first heartbeat.
    assert trace.ttft is not None
    assert trace.ttft >= 0.29


def test_openai_format_skips_role_only_delta(app_url: str) -> None:
    trace = run(
        app_url,
        "/v1/chat/completions",
        {"max_new_tokens": 3, "interval_s": 0.01, "stream": True},
        fmt="openai",
    )
    assert trace.completed
    assert trace.text == "tok0 tok1 tok2 "
    assert len(trace.chunks) == 3


def test_ndjson_format(app_url: str) -> None:
    trace = run(app_url, "/ndjson", {"max_new_tokens": 4, "interval_s": 0.01}, fmt="ndjson")
    assert trace.completed
    assert [c.data["index"] for c in trace.chunks] == [0, 1, 2, 3]


def test_raw_format_records_every_read(app_url: str) -> None:
    trace = run(app_url, "/generate", {"max_new_tokens": 3, "interval_s": 0.05}, fmt="raw")
    assert trace.completed
    assert len(trace.chunks) == len(trace.reads) >= 3
    assert "tok2" in trace.text


def test_server_error_event_is_recorded(app_url: str) -> None:
    trace = run(app_url, "/generate", {"max_new_tokens": 5, "interval_s": 0.01, "fail_after": 2})
    assert not trace.completed
    assert trace.error_kind == "server"
    assert "generation failed after 2 tokens" in (trace.error or "")
    assert len(trace.chunks) == 2


def test_http_error_is_recorded(app_url: str) -> None:
    trace = run(app_url, "/generate", {"max_new_tokens": -1})
    assert trace.status_code == 400
    assert trace.error_kind == "http"
    assert "HTTP 400" in (trace.error or "")
    assert "must be >= 0" in (trace.error or "")


def test_connection_refused_is_recorded() -> None:
    trace = run("http://127.0.0.1:9", "/generate", {})
    assert trace.error_kind == "connect"
    assert not trace.completed


def test_silent_stream_is_abandoned_at_the_read_limit(app_url: str) -> None:
    trace = run(
        app_url,
        "/generate",
        {"max_new_tokens": 3, "interval_s": 5},
        limits=ReadLimits(first=2, gap=0.3),
    )
    assert trace.error_kind == "timeout"
    assert len(trace.chunks) == 1
    assert trace.total is not None
    assert trace.total < 3


def test_heartbeats_do_not_keep_a_stalled_stream_alive(app_url: str) -> None:
    body = {"max_new_tokens": 3, "interval_s": 5, "heartbeat_s": 0.05}
    trace = run(app_url, "/generate", body, limits=ReadLimits(first=2, gap=0.4))
    assert trace.error_kind == "timeout"
    assert "no token for" in (trace.error or "")
    assert trace.total is not None
    assert trace.total < 3


def test_bad_format_is_rejected() -> None:
    with pytest.raises(
        ValueError,
        match=(
            r"expected auto \(the default\), one of sse, openai, openai-responses, anthropic, "
            r"gemini, ollama, tgi, "
            r"ndjson, raw or a pytest_streamguard\.StreamFormat instance"
        ),
    ):
        StreamRequest("GET", "http://127.0.0.1:1/", format="xml")


@pytest.mark.asyncio
async def test_async_twin_records_the_same(app_url: str) -> None:
    request = StreamRequest(
        "POST", app_url + "/generate", json_body={"max_new_tokens": 4, "interval_s": 0.02}
    )
    trace = await aread_stream(StreamRecorder(request, "stream 1"))
    assert trace.completed
    assert trace.text == "tok0 tok1 tok2 tok3 "
