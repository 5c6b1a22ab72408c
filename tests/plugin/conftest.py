"""Fixtures for the plugin's own tests: pytester runs with the plugin on, against the example
app and the embedded Toxiproxy of ``tests/conftest.py`` (by URL), or the app started by command."""

from __future__ import annotations

import sys
from collections.abc import Callable

import httpcore  # noqa: F401 -- see below
import pytest
from plugin_helpers import INI, streamguard_runner
from served import STREAM_APP

# httpx imports httpcore lazily and caches its exception classes on first use. pytester's
# in-process runs drop modules first imported inside them, so a later run would get new
# httpcore classes that httpx no longer maps; importing httpcore here keeps one copy.


@pytest.fixture(scope="session")
def app_cmd() -> str:
    """A --streamguard-target-cmd that starts the example app on the plugin's chosen port."""
    return f"{sys.executable} {STREAM_APP} --port {{port}}"


@pytest.fixture(autouse=True)
def _quiet_inner_asyncio(request: pytest.FixtureRequest) -> None:
    """Give pytester runs an ini that pytest-asyncio does not warn about."""
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester").makeini(INI)


@pytest.fixture
def run(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str
) -> Callable[..., pytest.RunResult]:
    """Run pytest in-process with the plugin on, against the shared app and server."""
    return streamguard_runner(pytester, toxiproxy_url, app_url, subprocess=False)
