"""The README's first example, as a file the suite runs against the bundled target."""

import pytest


@pytest.mark.token_deadline(ttft=0.5, chunk=0.2)
def test_stream_survives_latency(streamguard):
    streamguard.faults.latency(100)
    trace = streamguard.stream("/generate", json={"prompt": "hi", "max_new_tokens": 32})
    assert trace.completed
