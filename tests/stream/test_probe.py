"""The probe beside the streams (issue 37): it tells a blocked loop from a full server.

Two incident apps on real uvicorn on loopback, each with a ready path: ``/blocking`` calls
``time.sleep(0.25)`` inside its ``async def`` generator every 5 tokens (the loop, ready path
included, stops for every stream); ``/slots`` generates with ``await asyncio.sleep`` behind an
``asyncio.Semaphore(2)`` (two streams at a time, the others wait, the loop stays free). A load
of 8 streams on the first gets ``blocked_loop`` with the probe's wait as its evidence; 10 on
the second get ``queued`` at a concurrency of 2, and no blame.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from plugin_helpers import streamguard_runner
from served import loopback_socket, serve_in_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

SubRun = Callable[..., pytest.RunResult]

# The blocked loop: a quarter of a second every 5 tokens (the incident).
BLOCK_S = 0.25
BLOCK_EVERY = 5
SLOTS = 2


def _event(index: int) -> bytes:
    return f"data: {json.dumps({'index': index, 'text': f'tok{index} '})}\n\n".encode()


DONE = b'event: done\ndata: {"tokens": 0}\n\n'


async def _tokens(request: Request) -> tuple[int, float]:
    body = await request.json()
    return int(body.get("max_new_tokens", 15)), float(body.get("interval_s", 0.02))


async def blocking(request: Request) -> Response:
    """``time.sleep`` inside ``async def`` every ``BLOCK_EVERY`` tokens."""
    tokens, interval = await _tokens(request)

    async def events() -> AsyncIterator[bytes]:
        for index in range(tokens):
            await asyncio.sleep(interval)
            if index % BLOCK_EVERY == BLOCK_EVERY - 1:
                time.sleep(BLOCK_S)  # noqa: ASYNC251 -- the bug: nothing else on this loop runs
            yield _event(index)
        yield DONE

    return StreamingResponse(events(), media_type="text/event-stream")


def slots_app() -> Starlette:
    """A server with ``SLOTS`` generation slots: a stream waits for one, the loop stays free."""
    # Made inside the app's loop's first request, not at import (a Semaphore binds its loop).
    held: list[asyncio.Semaphore] = []

    async def slots(request: Request) -> Response:
        tokens, interval = await _tokens(request)
        if not held:
            held.append(asyncio.Semaphore(SLOTS))

        async def events() -> AsyncIterator[bytes]:
            async with held[0]:
                for index in range(tokens):
                    await asyncio.sleep(interval)
                    yield _event(index)
            yield DONE

        return StreamingResponse(events(), media_type="text/event-stream")

    async def ready(request: Request) -> Response:
        return PlainTextResponse("ok")

    return Starlette(
        routes=[
            Route("/blocking", blocking, methods=["POST"]),
            Route("/slots", slots, methods=["POST"]),
            Route("/readyz", ready),
        ]
    )


@pytest.fixture(scope="module")
def incident_url() -> Iterator[str]:
    """The two incident apps, served in a thread by real uvicorn on a port-0 socket."""
    with loopback_socket() as sock, serve_in_thread(slots_app(), [sock]):
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def run_sub(pytester: pytest.Pytester, incident_url: str, toxiproxy_url: str) -> SubRun:
    """Run pytest in a subprocess with the plugin on, against the incident apps."""
    return streamguard_runner(pytester, toxiproxy_url, incident_url, subprocess=True)


def _record(report: dict[str, object], test: str) -> dict[str, object]:
    tests = report["tests"]
    assert isinstance(tests, list)
    return next(t for t in tests if str(t["nodeid"]).endswith(test))


def _found(record: dict[str, object], name: str) -> list[dict[str, object]]:
    found = record["findings"]
    assert isinstance(found, list)
    return [f for f in found if f["name"] == name]


INCIDENT_TESTS = """
import pytest

# 15 tokens: three blocks per stream, three times every stream stalls together.
BLOCKING = {"max_new_tokens": 15, "interval_s": 0.02}
# 16 tokens 20 ms apart: 0.32 s a pair of streams, the fifth pair waits 1.3 s for a slot.
SLOTS = {"max_new_tokens": 16, "interval_s": 0.02}

@pytest.mark.token_deadline(ttft=5.0, chunk=0.2)
def test_blocking(streamguard):
    # Each round of blocks holds every stream 2 s: longer than the read limit a 0.2 s chunk
    # deadline gives (1.2 s).
    result = streamguard.load(8, "/blocking", json=BLOCKING, read_timeout=30.0)
    assert result.completed == 8
    assert result.probe is not None and result.probe.samples
    assert [f.name for f in result.findings] == ["blocked_loop"], result.findings

def test_slots(streamguard):
    result = streamguard.load(10, "/slots", json=SLOTS)
    assert result.completed == 10
    assert [f.name for f in result.findings] == ["queued"], result.findings
"""


def test_a_blocked_loop_is_blamed_with_the_probes_wait_and_a_full_server_is_queued(
    pytester: pytest.Pytester, run_sub: SubRun
) -> None:
    pytester.makepyfile(INCIDENT_TESTS)
    result = run_sub("--streamguard-json", "sg.json")
    # The blocked loop also breaks the chunk deadline: its failure names the cause first.
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "E *DeadlineViolation: likely cause: the event loop was blocked: the ready path "
            "/readyz took *.** s while 8 streams stalled",
            "*token deadline violated (* in 8 streams):",
            "*  findings: blocked_loop: *; the ready path /readyz took up to *",
        ]
    )
    report = json.loads(Path(pytester.path, "sg.json").read_text())
    blocking = _record(report, "test_blocking")
    (blocked,) = _found(blocking, "blocked_loop")
    data = blocked["data"]
    assert isinstance(data, dict)
    # The probe waited in the streams' stalls: for at least most of one block.
    assert data["probe_longest_s"] >= 0.2, blocked
    assert data["probe_share"] >= 0.25, blocked
    assert "the ready path /readyz took up to " in str(blocked["evidence"])
    probe = blocking["probe"]
    assert isinstance(probe, dict)
    assert (probe["kind"], probe["target"], probe["interval_s"]) == ("http", "/readyz", 0.05)
    assert len(probe["samples"]) >= 10
    # The full server: waiting began at two streams, and nobody is blamed.
    slots = _record(report, "test_slots")
    (queued,) = _found(slots, "queued")
    assert isinstance(queued["data"], dict)
    assert queued["data"]["concurrency"] == SLOTS
    assert queued["data"]["waiting"] >= 3
    assert "waiting began at a concurrency of 2" in str(queued["evidence"])
    assert _found(slots, "blocked_loop") == []


PROBE_OFF_TESTS = """
def test_blocking(streamguard):
    result = streamguard.load(8, "/blocking", json={"max_new_tokens": 15, "interval_s": 0.02})
    assert result.probe is None
    assert streamguard.probe is None

def test_slots(streamguard):
    result = streamguard.load(10, "/slots", json={"max_new_tokens": 16, "interval_s": 0.02})
    assert result.probe is None
"""


def test_with_the_probe_off_blocked_loop_keeps_its_rules_and_nothing_is_queued(
    pytester: pytest.Pytester, run_sub: SubRun
) -> None:
    pytester.makepyfile(PROBE_OFF_TESTS)
    result = run_sub("--streamguard-probe", "off", "--streamguard-json", "sg.json")
    result.assert_outcomes(passed=2)
    report = json.loads(Path(pytester.path, "sg.json").read_text())
    blocking = _record(report, "test_blocking")
    assert blocking["probe"] is None
    (blocked,) = _found(blocking, "blocked_loop")
    assert "probe" not in str(blocked["evidence"])
    # Without the probe the two-slot server's staircase of first tokens is still read as a
    # blocked loop (today's rule: the client alone cannot tell), and never as queued.
    assert _found(_record(report, "test_slots"), "queued") == []


def test_a_bad_probe_setting_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--streamguard", "--streamguard-probe", "readyz")
    result.stderr.fnmatch_lines(
        [
            "*'readyz' from --streamguard-probe is not a valid streamguard_probe: expected "
            "'off', 'tcp' or a path starting with '/', such as /readyz*"
        ]
    )
    result = pytester.runpytest("--streamguard", "-o", "streamguard_probe_interval=0")
    result.stderr.fnmatch_lines(["*'0' from ini key streamguard_probe_interval is not a valid*"])


def interrupting_app() -> Starlette:
    """llama-cpp-python's locks, at its default ``interrupt_requests=True``: a stream holds the
    model's (inner) lock; ``GET /v1/models`` takes the outer lock and then the inner one, and a
    stream that sees the outer lock taken after a token ends there with its normal end."""
    outer, inner = asyncio.Lock(), asyncio.Lock()

    async def completions(request: Request) -> Response:
        tokens, interval = await _tokens(request)

        async def events() -> AsyncIterator[bytes]:
            async with inner:
                for index in range(tokens):
                    await asyncio.sleep(interval)
                    yield _event(index)
                    if outer.locked():
                        break
            yield DONE

        return StreamingResponse(events(), media_type="text/event-stream")

    async def models(request: Request) -> Response:
        async with outer, inner:
            return JSONResponse({"object": "list", "data": [{"id": "tiny"}]})

    return Starlette(
        routes=[Route("/generate", completions, methods=["POST"]), Route("/v1/models", models)]
    )


INTERRUPTED_TESTS = """
import json

def test_every_token(streamguard):
    traces = [
        streamguard.stream(json={"max_new_tokens": 40, "interval_s": 0.02}) for _ in range(3)
    ]
    seen = {"chunks": [len(t.chunks) for t in traces], "completed": [t.completed for t in traces],
            "names": [t.name for t in traces], "probe": streamguard.probe.target,
            "samples": len(streamguard.probe.samples)}
    with open("seen.json", "w") as f:
        json.dump(seen, f)
"""


@pytest.mark.parametrize("probe", ["default", "/v1/models"])
def test_a_probe_never_ends_a_stream_it_measures_and_says_so_where_it_may_have(
    pytester: pytest.Pytester, toxiproxy_url: str, probe: str
) -> None:
    """Issue 45: a server that ends its stream whenever its ready path (``/v1/models``) is
    asked, as llama-cpp-python does. Under the plugin's defaults the probe asks ``/health``
    (a 404: any status is an answer) and every token arrives; a probe of ``/v1/models`` ends
    streams early, and ``probe_interrupted`` marks them."""
    pytester.makepyfile(INTERRUPTED_TESTS)
    with loopback_socket() as sock, serve_in_thread(interrupting_app(), [sock]):
        run = streamguard_runner(
            pytester, toxiproxy_url, f"http://127.0.0.1:{sock.getsockname()[1]}"
        )
        asked = [] if probe == "default" else ["--streamguard-probe", probe]
        result = run("--streamguard-ready-path", "/v1/models", "--streamguard-json=sg.json", *asked)
    result.assert_outcomes(passed=1)
    seen = json.loads(Path(pytester.path, "seen.json").read_text())
    assert all(seen["completed"]), seen
    (record,) = json.loads(Path(pytester.path, "sg.json").read_text())["tests"]
    interrupted = _found(record, "probe_interrupted")
    if probe == "default":
        assert seen["probe"] == "/health"
        # The probe ran beside the streams (0.8 s each), not just once.
        assert seen["samples"] >= 9, seen
        assert seen["chunks"] == [40, 40, 40], seen
        assert interrupted == []
    else:
        assert max(seen["chunks"]) < 40, seen
        # A probe the server answers within 2 ms of its arrival goes unmarked (module
        # docstring of verdict/findings/interrupted.py): one of three streams at least.
        (finding,) = interrupted
        assert set(finding["streams"]) <= set(seen["names"]), (finding, seen)
        assert "--streamguard-probe off" in str(finding["evidence"])
