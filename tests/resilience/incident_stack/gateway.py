"""The incident's gateway: a small FastAPI app in front of the model server, as teams write it.

It forwards ``POST /v1/chat/completions`` to the model server at ``--upstream HOST:PORT`` with
the body and the request id headers (``x-request-id``, ``traceparent``), and streams the answer
back as it comes with httpx; a break of the upstream mid-answer raises in its generator, so
uvicorn ends the client's answer unfinished, as the model's was. ``GET /readyz`` answers 200 once
the model server's does (asked with the same request id headers).
Run: ``python gateway.py --port 8080 --upstream 127.0.0.1:8000``.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import httpx
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse

FORWARDED = ("content-type", "x-request-id", "traceparent")


def make_app(upstream: str) -> FastAPI:
    """The gateway's app, forwarding to ``upstream`` (``host:port``)."""
    app = FastAPI()
    client = httpx.AsyncClient(
        base_url=f"http://{upstream}",
        timeout=httpx.Timeout(10, read=None),
        limits=httpx.Limits(max_connections=None),
    )

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED}
        sent = client.build_request(
            "POST", "/v1/chat/completions", content=await request.body(), headers=headers
        )
        answer = await client.send(sent, stream=True)

        async def passed_on() -> AsyncIterator[bytes]:
            try:
                async for piece in answer.aiter_raw():
                    yield piece
            finally:
                await answer.aclose()

        media_type = answer.headers.get("content-type", "text/event-stream")
        return StreamingResponse(passed_on(), status_code=answer.status_code, media_type=media_type)

    @app.get("/readyz")
    async def ready(request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED}
        try:
            answer = await client.get("/readyz", headers=headers)
        except httpx.HTTPError:
            return Response("model server not reachable", status_code=503)
        return Response("ok" if answer.is_success else "model not ready", answer.status_code)

    return app


def main() -> None:
    """``python gateway.py --port PORT --upstream HOST:PORT``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the model server's HOST:PORT")
    args = parser.parse_args()
    uvicorn.run(make_app(args.upstream), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
