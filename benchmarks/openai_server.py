"""A reference OpenAI-compatible chat-completions server with known timing, for fidelity.

``POST /v1/chat/completions`` with ``"stream": true`` answers ``text/event-stream`` chunks
(``chat.completion.chunk``, content ``" baba"``: one token of the bundled target's tiny
tokenizer, so a tokenizer-counting client sees one token per chunk). The first content chunk is
written ``--first-token-s`` after the whole request arrived (default 0.2 s), then one every
``--interval-s`` (default 0.02 s), on an absolute schedule; then a ``finish_reason: "stop"``
chunk and ``data: [DONE]``. Each content chunk carries ``sent_ns``: ``time.perf_counter_ns()``
just before its write, as the bundled target does, and ``received_ns``: the
``perf_counter_ns()`` at which the request was in (both CLOCK_MONOTONIC, comparable with a
client's stamps on the same machine). The number of chunks is the request's
``max_completion_tokens`` (or ``max_tokens``), else ``--tokens``.

HTTP/1.1 keep-alive with chunked bodies, since peer benchmarks (AIPerf) pool connections; a
``Connection: close`` request is answered and the socket closed. ``GET /v1/models`` lists the
one model. Lean on purpose (an asyncio Protocol, no framework), like ``sse_server.py``, so the
server is not what the benchmark measures.

Run it as ``python benchmarks/openai_server.py``: it binds 127.0.0.1 port 0 and prints
``{"url": "http://127.0.0.1:<port>"}`` once listening; SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from common import MODEL, Streamer, run_loop, serve_until_signal

TOKEN = " baba"
BACKLOG = 4096
HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n"
)


def chunked(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def simple(status: str, body: bytes, close: bool) -> bytes:
    """A whole non-streaming answer."""
    connection = b"close" if close else b"keep-alive"
    return (
        b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: %s\r\n\r\n%s" % (status.encode(), len(body), connection, body)
    )


class Exchange(Streamer):
    """One connection: requests one after another, each answered on schedule."""

    def __init__(self, first_token_s: float, interval_s: float, tokens: int) -> None:
        super().__init__()
        self.first_token_s = first_token_s
        self.interval_s = interval_s
        self.tokens = tokens

    def data_received(self, data: bytes) -> None:
        """Buffer until a whole request is in, then answer it."""
        arrived = time.perf_counter_ns()
        self.buffer += data
        if self.task is None or self.task.done():
            self._next(arrived)

    def _next(self, arrived: int) -> None:
        assert self.transport is not None
        head, sep, rest = self.buffer.partition(b"\r\n\r\n")
        if not sep:
            return
        lines = head.split(b"\r\n")
        method, _, target = lines[0].partition(b" ")
        path = target.partition(b" ")[0]
        length = 0
        close = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection":
                close = value.strip().lower() == b"close"
        if len(rest) < length:
            return
        body, self.buffer = rest[:length], rest[length:]
        if method == b"GET" and path == b"/v1/models":
            models = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
            self._answer(simple("200 OK", json.dumps(models).encode(), close), close)
            return
        if method != b"POST" or path != b"/v1/chat/completions":
            self._answer(simple("404 Not Found", b'{"error": "not found"}', close), close)
            return
        params = json.loads(body or b"{}")
        tokens = int(params.get("max_completion_tokens") or params.get("max_tokens") or 0)
        self.task = asyncio.get_running_loop().create_task(
            self.stream(arrived, tokens or self.tokens, close)
        )

    def _answer(self, data: bytes, close: bool) -> None:
        assert self.transport is not None
        self.transport.write(data)
        if close:
            self.transport.close()
        elif self.buffer:
            self._next(time.perf_counter_ns())

    async def stream(self, arrived: int, tokens: int, close: bool) -> None:
        """Write ``tokens`` chunks on schedule, each stamped just before its write."""
        assert self.transport is not None
        write = self.transport.write
        write(HEAD + (b"connection: close\r\n\r\n" if close else b"\r\n"))
        created = int(time.time())
        prefix = (
            f'{{"id": "chatcmpl-ref", "object": "chat.completion.chunk", "created": {created}, '
            f'"model": "{MODEL}", "choices": [{{"index": 0, '
        )
        received = f'"received_ns": {arrived}, "sent_ns": '.encode()
        start = arrived / 1e9 + self.first_token_s
        for index in range(tokens):
            wait = start + index * self.interval_s - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            delta = f'"delta": {{"content": "{TOKEN}"}}, "finish_reason": null}}], '
            stamp = b"%d}\n\n" % time.perf_counter_ns()
            write(chunked(b"data: " + (prefix + delta).encode() + received + stamp))
        end = '"delta": {}, "finish_reason": "stop"}]}'
        write(chunked(f"data: {prefix}{end}\n\ndata: [DONE]\n\n".encode()) + b"0\r\n\r\n")
        self._answer(b"", close)


def main() -> int:
    """Serve on uvloop when installed (as the plugin's load client does)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--first-token-s", type=float, default=0.2)
    parser.add_argument("--interval-s", type=float, default=0.02)
    parser.add_argument("--tokens", type=int, default=20, help="chunks when the request says not")
    options = parser.parse_args()
    run_loop(
        serve_until_signal(
            lambda: Exchange(options.first_token_s, options.interval_s, options.tokens), BACKLOG
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
