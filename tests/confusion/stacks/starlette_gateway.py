"""An API gateway on Starlette and uvicorn in front of a model server, as a team writes one to
meter usage: each ``POST /v1/chat/completions`` is sent on to the upstream (``--upstream
HOST:PORT``) with httpx, with the content type, the authorization and the trace context
(``traceparent``); the answer's SSE lines are read one by one and each event is sent on as it
comes (the gateway counts them). ``GET /readyz`` answers 200 once the upstream's does. It binds
``--port``.

``--incident`` picks the one thing wrong with it (``healthy``: nothing):

- ``blocked_loop``: every 4 events the gateway calls a guardrail with a synchronous client
  (``time.sleep`` standing for the call) inside its ``async`` generator;
- ``buffer``: the guardrail needs the whole answer: the events are collected until
  ``data: [DONE]``, checked, then sent together;
- ``meter_error``: the usage meter reads ``usage`` from the event that carries a
  ``finish_reason``, which this model does not send: ``KeyError`` escapes the generator after
  the last token, uvicorn logs its traceback and ends the client's stream before ``[DONE]``;
- ``read_timeout``: httpx's read timeout is ``--timeout-s``: after that silence the gateway
  gives up on the upstream, logs a warning and answers 504 when no head came yet, or ends the
  client's stream there.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

FORWARDED = ("content-type", "authorization", "traceparent")
GUARDRAIL_EVERY = 4
GUARDRAIL_S = 0.15

log = logging.getLogger("gateway")
METERED: dict[str, int] = {}


def meter(event: dict[str, Any]) -> None:
    """Count an answer's tokens: the model's own count from its last event."""
    if event["choices"][0].get("finish_reason") is not None:
        METERED[event["model"]] = (
            METERED.get(event["model"], 0) + event["usage"]["completion_tokens"]
        )


def make_app(upstream: str, incident: str, timeout: float) -> Starlette:
    read = timeout if incident == "read_timeout" else None
    client = httpx.AsyncClient(base_url=f"http://{upstream}", timeout=httpx.Timeout(10, read=read))

    async def completions(request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED}
        sent = client.build_request(
            "POST", "/v1/chat/completions", content=await request.body(), headers=headers
        )
        try:
            answer = await client.send(sent, stream=True)
        except httpx.ReadTimeout:
            log.warning("upstream gave no answer in %.1f s", timeout)
            return JSONResponse({"error": {"message": "upstream timed out"}}, status_code=504)

        async def events() -> AsyncIterator[str]:
            count = 0
            try:
                async for line in answer.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    count += 1
                    if incident == "meter_error" and line != "data: [DONE]":
                        meter(json.loads(line[len("data:") :]))
                    if incident == "blocked_loop" and count % GUARDRAIL_EVERY == 0:
                        time.sleep(GUARDRAIL_S)  # noqa: ASYNC251 -- the incident
                    yield f"{line}\n\n"
            except httpx.ReadTimeout:
                log.warning("upstream silent for %.1f s after %d events", timeout, count)
            finally:
                await answer.aclose()

        async def checked() -> AsyncIterator[str]:
            held = [event async for event in events()]
            yield "".join(held)

        body = checked() if incident == "buffer" else events()
        return StreamingResponse(
            body, status_code=answer.status_code, media_type="text/event-stream"
        )

    async def ready(request: Request) -> Response:
        try:
            answer = await client.get("/readyz")
        except httpx.HTTPError:
            return PlainTextResponse("upstream unreachable", status_code=503)
        return PlainTextResponse(
            "ok" if answer.is_success else "upstream not ready", answer.status_code
        )

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/readyz", ready),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument(
        "--incident",
        choices=("healthy", "blocked_loop", "buffer", "meter_error", "read_timeout"),
        default="healthy",
    )
    parser.add_argument("--timeout-s", type=float, default=60.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    app = make_app(args.upstream, args.incident, args.timeout_s)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
