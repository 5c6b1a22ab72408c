"""A chat-completions server on FastAPI, as a team writes one around an inference engine:
OpenAI-shaped SSE chunks from ``POST /v1/chat/completions``, ``/readyz``, Prometheus gauges on
``/metrics``, and the port it bound (port 0 unless ``--port``) on its listening line.

The engine generates in a task of its own and hands tokens to the response through a queue (an
accelerator does the work; the event loop only waits). ``--incident`` picks the one thing wrong
with it, or a look-alike of one (``healthy``: nothing):

- ``cold_start``: the weights are loaded on the first request (in a thread), not at startup;
- ``one_slot``: the engine runs one generation at a time; the others wait for the slot;
- ``batching``: a continuous-batching engine of 4 slots whose prefill of each newly admitted
  request stalls every running sequence (the accelerator is busy with the prompt);
- ``not_cancelled``: a client that goes away leaves its generation running to the end;
- ``cancelled``: the fixed twin: the generation is cancelled with the response;
- ``slow``: a slow but healthy model: a long prefill for every request, then steady tokens.

The gauges are named as the plugin reads them: the engine's requests in flight and the open
streams.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from prometheus_client import CollectorRegistry, Gauge, generate_latest

TOKEN_S = 0.02
LOAD_WEIGHTS_S = 1.2
SLOW_PREFILL_S = 0.6
SLOW_TOKEN_S = 0.05
BATCH_SLOTS = 4
PREFILL_S = 0.15
STEP_S = 0.03

REGISTRY = CollectorRegistry()
ENGINE = Gauge(
    "streamguard_target_engine_requests", "Requests the engine generates for", registry=REGISTRY
)
OPEN = Gauge("streamguard_target_active_streams", "Open response streams", registry=REGISTRY)


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
END = None


@dataclass
class Sequence:
    tokens: int
    out: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    made: int = 0


class Engine:
    """One generation per request (``generate``), or a continuous batch (``batched``)."""

    def __init__(self, incident: str) -> None:
        self.incident = incident
        self.loaded = incident != "cold_start"
        self.loading = asyncio.Lock()
        self.slot = asyncio.Semaphore(1)
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.wake = asyncio.Event()
        self.batcher: asyncio.Task[None] | None = None

    async def ensure_loaded(self) -> None:
        async with self.loading:
            if not self.loaded:
                await asyncio.to_thread(time.sleep, LOAD_WEIGHTS_S)
                self.loaded = True

    async def generate(self, seq: Sequence) -> None:
        ENGINE.inc()
        try:
            if self.incident == "one_slot":
                async with self.slot:
                    await self._decode(seq, TOKEN_S)
            elif self.incident == "slow":
                await asyncio.sleep(SLOW_PREFILL_S)
                await self._decode(seq, SLOW_TOKEN_S)
            else:
                await self._decode(seq, TOKEN_S)
        finally:
            ENGINE.dec()
            seq.out.put_nowait(END)

    async def _decode(self, seq: Sequence, pace: float) -> None:
        for index in range(seq.tokens):
            await asyncio.sleep(pace)
            seq.out.put_nowait(f"tok{index} ")

    def submit(self, seq: Sequence) -> None:
        self.waiting.append(seq)
        ENGINE.inc()
        self.wake.set()
        if self.batcher is None:
            self.batcher = asyncio.get_running_loop().create_task(self.batched())

    async def batched(self) -> None:
        while True:
            if not self.waiting and not self.running:
                self.wake.clear()
                await self.wake.wait()
            admitted = self.waiting[: BATCH_SLOTS - len(self.running)]
            del self.waiting[: len(admitted)]
            if admitted:
                # The prompts' prefill holds the accelerator: no running sequence steps.
                await asyncio.sleep(PREFILL_S)
                self.running += admitted
            await asyncio.sleep(STEP_S)
            for seq in list(self.running):
                seq.out.put_nowait(f"tok{seq.made} ")
                seq.made += 1
                if seq.made == seq.tokens:
                    self.running.remove(seq)
                    ENGINE.dec()
                    seq.out.put_nowait(END)


def make_app(incident: str) -> FastAPI:
    app = FastAPI()
    engines: list[Engine] = []

    def engine() -> Engine:
        # Made on the server's loop (its locks bind to it), at the first request.
        if not engines:
            engines.append(Engine(incident))
        return engines[0]

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> Response:
        body = await request.json()
        seq = Sequence(int(body.get("max_tokens", 16)))
        eng = engine()
        await eng.ensure_loaded()
        task = None
        if incident == "batching":
            eng.submit(seq)
        else:
            task = asyncio.get_running_loop().create_task(eng.generate(seq))

        async def events() -> AsyncIterator[bytes]:
            OPEN.inc()
            try:
                while (text := await seq.out.get()) is not END:
                    yield chunk(text)
                yield chunk(None, "stop")
                yield DONE
            finally:
                OPEN.dec()
                if task is not None and incident != "not_cancelled":
                    task.cancel()

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.get("/readyz")
    async def ready() -> Response:
        return PlainTextResponse("ok")

    @app.get("/metrics")
    async def metrics() -> Response:
        return PlainTextResponse(generate_latest(REGISTRY).decode())

    return app


INCIDENTS = ("healthy", "cold_start", "one_slot", "batching", "not_cancelled", "cancelled", "slow")


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
