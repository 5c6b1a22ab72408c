"""A model server on FastAPI and uvicorn, as a team writes one around an inference engine:
OpenAI-shaped SSE chunks from ``POST /v1/chat/completions``, ``/readyz``, and Prometheus gauges
on ``/metrics`` (named as the plugin reads them: the engine's requests in flight, the open
streams). The engine generates in a task of its own and hands tokens to the response through a
queue. It binds ``--port``.

``--incident`` picks the one thing wrong with it (``healthy``: nothing):

- ``blocked_loop``: the response generator detokenizes with a synchronous call every 4 tokens
  (``time.sleep`` standing for it): the event loop serves nothing else meanwhile;
- ``error``: the engine's step raises after 5 tokens (a device error), the exception escapes
  the response generator, uvicorn logs its traceback and ends the body unfinished;
- ``not_cancelled``: a client that goes away leaves its generation running to the end;
- ``pause``: healthy, but after 4 tokens the model is silent ``--pause-s`` seconds (a tool call,
  a long step) before it goes on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from prometheus_client import CollectorRegistry, Gauge, generate_latest

TOKEN_S = 0.02
DETOKENIZE_EVERY = 4
DETOKENIZE_S = 0.15
FAIL_AFTER = 5
PAUSE_AFTER = 4

REGISTRY = CollectorRegistry()
ENGINE = Gauge(
    "streamguard_target_engine_requests", "Requests the engine generates for", registry=REGISTRY
)
OPEN = Gauge("streamguard_target_active_streams", "Open response streams", registry=REGISTRY)


class DeviceError(RuntimeError):
    """What an accelerator's failed kernel raises."""


def chunk(text: str | None, finish: str | None = None) -> bytes:
    delta = {"content": text} if text is not None else {}
    body = {
        "id": "chatcmpl-stack",
        "object": "chat.completion.chunk",
        "model": "team-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


Out = asyncio.Queue[str | Exception | None]


async def generate(tokens: int, out: Out, incident: str, pause: float) -> None:
    """The engine: a token every ``TOKEN_S`` into ``out``, then None; an exception of a step
    is handed over to the response, as an async engine's output stream does."""
    ENGINE.inc()
    try:
        for index in range(tokens):
            await asyncio.sleep(TOKEN_S)
            if incident == "pause" and index == PAUSE_AFTER:
                await asyncio.sleep(pause)
            if incident == "error" and index == FAIL_AFTER:
                raise DeviceError("CUDA error: an illegal memory access was encountered")
            out.put_nowait(f"tok{index} ")
    except DeviceError as exc:
        out.put_nowait(exc)
    finally:
        ENGINE.dec()
        out.put_nowait(None)


def make_app(incident: str, pause: float) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> Response:
        body = await request.json()
        out: Out = asyncio.Queue()
        task = asyncio.create_task(generate(int(body.get("max_tokens", 16)), out, incident, pause))

        async def events() -> AsyncIterator[bytes]:
            OPEN.inc()
            try:
                index = 0
                while (text := await out.get()) is not None:
                    if isinstance(text, Exception):
                        raise text
                    if incident == "blocked_loop" and index % DETOKENIZE_EVERY == 3:
                        time.sleep(DETOKENIZE_S)  # noqa: ASYNC251 -- the incident
                    index += 1
                    yield chunk(text)
                yield chunk(None, "stop")
                yield b"data: [DONE]\n\n"
            finally:
                OPEN.dec()
                if incident != "not_cancelled":
                    task.cancel()

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.get("/readyz")
    async def ready() -> Response:
        return PlainTextResponse("ok")

    @app.get("/metrics")
    async def metrics() -> Response:
        return PlainTextResponse(generate_latest(REGISTRY).decode())

    return app


INCIDENTS = ("healthy", "blocked_loop", "error", "not_cancelled", "pause")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--incident", choices=INCIDENTS, default="healthy")
    parser.add_argument("--pause-s", type=float, default=1.0)
    args = parser.parse_args()
    app = make_app(args.incident, args.pause_s)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="off")


if __name__ == "__main__":
    main()
