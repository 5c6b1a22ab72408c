"""A chat-completions server on Starlette and uvicorn, as a team writes one: OpenAI-shaped SSE
chunks from ``POST /v1/chat/completions``, a ready path ``/readyz``, and the port it bound
(port 0 unless ``--port``) on its listening line.

``--incident`` picks the one thing wrong with it (``healthy``: nothing):

- ``blocked_loop``: a synchronous call (``time.sleep`` standing for a blocking client library)
  inside the ``async def`` generator every 5 tokens; nothing else on the loop runs meanwhile;
- ``busy_loop``: the same every 5 tokens, but CPU work (a tokenizer, a model run on the CPU):
  ``BLOCK_WORK`` steps, 0.15 s of one quiet core, longer on a busy machine;
- ``staircase``: the prompt is rendered and tokenized synchronously in the handler before the
  response starts, so requests sent together get their heads one after another;
- ``held_open``: after ``data: [DONE]`` the handler waits for its usage report before it ends
  the body;
- ``tool_pause``: the model writes 20 tokens, then calls a tool, and the stream is silent while
  the tool runs (healthy by itself; behind a proxy with a short read timeout the stream is cut);
- ``quick_tool``: the same tool call after only 3 tokens, within a few tenths of a second of
  the request;
- ``slow``: a slow but healthy model: a long prefill, then steady tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

TOKEN_S = 0.02
BLOCK_EVERY = 5
BLOCK_S = 0.15
BLOCK_WORK = 1_700_000
TEMPLATE_S = 0.15
USAGE_REPORT_S = 1.5
TOOL_AFTER = 20
QUICK_TOOL_AFTER = 3
TOOL_S = 1.8
SLOW_PREFILL_S = 0.6
SLOW_TOKEN_S = 0.05


def chunk(text: str | None, finish: str | None = None) -> bytes:
    delta = {"content": text} if text is not None else {}
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "team-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


DONE = b"data: [DONE]\n\n"


def work(steps: int) -> int:
    """CPU work on the calling thread, holding the interpreter's lock throughout."""
    x = 1
    for _ in range(steps):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return x


def make_app(incident: str) -> Starlette:
    async def completions(request: Request) -> Response:
        body = await request.json()
        tokens = int(body.get("max_tokens", 16))
        if incident == "staircase":
            time.sleep(TEMPLATE_S)  # noqa: ASYNC251 -- the incident: sync work on the loop

        async def events() -> AsyncIterator[bytes]:
            if incident == "slow":
                await asyncio.sleep(SLOW_PREFILL_S)
            pace = SLOW_TOKEN_S if incident == "slow" else TOKEN_S
            for index in range(tokens):
                await asyncio.sleep(pace)
                if incident == "blocked_loop" and index % BLOCK_EVERY == BLOCK_EVERY - 1:
                    time.sleep(BLOCK_S)  # noqa: ASYNC251 -- the incident: the loop stops
                if incident == "busy_loop" and index % BLOCK_EVERY == BLOCK_EVERY - 1:
                    work(BLOCK_WORK)
                tool_at = {"tool_pause": TOOL_AFTER, "quick_tool": QUICK_TOOL_AFTER}
                if index == tool_at.get(incident):
                    await asyncio.sleep(TOOL_S)
                yield chunk(f"tok{index} ")
            yield chunk(None, "stop")
            yield DONE
            if incident == "held_open":
                await asyncio.sleep(USAGE_REPORT_S)

        return StreamingResponse(events(), media_type="text/event-stream")

    async def ready(request: Request) -> Response:
        return PlainTextResponse("ok")

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/readyz", ready),
        ]
    )


INCIDENTS = (
    "healthy",
    "blocked_loop",
    "busy_loop",
    "staircase",
    "held_open",
    "tool_pause",
    "quick_tool",
    "slow",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--incident", choices=INCIDENTS, default="healthy")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    sock = socket.socket()
    sock.bind(("127.0.0.1", args.port))
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(make_app(args.incident), log_level="warning", lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
