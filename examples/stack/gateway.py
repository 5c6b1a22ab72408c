"""A small API gateway in front of a model server, to try a stack on: Starlette on uvicorn.

It forwards every POST (``/v1/chat/completions``, ``/v1/completions``, ``/generate``, ...) to
the model server at ``--upstream HOST:PORT`` with the same body and headers it needs (the
content type, and ``x-request-id`` and ``x-streamguard-aim`` when the client sent them), and
streams the answer back as it comes. With ``--buffer`` it reads the whole answer before sending
any of it, as a gateway with response buffering on does: every token then reaches the client at
once, at the end; with ``--drop-ids`` it forwards no ``x-request-id``, as a gateway that does
not pass request ids on; with ``--read-timeout SECONDS`` it gives up on an upstream silent that
long (httpx's read timeout) and ends the client's answer unfinished; with ``--block-s SECONDS``
it holds its event loop that long on every 5th piece of an answer it passes on (a synchronous
call inside ``async def``, as a blocking client library makes). ``/readyz`` answers 200 once
the model server's ``/readyz`` does (asked with the same headers passed on).

Run it with ``python gateway.py --port 8080 --upstream 127.0.0.1:8000``; it binds ``--host``
(127.0.0.1 unless given; a stack's ini passes ``{host}``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import AsyncIterator

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

FORWARDED = ("content-type", "x-request-id", "x-streamguard-aim")


def make_app(
    upstream: str,
    buffer: bool,
    drop_ids: bool = False,
    read_timeout: float | None = None,
    block_s: float = 0.0,
) -> Starlette:
    """The gateway's app, forwarding to ``upstream`` (``host:port``)."""
    forwarded = [name for name in FORWARDED if not (drop_ids and name == "x-request-id")]
    timeout = httpx.Timeout(10, read=read_timeout)
    client = httpx.AsyncClient(base_url=f"http://{upstream}", timeout=timeout)

    def headers_of(request: Request) -> dict[str, str]:
        return {k: v for k, v in request.headers.items() if k.lower() in forwarded}

    async def forward(request: Request) -> Response:
        headers = headers_of(request)
        sent = client.build_request(
            "POST", request.url.path, content=await request.body(), headers=headers
        )
        answer = await client.send(sent, stream=True)
        media_type = answer.headers.get("content-type", "text/event-stream")
        if buffer:
            body = await answer.aread()
            return Response(body, status_code=answer.status_code, media_type=media_type)

        async def passed_on() -> AsyncIterator[bytes]:
            # A break of the upstream mid-answer raises here, and uvicorn ends the client's
            # answer unfinished: the client sees its stream cut, as the model's was.
            try:
                pieces = 0
                async for piece in answer.aiter_raw():
                    pieces += 1
                    if block_s and pieces % 5 == 0:
                        time.sleep(block_s)  # noqa: ASYNC251 -- the incident: the loop stops
                    yield piece
            finally:
                await answer.aclose()

        return StreamingResponse(passed_on(), status_code=answer.status_code, media_type=media_type)

    async def ready(request: Request) -> Response:
        try:
            answer = await client.get("/readyz", headers=headers_of(request))
        except httpx.HTTPError as exc:
            return PlainTextResponse(f"model server not reachable: {exc}", status_code=503)
        return PlainTextResponse(
            "ok" if answer.is_success else "model server not ready",
            status_code=200 if answer.is_success else 503,
        )

    return Starlette(
        routes=[
            Route("/readyz", ready),
            Route("/{path:path}", forward, methods=["POST"]),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    """``python gateway.py --port PORT --upstream HOST:PORT [--host HOST] [--buffer] ...``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1", help="the interface to listen on")
    parser.add_argument("--upstream", required=True, help="the model server's HOST:PORT")
    parser.add_argument("--buffer", action="store_true", help="send each answer whole")
    parser.add_argument("--drop-ids", action="store_true", help="forward no x-request-id")
    parser.add_argument("--read-timeout", type=float, help="seconds of upstream silence allowed")
    parser.add_argument("--block-s", type=float, default=0.0, help="seconds to block per request")
    args = parser.parse_args(argv)
    app = make_app(args.upstream, args.buffer, args.drop_ids, args.read_timeout, args.block_s)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
