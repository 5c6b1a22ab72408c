"""The toxiproxy-python wrapper: per-call binding that never leaks, deadlines, clear errors."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from plugin_helpers import wait_until
from toxiproxy.api import APIConsumer

from pytest_streamguard.toxiproxy_client import ToxiproxyAPI, ToxiproxyError, _Binding


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
        from pytest_streamguard.toxiproxy_client import ToxiproxyServer

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
