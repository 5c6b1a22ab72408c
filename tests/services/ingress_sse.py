"""An SSE-reading client for the ingress tests: real httpx, arrival time of every event."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx

from pytest_streamguard.common.tls import tls_context


@dataclass
class StreamRead:
    """What a client saw of one SSE stream; times are seconds since the request was sent."""

    arrivals: list[float] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)
    done: bool = False
    error: Exception | None = None
    ended_at: float = 0.0
    headers: httpx.Headers = field(default_factory=httpx.Headers)


def read_stream(base_url: str, **params: float) -> StreamRead:
    """GET ``/stream`` with ``Accept-Encoding: gzip`` and time the arrival of every event.

    A cut stream (httpx raises) is recorded in ``error``, not raised.
    """
    result = StreamRead()
    event = "message"
    start = time.perf_counter()
    try:
        with (
            httpx.Client(timeout=httpx.Timeout(5.0), verify=tls_context()) as client,
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
