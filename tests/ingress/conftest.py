"""Fixtures for the ingress tests: the SSE app under uvicorn and an SSE-reading client."""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

SSE_APP = Path(__file__).with_name("sse_app.py")
STARTUP_TIMEOUT_S = 20.0


@pytest.fixture(scope="session")
def sse_upstream() -> Iterator[str]:
    """URL of the SSE app (``sse_app.py``) running under uvicorn in its own process."""
    proc = subprocess.Popen(
        [sys.executable, str(SSE_APP)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=STARTUP_TIMEOUT_S):
                raise RuntimeError(f"sse_app.py printed no URL within {STARTUP_TIMEOUT_S} s")
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"sse_app.py exited with code {proc.wait()} before printing a URL")
        url: str = json.loads(line)["url"]
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@dataclass
class StreamRead:
    """What a client saw of one SSE stream; times are seconds since the request was sent."""

    arrivals: list[float] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)
    done: bool = False
    error: Exception | None = None
    ended_at: float = 0.0
    headers: httpx.Headers = field(default_factory=httpx.Headers)


ReadStream = Callable[..., StreamRead]


@pytest.fixture
def read_stream() -> ReadStream:
    """``read_stream(base_url, **query)``: read ``/stream`` and time every event's arrival."""
    return _read_stream


def _read_stream(base_url: str, **params: float) -> StreamRead:
    """GET ``/stream`` with ``Accept-Encoding: gzip`` and time the arrival of every event.

    A cut stream (httpx raises) is recorded in ``error``, not raised.
    """
    result = StreamRead()
    event = "message"
    start = time.perf_counter()
    try:
        with (
            httpx.Client(timeout=httpx.Timeout(5.0)) as client,
            client.stream(
                "GET",
                f"{base_url}/stream",
                params=params,
                headers={"Accept-Encoding": "gzip"},
            ) as response,
        ):
            result.headers = response.headers
            response.raise_for_status()
            for line in response.iter_lines():
                if line.startswith("event:"):
                    event = line.removeprefix("event:").strip()
                elif line.startswith("data:"):
                    if event == "done":
                        result.done = True
                    else:
                        result.arrivals.append(time.perf_counter() - start)
                        payload = json.loads(line.removeprefix("data:"))
                        result.indices.append(payload["index"])
                elif not line:
                    event = "message"
    except httpx.HTTPError as exc:
        result.error = exc
    result.ended_at = time.perf_counter() - start
    return result
