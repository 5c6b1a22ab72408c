"""The README's first test, as a file the suite runs (against the bundled target, and in a fresh
virtual environment against a small app of a user's own: tests/install)."""

import pytest


@pytest.mark.token_deadline(ttft=1.0, chunk=0.5)
def test_stream_survives_latency(streamguard):
    streamguard.faults.latency(100)
    trace = streamguard.stream(
        "/v1/completions",
        json={"prompt": "hi", "max_tokens": 16, "stream": True},
        format="openai",
    )
    assert trace.completed, trace.error
