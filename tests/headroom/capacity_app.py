"""A server whose capacity is known exactly, for the headroom tests: real Starlette on uvicorn.

``POST /generate`` answers with ``--tokens`` SSE data events (``{"index", "text", "sent_ns"}``,
then ``event: done``, as the bundled target sends: ``sent_ns`` is ``time.perf_counter_ns()``
just before the event is handed to the server's write) ``--interval`` seconds apart,
each request holding one of ``--slots`` generation slots (an ``asyncio.Semaphore``) for its
whole answer: ``slots`` streams at once get their first token at once, the next one waits a
whole answer for a free slot. Its pauses are the answer's pace, not synchronisation.

With ``--first-token S`` each answer's first event comes ``S`` seconds after its slot was
taken (a prefill): every stream of a load is sent before any first token arrives. With
``--blocking`` the pause between tokens is ``time.sleep``, which blocks the server's event
loop (the anti-pattern of a blocked loop): streams are served one pause at a time, and its
``/health`` answers only between pauses.

Run as ``python capacity_app.py --port PORT --slots K --tokens N --interval S [--first-token S]
[--blocking]``.
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


def make_app(
    slots: int, tokens: int, interval: float, blocking: bool = False, first_token: float = 0.0
) -> Starlette:
    """The app with ``slots`` generation slots and answers of ``tokens`` events; ``blocking``:
    each pause blocks the event loop; ``first_token``: seconds before the first event."""
    semaphore = asyncio.Semaphore(slots)

    async def generate(request: Request) -> Response:
        await request.body()
        await semaphore.acquire()

        async def body() -> AsyncIterator[bytes]:
            try:
                if first_token:
                    await asyncio.sleep(first_token)
                for index in range(tokens):
                    if index and blocking:
                        time.sleep(interval)  # noqa: ASYNC251 -- the blocked loop on purpose
                    elif index:
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
    parser.add_argument("--blocking", action="store_true")
    parser.add_argument("--first-token", type=float, default=0.0)
    args = parser.parse_args()
    app = make_app(args.slots, args.tokens, args.interval, args.blocking, args.first_token)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
