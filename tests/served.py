"""Servers the suite's fixtures share: an ASGI app on real uvicorn in a thread, on sockets the
caller bound (port 0, or several addresses on one port), the example app (``examples/
stream_app.py``) it serves for the tests of several families, and one embedded Toxiproxy."""

from __future__ import annotations

import importlib.util
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import uvicorn

from pytest_streamguard.faults.toxiproxy_client import ToxiproxyServer

STARTUP_S = 15.0
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
STREAM_APP = EXAMPLES / "stream_app.py"


def load_stream_app() -> ModuleType:
    """The example streaming app (``examples/stream_app.py``), imported from its file."""
    spec = importlib.util.spec_from_file_location("streamguard_example_stream_app", STREAM_APP)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loopback_socket() -> socket.socket:
    """A TCP socket bound to a free port of 127.0.0.1."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def serve_in_thread(app: Any, sockets: Sequence[socket.socket]) -> Iterator[None]:
    """Serve ``app`` on ``sockets`` until the block ends; fail if uvicorn does not start."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": list(sockets)}, daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_S
    while not server.started:
        assert thread.is_alive(), "uvicorn thread exited during startup"
        assert time.monotonic() < deadline, f"uvicorn did not start within {STARTUP_S:g} s"
        time.sleep(0.01)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def embedded_toxiproxy() -> Iterator[str]:
    """An embedded Toxiproxy started like a real toxiproxy-server (its own process, port 0,
    startup line on stdout); yields its URL and stops it after the block."""
    server = ToxiproxyServer.embedded(startup_timeout=30.0)
    try:
        yield server.url
    finally:
        server.stop()
