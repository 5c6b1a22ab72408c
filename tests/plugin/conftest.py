"""Fixtures for the plugin's own tests: the example app served by real uvicorn on port 0."""

from __future__ import annotations

import importlib.util
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType

import httpcore  # noqa: F401 -- see below
import pytest
import uvicorn
from plugin_helpers import INI, STREAM_APP

from pytest_streamguard.toxiproxy_client import ToxiproxyServer

# httpx imports httpcore lazily and caches its exception classes on first use. pytester's
# in-process runs drop modules first imported inside them, so a later run would get new
# httpcore classes that httpx no longer maps; importing httpcore here keeps one copy.


def _load_stream_app() -> ModuleType:
    spec = importlib.util.spec_from_file_location("streamguard_example_stream_app", STREAM_APP)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def app_url() -> Iterator[str]:
    """The example streaming app, served in a thread by real uvicorn on a port-0 socket."""
    module = _load_stream_app()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(module.app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive(), "uvicorn thread exited during startup"
        assert time.monotonic() < deadline, "uvicorn did not start within 15 s"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture(scope="session")
def app_cmd() -> str:
    """A --streamguard-target-cmd that starts the example app on the plugin's chosen port."""
    return f"{sys.executable} {STREAM_APP} --port {{port}}"


@pytest.fixture(autouse=True)
def _quiet_inner_asyncio(request: pytest.FixtureRequest) -> None:
    """Give pytester runs an ini that pytest-asyncio does not warn about."""
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester").makeini(INI)


@pytest.fixture(scope="session")
def toxiproxy_url() -> Iterator[str]:
    """One embedded Toxiproxy server for the whole run, started like a real toxiproxy-server
    (its own process, port 0, startup line on stdout); pytester runs reach it by URL."""
    server = ToxiproxyServer.embedded(startup_timeout=30.0)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def run(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str
) -> Callable[..., pytest.RunResult]:
    """Run pytest in-process with the plugin on, against the shared app and server."""

    def run_pytest(*args: str) -> pytest.RunResult:
        return pytester.runpytest(
            "--streamguard",
            "--streamguard-toxiproxy",
            toxiproxy_url,
            "--streamguard-target-url",
            app_url,
            "-p",
            "no:cacheprovider",
            *args,
        )

    return run_pytest
