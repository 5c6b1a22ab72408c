"""A body held open after the protocol's end, in every protocol whose client reads on to the
body's end (Anthropic's ``message_stop``, Ollama's ``done: true``, TGI's final event): the
reader reads on until the body ends and ``held_open_s`` is the real time it stayed open; a body
that ends at once costs no wait and is not held open. The transcripts are served by the replay
app (real uvicorn), ``?hold=S`` keeping the body open S seconds after its last byte. (The
``openai`` format, and a body still open at the read limit: tests/stream/test_client_body_end.py.)
"""

from __future__ import annotations

import time

import pytest

from pytest_streamguard.stream.client import StreamRecorder, StreamRequest, read_stream


@pytest.mark.parametrize(
    ("fmt", "name"), [("anthropic", "normal"), ("ollama", "generate"), ("tgi", "normal")]
)
def test_held_open_is_measured_after_every_protocols_end(
    replay_url: str, fmt: str, name: str
) -> None:
    # Each of these clients reads on after its protocol's end (message_stop, done: true, the
    # final event) to the body's end: the body held open 1.5 s is measured for what it was.
    url = f"{replay_url}/{fmt}/{name}/x?hold=1.5"
    trace = read_stream(StreamRecorder(StreamRequest("POST", url, {}, format=fmt), "held"))
    assert trace.completed, trace.error
    assert trace.held_open_s is not None
    assert 1.5 - 0.05 <= trace.held_open_s < 1.5 + 3.0, trace.held_open_s
    started = time.perf_counter()
    quick = read_stream(
        StreamRecorder(StreamRequest("POST", url.replace("1.5", "0"), {}, format=fmt), "quick")
    )
    assert quick.completed, quick.error
    assert quick.held_open_s is None
    # No wait for a body that ends with its stream (the transcript's own 0.2 s pause aside;
    # generous for a busy machine).
    assert time.perf_counter() - started < 1.2
