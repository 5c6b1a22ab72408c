"""A burst of connections through a Toxiproxy: how many complete, and its CPU per connection.

Starts ``openai_server.py`` (2 tokens, first one after 50 ms), the embedded Toxiproxy and, with
``--toxiproxy-server``, the real one beside it; then, per proxy, ``--rounds`` times: opens
``--connections`` TCP connections at once (non-blocking connects from one process), sends one
streaming chat request on each as soon as it connects (``connection: close``), and reads each
to its close. Printed per proxy: the streams that got ``[DONE]``, the wall time of a round, and
the proxy process's CPU (user + system, from ``/proc/PID/stat``) per connection: accept, dial,
both links, a short response and the close. Linux only (``/proc``).

``python benchmarks/proxy_burst.py [--connections 500] [--rounds 5] [--toxiproxy-server PATH]``
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import subprocess
import sys
import time
from typing import Any

from common import (
    HERE,
    command_line,
    cpu_s,
    load_line,
    make_proxy,
    start_embedded_proxy,
    start_json,
    start_real_toxiproxy,
    stop,
)

BODY = (
    b'{"model":"reference","messages":[{"role":"user","content":"baba"}],'
    b'"stream":true,"max_completion_tokens":2}'
)
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(BODY), BODY)
)


def burst(port: int, count: int, timeout_s: float = 60.0) -> int:
    """Open ``count`` connections at once, one request each; the number answered to [DONE]."""
    selector = selectors.DefaultSelector()
    received: list[bytes] = [b""] * count
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
                conn.send(REQUEST)
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
    return sum(b"[DONE]" in answer for answer in received)


def main() -> int:
    """Run the bursts and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--toxiproxy-server", default=os.environ.get("STREAMGUARD_TOXIPROXY_SERVER")
    )
    options = parser.parse_args()
    argv = [sys.executable, str(HERE / "openai_server.py"), "--tokens", "2"]
    server, ready = start_json([*argv, "--first-token-s", "0.05"])
    helpers: list[subprocess.Popen[Any]] = [server]
    rows = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    before = os.getloadavg()[0]
    try:
        upstream = int(ready["url"].rsplit(":", 1)[1])
        embedded, api_port = start_embedded_proxy()
        helpers.append(embedded)
        api = f"http://127.0.0.1:{api_port}"
        proxies = [("embedded", embedded.pid, make_proxy(api, upstream, "burst"))]
        if options.toxiproxy_server:
            real, real_api = start_real_toxiproxy(options.toxiproxy_server)
            helpers.append(real)
            proxies.append(("toxiproxy", real.pid, make_proxy(real_api, upstream, "burst")))
        for name, pid, port in proxies:
            for _ in range(options.rounds):
                cpu, wall = cpu_s(pid), time.monotonic()
                done = burst(port, options.connections)
                wall, cpu = time.monotonic() - wall, cpu_s(pid) - cpu
                rows.append((name, done, wall, cpu * 1e6 / options.connections))
    finally:
        for helper in helpers:
            stop(helper)
    print(f"# {started}; {os.cpu_count()} cores; {load_line(before)}")
    print(command_line("proxy_burst.py"))
    print("| proxy | connections | completed | round s | proxy CPU us/connection |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, done, wall, per in rows:
        print(f"| {name} | {options.connections} | {done} | {wall:.2f} | {per:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
