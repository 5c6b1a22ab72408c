"""A server whose capacity is known exactly, for the headroom tests: real Starlette on uvicorn.

``POST /generate`` answers with ``--tokens`` SSE data events (``{"index", "text", "sent_ns"}``,
then ``event: done``, as the bundled target sends: ``sent_ns`` is ``time.perf_counter_ns()``
just before the event is handed to the server's write) ``--interval`` seconds apart,
each request holding one of ``--slots`` generation slots (an ``asyncio.Semaphore``) for its
whole answer: ``slots`` streams at once get their first token at once, the next one waits a
whole answer for a free slot. Its pauses are the answer's pace, not synchronisation.

Run as ``python capacity_app.py --port PORT --slots K --tokens N --interval S``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route


def make_app(slots: int, tokens: int, interval: float) -> Starlette:
    """The app with ``slots`` generation slots and answers of ``tokens`` events."""
    semaphore = asyncio.Semaphore(slots)

    async def generate(request: Request) -> Response:
        await request.body()
        await semaphore.acquire()

        async def body() -> AsyncIterator[bytes]:
            try:
                for index in range(tokens):
                    if index:
                        await asyncio.sleep(interval)
                    payload = {
                        "index": index,
                        "text": f"t{index} ",
                        "sent_ns": time.perf_counter_ns(),
                    }
                    yield f"data: {json.dumps(payload)}\n\n".encode()
                yield f"event: done\ndata: {json.dumps({'tokens': tokens})}\n\n".encode()
            finally:
                semaphore.release()

        return StreamingResponse(body(), media_type="text/event-stream")

    async def health(request: Request) -> Response:
        return Response("ok")

    return Starlette(
        routes=[Route("/generate", generate, methods=["POST"]), Route("/health", health)]
    )


def main() -> None:
    """Serve on 127.0.0.1 at ``--port``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--slots", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=10)
    parser.add_argument("--interval", type=float, default=0.05)
    args = parser.parse_args()
    app = make_app(args.slots, args.tokens, args.interval)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
