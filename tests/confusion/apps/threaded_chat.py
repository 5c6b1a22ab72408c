"""A chat-completions server on Python's threaded WSGI-style stack (``http.server``'s
``ThreadingHTTPServer``, a thread per connection, as Flask's development server and werkzeug
serve): OpenAI-shaped SSE chunks from ``POST /v1/chat/completions``, ``/readyz``, and the port
it bound (port 0 unless ``--port``) on its listening line.

``--incident`` picks the one thing wrong with it, or a look-alike of one (``healthy``: nothing):

- ``cold_start``: the model is loaded lazily under a lock by the first request;
- ``one_slot``: one model instance behind a lock: one generation at a time, the others wait
  (the server's threads answer ``/readyz`` meanwhile).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_S = 0.02
LOAD_MODEL_S = 1.2

Writer = Callable[[bytes], None]


def chunk(text: str | None, finish: str | None = None) -> bytes:
    delta = {"content": text} if text is not None else {}
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "team-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


class Model:
    def __init__(self, incident: str) -> None:
        self.incident = incident
        self.loaded = incident != "cold_start"
        self.loading = threading.Lock()
        self.busy = threading.Lock()

    def load(self) -> None:
        with self.loading:
            if not self.loaded:
                time.sleep(LOAD_MODEL_S)
                self.loaded = True

    def generate(self, tokens: int, write: Writer) -> None:
        self.load()
        if self.incident == "one_slot":
            with self.busy:
                self._decode(tokens, write)
        else:
            self._decode(tokens, write)

    @staticmethod
    def _decode(tokens: int, write: Writer) -> None:
        for index in range(tokens):
            time.sleep(TOKEN_S)
            write(chunk(f"tok{index} "))


def handler(model: Model) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

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
            body = json.loads(self.rfile.read(length) or b"{}")
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()

            def write(data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            try:
                model.generate(int(body.get("max_tokens", 16)), write)
                write(chunk(None, "stop"))
                write(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--incident", choices=("healthy", "cold_start", "one_slot"), default="healthy"
    )
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(Model(args.incident)))
    server.daemon_threads = True
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
