"""The toxiproxy-python wrapper (``faults/toxiproxy_client.py``): per-call binding that never
leaks, deadlines, clear errors; the ``GET /version`` answer of every real Toxiproxy 2.x release
accepted; addresses joined as Go writes them; which proxy names are a dead session's."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
from polling import wait_until
from toxiproxy.api import APIConsumer
from toxiproxy_releases import GO_JSON, GO_TEXT, RELEASE_ANSWERS

from pytest_streamguard.errors import ToxiproxyError
from pytest_streamguard.faults.toxiproxy_client import (
    ToxiproxyAPI,
    _Binding,
    _toxiproxy_version,
    host_port,
    is_stale_proxy,
    parse_version,
    proxy_url,
    with_host,
)

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


def test_addresses_are_joined_as_go_writes_them() -> None:
    assert host_port("127.0.0.2", 0) == "127.0.0.2:0"
    assert host_port("::1", 8474) == "[::1]:8474"
    assert with_host("127.0.0.1:8000", "10.0.0.5") == "10.0.0.5:8000"
    assert with_host("127.0.0.1:8000", None) == "127.0.0.1:8000"
    assert proxy_url("127.0.0.2:4100", "127.0.0.2", "127.0.0.1") == "http://127.0.0.2:4100"
    # A wildcard listens everywhere; clients dial the host they reach the Toxiproxy API at.
    assert proxy_url("[::]:4100", "0.0.0.0", "toxiproxy") == "http://toxiproxy:4100"
    assert proxy_url("[::]:4100", "::", "127.0.0.1") == "http://127.0.0.1:4100"


@pytest.mark.parametrize(
    ("name", "stale"),
    [
        ("streamguard_1_0_ab", False),  # pid 1 is always alive
        ("not_streamguard_99_ab", False),
        ("streamguard_x_ab", False),
        ("streamguard_ab", False),
    ],
)
def test_is_stale_proxy_leaves_live_and_foreign_names(name: str, stale: bool) -> None:
    assert is_stale_proxy(name) is stale
