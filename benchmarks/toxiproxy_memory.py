"""Memory of the embedded Toxiproxy server over many error answers.

Starts the server (``common.start_embedded_proxy``), answers a warm-up of 3,000 errors, then
measures its resident set size (``/proc/<pid>/status`` VmRSS) before and after each kind of
error answer: 404s (unknown proxy or toxic), 409s (a proxy that exists), 400s (malformed,
deeply nested and lone-surrogate bodies). One table row per kind, RSS growth per 10,000
answers. Issue 12's acceptance bound: at most 2 MB over 20,000 error answers after warm-up
(before the fix the server grew 6-8 KB per answer)::

    .venv/bin/python benchmarks/toxiproxy_memory.py
    .venv/bin/python benchmarks/toxiproxy_memory.py --requests 50000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import httpx
from common import rss_mib, start_embedded_proxy, stop

WARM_UP = 3000


def kinds(api: httpx.Client) -> dict[str, Callable[[int], httpx.Response]]:
    """One request per error kind, by table label."""
    return {
        "404 unknown proxy/toxic": lambda i: api.get(
            "/proxies/missing" if i % 2 else "/proxies/missing/toxics/t"
        ),
        "409 proxy exists": lambda i: api.post(
            "/proxies", json={"name": "taken", "upstream": "127.0.0.1:9", "listen": "127.0.0.1:0"}
        ),
        "400 bad bodies": lambda i: api.post(
            "/proxies",
            content=(b"{", b"[" * 3000, b'{"name": "\\ud800", "upstream": "x:1"}')[i % 3],
        ),
    }


def main() -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000, help="answers per kind")
    args = parser.parse_args()
    proc, port = start_embedded_proxy()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as api:
            taken = {"name": "taken", "upstream": "127.0.0.1:9", "listen": "127.0.0.1:0"}
            assert api.post("/proxies", json=taken).status_code == 201
            requests = kinds(api)
            for i in range(WARM_UP):
                for send in requests.values():
                    send(i)
            print(f"embedded toxiproxy, {args.requests} error answers per row, after a warm-up")
            print(f"{'answers':<26}{'RSS MiB':>9}{'after':>9}{'per 10,000':>12}{'ms/req':>8}")
            for label, send in requests.items():
                before = rss_mib(proc.pid)
                started = time.perf_counter()
                for i in range(args.requests):
                    status = send(i).status_code
                    assert 400 <= status < 500, f"{label}: HTTP {status}"
                elapsed = time.perf_counter() - started
                after = rss_mib(proc.pid)
                per = (after - before) * 10_000 / args.requests
                print(
                    f"{label:<26}{before:>9.1f}{after:>9.1f}{per:>+11.2f}M"
                    f"{elapsed * 1e3 / args.requests:>8.2f}"
                )
    finally:
        stop(proc, group=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
