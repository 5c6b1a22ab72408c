"""After the protocol's end, the body must end too. The official clients read on to the end of
the body (the ``openai`` client too after a ``finish_reason`` without ``[DONE]``; at ``[DONE]`` it
stops), so a body held open makes them wait until their own timeout, and a connection cut before
the body's end (an incomplete chunked body) makes them raise. The plugin's verdict is theirs: the
example app, read by the plugin and by the ``openai`` client on the same route."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pytest_streamguard.judge import judge_trace
from pytest_streamguard.stream.client import StreamRecorder, StreamRequest, read_stream
from pytest_streamguard.stream.request import ReadLimits
from pytest_streamguard.stream.trace import StreamTrace
from pytest_streamguard.stream.transport import _Connection
from pytest_streamguard.verdict.deadlines import Deadline, check_trace

BODY: dict[str, Any] = {"max_new_tokens": 5, "interval_s": 0.01, "stream": True}


def plugin_reads(app_url: str, read_timeout: float = 30.0, **knobs: Any) -> StreamTrace:
    request = StreamRequest(
        "POST",
        app_url + "/v1/completions",
        {**BODY, **knobs},
        format="openai",
        limits=ReadLimits(first=read_timeout, gap=read_timeout),
    )
    return read_stream(StreamRecorder(request, "stream"))


def sdk_reads(app_url: str, timeout: float, **knobs: Any) -> str:
    """The text the openai client assembles, to the end of its stream (the SDK is imported
    here, not at collection, where it costs every xdist worker a second)."""
    import openai

    client = openai.OpenAI(base_url=app_url + "/v1", api_key="x", max_retries=0, timeout=timeout)
    stream = client.completions.create(
        model="x", prompt="hi", stream=True, extra_body={**BODY, **knobs}
    )
    return "".join(choice.text for chunk in stream for choice in chunk.choices)


def test_a_body_that_ends_with_its_stream_is_not_held_open(app_url: str) -> None:
    trace = plugin_reads(app_url)
    assert trace.completed, trace.error
    assert trace.held_open_s is None
    assert check_trace(trace, Deadline()) == []
    assert sdk_reads(app_url, timeout=10) == trace.text


def test_a_reader_that_comes_late_to_the_bodys_end_does_not_hold_it_open(
    app_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A busy reader (30 streams on a busy machine) came to bodies that had ended at once over
    # 1 s after their last event, and the trace said the server held them open. The end is
    # when the read that ended the body arrived, as the last event's is.
    feed, busy = StreamRecorder.feed, []

    def late(recorder: StreamRecorder, data: bytes, stamp_ns: int) -> None:
        feed(recorder, data, stamp_ns)
        if recorder.ended and not busy:
            busy.append(stamp_ns)
            time.sleep(1.2)  # the busy reader (the fault), not a synchronisation

    monkeypatch.setattr(StreamRecorder, "feed", late)
    for knobs in ({}, {"drop_done": True}):
        busy.clear()
        trace = plugin_reads(app_url, **knobs)
        assert busy, "the reader was never late"
        assert trace.completed, trace.error
        assert trace.stamps == "kernel"
        assert trace.held_open_s is None, knobs


def test_a_body_held_open_after_the_finish_is_a_violation_and_counts_in_total(
    app_url: str,
) -> None:
    # After a finish_reason without [DONE] the openai client reads on until the body ends: it
    # waits there as long as the body stays open (2 s).
    text = sdk_reads(app_url, timeout=10, drop_done=True, hold_open_s=2)
    trace = plugin_reads(app_url, drop_done=True, hold_open_s=2)
    assert trace.text == text
    assert trace.completed, trace.error
    # The real time the body stayed open, not a capped wait (tolerance: a loaded machine).
    assert trace.held_open_s is not None
    assert 2.0 - 0.05 <= trace.held_open_s < 2.0 + 3.0, trace.held_open_s
    # total runs to where the body ended, so a total deadline sees it.
    assert trace.total is not None
    assert trace.total >= trace.held_open_s
    # Named as the incident too, with its evidence.
    assert "held_open" in {finding.name for finding in trace.findings}
    (violation,) = check_trace(trace, Deadline())
    assert violation.bound == "held_open"
    assert "body held open" in violation.headline()
    assert "an SDK client that reads to the body's end waits there" in violation.headline()
    assert StreamTrace.from_dict(trace.to_dict()).held_open_s == trace.held_open_s
    # The openai client, replayed the recorded bytes, completes as well.
    judge_trace(trace, "openai")
    assert trace.reader_agrees is True, trace.judged
    assert trace.completed


def test_a_body_held_open_past_the_read_limit_is_the_clients_read_timeout(
    app_url: str,
) -> None:
    import openai

    # With a read timeout shorter than the body stays open, the openai client times out.
    with pytest.raises(openai.APITimeoutError):
        sdk_reads(app_url, timeout=1.0, drop_done=True, hold_open_s=4)
    trace = plugin_reads(app_url, read_timeout=1.0, drop_done=True, hold_open_s=4)
    assert not trace.completed
    assert trace.error_kind == "timeout"
    assert trace.error is not None
    assert "still open" in trace.error
    assert "openai stream's end" in trace.error
    assert trace.held_open_s is not None
    assert 1.0 - 0.05 <= trace.held_open_s < 1.0 + 3.0, trace.held_open_s
    # The replay ends in the read timeout too: the client's verdict is the same.
    judge_trace(trace, "openai")
    assert trace.reader_agrees is True, trace.judged
    assert trace.error_kind == "timeout"


def test_after_done_the_openai_client_stops_and_the_plugin_only_measures(app_url: str) -> None:
    # At [DONE] the openai client stops (it closes the body): neither a body held open after
    # it nor a cut after it changes what it returns, and the verdict stays completed. The
    # plugin reads on only to measure how long the body stayed open (the Node SDK and a proxy
    # that waits for the close wait there): a held_open bound, never a failed stream.
    text = sdk_reads(app_url, timeout=1.5, hold_open_s=4)
    trace = plugin_reads(app_url, hold_open_s=4)
    assert trace.completed, trace.error
    assert trace.text == text
    assert trace.held_open_s is not None
    assert 4.0 - 0.05 <= trace.held_open_s < 4.0 + 3.0, trace.held_open_s
    assert [v.bound for v in check_trace(trace, Deadline())] == ["held_open"]

    text = sdk_reads(app_url, timeout=1.5, break_after_end=True)
    trace = plugin_reads(app_url, break_after_end=True)
    assert trace.completed, trace.error
    assert trace.held_open_s is None
    assert trace.text == text
    assert check_trace(trace, Deadline()) == []


def test_a_connection_cut_after_the_finish_is_what_the_sdk_raises_on(app_url: str) -> None:
    import openai

    # The cut that removes only [DONE]: the client, reading on for it, raises.
    with pytest.raises(openai.APIConnectionError):
        sdk_reads(app_url, timeout=10, drop_done=True, break_after_end=True)
    trace = plugin_reads(app_url, drop_done=True, break_after_end=True)
    assert not trace.completed
    assert trace.error_kind == "cut"
    assert trace.error is not None
    assert "cut after the openai stream's end but before its body ended" in trace.error


def test_a_reader_whose_loop_was_held_does_not_read_as_a_buffering_hop(
    app_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CI, twice: 8 healthy streams named buffered, head and all 48 chunks in two reads at
    # 0.30 s, the last token's time. The reader's loop could not run meanwhile, and a late
    # read takes the kernel's stamp of its last segment. Its own timer, due 50 ms into the
    # silence and run only with that read, says so.
    send = _Connection.send

    async def held(connection: _Connection, *events: Any) -> int:
        sent = await send(connection, *events)
        connection.loop.call_soon(time.sleep, 0.4)  # the held loop (the fault)
        return sent

    monkeypatch.setattr(_Connection, "send", held)
    trace = plugin_reads(app_url, max_new_tokens=40, interval_s=0.008)
    assert trace.completed, trace.error
    assert len({c.stamp_ns for c in trace.chunks}) <= 2
    assert [f.name for f in trace.findings] == [], trace.findings
    ((start, end),) = trace.reader_held
    assert 0.3 <= (end - start) / 1e9 < 0.4 + 3.0, trace.reader_held
    assert StreamTrace.from_dict(trace.to_dict()).reader_held == trace.reader_held
