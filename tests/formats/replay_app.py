"""Replays a recorded stream transcript byte for byte, with its content type and pauses.

``GET|POST /{format}/{name}/{anything}`` answers ``transcripts/{format}/{name}.*`` as written
on disk. ``{anything}`` is whatever path a vendor SDK appends to its base URL
(``/chat/completions``, ``/v1/messages``, ``/api/chat``, ...), so an official client and the
plugin read the same bytes. Each format's ``manifest.json`` gives a transcript's content type,
status and pauses: ``{"at_byte": n, "seconds": s}`` sleeps ``s`` before byte ``n`` is written,
which splits the body into timed writes (a role-only chunk at 0 s, the first token 0.2 s later).
``"cut": true`` ends the answer without the chunked body's last chunk: the server closes the
connection mid-body, as a crashed or reset upstream does.

Run it on its own (``python replay_app.py --port 0``) or serve ``app`` with uvicorn.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

TRANSCRIPTS = Path(__file__).resolve().parent / "transcripts"


@dataclass(frozen=True)
class Transcript:
    """One recorded answer: its bytes and how to serve them."""

    body: bytes
    content_type: str
    status: int
    pauses: tuple[tuple[int, float], ...]
    cut: bool = False

    def writes(self) -> list[tuple[float, bytes]]:
        """The body as ``(pause before, bytes)`` writes, split at the pause offsets."""
        cuts = [0, *(at for at, _ in self.pauses if at > 0), len(self.body)]
        waits = dict(self.pauses)
        return [
            (waits.get(start, 0.0), self.body[start:end])
            for start, end in itertools.pairwise(cuts)
            if end > start
        ]


def load_transcript(fmt: str, name: str) -> Transcript:
    """Read ``transcripts/{fmt}/{name}.*`` and its manifest entry; KeyError if unknown."""
    manifest = json.loads((TRANSCRIPTS / fmt / "manifest.json").read_text(encoding="utf-8"))
    files = [f for f in manifest if f.rsplit(".", 1)[0] == name]
    if len(files) != 1:
        raise KeyError(f"{fmt}/{name}")
    entry = manifest[files[0]]
    return Transcript(
        body=(TRANSCRIPTS / fmt / files[0]).read_bytes(),
        content_type=entry["content_type"],
        status=int(entry.get("status", 200)),
        pauses=tuple((int(p["at_byte"]), float(p["seconds"])) for p in entry.get("pauses", [])),
        cut=bool(entry.get("cut", False)),
    )


async def replay(request: Request) -> Response:
    """Serve the transcript named by the path, in its timed writes; ``?hold=S`` keeps the body
    open S seconds after its last byte (a server that forgets to close it)."""
    try:
        transcript = load_transcript(request.path_params["fmt"], request.path_params["name"])
    except (KeyError, FileNotFoundError):
        return PlainTextResponse(f"no transcript {request.url.path}", status_code=404)
    # Read the request body so a client that sends one sees it consumed before the answer.
    await request.body()

    async def chunks() -> AsyncIterator[bytes]:
        for wait, data in transcript.writes():
            if wait:
                # Pacing the server's writes, as a model's decode loop would; not a test wait.
                await asyncio.sleep(wait)
            yield data
        if hold:
            await asyncio.sleep(hold)

    hold = float(request.query_params.get("hold", 0))
    if transcript.cut:
        return CutResponse(chunks(), transcript.content_type)
    return StreamingResponse(
        chunks(),
        status_code=transcript.status,
        headers={"content-type": transcript.content_type},
    )


_UNFINISHED = "ASGI callable returned without completing response."


class CutResponse(Response):
    """A body that stops without its end: uvicorn then closes the connection mid-body."""

    def __init__(self, chunks: AsyncIterator[bytes], content_type: str) -> None:
        # Not Response.__init__: it would add content-length: 0 for the missing content.
        self.status_code = 200
        self.background = None
        self.raw_headers = [(b"content-type", content_type.encode("latin-1"))]
        self.chunks = chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Start the answer and send every chunk, but never the last (empty) one."""
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        async for data in self.chunks:
            await send({"type": "http.response.body", "body": data, "more_body": True})


def _not_the_deliberate_cut(record: logging.LogRecord) -> bool:
    return record.getMessage() != _UNFINISHED


# The cut is the transcript's point; uvicorn's error line for it is noise.
logging.getLogger("uvicorn.error").addFilter(_not_the_deliberate_cut)


async def redirect(request: Request) -> Response:
    """``/redirect/{code}/{rest}``: answer ``code`` with ``Location: /{rest}`` (a proxy or a
    gateway that moved the route)."""
    code = int(request.path_params["code"])
    return Response(status_code=code, headers={"location": "/" + request.path_params["rest"]})


async def readyz(request: Request) -> Response:
    """The readiness probe the plugin polls before the first test."""
    return PlainTextResponse("ok")


app = Starlette(
    routes=[
        Route("/readyz", readyz),
        Route("/redirect/{code:int}/{rest:path}", redirect, methods=["GET", "POST"]),
        Route("/{fmt}/{name}/{rest:path}", replay, methods=["GET", "POST"]),
    ]
)


def main() -> None:
    """``python replay_app.py --port N``: serve the transcripts on 127.0.0.1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
