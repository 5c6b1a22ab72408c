"""Framing and format readings without a network (sans-IO): WHATWG event-stream rules, JSON
lines, raw reads, and what the recorder makes of ends, errors and clean closes."""

from __future__ import annotations

import pytest

from pytest_streamguard.client import ReadLimits, StreamRecorder, StreamRequest
from pytest_streamguard.formats import Frame, Framer, NDJSONFormat, SSEFormat, resolve_format


def frames(framing: str, *reads: bytes) -> list[tuple[Frame | None, int, int, int]]:
    framer = Framer(framing)  # type: ignore[arg-type]
    out = []
    for stamp, data in enumerate(reads, start=1):
        out += [(f.frame, f.start_ns, f.stamp_ns, f.nbytes) for f in framer.feed(data, stamp)]
    out += [(f.frame, f.start_ns, f.stamp_ns, f.nbytes) for f in framer.close(99)]
    return out


def test_sse_event_split_across_reads_keeps_both_stamps() -> None:
    (event,) = frames("sse", b"event: tok\r\nda", b"ta: a\r\ndata: b\r\n", b"\r\n")
    assert event == (Frame("a\nb", "tok"), 1, 3, len(b"event: tok\r\ndata: a\r\ndata: b\r\n\r\n"))


def test_sse_comments_are_heartbeats_and_unknown_fields_are_ignored() -> None:
    got = frames("sse", b"\xef\xbb\xbf: ping\n\npad: xxx\ndata:x\nid: 7\n\n")
    assert [frame for frame, *_ in got] == [None, Frame("x")]


def test_sse_event_cut_off_by_the_end_of_the_body_is_discarded() -> None:
    assert frames("sse", b"data: [DONE]\n") == []


def test_lines_keep_a_last_line_without_newline() -> None:
    got = frames("lines", b'{"a": 1}\n\n{"b"', b": 2}")
    assert [frame for frame, *_ in got] == [Frame('{"a": 1}'), Frame('{"b": 2}')]
    assert got[1][1:3] == (1, 99)


def test_raw_decodes_a_character_split_across_reads() -> None:
    got = frames("raw", "é".encode()[:1], "é".encode()[1:] + b"!")
    assert [frame for frame, *_ in got] == [Frame("é!")]


def record(fmt: object, *reads: bytes, content_type: str = "text/event-stream") -> StreamRecorder:
    request = StreamRequest("POST", "http://127.0.0.1:1/x", format=fmt, limits=ReadLimits())  # type: ignore[arg-type]
    recorder = StreamRecorder(request, "stream 1")
    recorder.start()
    recorder.response(200, content_type)
    for data in reads:
        recorder.feed(data, recorder.trace.request_ns + 1)
    recorder.eof()
    recorder.finish()
    return recorder


def test_openai_finish_reason_then_clean_close_is_complete() -> None:
    trace = record(
        "openai",
        b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n',
        b'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n',
    ).trace
    assert (trace.completed, trace.error_kind, trace.text) == (True, None, "hi")


def test_reasoning_and_content_in_one_chunk_are_split_by_kind() -> None:
    delta = b'{"reasoning_content":"think","content":"say"}'
    trace = record(
        "openai", b'data: {"choices":[{"delta":' + delta + b"}]}\n\ndata: [DONE]\n\n"
    ).trace
    (chunk,) = trace.chunks
    assert chunk.kind == "reasoning+text"
    assert (trace.text, trace.text_of("reasoning"), chunk.text) == ("say", "think", "thinksay")


def test_non_json_data_in_a_json_format_is_a_protocol_error() -> None:
    trace = record("openai", b"data: hello\n\n").trace
    assert trace.error_kind == "protocol"
    assert trace.error == "the openai stream sent a data event that is not JSON: 'hello'"


def test_wrong_content_type_is_a_protocol_error_before_any_frame() -> None:
    trace = record("anthropic", b"{}", content_type="application/json; charset=utf-8").trace
    assert trace.error_kind == "protocol"
    assert trace.error.startswith(
        'answered application/json, not a stream: did you send "stream": true? '
        "(the anthropic format reads text/event-stream)"
    )


def test_custom_sse_format_names_its_events() -> None:
    fmt = SSEFormat(
        "mine",
        token_events=("token",),
        end_events=("finished",),
        error_events=("failure",),
        heartbeat_events=("keepalive",),
        text=lambda data: data["t"],
    )
    ok = record(
        fmt,
        b'event: keepalive\ndata: {}\n\nevent: token\ndata: {"t": "a"}\n\n',
        b'data: {"t": "ignored"}\n\nevent: finished\ndata: {}\n\n',
    ).trace
    assert (ok.completed, ok.text, ok.heartbeats) == (True, "a", 1)
    failed = record(fmt, b'event: failure\ndata: {"error": {"message": "boom"}}\n\n').trace
    assert (failed.error_kind, failed.error) == ("server", "server sent event: failure: boom")
    cut_short = record(fmt, b'event: token\ndata: {"t": "a"}\n\n').trace
    assert cut_short.error_kind == "truncated"
    assert "without the mine stream's end (event: finished)" in (cut_short.error or "")


def test_ndjson_format_with_an_end_line() -> None:
    fmt = NDJSONFormat("lines", end=lambda obj: obj.get("last") is True)
    trace = record(fmt, b'{"text": "a"}\n{"text": "b", "last": true}\n', content_type="").trace
    assert (trace.completed, trace.text) == (True, "ab")
    assert record(fmt, b'{"text": "a"}\n', content_type="").trace.error_kind == "truncated"


def test_unknown_format_names_the_accepted_ones() -> None:
    with pytest.raises(ValueError, match=r"format='xml' is not supported: expected one of sse, "):
        resolve_format("xml")
