"""Fixtures for the stream-format tests: the transcript replay app on real uvicorn (port 0)
and one embedded Toxiproxy server; pytester runs reach both by URL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType

import httpcore  # noqa: F401 -- see below
import pytest
from replay_app import app
from served import embedded_toxiproxy, loopback_socket, serve_in_thread

# httpx imports httpcore lazily and caches its exception classes on first use. pytester's
# in-process runs drop modules first imported inside them, so a later run would get new
# httpcore classes that httpx no longer maps; importing httpcore here keeps one copy.

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"


@pytest.fixture(scope="session")
def replay_url() -> Iterator[str]:
    """The transcript replay app, served in a thread by real uvicorn on a port-0 socket."""
    with loopback_socket() as sock, serve_in_thread(app, [sock]):
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="session")
def toxiproxy_url() -> Iterator[str]:
    """One embedded Toxiproxy server for the whole run; pytester runs reach it by URL."""
    with embedded_toxiproxy() as url:
        yield url


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


@pytest.fixture(scope="session")
def official_clients() -> ModuleType:
    """``oracles`` (the vendors' official clients), imported once per worker, before any
    pytester run: pytester drops every module first imported during its test, so each format's
    test imported the SDKs again (12 times a run, over a second of CPU each)."""
    import oracles

    return oracles
