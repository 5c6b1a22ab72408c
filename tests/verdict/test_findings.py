"""Findings as a user sees them: small apps with a known fault, read through the plugin.

The apps are the incidents new users met (issue 30): a gateway that collects the whole answer
and then sends it (``/buffered``), a handler that calls ``time.sleep`` inside ``async def``
every few tokens, blocking the event loop for every stream (``/blocking``), and one that keeps
the body open after its end event (``/held_open``); each has its fixed twin (``/generate``:
``await asyncio.sleep``, one write per token, the body ended with the stream).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from plugin_helpers import INI, streamguard_runner
from served import loopback_socket, serve_in_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

SubRun = Callable[..., pytest.RunResult]


def _event(index: int) -> bytes:
    return f"data: {json.dumps({'index': index, 'text': f'tok{index} '})}\n\n".encode()


DONE = b'event: done\ndata: {"tokens": 0}\n\n'


async def _params(request: Request) -> tuple[int, float, int, float]:
    body = await request.json()
    return (
        int(body.get("max_new_tokens", 8)),
        float(body.get("interval_s", 0.02)),
        int(body.get("block_every", 4)),
        float(body.get("block_s", 0.15)),
    )


async def generate(request: Request) -> Response:
    """The fixed app: one write per token, the loop free between them."""
    tokens, interval, _, _ = await _params(request)

    async def events() -> AsyncIterator[bytes]:
        for index in range(tokens):
            await asyncio.sleep(interval)
            yield _event(index)
        yield DONE

    return StreamingResponse(events(), media_type="text/event-stream")


async def buffered(request: Request) -> Response:
    """The buffering gateway: it collects the whole answer, then sends it in one write."""
    tokens, interval, _, _ = await _params(request)

    async def events() -> AsyncIterator[bytes]:
        collected = []
        for index in range(tokens):
            await asyncio.sleep(interval)
            collected.append(_event(index))
        yield b"".join(collected) + DONE

    return StreamingResponse(events(), media_type="text/event-stream")


async def blocking(request: Request) -> Response:
    """The blocked loop: ``time.sleep`` inside ``async def`` every ``block_every`` tokens."""
    tokens, interval, every, block = await _params(request)

    async def events() -> AsyncIterator[bytes]:
        for index in range(tokens):
            await asyncio.sleep(interval)
            if index % every == every - 1:
                time.sleep(block)  # noqa: ASYNC251 -- the bug: nothing else on this loop runs
            yield _event(index)
        yield DONE

    return StreamingResponse(events(), media_type="text/event-stream")


async def held_open(request: Request) -> Response:
    """The body held open: every token and the end event, then the body stays open 2 s."""
    tokens, interval, _, _ = await _params(request)

    async def events() -> AsyncIterator[bytes]:
        for index in range(tokens):
            await asyncio.sleep(interval)
            yield _event(index)
        yield DONE
        await asyncio.sleep(2.0)

    return StreamingResponse(events(), media_type="text/event-stream")


class WriteTimeout(Exception):
    """The gateway's write deadline: the connection is closed mid-answer."""


async def write_timeout(request: Request) -> Response:
    """A gateway with a 1 s write (total) timeout, as Go's ``http.Server.WriteTimeout``: every
    answer's connection is closed 1 s after its request, however well it flows."""
    tokens, interval, _, _ = await _params(request)
    deadline = time.monotonic() + 1.0

    async def events() -> AsyncIterator[bytes]:
        for index in range(tokens):
            await asyncio.sleep(interval)
            if time.monotonic() >= deadline:
                # uvicorn closes a connection whose answer raised after it started.
                raise WriteTimeout("write deadline exceeded")
            yield _event(index)
        yield DONE

    return StreamingResponse(events(), media_type="text/event-stream")


async def flushed_by_size(request: Request) -> Response:
    """A hop that writes through a 4 KB buffer and flushes it only when full (Go's
    ``bufio.Writer``): the server's 200-byte events, one every ``interval_s``, leave in 4 KB
    bursts."""
    tokens, interval, _, _ = await _params(request)

    async def events() -> AsyncIterator[bytes]:
        pending = b""
        for index in range(tokens):
            await asyncio.sleep(interval)
            event = f"data: {json.dumps({'index': index, 'text': 'x' * 160})}\n\n".encode()
            pending += event
            while len(pending) >= 4096:
                yield pending[:4096]
                pending = pending[4096:]
        yield pending + DONE

    return StreamingResponse(events(), media_type="text/event-stream")


async def ready(request: Request) -> Response:
    return PlainTextResponse("ok")


APP = Starlette(
    routes=[
        Route("/generate", generate, methods=["POST"]),
        Route("/buffered", buffered, methods=["POST"]),
        Route("/blocking", blocking, methods=["POST"]),
        Route("/held_open", held_open, methods=["POST"]),
        Route("/write_timeout", write_timeout, methods=["POST"]),
        Route("/flushed_by_size", flushed_by_size, methods=["POST"]),
        Route("/readyz", ready),
    ]
)


@pytest.fixture(scope="module")
def incidents_url() -> Iterator[str]:
    """The four apps, served in a thread by real uvicorn on a port-0 socket."""
    with loopback_socket() as sock, serve_in_thread(APP, [sock]):
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def run_sub(pytester: pytest.Pytester, incidents_url: str, toxiproxy_url: str) -> SubRun:
    """Run pytest in a subprocess with the plugin on, against the incident apps."""
    return streamguard_runner(pytester, toxiproxy_url, incidents_url, subprocess=True)


def _findings(report: dict[str, object], test: str) -> list[dict[str, object]]:
    tests = report["tests"]
    assert isinstance(tests, list)
    record = next(t for t in tests if t["nodeid"].endswith(test))
    found = record["findings"]
    assert isinstance(found, list)
    return found


BUFFERED_TESTS = """
import pytest

# 8 tokens, 50 ms apart: the whole answer takes 0.4 s, far inside every deadline.
@pytest.mark.token_deadline(ttft=2.0, chunk=1.0)
def test_buffered(streamguard):
    trace = streamguard.stream("/buffered", json={"max_new_tokens": 8, "interval_s": 0.05})
    assert trace.completed
    assert [f.name for f in trace.findings] == ["buffered"]

@pytest.mark.token_deadline(ttft=2.0, chunk=1.0)
def test_flowing(streamguard):
    trace = streamguard.stream("/generate", json={"max_new_tokens": 8, "interval_s": 0.02})
    assert trace.completed
    assert trace.findings == []
"""


def test_a_buffered_stream_within_its_deadlines_shows_buffered(
    pytester: pytest.Pytester, run_sub: SubRun
) -> None:
    pytester.makepyfile(BUFFERED_TESTS)
    result = run_sub("--streamguard-json", "sg.json")
    result.assert_outcomes(passed=2)
    report = json.loads(Path(pytester.path, "sg.json").read_text())
    (finding,) = _findings(report, "test_buffered")
    assert finding["name"] == "buffered"
    assert str(finding["evidence"]).startswith("8 of 8 chunks in 1 read"), finding
    assert _findings(report, "test_flowing") == []
    trace = next(t for t in report["tests"] if t["nodeid"].endswith("test_buffered"))["traces"][0]
    assert [f["name"] for f in trace["findings"]] == ["buffered"]
    # The summary names it per test.
    result.stdout.fnmatch_lines(
        ["findings (see docs/findings.md):", "*test_buffered: buffered: 8 of 8 chunks in 1 read*"]
    )


def test_fail_on_buffered_fails_the_buffered_test_and_names_it(
    pytester: pytest.Pytester, run_sub: SubRun
) -> None:
    pytester.makepyfile(BUFFERED_TESTS)
    result = run_sub("--streamguard-fail-on", "buffered", "--streamguard-html", "sg.html")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*streamguard finding(s) this test fails on (fail_on): buffered",
            "*buffered: 8 of 8 chunks in 1 read*",
        ]
    )
    assert "test_flowing FAILED" not in result.stdout.str()
    html = Path(pytester.path, "sg.html").read_text()
    assert "<h3>Findings</h3>" in html
    assert "<b>buffered</b>: 8 of 8 chunks in 1 read" in html


def test_the_marker_fail_on_gates_and_a_late_buffered_stream_says_likely_cause(
    pytester: pytest.Pytester, run_sub: SubRun
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.token_deadline(ttft=2.0, chunk=1.0, fail_on=["buffered"])
        def test_gated(streamguard):
            streamguard.stream("/buffered", json={"max_new_tokens": 8, "interval_s": 0.05})

        # 24 tokens, 40 ms apart: the answer (about 1 s) comes after the TTFT bound.
        @pytest.mark.token_deadline(ttft=0.5, chunk=1.0)
        def test_late(streamguard):
            streamguard.stream("/buffered", json={"max_new_tokens": 24, "interval_s": 0.04})

        @pytest.mark.token_deadline(ttft=2.0, fail_on="bufferd")
        def test_typo(streamguard):
            pass
        """
    )
    result = run_sub()
    result.assert_outcomes(failed=2, errors=1)
    out = result.stdout.str()
    assert "streamguard finding(s) this test fails on (fail_on): buffered" in out
    # The verdict names the cause right under its header.
    result.stdout.fnmatch_lines(
        [
            "*token deadline violated (1 in 1 stream):",
            "*likely cause: buffered: 24 of 24 chunks in 1 read*",
        ]
    )
    assert "token_deadline(fail_on='bufferd'): unknown finding(s) bufferd; known findings: " in out
    assert "buffered, blocked_loop, cold_start, idle_cut, held_open" in out


def test_an_unknown_fail_on_option_is_a_usage_error(
    pytester: pytest.Pytester, run_sub: SubRun
) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run_sub("--streamguard-fail-on", "buffered,slow")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*'buffered,slow' from --streamguard-fail-on: unknown finding(s) slow; known "
            "findings: *buffered, blocked_loop, cold_start, idle_cut, held_open*"
        ]
    )


LOAD_TESTS = """
import pytest

REQUEST = {"max_new_tokens": 16, "interval_s": 0.02, "block_every": 4, "block_s": 0.15}

def test_blocking(streamguard):
    result = streamguard.load(10, "/blocking", json=REQUEST)
    assert result.completed == 10
    assert "blocked_loop" in [f.name for f in result.findings], result.findings

def test_fixed(streamguard):
    result = streamguard.load(10, "/generate", json=REQUEST)
    assert result.completed == 10
    assert result.findings == [], result.findings
"""


def test_a_load_against_a_blocking_loop_shows_blocked_loop_and_the_fixed_one_none(
    pytester: pytest.Pytester, run_sub: SubRun
) -> None:
    pytester.makepyfile(LOAD_TESTS)
    result = run_sub("--streamguard-json", "sg.json")
    result.assert_outcomes(passed=2)
    report = json.loads(Path(pytester.path, "sg.json").read_text())
    assert [f["name"] for f in _findings(report, "test_blocking")] == ["blocked_loop"]
    assert _findings(report, "test_fixed") == []


def test_the_ini_key_gates_like_the_option(pytester: pytest.Pytester, run_sub: SubRun) -> None:
    pytester.makeini(INI + "streamguard_fail_on = buffered\n")
    pytester.makepyfile(BUFFERED_TESTS)
    result = run_sub()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED *test_buffered*"])


HELD_OPEN_TESTS = """
def test_held(streamguard):
    trace = streamguard.stream("/held_open", json={"max_new_tokens": 8, "interval_s": 0.02})
    assert trace.completed

def test_ended(streamguard):
    trace = streamguard.stream("/generate", json={"max_new_tokens": 8, "interval_s": 0.02})
    assert trace.completed
"""


def test_a_body_held_open_after_its_end_shows_held_open_and_the_fixed_one_none(
    pytester: pytest.Pytester, run_sub: SubRun
) -> None:
    pytester.makepyfile(HELD_OPEN_TESTS)
    result = run_sub("--streamguard-json", "sg.json")
    result.assert_outcomes(passed=2)
    report = json.loads(Path(pytester.path, "sg.json").read_text())
    (finding,) = _findings(report, "test_held")
    assert finding["name"] == "held_open"
    # The app holds the body 2 s from its end event's write; the client counts from that
    # event's arrival, which a busy machine delays (1.993 s once).
    assert 1.9 <= finding["data"]["held_open_s"] < 2.5, finding
    assert _findings(report, "test_ended") == []
    result.stdout.fnmatch_lines(
        ["findings (see docs/findings.md):", "*test_held: held_open: body held open *"]
    )
    assert "test_ended: " not in result.stdout.str()


NOT_CANCELLED_TESTS = """
REQUEST = {"prompt": "a long answer", "max_new_tokens": 1000}

def test_cancelled(streamguard):
    streamguard.faults.cut(after_bytes=2000)
    trace = streamguard.stream(json=REQUEST, read_timeout=5.0)
    assert trace.error_kind == "cut"

def test_left_running(streamguard):
    streamguard.faults.cut(after_bytes=2000)
    # The target's limit: generation must outlast the finding's 1 s wait after the cut with room
    # for a busy machine (1000 tokens, about 1.8 s, once ended before the check).
    body = {**REQUEST, "max_new_tokens": 2000, "fault": {"keep_generating": True}}
    trace = streamguard.stream(json=body, read_timeout=5.0)
    assert trace.error_kind == "cut"
"""


def test_generation_left_running_after_a_cut_is_in_the_test_record(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    """The bundled target the plugin starts, read at each test's end: a cut it cancels shows no
    finding; one its ``keep_generating`` knob lets run on shows ``not_cancelled``."""
    pytester.makepyfile(NOT_CANCELLED_TESTS)
    result = pytester.runpytest_subprocess(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-args=--allow-fault-knobs",
        "--streamguard-json",
        "sg.json",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=2)
    report = json.loads(Path(pytester.path, "sg.json").read_text())
    assert _findings(report, "test_cancelled") == []
    (finding,) = _findings(report, "test_left_running")
    assert finding["name"] == "not_cancelled"
    # Read 1 s after the cut at the earliest; a busy machine's slow gauge read can make it later.
    assert finding["data"]["after_s"] >= 1.0, finding
    assert str(finding["evidence"]).startswith("generation still running "), finding
    result.stdout.fnmatch_lines(["*test_left_running: not_cancelled: generation still running*"])


OWN_FAULT_TESTS = """
import pytest

REQUEST = {"max_new_tokens": 24, "interval_s": 0.02}

def names(found):
    return [f.name for f in found]

def test_stalled_stream(streamguard):
    streamguard.faults.stall(after_chunks=5, seconds=1.0)
    trace = streamguard.stream("/generate", json=REQUEST)
    assert trace.completed
    assert names(trace.findings) == ["own_fault"], trace.findings

def test_stalled_load(streamguard):
    streamguard.faults.stall(after_chunks=5, seconds=1.0)
    result = streamguard.load(10, "/generate", json=REQUEST)
    assert result.completed == 10
    found = names(result.findings)
    assert "buffered" not in found and "blocked_loop" not in found, result.findings

def test_load_through_latency(streamguard):
    streamguard.faults.latency(200, jitter=100)
    result = streamguard.load(30, "/generate", json=REQUEST)
    assert result.completed == 30
    assert "blocked_loop" not in names(result.findings), result.findings
"""


@pytest.mark.parametrize("probe", ["off", "/readyz"])
def test_a_fault_the_plugin_applied_is_named_and_never_blamed_on_the_app(
    pytester: pytest.Pytester, run_sub: SubRun, probe: str
) -> None:
    """A stall the plugin applied is ``own_fault``, never ``buffered`` or ``blocked_loop``,
    and 30 streams through its latency toxic get no ``blocked_loop``: with the probe (which
    passes through no fault) and without it (the rules of the plugin's own faults alone)."""
    pytester.makepyfile(OWN_FAULT_TESTS)
    result = run_sub("--streamguard-probe", probe, "--streamguard-json", "sg.json")
    result.assert_outcomes(passed=3)
    report = json.loads(Path(pytester.path, "sg.json").read_text())
    (finding,) = _findings(report, "test_stalled_stream")
    assert finding["name"] == "own_fault"
    assert str(finding["evidence"]).startswith("the gap after chunk 5 of "), finding
    # The shape it would have been taken for: one burst after the stall (buffered), or, with
    # a busy machine's reads grouping the chunks after it, several (bursts).
    assert re.search(
        r"is the plugin's own stall\(after_chunks=5, seconds=1\.0\), not (buffered|bursts)$",
        str(finding["evidence"]),
    ), finding


UNCHECKED_TESTS = """
import pytest

@pytest.mark.token_deadline(ttft=2.0, chunk=1.0, fail_on=["not_cancelled", "backpressure"])
def test_gated(streamguard):
    trace = streamguard.stream("/generate", json={"max_new_tokens": 8, "interval_s": 0.02})
    assert trace.completed
"""


def test_a_gate_that_could_not_be_checked_says_so_and_fails_when_asked(
    pytester: pytest.Pytester, run_sub: SubRun
) -> None:
    """``not_cancelled`` on a target given by URL (no gauges the plugin may read) and
    ``backpressure`` with no throttle: listed as not checked, on the record and in the
    summary; ``--streamguard-unchecked fail`` fails the test naming both."""
    pytester.makepyfile(UNCHECKED_TESTS)
    warned = run_sub("--streamguard-json", "sg.json", "--streamguard-html", "sg.html")
    warned.assert_outcomes(passed=1)
    warned.stdout.fnmatch_lines(
        [
            "2 fail_on gates could not be checked (--streamguard-unchecked fail fails them):",
            "*test_gated: not checked: not_cancelled (the plugin did not start the target*",
            "*test_gated: not checked: backpressure (no bandwidth or slow_reader fault*",
        ]
    )
    report = json.loads(Path(pytester.path, "sg.json").read_text())
    (record,) = report["tests"]
    assert [u["finding"] for u in record["unchecked"]] == ["not_cancelled", "backpressure"]
    html = Path(pytester.path, "sg.html").read_text()
    assert "<h3>Not checked (fail_on)</h3>" in html
    assert "<li><b>backpressure</b>: no bandwidth or slow_reader fault throttled" in html
    # Failed, and said in the quiet summary too.
    failed = run_sub("--streamguard-unchecked", "fail", "-q")
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(
        [
            "*FindingsUnchecked: streamguard could not check the finding(s) this test fails on "
            "(fail_on): not_cancelled, backpressure",
            "*not checked: not_cancelled (the plugin did not start the target*",
            "2 fail_on gates could not be checked (failed: --streamguard-unchecked fail):",
        ]
    )
    bad = run_sub("--streamguard-unchecked", "loud")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(
        [
            "*'loud' from --streamguard-unchecked is not a valid streamguard_unchecked: expected "
            "'warn' or 'fail'*"
        ]
    )


GATEWAY_TESTS = """
import pytest

LONG = {"max_new_tokens": 100, "interval_s": 0.02}

def names(found):
    return [f.name for f in found]

def test_write_timeout(streamguard):
    result = streamguard.load(4, "/write_timeout", json=LONG)
    assert result.completed == 0
    assert "total_timeout" in names(result.findings), result.findings

def test_no_write_timeout(streamguard):
    result = streamguard.load(4, "/generate", json=LONG)
    assert result.completed == 4
    assert result.findings == [], result.findings

def test_flushed_by_size(streamguard):
    trace = streamguard.stream("/flushed_by_size", json={"max_new_tokens": 100, "interval_s": 0.01})
    assert trace.completed
    assert names(trace.findings) == ["bursts"], trace.findings

def test_flushed_per_event(streamguard):
    trace = streamguard.stream("/generate", json={"max_new_tokens": 100, "interval_s": 0.01})
    assert trace.completed
    assert trace.findings == [], trace.findings
"""


def test_a_gateways_write_timeout_and_its_size_flushed_bursts_are_named(
    pytester: pytest.Pytester, run_sub: SubRun
) -> None:
    """The gateway incidents: a 1 s write timeout cuts 4 flowing streams at the same elapsed
    time (``total_timeout``), a 4 KB buffer flushed when full releases the events in bursts
    (``bursts``); their fixed twins show nothing."""
    pytester.makepyfile(GATEWAY_TESTS)
    result = run_sub("--streamguard-json", "sg.json")
    result.assert_outcomes(passed=4)
    report = json.loads(Path(pytester.path, "sg.json").read_text())
    (cut,) = _findings(report, "test_write_timeout")
    assert cut["name"] == "total_timeout"
    assert 0.9 <= cut["data"]["elapsed_s"] <= 1.3, cut
    (burst,) = _findings(report, "test_flushed_by_size")
    assert burst["name"] == "bursts"
    assert burst["data"]["by"] == "size", burst
    result.stdout.fnmatch_lines(["*test_flushed_by_size: bursts: * chunks came in * reads*"])


EVERY_GAP_STALLED_TESTS = """
REQUEST = {"max_new_tokens": 15, "interval_s": 0.02, "block_every": 5, "block_s": 0.25}

def test_blocking(streamguard):
    result = streamguard.load(10, "/blocking", json=REQUEST)
    assert result.completed == 10
    found = [f for f in result.findings if f.name == "blocked_loop"]
    assert found, result.findings
    assert found[0].data["probe_waited"] > 0, found[0]
    print("EVIDENCE", found[0].describe())
"""


def test_a_loop_blocked_by_each_stream_in_turn_is_named_with_the_probes_wait(
    pytester: pytest.Pytester, run_sub: SubRun
) -> None:
    """10 streams on an asyncio app that blocks its loop 0.25 s every 5 tokens: each stream's
    gaps are mostly the other streams' blocks, so its median gap is a stall too; the probe,
    which waited through them, names the blocked loop."""
    pytester.makepyfile(EVERY_GAP_STALLED_TESTS)
    result = run_sub("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*EVIDENCE blocked_loop: *; the ready path /readyz took up to *"])
