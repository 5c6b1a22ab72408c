"""What a repository with a streaming endpoint writes to guard it with pytest-streamguard.

The app under test here is ``stream_app.py`` next to this file (a stand-in for yours). Run::

    pytest --streamguard --streamguard-target-cmd "python examples/stream_app.py --port {port}" \
        examples/test_example_stream.py

Without ``--streamguard`` these tests are skipped, so they can live in a normal test suite.
"""

from __future__ import annotations

import pytest

from pytest_streamguard import DeadlineViolation, StreamGuard

PROMPT = {"prompt": "Tell me a story", "max_new_tokens": 20, "interval_s": 0.02}


@pytest.mark.token_deadline(ttft=0.5, chunk=0.2)
def test_stream_meets_its_deadlines(streamguard: StreamGuard) -> None:
    trace = streamguard.stream("/generate", json=PROMPT)
    assert trace.completed
    assert len(trace.chunks) == 20


@pytest.mark.token_deadline(ttft=0.5, chunk=0.2)
def test_survives_network_latency(streamguard: StreamGuard) -> None:
    streamguard.faults.latency(150, jitter=20)
    trace = streamguard.stream("/generate", json=PROMPT)
    # Latency delays the first token; the marker still checks every gap afterwards.
    assert trace.ttft is not None
    assert trace.ttft >= 0.1


@pytest.mark.token_deadline(chunk=0.2, percentile=95)
def test_openai_endpoint_p95_gap(streamguard: StreamGuard) -> None:
    trace = streamguard.stream("/v1/completions", json={**PROMPT, "stream": True}, format="openai")
    assert trace.text.startswith("tok0 tok1")


def test_a_request_that_forgot_to_ask_for_a_stream_is_not_a_stream(
    streamguard: StreamGuard,
) -> None:
    # Without "stream": true the endpoint answers one JSON object: a 200 that is no stream.
    trace = streamguard.stream("/v1/completions", json=PROMPT, format="openai")
    assert trace.error_kind == "protocol"
    assert 'did you send "stream": true?' in (trace.error or "")


def test_a_stream_that_stops_without_its_end_is_truncated(streamguard: StreamGuard) -> None:
    trace = streamguard.stream("/generate", json={**PROMPT, "drop_end": True})
    assert len(trace.chunks) == 20
    assert not trace.completed
    assert trace.error_kind == "truncated"


def test_a_mid_stream_stall_is_caught(streamguard: StreamGuard) -> None:
    # The stall starts once the proxy holds the stream, a few ms after the 5th token; tokens
    # already on their way still arrive, so the long gap comes right after token 5 or so.
    # A real toxiproxy-server (--streamguard-toxiproxy URL) cannot stall at a chunk: there the
    # plugin skips this test, naming the embedded server it needs.
    streamguard.faults.stall(after_chunks=5, seconds=0.5)
    trace = streamguard.stream("/generate", json=PROMPT)
    with pytest.raises(
        DeadlineViolation, match=r"gap before chunk \d+ = 0\.\d+ s > chunk deadline"
    ):
        trace.assert_deadline(chunk=0.2)


def test_a_cut_connection_is_reported_not_hidden(streamguard: StreamGuard) -> None:
    streamguard.faults.cut(after_bytes=500)
    trace = streamguard.stream("/generate", json=PROMPT)
    assert not trace.completed
    assert trace.error_kind == "cut"
