"""The Toxiproxy client's session fixtures through the plugin: a conftest overrides them, and a
fault test passes against the ``GET /version`` answer of every real Toxiproxy 2.x release (the
wrapper's own tests are in tests/faults/test_toxiproxy_client.py)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from toxiproxy_releases import RELEASE_ANSWERS


def test_conftest_can_override_the_session_fixtures(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str
) -> None:
    pytester.makeconftest(
        f"""
        import pytest
        from pytest_streamguard import Target
        from pytest_streamguard.faults.toxiproxy_client import ToxiproxyServer

        @pytest.fixture(scope="session")
        def streamguard_target():
            return Target({app_url!r}, "mine", "my app")

        @pytest.fixture(scope="session")
        def streamguard_toxiproxy_server():
            return ToxiproxyServer.external({toxiproxy_url!r})
        """
    )
    pytester.makepyfile(
        """
        def test_uses_overrides(streamguard):
            assert streamguard.target.kind == "mine"
            assert streamguard.stream(json={"max_new_tokens": 2}).completed
        """
    )
    pytester.runpytest("--streamguard").assert_outcomes(passed=1)


class VersionFront:
    """An HTTP front that answers ``GET /version`` with a release's exact bytes and content type
    and forwards every other request, method, path, body and content type, to a real Toxiproxy
    API (the embedded server), passing its status, content type and body back."""

    def __init__(self, api_url: str, body: bytes, content_type: str) -> None:
        front = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                if self.command == "GET" and self.path == "/version":
                    status, kind, data = 200, content_type, body
                else:
                    length = int(self.headers.get("content-length") or 0)
                    forwarded = front.client.request(
                        self.command,
                        api_url + self.path,
                        content=self.rfile.read(length),
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

        self.client = httpx.Client(timeout=10.0)
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


FAULT_THROUGH_PLUGIN = """
def test_faults(streamguard):
    streamguard.faults.latency(200)
    slow = streamguard.stream(json={"max_new_tokens": 3, "interval_s": 0.01})
    assert slow.completed
    assert slow.ttft >= 0.15  # a 200 ms toxic, 50 ms of tolerance below it
    streamguard.faults.clear()
    streamguard.faults.cut(after_bytes=400)
    cut = streamguard.stream(json={"max_new_tokens": 50, "interval_s": 0.005})
    assert cut.error_kind == "cut"
    assert 0 < len(cut.chunks) < 50
"""


@pytest.mark.parametrize("release", ["2.5.0", "2.6.0", "2.6.0 source build", "2.12.0"])
def test_fault_test_passes_against_each_release_version_answer(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str, release: str
) -> None:
    """The plugin, given ``--streamguard-toxiproxy`` of a server answering ``/version`` as
    ``release`` does, accepts it, shows its version and runs a latency and a cut fault through
    it. The front answers only ``/version`` itself; proxies and toxics are created on the
    embedded server, whose API matches 2.12's (what differs between these releases' APIs
    besides ``/version`` is not what this test is about; the real servers were run by hand)."""
    body, content_type, version = RELEASE_ANSWERS[release]
    front = VersionFront(toxiproxy_url, body, content_type)
    try:
        pytester.makepyfile(FAULT_THROUGH_PLUGIN)
        result = pytester.runpytest(
            "--streamguard",
            "--streamguard-toxiproxy",
            front.url,
            "--streamguard-target-url",
            app_url,
            "-p",
            "no:cacheprovider",
        )
    finally:
        front.close()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [f"streamguard: target=url *, toxiproxy=external {front.url} (version {version}), *"]
    )
