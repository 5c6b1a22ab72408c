"""Memory of the bundled target under hostile traffic: cancelled streams and error answers.

Starts ``python -m target_app`` per engine, warms it up, then measures its resident set size
(``/proc/<pid>/status`` VmRSS) before and after

- a disconnect storm: long streams on every streaming route, each cancelled by its client after
  0 to 3 token events (half with a reset, half with a polite close), 8 at a time;
- a run of error answers: bodies that are rejected with a 400 (nesting, huge numbers, lone
  surrogates, malformed JSON, over-long prompts and model names).

After each run it waits for the target to settle (no stream slot held, engine idle, every
engine queue empty) and prints one table row: RSS growth per 1,000 cancelled streams or per
10,000 error answers, the time per request, and the engine queues once settled. Issue 12's
acceptance bound is 10 MB over 3,000 cancelled streams (about 3.3 MB per 1,000)::

    .venv/bin/python benchmarks/target_memory.py
    .venv/bin/python benchmarks/target_memory.py --engines batch --streams 10000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import time
from dataclasses import dataclass

import httpx
from common import rss_kib, start_target, stop
from prometheus_client.parser import text_string_to_metric_families

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

ERROR_BODIES = (
    b'{"prompt":' + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"prompt":"a","max_new_tokens":' + b"1" * 4301 + b"}",
    b'{"prompt":"\\ud800"}',
    b'{"prompt":"a","max_new_tokens":NaN}',
    b'{"prompt":"a","max_new_tokens":0}',
    b"{not json",
    b'{"prompt":"' + b"w " * 40000 + b'"}',
)
"""All answered 400 by ``/generate``; the storm of errors cycles through them."""

CONCURRENCY = 8
MIB = 1024 * 1024


@dataclass
class Row:
    """One line of the table."""

    engine: str
    workload: str
    requests: int
    rss_before: int
    rss_after: int
    per: int
    seconds: float
    queues: dict[str, float]

    def render(self) -> str:
        """The row as fixed-width text."""
        growth = self.rss_after - self.rss_before
        scaled = growth / self.requests * self.per / MIB
        queues = ",".join(f"{k}={v:g}" for k, v in sorted(self.queues.items())) or "-"
        return (
            f"{self.engine:<9} {self.workload:<18} {self.requests:>8} "
            f"{self.rss_before / MIB:>9.1f} {self.rss_after / MIB:>9.1f} "
            f"{scaled:>+10.2f} MiB/{self.per:<6} {self.seconds / self.requests * 1000:>8.2f} "
            f"{queues}"
        )


HEADER = (
    f"{'engine':<9} {'workload':<18} {'requests':>8} {'RSS MiB':>9} {'after':>9} "
    f"{'growth':>10} {'per':<6}     {'ms/req':>8} engine queues when settled"
)


def rss(pid: int) -> int:
    """Resident set size of ``pid`` in bytes."""
    kib = rss_kib(pid)
    if kib is None:
        raise SystemExit(f"no VmRSS for pid {pid}")
    return kib * 1024


def samples(client: httpx.Client) -> dict[str, float]:
    """Every unlabelled sample, plus the engine queue depths as ``queue:<name>``."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "streamguard_target_engine_queue_depth":
                found[f"queue:{sample.labels['queue']}"] = sample.value
            elif not sample.labels:
                found[sample.name] = sample.value
    return found


def settle(client: httpx.Client, timeout: float = 60.0) -> dict[str, float]:
    """Wait until no slot is held, the engine is idle and its queues are empty; the queues."""
    deadline = time.monotonic() + timeout
    while True:
        found = samples(client)
        queues = {k.removeprefix("queue:"): v for k, v in found.items() if k.startswith("queue:")}
        idle = (
            found.get("streamguard_target_active_streams") == 0
            and found.get("streamguard_target_engine_requests", 0) == 0
            and not any(queues.values())
        )
        if idle or time.monotonic() > deadline:
            return queues
        time.sleep(0.1)


async def cancelled_stream(host: str, port: int, rng: random.Random) -> None:
    """One long stream, cancelled by the client after 0 to 3 token events."""
    path, body = rng.choice(STORM_BODIES)
    payload = json.dumps(body).encode()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        wanted = rng.randint(0, 3)
        received = b""
        async with asyncio.timeout(60):
            while received.count(b"data:") < wanted:
                chunk = await reader.read(65536)
                if not chunk:
                    return
                received += chunk
    finally:
        if rng.random() < 0.5:
            writer.transport.abort()
        else:
            writer.close()


def storm(url: str, streams: int, seed: int) -> float:
    """Run ``streams`` cancelled streams, ``CONCURRENCY`` at a time; the wall time."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    rng = random.Random(seed)

    async def run() -> None:
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one() -> None:
            async with gate:
                await cancelled_stream(host, int(port), rng)

        await asyncio.gather(*(one() for _ in range(streams)))

    start = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - start


def errors(client: httpx.Client, answers: int) -> float:
    """Send ``answers`` bodies that get a 400; the wall time."""
    start = time.perf_counter()
    for n in range(answers):
        reply = client.post(
            "/generate",
            content=ERROR_BODIES[n % len(ERROR_BODIES)],
            headers={"content-type": "application/json"},
        )
        if reply.status_code != 400:
            raise SystemExit(f"expected 400, got {reply.status_code}: {reply.text[:200]}")
    return time.perf_counter() - start


def measure(engine: str, streams: int, answers: int, warm_up: int) -> list[Row]:
    """Both workloads against one fresh target with ``engine``."""
    process: subprocess.Popen[str]
    process, url = start_target(["--engine", engine, "--max-concurrency", "16"])
    rows: list[Row] = []
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            storm(url, warm_up, seed=1)
            settle(client)
            before = rss(process.pid)
            seconds = storm(url, streams, seed=2)
            queues = settle(client)
            rows.append(
                Row(
                    engine,
                    "cancelled streams",
                    streams,
                    before,
                    rss(process.pid),
                    1000,
                    seconds,
                    queues,
                )
            )
            errors(client, warm_up)
            before = rss(process.pid)
            seconds = errors(client, answers)
            queues = settle(client)
            rows.append(
                Row(
                    engine, "400 answers", answers, before, rss(process.pid), 10000, seconds, queues
                )
            )
    finally:
        stop(process, timeout_s=30)
    return rows


def main() -> None:
    """Parse the options, run each engine, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="batch,generate", help="comma-separated engines")
    parser.add_argument("--streams", type=int, default=5000, help="cancelled streams measured")
    parser.add_argument("--answers", type=int, default=10000, help="error answers measured")
    parser.add_argument("--warm-up", type=int, default=500, help="requests before measuring")
    args = parser.parse_args()
    print(HEADER, flush=True)
    for engine in args.engines.split(","):
        for row in measure(engine, args.streams, args.answers, args.warm_up):
            print(row.render(), flush=True)


if __name__ == "__main__":
    main()
