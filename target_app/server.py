"""Serving the app on uvicorn: the guarded protocol, and a graceful drain on SIGTERM/SIGINT.

uvicorn's own shutdown closes the listener, waits ``timeout_graceful_shutdown`` and then
cancels every request task, which cuts open streams without an error event (and its signal
handling re-raises SIGTERM afterwards, so the process exits 143). Here the first signal starts
a drain instead: new generation requests get 503 with ``Retry-After``, open streams get
``--shutdown-grace`` seconds to finish, each one still open then ends with an error event
saying the server is shutting down, and only then does uvicorn shut down; the exit status is 0.
A second signal skips the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette

from .config import TargetConfig
from .protocol import guarded_protocol
from .responses import SHUTTING_DOWN, SLOW_READER_GOODBYE_S
from .state import TargetState

UVICORN_SHUTDOWN_S = 0.3
"""uvicorn's ``timeout_graceful_shutdown`` after the drain: by then every stream has ended,
so this only bounds connections uvicorn still has to close."""

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def uvicorn_config(app: Starlette, config: TargetConfig, **settings: Any) -> uvicorn.Config:
    """The uvicorn settings the target runs with (``settings`` adds or overrides some)."""
    return uvicorn.Config(
        app,
        **{
            "log_level": "warning",
            "access_log": False,
            "lifespan": "on",
            "http": guarded_protocol(config.max_header_bytes, config.header_timeout),
            "timeout_graceful_shutdown": UVICORN_SHUTDOWN_S,
            **settings,
        },
    )


class TargetServer(uvicorn.Server):
    """``uvicorn.Server`` whose first SIGTERM/SIGINT drains the app's streams (see module)."""

    def __init__(self, config: uvicorn.Config, state: TargetState) -> None:
        super().__init__(config)
        self._state = state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Handle SIGTERM/SIGINT on the loop for the server's lifetime (main thread only, as
        signals are; elsewhere, e.g. a test's thread, stopping is ``should_exit``'s job)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        loop = asyncio.get_running_loop()
        self._loop = loop
        for sig in _SIGNALS:
            loop.add_signal_handler(sig, self._on_signal)
        try:
            yield
        finally:
            for sig in _SIGNALS:
                loop.remove_signal_handler(sig)

    def _on_signal(self) -> None:
        if self._drain is not None:
            self.should_exit = True
            self.force_exit = True
            return
        self._drain = asyncio.ensure_future(self.drain_then_exit())

    async def drain_then_exit(self) -> None:
        """Drain the app's streams (``drain``), then let uvicorn shut down."""
        try:
            await drain(self._state, self._state.config.shutdown_grace)
        finally:
            self.should_exit = True
        # No stream is left to generate for: stopping the engine's thread can overlap
        # uvicorn closing connections (the lifespan then waits for this same close).
        await self._state.close_engine()


async def drain(state: TargetState, grace: float) -> None:
    """Stop admitting, give open streams ``grace`` seconds, then end the rest with an error."""
    state.draining = True
    state.metrics.ready.set(0)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(grace):
            await state.wait_idle()
    if not state.active:
        return
    message = (
        f"{SHUTTING_DOWN}: the stream did not finish within the {grace:g} s drain "
        "(--shutdown-grace)"
    )
    for stream in list(state.streams):
        stream.end_for_shutdown(message)
    # Each writer sends its error event within SLOW_READER_GOODBYE_S or gives up.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(SLOW_READER_GOODBYE_S + 0.05):
            await state.wait_idle()
