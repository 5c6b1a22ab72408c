"""A replay transport: answers a client's request with a recorded response, read by read.

An official client is given an HTTP client over this transport (httpx's, or httpx2's for the
clients built on that fork of it: anthropic, huggingface_hub), so it runs its own code on the
recorded bytes without a socket: the status and headers first, then each body read in its
order, then the recorded ending (a clean end, or the connection's failure raised as the HTTP
library raises it). :meth:`Replay.stamp` says which read the client last took, so each output
the client yields carries the arrival stamp of the read that let it yield.
:func:`kept_client` keeps one official client per thread over one replay, pointed at each
stream in turn (:meth:`Replay.serve`).

The body is served decoded (as the reader took it), so the headers that describe the wire's
encoding and framing are left out.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType
from typing import Any, TypeVar

from pytest_streamguard.judge.base import REPLAY_TIMEOUT_S
from pytest_streamguard.stream.recorded import Recorded

#: Where a replayed client is pointed (the transport answers any path; nothing is resolved).
REPLAY_URL = "http://replay.invalid"
# The body is served decoded and whole-read by read: these described the original wire.
_WIRE_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection"})
_KEPT = threading.local()
# How kept_client builds a client: no retries (a retry would read the response twice).
_SDK_OPTIONS: dict[str, Any] = {
    "base_url": REPLAY_URL,
    "api_key": "replay",
    "max_retries": 0,
    "timeout": REPLAY_TIMEOUT_S,
}
Client = TypeVar("Client")


class Replay:
    """Serves a recorded response (till :meth:`serve` gives another) to every request a client
    makes through :meth:`client` or :meth:`transport`, each request from the first read again."""

    def __init__(self, recorded: Recorded) -> None:
        self.serve(recorded)

    def serve(self, recorded: Recorded) -> None:
        """Answer every request from now on with ``recorded``."""
        self.recorded = recorded
        self._at = 0
        self._first_ns = recorded.reads[0][0] if recorded.reads else 0

    def stamp(self) -> int:
        """The arrival stamp of the last body read handed to the client."""
        return self.recorded.reads[self._at - 1][0] if self._at else self._first_ns

    def transport(self, module: ModuleType) -> Any:
        """This replay as a transport of ``module`` (``httpx`` or ``httpx2``)."""
        return _transport_class(module)(self, module)

    def client(self, module: ModuleType) -> Any:
        """A new ``module.Client`` over this replay."""
        return module.Client(transport=self.transport(module), timeout=REPLAY_TIMEOUT_S)

    def headers(self) -> list[tuple[str, str]]:
        """The recorded headers but those of the wire's encoding and framing."""
        return [(k, v) for k, v in self.recorded.headers if k.lower() not in _WIRE_HEADERS]

    def reads(self, module: ModuleType) -> Iterator[bytes]:
        """Each recorded read in order, then the recorded ending raised as ``module`` does."""
        self._at = 0
        for _, data in self.recorded.reads:
            self._at += 1
            yield data
        self._end(module)

    def _end(self, module: ModuleType) -> None:
        ending, message = self.recorded.ending, self.recorded.message or self.recorded.ending
        if ending == "reset":
            raise module.ReadError(message) from ConnectionResetError(104, "Connection reset")
        if ending == "cut":
            raise module.RemoteProtocolError(message)
        if ending == "timeout":
            raise module.ReadTimeout(message)
        if ending == "network":
            raise module.ReadError(message)


def kept_client(
    sdk: Callable[..., Client],
    module: ModuleType,
    recorded: Recorded,
    build: Callable[[Replay], Client] | None = None,
) -> tuple[Replay, Client]:
    """This thread's ``sdk`` client over a ``module`` client of a replay, and that replay, now
    serving ``recorded``: built by ``build`` from the replay, or (None) as ``openai.OpenAI``,
    ``anthropic.Anthropic`` and ``groq.Groq`` are built alike. Built once per thread, not per
    stream: building them took about 0.1 ms of the 3.5 ms judging a stream of 50 events takes
    (benchmarks/RESULTS.md), a ``genai.Client`` about 30 ms."""
    kept: dict[Any, tuple[Replay, Any]] = _KEPT.__dict__.setdefault("clients", {})
    if sdk not in kept:
        replay = Replay(recorded)
        client = (
            build(replay)
            if build is not None
            else sdk(**_SDK_OPTIONS, http_client=replay.client(module))
        )
        kept[sdk] = replay, client
    replay, client = kept[sdk]
    replay.serve(recorded)
    return replay, client


@functools.cache
def _transport_class(module: ModuleType) -> type[Any]:
    """The transport class of ``module`` (made once per HTTP library: httpx and httpx2 have
    the same API under different names)."""

    class Body(module.SyncByteStream, module.AsyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self, replay: Replay) -> None:
            self.replay = replay

        def __iter__(self) -> Iterator[bytes]:
            yield from self.replay.reads(module)

        async def __aiter__(self) -> AsyncIterator[bytes]:
            for data in self.replay.reads(module):
                yield data

    class Transport(module.BaseTransport, module.AsyncBaseTransport):  # type: ignore[misc,name-defined]
        def __init__(self, replay: Replay, module: ModuleType) -> None:
            self.replay = replay
            self.module = module

        def _answer(self, request: Any) -> Any:
            recorded = self.replay.recorded
            if recorded.status is None:
                raise self.module.ConnectError(recorded.message or "no response", request=request)
            return self.module.Response(
                recorded.status,
                headers=self.replay.headers(),
                stream=Body(self.replay),
                request=request,
            )

        def handle_request(self, request: Any) -> Any:
            request.read()
            return self._answer(request)

        async def handle_async_request(self, request: Any) -> Any:
            await request.aread()
            return self._answer(request)

    return Transport
