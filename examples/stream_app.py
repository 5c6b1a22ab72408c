"""A small streaming app to try pytest-streamguard on: a fake LLM that streams numbered tokens.

It stands in for "your app": Starlette on uvicorn, with an SSE endpoint, OpenAI-style
completions and chat completions endpoints (each shaped as the official ``openai`` client reads
it: ``choices[].text``, ``choices[].delta``) and an NDJSON endpoint. The request body sets the
pace, so tests are deterministic::

    {"prompt": "hi", "max_new_tokens": 16, "interval_s": 0.02, "first_token_s": 0.0,
     "fail_after": null, "heartbeat_s": null, "pad": 0, "drop_end": false, "drop_done": false,
     "hold_open_s": 0, "break_after_end": false, "one_write": false}

``drop_end`` closes the stream cleanly without its end event (a stream cut short by the app
itself); ``drop_done`` closes an OpenAI-style stream after its ``finish_reason`` chunk without
``data: [DONE]``; ``hold_open_s`` keeps the body open that long after the stream's end (a server
that forgets to close it); ``break_after_end`` breaks the connection right after the end, before
the body's own end (an incomplete chunked body); ``one_write`` writes the whole body at once
when it is complete (a server that collects its answer, then sends it); ``/v1/completions``
streams only with ``"stream": true``, as OpenAI's API does (and ``/v1/chat/completions``), and
answers one JSON object otherwise.

Run it with ``python stream_app.py --port 0``: it binds 127.0.0.1 and prints
``{"message": "streamguard target listening", "url": "http://127.0.0.1:<port>"}`` once bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

REGISTRY = CollectorRegistry()
ACTIVE = Gauge("stream_app_active_streams", "Streams being written now", registry=REGISTRY)
STARTED = Counter("stream_app_streams", "Streams started", registry=REGISTRY)


class Pace:
    """How one request wants its tokens paced (validated request body)."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.prompt = str(body.get("prompt", ""))
        self.tokens = int(body.get("max_new_tokens", 16))
        self.interval = float(body.get("interval_s", 0.02))
        self.first = float(body.get("first_token_s", 0.0))
        fail_after = body.get("fail_after")
        self.fail_after = None if fail_after is None else int(fail_after)
        heartbeat = body.get("heartbeat_s")
        self.heartbeat = None if heartbeat is None else float(heartbeat)
        self.pad = int(body.get("pad", 0))
        self.drop_end = bool(body.get("drop_end", False))
        self.drop_done = bool(body.get("drop_done", False))
        self.hold_open = float(body.get("hold_open_s", 0))
        self.break_after_end = bool(body.get("break_after_end", False))
        self.stream = body.get("stream") is True
        self.one_write = bool(body.get("one_write", False))
        if self.tokens < 0 or self.interval < 0 or self.first < 0 or self.pad < 0:
            raise ValueError("max_new_tokens, interval_s, first_token_s and pad must be >= 0")

    async def wait(self, seconds: float) -> AsyncIterator[None]:
        """Sleep ``seconds``, yielding once per heartbeat interval on the way."""
        if self.heartbeat is None or self.heartbeat <= 0:
            await asyncio.sleep(seconds)
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while (left := end - loop.time()) > 0:
            await asyncio.sleep(min(self.heartbeat, left))
            if end - loop.time() > 0:
                yield None

    async def after_end(self) -> None:
        """What the body does once the stream's end is written: hold it open, or break it."""
        if self.hold_open > 0:
            await asyncio.sleep(self.hold_open)
        if self.break_after_end:
            # Raised from the body, uvicorn aborts the connection without the chunked body's
            # terminating chunk.
            raise ConnectionAbortedError("stream_app: break_after_end")

    def token(self, index: int) -> str:
        """The text of token ``index``, padded to make events bigger when asked."""
        return f"tok{index} " + "x" * self.pad


async def _written(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``body`` in one write once complete (``one_write``)."""
    yield b"".join([part async for part in body])


def _streamed(pace: Pace, body: AsyncIterator[bytes], media_type: str, **kw: Any) -> Response:
    """The streaming response of ``body``: event by event, or in one write (``one_write``)."""
    content = _written(body) if pace.one_write else body
    return StreamingResponse(content, media_type=media_type, **kw)


async def _body(request: Request) -> Pace | Response:
    try:
        raw = await request.json() if await request.body() else {}
        return Pace(raw if isinstance(raw, dict) else {})
    except (ValueError, TypeError) as exc:
        return JSONResponse({"error": f"bad request body: {exc}"}, status_code=400)


async def _tokens(pace: Pace) -> AsyncIterator[tuple[int, str] | None]:
    """Yield (index, token) on schedule, None for a heartbeat, raise RuntimeError to fail."""
    ACTIVE.inc()
    STARTED.inc()
    try:
        async for _ in pace.wait(pace.first):
            yield None
        for index in range(pace.tokens):
            if pace.fail_after is not None and index >= pace.fail_after:
                raise RuntimeError(f"generation failed after {index} tokens")
            if index:
                async for _ in pace.wait(pace.interval):
                    yield None
            yield index, pace.token(index)
    finally:
        ACTIVE.dec()


async def generate(request: Request) -> Response:
    """SSE: one ``data: {"index", "text"}`` event per token, ``event: done`` at the end."""
    pace = await _body(request)
    if isinstance(pace, Response):
        return pace

    async def events() -> AsyncIterator[bytes]:
        count = 0
        try:
            async for item in _tokens(pace):
                if item is None:
                    yield b": ping\n\n"
                    continue
                index, text = item
                count += 1
                yield f"data: {json.dumps({'index': index, 'text': text})}\n\n".encode()
        except RuntimeError as exc:
            yield f"event: error\ndata: {json.dumps({'error': str(exc)})}\n\n".encode()
            return
        if pace.drop_end:
            return
        yield f"event: done\ndata: {json.dumps({'tokens': count})}\n\n".encode()
        await pace.after_end()

    return _streamed(pace, events(), "text/event-stream", headers={"X-Accel-Buffering": "no"})


async def completions(request: Request) -> Response:
    """OpenAI-style legacy completions. With ``"stream": true``: ``text_completion`` chunks
    (``choices[].text``), a chunk with the ``finish_reason``, then ``data: [DONE]``; otherwise
    one JSON object."""
    return await _openai(request, _completion_choice)


async def chat(request: Request) -> Response:
    """OpenAI-style chat completions. With ``"stream": true``: a role-only delta, content
    deltas, a chunk with the ``finish_reason``, then ``data: [DONE]``; otherwise one JSON
    object."""
    return await _openai(request, _chat_choice)


# Shapes one choice of an OpenAI-style API: (a token's text, or None; whether the answer is whole).
Choice = Callable[[str | None, bool], dict[str, Any]]


def _completion_choice(text: str | None, whole: bool) -> dict[str, Any]:
    """A completions choice: its ``text`` (None: the empty one the finish_reason comes in)."""
    return {"index": 0, "text": text or "", "logprobs": None}


def _chat_choice(text: str | None, whole: bool) -> dict[str, Any]:
    """A chat choice: the answer's ``message`` when whole, else a ``delta`` (None: the role
    delta first, an empty one with the finish_reason last)."""
    if whole:
        return {"index": 0, "message": {"role": "assistant", "content": text}}
    return {"index": 0, "delta": {} if text is None else {"content": text}}


async def _openai(request: Request, choice: Choice) -> Response:
    """The stream (or, without ``"stream": true``, the one JSON object) of an OpenAI-style
    API whose choices ``choice(text, whole)`` shapes."""
    pace = await _body(request)
    if isinstance(pace, Response):
        return pace
    if not pace.stream:
        text = "".join([item[1] async for item in _tokens(pace) if item is not None])
        return JSONResponse({"choices": [{**choice(text, True), "finish_reason": "length"}]})

    def event(part: dict[str, Any]) -> bytes:
        return f"data: {json.dumps({'choices': [part]})}\n\n".encode()

    async def events() -> AsyncIterator[bytes]:
        if choice is _chat_choice:
            yield event({"index": 0, "delta": {"role": "assistant"}})
        async for item in _tokens(pace):
            if item is not None:
                yield event(choice(item[1], False))
        if pace.drop_end:
            return
        yield event({**choice(None, False), "finish_reason": "length"})
        if not pace.drop_done:
            yield b"data: [DONE]\n\n"
        await pace.after_end()

    return _streamed(pace, events(), "text/event-stream")


async def ndjson(request: Request) -> Response:
    """One JSON object per line: ``{"index", "text"}``."""
    pace = await _body(request)
    if isinstance(pace, Response):
        return pace

    async def lines() -> AsyncIterator[bytes]:
        async for item in _tokens(pace):
            if item is not None:
                yield (json.dumps({"index": item[0], "text": item[1]}) + "\n").encode()

    return _streamed(pace, lines(), "application/x-ndjson")


async def home(request: Request) -> Response:
    """An HTML page, as a docs route or a proxy's error page would answer a stream request."""
    return HTMLResponse("<!doctype html><title>stream_app</title><p>POST /generate to stream</p>")


async def ready(request: Request) -> Response:
    """Readiness: 200 once the app serves requests."""
    return PlainTextResponse("ok")


async def metrics(request: Request) -> Response:
    """Prometheus text."""
    return Response(generate_latest(REGISTRY), media_type="text/plain; version=0.0.4")


app = Starlette(
    routes=[
        Route("/generate", generate, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/ndjson", ndjson, methods=["POST"]),
        Route("/", home),
        Route("/readyz", ready),
        Route("/healthz", ready),
        Route("/metrics", metrics),
    ]
)


def main(argv: list[str] | None = None) -> None:
    """Serve the app on 127.0.0.1; ``--port 0`` picks a free port and prints it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(128)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    print(
        json.dumps({"message": "streamguard target listening", "url": f"http://{host}:{port}"}),
        flush=True,
    )
    server.run(sockets=[sock])
    sys.exit(0)


if __name__ == "__main__":
    main()
