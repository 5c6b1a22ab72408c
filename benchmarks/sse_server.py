"""A lean SSE server for measuring the client: it costs little per event, so it is not the limit.

``POST /generate`` with ``{"max_new_tokens": N, "interval_s": S, "first_token_s": F}`` answers
``text/event-stream`` with N events ``data: {"index", "text", "sent_ns"}``, the first after F
seconds and then one every S seconds, then ``event: done``; ``sent_ns`` is
``time.perf_counter_ns()`` just before the write, as the bundled target does. Each stream
starts at a random phase within its first interval (seeded), so many streams' events spread
over time the way independent token streams do. HTTP/1.1 with ``Connection: close``: the body
ends when the server closes the socket.

Run it as ``python benchmarks/sse_server.py``: it binds 127.0.0.1 port 0 and prints
``{"url": "http://127.0.0.1:<port>"}`` once listening; SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time

from common import Streamer, run_loop, serve_until_signal

HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"connection: close\r\n\r\n"
)
BACKLOG = 4096


class SSEStream(Streamer):
    """One connection: read the request, then write the stamped events."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng

    def data_received(self, data: bytes) -> None:
        """Wait for the whole request (headers + Content-Length body), then start streaming."""
        self.buffer += data
        head, sep, body = self.buffer.partition(b"\r\n\r\n")
        if not sep or self.task is not None:
            return
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(body) < length:
            return
        params = json.loads(body[:length] or b"{}")
        tokens = int(params.get("max_new_tokens", 16))
        interval = float(params.get("interval_s", 0.05))
        first = float(params.get("first_token_s", 0.0))
        self.task = asyncio.get_running_loop().create_task(self.stream(tokens, interval, first))

    async def stream(self, tokens: int, interval: float, first: float) -> None:
        """Write ``tokens`` events on schedule, each stamped just before its write."""
        assert self.transport is not None
        self.transport.write(HEAD)
        start = time.perf_counter() + first + self.rng.uniform(0, interval)
        for index in range(tokens):
            wait = start + index * interval - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            payload = f'{{"index": {index}, "text": "tok{index} ", "sent_ns": '
            event = f"data: {payload}{time.perf_counter_ns()}}}\n\n"
            self.transport.write(event.encode())
        self.transport.write(f'event: done\ndata: {{"tokens": {tokens}}}\n\n'.encode())
        self.transport.close()


def main() -> int:
    """Serve on uvloop when installed (as the plugin's load client does)."""
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    rng = random.Random(0)
    run_loop(serve_until_signal(lambda: SSEStream(rng), BACKLOG))
    return 0


if __name__ == "__main__":
    sys.exit(main())
