"""The engine interface and the thread-to-loop hand-off every engine uses."""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from ..config import TargetConfig
from ..faults import InjectedFault
from ..loading import LoadedModel
from ..stream import StreamItem, TokenStream


@dataclass(frozen=True)
class GenerationRequest:
    """What an engine needs to generate for one stream."""

    request_id: str
    input_ids: list[int]
    max_new_tokens: int
    ignore_eos: bool
    raise_after: int | None


class Engine(ABC):
    """Generates tokens for many concurrent streams without blocking the event loop."""

    name = ""

    def __init__(self, loaded: LoadedModel, config: TargetConfig) -> None:
        self.loaded = loaded
        self.config = config

    @abstractmethod
    def start(self) -> None:
        """Prepare for requests (blocking; run it off the event loop)."""

    @abstractmethod
    def submit(self, request: GenerationRequest, stream: TokenStream) -> None:
        """Begin generating into ``stream`` and bind its cancel hook (call on the event loop)."""

    @abstractmethod
    def in_flight(self) -> int:
        """Requests the engine is still generating for."""

    def queue_depths(self) -> dict[str, int]:
        """Depths of the engine's internal queues by name (empty for engines without any)."""
        return {}

    def threads(self) -> int:
        """Live per-request generation threads (0 for engines without any)."""
        return 0

    def failure(self) -> str | None:
        """Why the engine can no longer serve, or ``None`` while it is healthy."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Stop all generation and release the engine (blocking; run it off the event loop)."""


def finish_reason(last_token: int | None, eos_ids: frozenset[int], ignore_eos: bool) -> str:
    """OpenAI's vocabulary: ``stop`` when the model ended on EOS, else ``length``."""
    if not ignore_eos and last_token is not None and last_token in eos_ids:
        return "stop"
    return "length"


def failure_message(exc: BaseException) -> str:
    """What the client is told when generation raised."""
    if isinstance(exc, InjectedFault):
        return str(exc)
    return f"generation failed: {type(exc).__name__}: {exc}"


def thread_poster(
    loop: asyncio.AbstractEventLoop, stream: TokenStream
) -> Callable[[StreamItem], None]:
    """A function a worker thread calls to hand an item to ``stream`` on the event loop."""

    def post(item: StreamItem) -> None:
        # A closed loop (process shutdown under a running generation) has nobody left to
        # read the item.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(stream.push, item)

    return post
