"""A small SSE server for the ingress tests: real Starlette on real uvicorn.

``GET /stream`` sends ``events`` data events ``interval`` seconds apart, then ``event: done``.
Query knobs: ``stall_after`` (index after which it pauses ``stall_s`` seconds; -1 for none) and
``accel`` (1 sends ``X-Accel-Buffering: no``, 0 leaves it out). Its pauses are the faults the
tests put in front of nginx, not synchronisation.

Run as a script: it binds 127.0.0.1 port 0 and prints one JSON line with its real URL.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


def _query(request: Request, name: str, kind: type[int] | type[float], default: float) -> float:
    raw = request.query_params.get(name)
    return default if raw is None else kind(raw)


async def stream(request: Request) -> Response:
    """Stream numbered events with an optional stall in the middle."""
    try:
        events = int(_query(request, "events", int, 12))
        interval = _query(request, "interval", float, 0.1)
        stall_after = int(_query(request, "stall_after", int, -1))
        stall_s = _query(request, "stall_s", float, 0.0)
        accel = int(_query(request, "accel", int, 0))
    except ValueError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)

    async def body() -> AsyncIterator[bytes]:
        for index in range(events):
            if index:
                await asyncio.sleep(interval)
            payload = {"index": index, "sent_ns": time.perf_counter_ns()}
            yield f"data: {json.dumps(payload)}\n\n".encode()
            if index == stall_after:
                await asyncio.sleep(stall_s)
        yield f"event: done\ndata: {json.dumps({'events': events})}\n\n".encode()

    headers = {"Cache-Control": "no-cache"}
    if accel:
        headers["X-Accel-Buffering"] = "no"
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


app = Starlette(routes=[Route("/stream", stream)])


def main() -> None:
    """Serve on 127.0.0.1 port 0 and print the real URL as one JSON line on stdout."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before the URL is printed: early connections wait in the backlog.
    sock.listen(128)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    print(json.dumps({"url": f"http://127.0.0.1:{port}"}), flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
