"""A Toxiproxy 2.x API in front of the embedded server, for the tests of what the plugin does on
a real ``toxiproxy-server`` when none is at hand (``STREAMGUARD_TOXIPROXY_SERVER`` names the
real binary; with it, :func:`toxiproxy_2x` runs that instead).

:class:`ApiFront` answers ``GET /version`` with a release's exact bytes, refuses the toxic types
a real server does not know (the embedded server's chunk toxics) with the real server's own
answer, and forwards every other request (method, path, body and content type) to the embedded
server, passing its status, content type and body back. The proxies themselves are the embedded
server's: what a real server does with its own toxics is checked against one by hand
(docs/toxiproxy.md, "Real servers checked")."""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from toxiproxy_releases import RELEASE_ANSWERS

from pytest_streamguard.common.tls import tls_context
from pytest_streamguard.services.processes import ManagedProcess, free_port

#: The toxic types of the embedded server that Toxiproxy 2.x does not have.
EMBEDDED_ONLY_TYPES = ("chunk_stall", "chunk_cut", "chunk_reset")

#: What toxiproxy-server answers ``POST /proxies/{proxy}/toxics`` with an unknown ``type``
#: (``ErrInvalidToxicType`` in api.go, rendered by ``apiError``): status, content type, body.
INVALID_TOXIC_TYPE = (
    400,
    "text/plain; charset=utf-8",
    b'{"error":"invalid toxic type","status":400}\n',
)

_TOXICS_PATH = re.compile(r"^/proxies/[^/]+/toxics$")


class ApiFront:
    """An HTTP front on a free loopback port; :attr:`url` is its API URL."""

    def __init__(
        self,
        api_url: str,
        version: tuple[bytes, str],
        refused_types: tuple[str, ...] = (),
    ) -> None:
        front = self
        body, content_type = version

        class Handler(BaseHTTPRequestHandler):
            def _refused(self, data: bytes) -> bool:
                if self.command != "POST" or not _TOXICS_PATH.match(self.path):
                    return False
                try:
                    toxic = json.loads(data)
                except ValueError:
                    return False
                return isinstance(toxic, dict) and toxic.get("type") in refused_types

            def _answer(self) -> None:
                if self.command == "GET" and self.path == "/version":
                    status, kind, data = 200, content_type, body
                else:
                    length = int(self.headers.get("content-length") or 0)
                    sent = self.rfile.read(length)
                    if self._refused(sent):
                        status, kind, data = INVALID_TOXIC_TYPE
                    else:
                        forwarded = front.client.request(
                            self.command,
                            api_url + self.path,
                            content=sent,
                            headers={"content-type": self.headers.get("content-type", "")},
                        )
                        status, data = forwarded.status_code, forwarded.content
                        kind = forwarded.headers.get("content-type", "")
                self.send_response(status)
                if kind:
                    self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.client = httpx.Client(timeout=10.0, verify=tls_context())
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop serving and release the forwarding client."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
        self.client.close()


def version_front(api_url: str, body: bytes, content_type: str) -> ApiFront:
    """A front that answers ``GET /version`` with ``body`` and forwards everything else."""
    return ApiFront(api_url, (body, content_type))


@contextmanager
def toxiproxy_2x(embedded_url: str) -> Iterator[str]:
    """The API URL of a Toxiproxy 2.x: the real ``toxiproxy-server`` that
    ``STREAMGUARD_TOXIPROXY_SERVER`` names, on a free port, or else a 2.12.0 front over the
    embedded server at ``embedded_url`` that knows only Toxiproxy's own toxic types."""
    binary = os.environ.get("STREAMGUARD_TOXIPROXY_SERVER", "")
    if binary:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        argv = [binary, "-host", "127.0.0.1", "-port", str(port)]
        process = ManagedProcess("toxiproxy-server", argv)
        try:
            process.wait_ready(f"{url}/version", 30.0)
            yield url
        finally:
            process.stop()
        return
    body, content_type, _ = RELEASE_ANSWERS["2.12.0"]
    front = ApiFront(embedded_url, (body, content_type), EMBEDDED_ONLY_TYPES)
    try:
        yield front.url
    finally:
        front.close()
