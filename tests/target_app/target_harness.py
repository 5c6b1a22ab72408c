"""Helpers for driving a real target over real sockets: processes, SSE parsing, metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pytest_streamguard.common.tls import tls_context

if TYPE_CHECKING:  # torch and transformers: not at every worker's collection
    from target_app.state import TargetState

START_TIMEOUT_S = 120.0
"""Generous: importing torch and loading on a shared 2-core machine can take tens of seconds."""

#: The flags of the targets the target_app tests start: a 0.2 s heartbeat, 4 streams at once ...
SERVE_FLAGS = ["--heartbeat", "0.2", "--max-concurrency", "4", "--stream-timeout", "10"]
#: ... and, but where a test fuzzes the request body, the fault knobs on.
TEST_FLAGS = ["--allow-fault-knobs", *SERVE_FLAGS]


@dataclass
class InProcessTarget:
    """A target app served by uvicorn on a thread of this process, with its state at hand."""

    url: str
    state: TargetState


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail with ``what`` once ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        pause.wait(0.01)


@dataclass
class TargetProcess:
    """A ``python -m target_app`` subprocess and its base URL."""

    process: subprocess.Popen[str]
    url: str
    stderr_path: Path
    args: list[str] = field(default_factory=list)
    pump: threading.Thread | None = None

    def stderr(self) -> str:
        """What the target wrote to stderr so far."""
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> int:
        """SIGTERM, then wait; returns the exit status (kills after 15 s and fails)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError("target did not exit within 15 s of SIGTERM") from None
        finally:
            # The pump reads stdout to EOF, which comes once the process is gone.
            if self.pump is not None:
                self.pump.join(timeout=5)
            if self.process.stdout is not None:
                self.process.stdout.close()


def start_target(args: list[str], cache: Path, stderr_path: Path) -> TargetProcess:
    """Start the target on a free port, read its listening line and wait for ``/readyz``."""
    env = {**os.environ, "STREAMGUARD_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "target_app", "--host", "127.0.0.1", "--port", "0", *args]
    stderr_file = stderr_path.open("w", encoding="utf-8")
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=stderr_file, text=True, env=env
    )
    stderr_file.close()
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)

    pump_thread = threading.Thread(target=pump, daemon=True)
    pump_thread.start()
    target = TargetProcess(process, "", stderr_path, args, pump_thread)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not target.url:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or process.poll() is not None:
                raise AssertionError(
                    f"target {args} printed no listening line; stderr:\n{target.stderr()}"
                )
            try:
                record = json.loads(lines.get(timeout=min(remaining, 1.0)))
            except queue.Empty:
                continue
            if record.get("message") == "streamguard target listening":
                target.url = record["url"]
        with httpx.Client(base_url=target.url, timeout=5, verify=tls_context()) as client:
            assert client.get("/healthz").status_code == 200
            wait_until(
                lambda: client.get("/readyz").status_code == 200,
                START_TIMEOUT_S,
                f"/readyz of target {args}; stderr:\n{target.stderr()}",
            )
    except BaseException:
        target.stop()
        raise
    return target


@dataclass
class SseEvent:
    """One SSE event or comment, stamped when it was parsed."""

    kind: str
    data: Any
    received_ns: int


def iter_sse(response: httpx.Response) -> Iterator[SseEvent]:
    """Parse an SSE body line by line: ``data`` events, named events and ``: ...`` comments."""
    event_name = ""
    data_lines: list[str] = []
    for line in response.iter_lines():
        if line.startswith(":"):
            yield SseEvent("comment", line[1:].strip(), time.perf_counter_ns())
        elif line.startswith("event:"):
            event_name = line[len("event:") :].strip()
        elif line.startswith("data:"):
            data_lines.append(line[len("data:") :].strip())
        elif line == "" and data_lines:
            raw = "\n".join(data_lines)
            data = raw if raw == "[DONE]" else json.loads(raw)
            yield SseEvent(event_name or "data", data, time.perf_counter_ns())
            event_name, data_lines = "", []


def collect(client: httpx.Client, path: str, body: dict[str, Any]) -> list[SseEvent]:
    """POST ``body`` and read the whole event stream."""
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200, response.read()
        return list(iter_sse(response))


def metric(client: httpx.Client, name: str, labels: dict[str, str] | None = None) -> float:
    """The value of one sample from ``/metrics`` (counters by their ``_total`` name)."""
    text = client.get("/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and (labels is None or sample.labels == labels):
                return float(sample.value)
    raise AssertionError(f"metric {name} {labels or ''} not exported")


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` (Linux ``/proc``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


STORM_BODIES = (
    ("/generate", {"prompt": "baba kobe", "max_new_tokens": 2000, "ignore_eos": True}),
    (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "baba"}],
            "max_tokens": 2000,
            "ignore_eos": True,
            "stream": True,
        },
    ),
    ("/v1/completions", {"prompt": "lemu", "max_tokens": 2000, "ignore_eos": True, "stream": True}),
)
"""Long streams on every streaming route, so each storm client cancels one mid-generation."""


async def _cancelled_stream(host: str, port: int, rng: random.Random) -> None:
    path, body = rng.choice(STORM_BODIES)
    payload = json.dumps(body).encode()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        # Cancel after 0 to 3 token events have arrived, at random.
        events_wanted = rng.randint(0, 3)
        received = b""
        async with asyncio.timeout(30):
            while received.count(b"data:") < events_wanted:
                chunk = await reader.read(65536)
                if not chunk:
                    raise AssertionError(f"the target closed a stream early: {received[-300:]!r}")
                received += chunk
    finally:
        # Half the clients vanish with a reset, half close politely.
        if rng.random() < 0.5:
            writer.transport.abort()
        else:
            writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def cancel_storm(url: str, streams: int, concurrency: int, seed: int) -> None:
    """Open ``streams`` long streams, ``concurrency`` at a time, each cancelled by its client
    after 0 to 3 tokens (seeded, so a run can be repeated)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    rng = random.Random(seed)

    async def run() -> None:
        gate = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with gate:
                await _cancelled_stream(host, int(port), rng)

        await asyncio.gather(*(one() for _ in range(streams)))

    asyncio.run(run())
