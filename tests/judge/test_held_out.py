"""Held-out shapes of real servers (``held_out.py``): the judge concludes what the named call
does, and never by its own code; a stream the reader alone passed passes judged too."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import httpx
import pytest
from held_out import SHAPES, Shape

from pytest_streamguard.judge import judge_for, judge_trace
from pytest_streamguard.stream.client import StreamRecorder, aread_stream
from pytest_streamguard.stream.recorded import Recorded
from pytest_streamguard.stream.request import StreamRequest
from pytest_streamguard.stream.trace import StreamTrace

URL = "http://replay.invalid"
CUT = "peer closed connection without sending complete message body"


def recorded_of(shape: Shape) -> Recorded:
    """The shape as the recorder keeps it: one read per event, stamped 1000, 1001..."""
    recorded = Recorded("POST", URL + shape.path, shape.body, shape.format)
    recorded.answered(200, [("content-type", shape.content_type)])
    for index, piece in enumerate(shape.pieces):
        recorded.keep(piece, 1000 + index)
    if shape.ending == "cut":
        recorded.broke("cut", CUT)
    return recorded


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: shape.name)
def test_the_judge_concludes_what_the_named_call_does(shape: Shape) -> None:
    judge = judge_for(shape.client, shape.format)
    assert judge is not None
    conclusion = judge.judge(recorded_of(shape))
    assert conclusion.defect is None
    assert conclusion.completed is shape.completed, conclusion
    assert conclusion.text_of("text") == shape.text
    if shape.reason is not None:
        assert conclusion.end_reason == shape.reason


class _Body(httpx.AsyncByteStream):
    def __init__(self, shape: Shape) -> None:
        self.shape = shape

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.shape.pieces:
            yield piece
        if self.shape.ending == "cut":
            raise httpx.RemoteProtocolError(CUT)


def _read(shape: Shape, client: str, format: str = "auto") -> StreamTrace:
    async def read() -> StreamTrace:
        def answer(request: httpx.Request) -> httpx.Response:
            return httpx.Response(
                200, headers={"content-type": shape.content_type}, stream=_Body(shape)
            )

        request = StreamRequest("POST", URL + shape.path, json_body=shape.body, format=format)
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
            return await aread_stream(StreamRecorder(request, "s"), http)

    trace = asyncio.run(read())
    judge_trace(trace, client)
    return trace


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: shape.name)
def test_a_stream_the_reader_alone_passed_passes_under_the_default(shape: Shape) -> None:
    reader = _read(shape, "none")
    judged = _read(shape, "auto")
    assert judged.judged is None or "defect" not in judged.judged, judged.judged
    if reader.completed:
        assert judged.completed, judged.judged
    if shape.client == "auto":
        assert judged.completed is shape.completed, (reader.error, judged.judged)


def test_what_follows_the_end_is_replayed_to_a_client_that_drains_the_body() -> None:
    (shape,) = [s for s in SHAPES if s.name == "cut-after-done-groq-drains"]
    assert _read(shape, "none").completed  # the openai client stops at [DONE]: so does the reader
    judged = _read(shape, "groq")
    assert (judged.completed, judged.error_kind) == (False, "client")
    assert judged.error is not None
    assert CUT in judged.error


@pytest.mark.parametrize(
    ("name", "content_type"),
    [("litellm-usage-choices-null", "text/plain"), ("ollama-chat-length", "application/json")],
)
def test_an_event_stream_under_a_wrong_content_type_is_the_clients_to_read(
    name: str, content_type: str
) -> None:
    (shape,) = [s for s in SHAPES if s.name == name]
    shape = dataclasses.replace(shape, content_type=content_type)
    reader = _read(shape, "none", shape.format)
    assert (reader.completed, reader.error_kind) == (False, "protocol")
    judged = _read(shape, "auto", shape.format)
    assert (judged.completed, judged.text) == (True, shape.text)
    assert judged.judged is not None
    assert judged.judged["rule"] == "content-type"  # reported, not a plugin bug
    assert f"answered {content_type}, not a stream" in (judged.judged["content_type"] or "")


def test_a_whole_json_answer_stays_not_a_stream() -> None:
    whole = (
        '{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"content":"Hi"}}]}'
    )
    shape = Shape(
        "whole", "openai", "/v1/chat/completions", [whole], False, content_type="application/json"
    )
    judged = _read(shape, "auto", "openai")
    assert (judged.completed, judged.error_kind) == (False, "protocol")
