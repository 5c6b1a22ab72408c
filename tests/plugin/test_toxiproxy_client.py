"""The toxiproxy-python wrapper: per-call binding that never leaks, deadlines, clear errors;
and the ``GET /version`` answer of every real Toxiproxy 2.x release accepted."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from polling import wait_until
from toxiproxy.api import APIConsumer

from pytest_streamguard.errors import ToxiproxyError
from pytest_streamguard.faults.toxiproxy_client import (
    ToxiproxyAPI,
    _Binding,
    _toxiproxy_version,
    parse_version,
)

GO_JSON = "application/json;charset=utf-8"
GO_TEXT = "text/plain;charset=utf-8"

# What each real server answers to GET /version, byte for byte, with its content type. From
# ApiServer.Version in api.go at each tag, with Version set as goreleaser sets it for a release
# (-X ...Version=<tag without v>) and left at version.go's "git" in a build from source; each
# was also read from a server built from that tag (docs/toxiproxy.md, "Real servers checked").
RELEASE_ANSWERS: dict[str, tuple[bytes, str, str]] = {
    # 2.0 to 2.5: response.Write([]byte(Version)), no newline.
    "2.5.0": (b"2.5.0", GO_TEXT, "2.5.0"),
    "2.5.0 source build": (b"git", GO_TEXT, "git"),
    # 2.6.0: fmt.Sprintf(`{"version": "%s"}\n`, ...) -- a raw string, so backslash and n.
    "2.6.0": (b'{"version": "2.6.0"}\\n', GO_JSON, "2.6.0"),
    "2.6.0 source build": (b'{"version": "git"}\\n', GO_JSON, "git"),
    # 2.7.0 and later (Shopify/toxiproxy#538): a real newline.
    "2.12.0": (b'{"version": "2.12.0"}\n', GO_JSON, "2.12.0"),
    "2.12.0 source build": (b'{"version": "git"}\n', GO_JSON, "git"),
}

NOT_TOXIPROXY: dict[str, tuple[int, bytes, str]] = {
    "html page": (200, b"<!DOCTYPE html><html><body><h1>Welcome</h1></body></html>", "text/html"),
    "other json": (200, b'{"status": "ok"}\n', "application/json"),
    "version not a string": (200, b'{"version": 2}\n', "application/json"),
    "json then garbage": (200, b'{"version": "2.6.0"}garbage', "application/json"),
    "json array": (200, b'["2.6.0"]', "application/json"),
    "health text": (200, b"OK", GO_TEXT),
    "empty body": (200, b"", GO_TEXT),
    "404": (404, b"404 page not found\n", GO_TEXT),
    "500 with a version": (500, b'{"version": "2.12.0"}\n', GO_JSON),
}


@pytest.fixture
def api(toxiproxy_url: str) -> Iterator[ToxiproxyAPI]:
    client = ToxiproxyAPI(toxiproxy_url)
    try:
        yield client
    finally:
        client.close()


class SilentServer:
    """A TCP server that accepts connections and never answers (a hung API)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                self.accepted.append(self.sock.accept()[0])
            except TimeoutError:
                continue

    def close(self) -> None:
        """Stop accepting and drop every connection (a hung call then fails and returns)."""
        self.stop.set()
        self.thread.join(5)
        for conn in self.accepted:
            conn.close()
        self.sock.close()


def test_binding_is_restored_after_each_call(api: ToxiproxyAPI) -> None:
    saved = (APIConsumer.host, APIConsumer.port)
    APIConsumer.host, APIConsumer.port = "192.0.2.1", 1
    try:
        assert api.version() == "2.12.0"
        assert (APIConsumer.host, APIConsumer.port) == ("192.0.2.1", 1)
    finally:
        APIConsumer.host, APIConsumer.port = saved


def test_hung_server_fails_clearly_and_does_not_leak(api: ToxiproxyAPI) -> None:
    silent = SilentServer()
    hung = ToxiproxyAPI(silent.url, timeout=1.0)
    try:
        with pytest.raises(ToxiproxyError, match=r"did not answer GET /version within 1 s"):
            hung.version()
        # While that call hangs, another server's call says what holds the binding.
        quick = ToxiproxyAPI(api.url, timeout=1.0)
        try:
            with pytest.raises(
                ToxiproxyError, match=r"still held by GET /version at " + silent.url
            ):
                quick.version()
        finally:
            quick.close()
    finally:
        silent.close()
        hung.close()
    # Once the hung call returns, the healthy server works and sees only its own proxies.
    wait_until(lambda: not _Binding.lock.locked(), 10, "the hung call to return")
    proxy = api.create_proxy("binding_check", "127.0.0.1:9")
    try:
        assert api.get_proxy("binding_check").upstream == "127.0.0.1:9"
    finally:
        api.destroy_proxy(proxy)


def test_http_500_becomes_a_clear_error(api: ToxiproxyAPI) -> None:
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(ToxiproxyError, match=r"answered an error .HTTP 5xx.*KeyError"):
            api.call(
                "create proxy 'clash'",
                lambda: api.client.create(upstream="127.0.0.1:9", name="clash", listen=listen),
            )
    finally:
        taken.close()


def test_missing_proxy_and_bad_toxic_are_named(api: ToxiproxyAPI) -> None:
    with pytest.raises(ToxiproxyError, match="no proxy named 'nope'"):
        api.get_proxy("nope")
    proxy = api.create_proxy("bad_toxic", "127.0.0.1:9")
    try:
        with pytest.raises(
            ToxiproxyError, match=r"add toxic 'x' .bogus, downstream. .*InvalidToxic"
        ):
            api.add_toxic(proxy, "x", "bogus", "downstream", {})
    finally:
        api.destroy_proxy(proxy)


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


@pytest.mark.parametrize("release", list(RELEASE_ANSWERS))
def test_every_release_version_answer_is_read(release: str) -> None:
    body, content_type, version = RELEASE_ANSWERS[release]
    response = httpx.Response(200, content=body, headers={"content-type": content_type})
    assert _toxiproxy_version(response) == version
    assert parse_version(body.decode()) == version


@pytest.mark.parametrize("answer", list(NOT_TOXIPROXY))
def test_a_server_that_is_not_toxiproxy_is_not_read_as_one(answer: str) -> None:
    status, body, content_type = NOT_TOXIPROXY[answer]
    response = httpx.Response(status, content=body, headers={"content-type": content_type})
    assert _toxiproxy_version(response) is None


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
