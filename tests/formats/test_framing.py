"""Framing and format readings without a network (sans-IO): WHATWG event-stream rules, JSON
lines, raw reads, and what the recorder makes of ends, errors and clean closes."""

from __future__ import annotations

import json

import pytest

from pytest_streamguard.formats import Frame, Framer, NDJSONFormat, SSEFormat, resolve_format
from pytest_streamguard.stream.client import StreamRecorder
from pytest_streamguard.stream.endings import EMPTY_HINT
from pytest_streamguard.stream.request import ReadLimits, StreamRequest


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


def record(
    fmt: object,
    *reads: bytes,
    content_type: str = "text/event-stream",
    allow_empty: bool = False,
) -> StreamRecorder:
    request = StreamRequest(
        "POST",
        "http://127.0.0.1:1/x",
        format=fmt,  # type: ignore[arg-type]
        limits=ReadLimits(),
        allow_empty=allow_empty,
    )
    recorder = StreamRecorder(request, "stream 1")
    recorder.start()
    recorder.response(200, content_type)
    if recorder.stopped:
        recorder.add_body(b"".join(reads))
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
    with pytest.raises(
        ValueError,
        match=r"format='xml' is not supported: expected auto \(the default\), one of sse, ",
    ):
        resolve_format("xml")


# WHATWG: a line ends with CRLF, LF or a lone CR, wherever the network splits the bytes.


def test_sse_lone_cr_ends_lines() -> None:
    got = frames("sse", b"event: tok\rdata: a\rdata: b\r\rdata: c\r\r")
    assert [frame for frame, *_ in got] == [Frame("a\nb", "tok"), Frame("c")]


def test_sse_crlf_split_across_reads_is_one_line_end() -> None:
    # Were the LF read as a second line end, it would be a blank line dispatching "a" alone.
    got = frames("sse", b"data: a\r", b"\ndata: b\r\n\r\n")
    assert [frame for frame, *_ in got] == [Frame("a\nb")]
    assert got[0][1:3] == (1, 2)


def test_sse_lone_cr_at_the_end_of_a_read_ends_its_line_at_once() -> None:
    framer = Framer("sse")
    assert framer.feed(b"data: a\r", 1) == []
    (event,) = framer.feed(b"\r", 2)
    assert (event.frame, event.stamp_ns) == (Frame("a"), 2)


def chat(content: str | None = None, *, index: int = 0, finish: str | None = None) -> bytes:
    delta = {"role": "assistant"} if content is None else {"content": content}
    choice = {"index": index, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({"object": "chat.completion.chunk", "choices": [choice]}).encode()


def test_openai_stream_with_lone_cr_line_ends_reads_every_token() -> None:
    body = b"\r\r".join([chat(), *(chat(f"t{i}") for i in range(7)), b"data: [DONE]"]) + b"\r\r"
    # One byte per read: every CR lands at the end of a read.
    trace = record("openai", *(body[i : i + 1] for i in range(len(body)))).trace
    assert (trace.completed, len(trace.chunks), trace.text) == (True, 7, "t0t1t2t3t4t5t6")


# Several answers: the end is a finish on every choice (candidate) that appeared, or [DONE].


def test_openai_two_choices_one_unfinished_then_clean_close_is_truncated() -> None:
    trace = record(
        "openai",
        chat("a", index=0) + b"\n\n" + chat("b", index=1) + b"\n\n",
        chat(index=0, finish="stop") + b"\n\n" + chat("c", index=1) + b"\n\n",
    ).trace
    assert (trace.completed, trace.error_kind, len(trace.chunks)) == (False, "truncated", 3)
    assert "a finish_reason on every choice" in (trace.error or "")


def test_openai_two_choices_both_finished_or_done_complete() -> None:
    both = chat("a", index=0) + b"\n\n" + chat("b", index=1) + b"\n\n"
    finished = chat(index=0, finish="stop") + b"\n\n" + chat(index=1, finish="length") + b"\n\n"
    assert record("openai", both, finished).trace.completed
    assert record(
        "openai", both, chat(index=0, finish="stop") + b"\n\ndata: [DONE]\n\n"
    ).trace.completed


def gemini(*candidates: tuple[int, str, str | None]) -> bytes:
    out = []
    for index, text, finish in candidates:
        candidate = {"index": index, "content": {"parts": [{"text": text}], "role": "model"}}
        if finish:
            candidate["finishReason"] = finish
        out.append(candidate)
    return b"data: " + json.dumps({"candidates": out}).encode() + b"\r\n\r\n"


def test_gemini_two_candidates_one_unfinished_is_not_completed() -> None:
    trace = record("gemini", gemini((0, "A", None), (1, "B", None)), gemini((0, ".", "STOP"))).trace
    assert (trace.completed, trace.error_kind) == (False, "truncated")
    done = record(
        "gemini", gemini((0, "A", None), (1, "B", None)), gemini((0, ".", "STOP"), (1, "!", "STOP"))
    )
    assert done.trace.completed


# Named events carrying a format's JSON are read as its SDK reads them.


def test_openai_chat_chunks_under_a_named_event_are_tokens() -> None:
    body = b"".join(b"event: completion\n" + chat(f"w{i}") + b"\n\n" for i in range(5))
    trace = record("openai", body + b"event: completion\ndata: [DONE]\n\n").trace
    assert (trace.completed, len(trace.chunks)) == (True, 5)
    assert (
        record(
            "openai",
            b"event: thread.run.created\ndata: {}\n\n" + chat("x") + b"\n\ndata: [DONE]\n\n",
        ).trace.text
        == "x"
    )


# empty: the protocol's end before any token.


def test_role_chunk_then_bare_done_is_empty() -> None:
    trace = record("openai", chat() + b"\n\ndata: [DONE]\n\n").trace
    assert (trace.completed, trace.error_kind) == (False, "empty")
    assert trace.error == (
        f"the openai stream ended before any token: it sent only role chunk, [DONE] ({EMPTY_HINT})"
    )


def test_bare_done_is_empty_unless_allowed() -> None:
    trace = record("openai", b"data: [DONE]\n\n").trace
    assert trace.error_kind == "empty"
    assert "it sent a bare [DONE] and nothing else" in (trace.error or "")
    allowed = record("openai", b"data: [DONE]\n\n", allow_empty=True).trace
    assert (allowed.completed, allowed.error_kind) == (True, None)


def test_usage_chunks_after_an_empty_finish_are_named() -> None:
    usage = b'data: {"object":"chat.completion.chunk","choices":[],"usage":{"total_tokens":3}}'
    trace = record(
        "openai", chat() + b"\n\n" + chat(finish="stop") + b"\n\n" + usage + b"\n\n"
    ).trace
    assert trace.error_kind == "empty"
    assert "it sent only role chunk, finish_reason chunk, usage chunk " in (trace.error or "")


def test_chat_stream_read_as_responses_is_truncated_and_says_what_it_looks_like() -> None:
    # [DONE] is not the Responses API's end (its client raises without response.completed).
    trace = record(
        "openai-responses", chat() + b"\n\n" + chat("hi") + b"\n\ndata: [DONE]\n\n"
    ).trace
    assert trace.error_kind == "truncated"
    assert 'it looks like openai (format="openai")' in (trace.error or "")


def test_clean_close_of_an_empty_ndjson_body_is_empty() -> None:
    trace = record("ndjson", content_type="application/x-ndjson").trace
    assert (trace.error_kind, trace.error) == (
        "empty",
        f"the ndjson stream ended before any token: it sent nothing ({EMPTY_HINT})",
    )


def test_allow_empty_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match=r"allow_empty='yes': expected True or False"):
        StreamRequest("POST", "http://127.0.0.1:1/x", allow_empty="yes")  # type: ignore[arg-type]


# protocol: what a body that is not a stream of the format looks like.


def test_json_body_under_event_stream_is_protocol() -> None:
    trace = record("openai", b'{"object":"chat.completion","choices":[]}').trace
    assert trace.error_kind == "protocol"
    assert trace.error == (
        "answered text/event-stream, but the body is JSON, not server-sent events; "
        'body: {"object":"chat.completion","choices":[]}'
    )


def test_stream_of_another_format_says_which() -> None:
    anthropic = b'event: message_start\ndata: {"type":"message_start"}\n\n'
    trace = record("openai", anthropic).trace
    assert trace.error_kind == "truncated"
    assert (trace.error or "").endswith('; it looks like anthropic (format="anthropic")')
    rejected = record(
        "anthropic",
        b'{"model":"m","response":"a","done":false}\n{"model":"m","response":"","done":true}\n',
        content_type="application/x-ndjson",
    ).trace
    assert rejected.error_kind == "protocol"
    assert 'it looks like ollama (format="ollama"); body: {"model"' in (rejected.error or "")
    # Events without an event: line are skipped, as the anthropic client skips them.
    unnamed = record("anthropic", chat("x") + b"\n\ndata: [DONE]\n\n").trace
    assert unnamed.error_kind == "truncated"
    assert (unnamed.error or "").endswith('it looks like openai (format="openai")')


def test_html_without_a_content_type_is_protocol() -> None:
    trace = record("auto", b"  <!doctype html><title>502</title>", content_type="").trace
    assert (trace.error_kind, trace.format) == ("protocol", "auto")
    assert trace.error == (
        "answered no content type, but the body is an HTML page, not a stream; "
        "body: <!doctype html><title>502</title>"
    )


# format="auto": recognised from the content type and the first frames.

AUTO_CASES = [
    ("openai", "text/event-stream", chat() + b"\n\n" + chat("a") + b"\n\ndata: [DONE]\n\n"),
    (
        "openai-responses",
        "text/event-stream",
        b"event: response.output_text.delta\n"
        b'data: {"type":"response.output_text.delta","delta":"a"}'
        b'\n\nevent: response.completed\ndata: {"type":"response.completed"}\n\n',
    ),
    (
        "anthropic",
        "text/event-stream",
        b'event: message_start\ndata: {"type":"message_start"}\n\nevent: content_block_delta\n'
        b'data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"a"}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ),
    ("gemini", "text/event-stream", gemini((0, "a", "STOP"))),
    # A first event that is an empty object (every field of the typed response unset): the
    # next one decides.
    ("gemini", "text/event-stream", b"data: {}\n\n" + gemini((0, "a", "STOP"))),
    ("ollama", "", b'{}\n{"model":"m","response":"a","done":false}\n{"model":"m","done":true}\n'),
    # A first event with no candidate yet (usage only), as google-genai's typed response allows.
    (
        "gemini",
        "text/event-stream",
        b'data: {"usageMetadata":{"promptTokenCount":1},"responseId":"r"}\n\n'
        + gemini((0, "a", "STOP")),
    ),
    (
        "ollama",
        "application/x-ndjson",
        b'{"model":"m","response":"a","done":false}\n{"model":"m","response":"","done":true}\n',
    ),
    (
        "tgi",
        "text/event-stream",
        b'data:{"token":{"text":"a","special":false},"generated_text":null}\n\n'
        b'data:{"token":{"text":"</s>","special":true},"generated_text":"a"}\n\n',
    ),
    ("ndjson", "application/x-ndjson", b'{"text":"a"}\n'),
    ("sse", "text/event-stream", b': hi\n\ndata: {"text":"a"}\n\nevent: done\ndata: {}\n\n'),
    ("ollama", "", b'{"model":"m","response":"a","done":false}\n{"model":"m","done":true}\n'),
    ("openai", "", chat("a") + b"\n\ndata: [DONE]\n\n"),
    ("raw", "text/plain", b"a"),
]


@pytest.mark.parametrize(("expected", "content_type", "body"), AUTO_CASES)
def test_auto_recognises_the_format(expected: str, content_type: str, body: bytes) -> None:
    # One byte per read: the format must be recognised whatever the network's splits.
    trace = record(
        "auto", *(body[i : i + 1] for i in range(len(body))), content_type=content_type
    ).trace
    assert (trace.format, trace.format_auto, trace.completed, trace.text) == (
        expected,
        True,
        True,
        "a",
    )


def test_explicit_format_is_recorded_as_not_auto() -> None:
    trace = record("openai", chat("a") + b"\n\ndata: [DONE]\n\n").trace
    assert (trace.format, trace.format_auto) == ("openai", False)


def test_auto_refuses_a_json_answer() -> None:
    trace = record("auto", b'{"choices":[]}', content_type="application/json").trace
    assert trace.error_kind == "protocol"
    assert trace.error.startswith(
        'answered application/json, not a stream: did you send "stream": true? '
        '(format="auto" reads event streams, JSON lines or text); body: {"choices":[]}'
    )


def test_auto_with_nothing_to_recognise_is_truncated() -> None:
    trace = record("auto", b": ping\n\n").trace
    assert (trace.error_kind, trace.format) == ("truncated", "auto")
    assert "after only 1 heartbeat: nothing to recognise the stream's format by" in (
        trace.error or ""
    )


def test_format_auto_round_trips_through_the_report_form() -> None:
    trace = record("auto", chat("a") + b"\n\ndata: [DONE]\n\n").trace
    again = type(trace).from_dict(trace.to_dict())
    assert (again.format, again.format_auto) == ("openai", True)
