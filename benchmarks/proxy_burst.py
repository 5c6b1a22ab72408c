"""A burst of connections through a Toxiproxy: how many complete, and its CPU per connection.

Starts ``openai_server.py`` (answers of ``--tokens`` chunks, default 2, 20 ms apart, the first
after 50 ms), the embedded Toxiproxy, nginx's ``stream`` proxy (a C proxy, one worker; skipped
with a note when Debian's libnginx-mod-stream is absent) and, with ``--toxiproxy-server``, the
real one beside them; then, per proxy, ``--rounds`` times: opens ``--connections`` TCP
connections at once (non-blocking connects from one process), sends one streaming chat request
on each as soon as it connects (``connection: close``), and reads each to its close. Printed
per path (no proxy as well, "direct"; the rounds go round the paths): the streams that got
``[DONE]``, the wall time of a round, each request's send to the server's ``received_ns`` in its
answer (one clock: p50 and p99 over the burst; through a proxy it holds the proxy's accept, its
dial of the upstream and the request's forwarding, all of the burst's connections served one
after another), and the proxy's CPU (user + system, from ``/proc/PID/stat``; nginx's master and
worker) per connection: accept, dial, both links, the answer and the close.
Linux only (``/proc``).

``python benchmarks/proxy_burst.py [--connections 500] [--rounds 5] [--tokens 2]
[--toxiproxy-server PATH]``
"""

from __future__ import annotations

import argparse
import os
import re
import selectors
import socket
import subprocess
import sys
import time
from typing import Any

from common import (
    HERE,
    cell,
    command_line,
    cpu_s,
    descendants,
    load_line,
    make_proxy,
    nginx_stream_absent,
    start_embedded_proxy,
    start_json,
    start_nginx_stream,
    start_real_toxiproxy,
    stop,
)

from pytest_streamguard.verdict.stats import percentile as pct

RECEIVED = re.compile(rb'"received_ns": (\d+)')


def request(tokens: int) -> bytes:
    """A streaming chat request for ``tokens`` chunks, ``connection: close``."""
    body = (
        b'{"model":"reference","messages":[{"role":"user","content":"baba"}],'
        b'"stream":true,"max_completion_tokens":%d}' % tokens
    )
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
        b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )


def burst(
    port: int, count: int, tokens: int = 2, timeout_s: float = 60.0
) -> tuple[int, list[float]]:
    """Open ``count`` connections at once, one request each (for ``tokens`` chunks); the
    number answered to [DONE], and per answered request the ms from its send to the server's
    ``received_ns`` (both ``CLOCK_MONOTONIC``)."""
    sent = request(tokens)
    selector = selectors.DefaultSelector()
    received: list[bytes] = [b""] * count
    sent_ns = [0] * count
    for index in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        selector.register(sock, selectors.EVENT_WRITE, index)
    open_count = count
    deadline = time.monotonic() + timeout_s
    while open_count and time.monotonic() < deadline:
        for key, events in selector.select(1.0):
            conn = key.fileobj
            assert isinstance(conn, socket.socket)
            if events & selectors.EVENT_WRITE:
                conn.send(sent)
                sent_ns[key.data] = time.perf_counter_ns()
                selector.modify(conn, selectors.EVENT_READ, key.data)
                continue
            try:
                data = conn.recv(65536)
            except OSError:
                data = b""
            received[key.data] += data
            if not data:
                selector.unregister(conn)
                conn.close()
                open_count -= 1
    for key in list(selector.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    delays = []
    for index, answer in enumerate(received):
        if (found := RECEIVED.search(answer)) is not None:
            delays.append((int(found.group(1)) - sent_ns[index]) / 1e6)
    return sum(b"[DONE]" in answer for answer in received), delays


def main() -> int:
    """Run the bursts and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--tokens",
        type=int,
        default=2,
        help="chunks per answer, 20 ms apart (the difference of two runs' CPU per connection, "
        "divided by that of their --tokens, is the CPU per chunk)",
    )
    parser.add_argument(
        "--toxiproxy-server", default=os.environ.get("STREAMGUARD_TOXIPROXY_SERVER")
    )
    options = parser.parse_args()
    argv = [sys.executable, str(HERE / "openai_server.py"), "--tokens", "2"]
    server, ready = start_json([*argv, "--first-token-s", "0.05"])
    helpers: list[subprocess.Popen[Any]] = [server]
    groups: list[subprocess.Popen[Any]] = []
    prefixes: list[Any] = []
    notes: list[str] = []
    rows = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    before = os.getloadavg()[0]
    try:
        upstream = int(ready["url"].rsplit(":", 1)[1])
        embedded, api_port = start_embedded_proxy()
        helpers.append(embedded)
        api = f"http://127.0.0.1:{api_port}"
        proxies: list[tuple[str, list[int] | None, int]] = [
            ("direct", None, upstream),
            ("embedded", [embedded.pid], make_proxy(api, upstream, "burst")),
        ]
        absent = nginx_stream_absent()
        if absent is None:
            nginx, port, prefix = start_nginx_stream(upstream)
            groups.append(nginx)
            prefixes.append(prefix)
            proxies.append(("nginx stream (C)", [nginx.pid, *descendants(nginx.pid)], port))
        else:
            notes.append(f"# no nginx row: {absent}")
        if options.toxiproxy_server:
            real, real_api = start_real_toxiproxy(options.toxiproxy_server)
            helpers.append(real)
            proxies.append(("toxiproxy", [real.pid], make_proxy(real_api, upstream, "burst")))
        # Round by round, every path in turn: a proxy's rows and the others' share the moment.
        for _ in range(options.rounds):
            for name, pids, port in proxies:
                cpu, wall = sum(map(cpu_s, pids or [])), time.monotonic()
                done, delays = burst(port, options.connections, options.tokens)
                wall, cpu = time.monotonic() - wall, sum(map(cpu_s, pids or [])) - cpu
                per = "-" if pids is None else f"{cpu * 1e6 / options.connections:.0f}"
                request_ms = f"{cell(pct(delays, 50))} / {cell(pct(delays, 99))}"
                rows.append((name, done, wall, request_ms, per))
    finally:
        for helper in helpers:
            stop(helper)
        for group in groups:
            stop(group, group=True)
        for prefix in prefixes:
            prefix.cleanup()
    print(f"# {started}; {os.cpu_count()} cores; {load_line(before)}")
    print(command_line("proxy_burst.py"))
    print(
        "| proxy | connections | tokens | completed | round s | request to server p50/p99 ms "
        "| proxy CPU us/connection |"
    )
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for name, done, wall, request_ms, per in sorted(rows, key=lambda row: row[0]):
        counts = f"{options.connections} | {options.tokens} | {done}"
        print(f"| {name} | {counts} | {wall:.2f} | {request_ms} | {per} |")
    print("\n".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
