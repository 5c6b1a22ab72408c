"""Fixtures for the embedded Toxiproxy server: one real server process per module."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from toxiproxy_helpers import ServerProcess, Upstream, echo, start_server

from pytest_streamguard.common.tls import tls_context


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """``python -m pytest_streamguard.toxiproxy_server -port 0 -seed 7``, stopped with SIGTERM."""
    process = start_server("-seed", "7")
    try:
        yield process
    finally:
        status = process.stop()
    assert status == 0, f"server exited with {status} after SIGTERM"


@pytest.fixture
def api(server: ServerProcess) -> Iterator[httpx.Client]:
    """An httpx client on the API; every proxy is deleted after the test."""
    with httpx.Client(base_url=server.url, timeout=10, verify=tls_context()) as client:
        yield client
        for name in client.get("/proxies").json():
            client.delete(f"/proxies/{name}")


@pytest.fixture
def upstream() -> Iterator[Callable[..., Upstream]]:
    """Factory for TCP upstreams on port 0 (default: echo); all closed after the test."""
    made: list[Upstream] = []

    def make(handler: Callable[..., None] = echo) -> Upstream:
        server = Upstream(handler)
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()


@pytest.fixture
def proxy(api: httpx.Client, upstream: Callable[..., Upstream]) -> Callable[..., str]:
    """Create a proxy on 127.0.0.1:0 to a new upstream; returns its bound listen address."""

    def make(name: str = "p", handler: Callable[..., None] = echo) -> str:
        target = upstream(handler)
        body = {"name": name, "listen": "127.0.0.1:0", "upstream": target.address}
        response = api.post("/proxies", json=body)
        assert response.status_code == 201, response.text
        listen: str = response.json()["listen"]
        return listen

    return make
