"""Fixtures that start the real target (subprocess or in-process uvicorn) on a free port."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from target_harness import InProcessTarget, TargetProcess, start_target, wait_until

from pytest_streamguard.common.tls import tls_context
from target_app import TargetConfig

# create_app, target_app.server and .tiny_model import torch and transformers: imported in the
# fixtures that need them, not at collection, where they cost every xdist worker seconds.


@pytest.fixture(scope="session")
def tiny_cache(model_cache: Path) -> Path:
    """The worker's model cache, with the tiny model built once (the targets started by the
    tests then only load it)."""
    from target_app.tiny_model import ensure_tiny_model

    ensure_tiny_model(model_cache)
    return model_cache


@pytest.fixture(scope="module")
def make_target(
    tiny_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., TargetProcess]]:
    """Factory: start ``python -m target_app`` with extra flags; every process is stopped
    (SIGTERM, then waited for) when the module's tests are done."""
    started: list[TargetProcess] = []

    def make(*args: str) -> TargetProcess:
        log = tmp_path_factory.mktemp("target-log") / "stderr.txt"
        target = start_target(list(args), tiny_cache, log)
        started.append(target)
        return target

    yield make
    for target in started:
        target.stop()


@pytest.fixture
def inprocess_target(
    tiny_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., InProcessTarget]]:
    """Factory: serve ``create_app(config)`` on 127.0.0.1:0 in a thread (optionally with a
    small socket send buffer), wait until ready; stopped and joined at teardown."""
    from target_app import create_app
    from target_app.server import uvicorn_config

    monkeypatch.setenv("STREAMGUARD_CACHE", str(tiny_cache))
    running: list[tuple[uvicorn.Server, threading.Thread]] = []

    def make(config: TargetConfig, send_buffer: int | None = None) -> InProcessTarget:
        app = create_app(config)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if send_buffer is not None:
            # Accepted sockets inherit it: lets a test reach write backpressure quickly.
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        listener.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn_config(app, config, timeout_graceful_shutdown=1))
        thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=[listener])), daemon=True
        )
        thread.start()
        running.append((server, thread))
        wait_until(lambda: server.started, 30, "in-process uvicorn to start")
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with httpx.Client(base_url=url, timeout=5, verify=tls_context()) as client:
            wait_until(lambda: client.get("/readyz").status_code == 200, 120, "in-process /readyz")
        return InProcessTarget(url, app.state.target)

    yield make
    for server, thread in running:
        server.should_exit = True
        thread.join(timeout=15)
        assert not thread.is_alive(), "in-process uvicorn did not stop"
