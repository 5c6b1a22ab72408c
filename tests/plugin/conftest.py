"""Fixtures for the plugin's own tests: the example app served by real uvicorn on port 0."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from types import ModuleType

import httpcore  # noqa: F401 -- see below
import pytest
from plugin_helpers import INI, STREAM_APP, streamguard_runner
from served import embedded_toxiproxy, loopback_socket, serve_in_thread

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
    with loopback_socket() as sock, serve_in_thread(_load_stream_app().app, [sock]):
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


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
    """One embedded Toxiproxy server for the whole run; pytester runs reach it by URL."""
    with embedded_toxiproxy() as url:
        yield url


@pytest.fixture
def run(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str
) -> Callable[..., pytest.RunResult]:
    """Run pytest in-process with the plugin on, against the shared app and server."""
    return streamguard_runner(pytester, toxiproxy_url, app_url, subprocess=False)
