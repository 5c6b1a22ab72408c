"""Load on the bundled target over HTTP: TTFT, inter-chunk gaps, tokens/s and event-loop lag.

Starts ``python -m target_app`` once per engine (``batch``, ``generate`` and the ``--naive``
anti-pattern), drives N concurrent ``/generate`` streams of 64 tokens for each N, and prints
one table row per (engine, N). Loop lag is measured inside the target (a 20 ms timer probe)
and read from its Prometheus histogram before and after each run.

    .venv/bin/python benchmarks/target_load.py
    .venv/bin/python benchmarks/target_load.py --engines batch --streams 30,100
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass, field

import httpx
from common import rounded_rank_percentile as pct
from common import start_target, stop
from prometheus_client.parser import text_string_to_metric_families

LAG_METRIC = "streamguard_target_event_loop_lag_seconds"
TARGETS = {30: (0.25, 0.05), 100: (0.5, 0.2)}
"""Batch-engine targets from issue 3: streams -> (TTFT p95, gap p95) in seconds."""
LAG_TARGET_S = 0.05


@dataclass
class StreamResult:
    """What one client saw."""

    ttft: float | None = None
    gaps: list[float] = field(default_factory=list)
    tokens: int = 0
    error: str | None = None


def lag_buckets(client: httpx.Client) -> dict[float, float]:
    """Cumulative counts of the target's loop-lag histogram, by upper bound."""
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == f"{LAG_METRIC}_bucket":
                buckets[float(sample.labels["le"])] = sample.value
    return buckets


def lag_max_bound(before: dict[float, float], after: dict[float, float]) -> float:
    """Upper bound of the highest lag bucket that gained samples during the run."""
    bounds = sorted(after)
    highest = 0.0
    previous_delta = 0.0
    for bound in bounds:
        delta = after[bound] - before.get(bound, 0.0)
        if delta > previous_delta:
            highest = bound
        previous_delta = delta
    return highest


async def one_stream(client: httpx.AsyncClient, tokens: int) -> StreamResult:
    """Read one stream, stamping each token event as it is parsed."""
    result = StreamResult()
    body = {"prompt": "baba keke", "max_new_tokens": tokens, "ignore_eos": True}
    start = time.perf_counter()
    last: float | None = None
    try:
        async with client.stream("POST", "/generate", json=body) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}"
                return result
            async for line in response.aiter_lines():
                if line.startswith("event: error"):
                    result.error = "error event"
                if not line.startswith("data:") or '"index"' not in line:
                    continue
                now = time.perf_counter()
                if last is None:
                    result.ttft = now - start
                else:
                    result.gaps.append(now - last)
                last = now
                result.tokens += 1
    except httpx.HTTPError as exc:
        result.error = type(exc).__name__
    return result


async def drive(url: str, streams: int, tokens: int) -> tuple[list[StreamResult], float]:
    """Run ``streams`` concurrent streams; return their results and the wall time."""
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    timeout = httpx.Timeout(300.0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as client:
        start = time.perf_counter()
        results = await asyncio.gather(*(one_stream(client, tokens) for _ in range(streams)))
        return list(results), time.perf_counter() - start


def verdict(engine: str, streams: int, ttft95: float, gap95: float, lag: float) -> str:
    """Whether the batch engine met issue 3's targets at this load."""
    if engine != "batch":
        return ""
    checks = [lag <= LAG_TARGET_S]
    if streams in TARGETS:
        ttft_target, gap_target = TARGETS[streams]
        checks += [ttft95 <= ttft_target, gap95 <= gap_target]
    return "meets" if all(checks) else "MISSES"


def main() -> int:
    """Parse options, run every (engine, streams) pair, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="batch,generate,naive")
    parser.add_argument("--streams", default="1,8,30,100,300")
    parser.add_argument(
        "--naive-streams",
        default="1,8,30",
        help="stream counts for the naive mode, which serves one token at a time",
    )
    parser.add_argument("--tokens", type=int, default=64)
    options = parser.parse_args()
    counts = [int(n) for n in options.streams.split(",")]
    naive_counts = [int(n) for n in options.naive_streams.split(",")]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    header = (
        f"{'engine':<9}{'streams':>8}{'ok':>5}{'ttft p50':>10}{'p95':>8}{'max':>8}"
        f"{'gap p50':>9}{'p95':>8}{'max':>8}{'tok/s':>8}{'lag max<=':>10}  target"
    )
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} tiny model, {options.tokens} tokens/stream")
    print(header)
    for engine in options.engines.split(","):
        flags = ["--naive"] if engine == "naive" else ["--engine", engine]
        wanted = naive_counts if engine == "naive" else counts
        flags += ["--max-concurrency", str(max(wanted))]
        process, url = start_target(flags)
        try:
            with httpx.Client(base_url=url, timeout=10) as admin:
                for streams in wanted:
                    before = lag_buckets(admin)
                    results, wall = asyncio.run(drive(url, streams, options.tokens))
                    lag = lag_max_bound(before, lag_buckets(admin))
                    ok = [r for r in results if r.error is None and r.tokens == options.tokens]
                    ttfts = [r.ttft for r in results if r.ttft is not None]
                    gaps = [g for r in results for g in r.gaps]
                    total = sum(r.tokens for r in results)
                    t95, g95 = pct(ttfts, 95), pct(gaps, 95)
                    meets = verdict(engine, streams, t95, g95, lag)
                    print(
                        f"{engine:<9}{streams:>8}{len(ok):>5}"
                        f"{pct(ttfts, 50):>10.3f}{t95:>8.3f}{max(ttfts, default=0):>8.3f}"
                        f"{pct(gaps, 50):>9.3f}{g95:>8.3f}{max(gaps, default=0):>8.3f}"
                        f"{total / wall:>8.0f}{lag:>10.3f}  {meets}".rstrip(),
                        flush=True,
                    )
        finally:
            stop(process, timeout_s=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
