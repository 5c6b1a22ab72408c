"""Fixtures for the stream-format tests: the transcript replay app on real uvicorn (port 0)
and one embedded Toxiproxy server; pytester runs reach both by URL."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import httpcore  # noqa: F401 -- see below
import pytest
import uvicorn
from replay_app import app

from pytest_streamguard.toxiproxy_client import ToxiproxyServer

# httpx imports httpcore lazily and caches its exception classes on first use. pytester's
# in-process runs drop modules first imported inside them, so a later run would get new
# httpcore classes that httpx no longer maps; importing httpcore here keeps one copy.

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"


@pytest.fixture(scope="session")
def replay_url() -> Iterator[str]:
    """The transcript replay app, served in a thread by real uvicorn on a port-0 socket."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
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
def toxiproxy_url() -> Iterator[str]:
    """One embedded Toxiproxy server for the whole run, started like a real toxiproxy-server
    (its own process, port 0, startup line on stdout)."""
    server = ToxiproxyServer.embedded(startup_timeout=30.0)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def run(
    pytester: pytest.Pytester, replay_url: str, toxiproxy_url: str
) -> Callable[..., pytest.RunResult]:
    """Run pytest in-process with the plugin on, the replay app as its target."""
    pytester.makeini(INI)

    def run_pytest(*args: str) -> pytest.RunResult:
        return pytester.runpytest(
            "--streamguard",
            "--streamguard-toxiproxy",
            toxiproxy_url,
            "--streamguard-target-url",
            replay_url,
            "-p",
            "no:cacheprovider",
            *args,
        )

    return run_pytest
