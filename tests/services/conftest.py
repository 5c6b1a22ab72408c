"""Fixture for the ingress tests (``services/ingress.py``): the SSE app (``sse_app.py``) under
uvicorn."""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SSE_APP = Path(__file__).with_name("sse_app.py")
STARTUP_TIMEOUT_S = 20.0


@pytest.fixture(scope="session")
def sse_upstream() -> Iterator[str]:
    """URL of the SSE app (``sse_app.py``) running under uvicorn in its own process."""
    proc = subprocess.Popen(
        [sys.executable, str(SSE_APP)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=STARTUP_TIMEOUT_S):
                raise RuntimeError(f"sse_app.py printed no URL within {STARTUP_TIMEOUT_S} s")
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"sse_app.py exited with code {proc.wait()} before printing a URL")
        url: str = json.loads(line)["url"]
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
