"""The mutable state of one app instance, shared by its routes, responses and shutdown."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from .config import TargetConfig
from .engines import Engine
from .engines.naive import NaiveRunner
from .loading import LoadedModel
from .metrics import TargetMetrics
from .stream import TokenStream


@dataclass
class TargetState:
    """Everything the routes share (all of it touched on the event loop only)."""

    config: TargetConfig
    metrics: TargetMetrics = field(default_factory=TargetMetrics)
    loaded: LoadedModel | None = None
    engine: Engine | None = None
    naive: NaiveRunner | None = None
    ready: bool = False
    load_error: str | None = None
    active: int = 0
    draining: bool = False
    """Set on SIGTERM: new generation requests get 503 while open streams drain."""
    streams: set[TokenStream] = field(default_factory=set)
    """The open streams, so shutdown can end each one with an error event."""
    _idle: asyncio.Event = field(default_factory=asyncio.Event)
    _engine_closing: asyncio.Future[None] | None = None

    def __post_init__(self) -> None:
        self._idle.set()

    def admit(self, stream: TokenStream) -> None:
        """Count ``stream`` as holding a slot until ``release``."""
        self.active += 1
        self.streams.add(stream)
        self._idle.clear()
        self.metrics.active_streams.inc()

    def release(self, stream: TokenStream) -> None:
        """Give back the slot ``admit`` took (never awaits: runs in ``finally`` blocks)."""
        self.active -= 1
        self.streams.discard(stream)
        self.metrics.active_streams.dec()
        if not self.active:
            self._idle.set()

    async def close_engine(self) -> None:
        """Close the engine in a thread, once; every caller waits for that one close (the
        shutdown drain starts it early so it overlaps uvicorn's own shutdown)."""
        engine = self.engine
        if engine is None:
            return
        if self._engine_closing is None:
            self._engine_closing = asyncio.ensure_future(asyncio.to_thread(engine.close))
        await asyncio.shield(self._engine_closing)

    async def wait_idle(self) -> None:
        """Wait until no stream holds a slot (callers bound it with ``asyncio.timeout``)."""
        await self._idle.wait()
