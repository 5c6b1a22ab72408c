"""A model server on Python's threaded stack (``http.server``'s ``ThreadingHTTPServer``, a
thread per connection, as werkzeug's development server serves a Flask app): OpenAI-shaped SSE
chunks from ``POST /v1/chat/completions`` in HTTP/1.1 chunked encoding written by hand,
``/readyz``, an access log line per request on stderr. It binds ``--port``.

``--incident`` picks the one thing wrong with it (``healthy``: nothing):

- ``error``: the tokenizer's decode raises ``KeyError`` on token 6 (an id outside its
  vocabulary); the handler does not catch it, ``socketserver`` prints the traceback and closes
  the connection with the chunked body unfinished;
- ``one_piece``: the handler generates the whole answer, then writes it in one write (every
  event at once, at the end, with the response head);
- ``slow_first``: healthy, but its prefill keeps the response head back ``--delay-s`` seconds.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_S = 0.02
BAD_TOKEN = 6
VOCABULARY = {index: f"tok{index} " for index in range(64) if index != BAD_TOKEN}


def chunk(text: str | None, finish: str | None = None) -> bytes:
    delta = {"content": text} if text is not None else {}
    body = {
        "id": "chatcmpl-threaded",
        "object": "chat.completion.chunk",
        "model": "team-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


def decode(token: int, incident: str) -> str:
    if incident == "error":
        return VOCABULARY[token]
    return f"tok{token} "


def events(tokens: int, incident: str) -> Iterator[bytes]:
    for index in range(tokens):
        time.sleep(TOKEN_S)
        yield chunk(decode(index, incident))
    yield chunk(None, "stop")
    yield b"data: [DONE]\n\n"


def handler(incident: str, delay: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path != "/readyz":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            tokens = int(json.loads(self.rfile.read(length) or b"{}").get("max_tokens", 16))
            if incident == "slow_first":
                time.sleep(delay)
            stream = events(tokens, incident)
            if incident == "one_piece":
                whole = b"".join(stream)
                stream = iter([whole])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for data in stream:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--incident", choices=("healthy", "error", "one_piece", "slow_first"), default="healthy"
    )
    parser.add_argument("--delay-s", type=float, default=1.0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(args.incident, args.delay_s))
    server.daemon_threads = True
    print(f"listening on http://127.0.0.1:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
