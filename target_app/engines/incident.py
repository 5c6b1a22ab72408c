"""``--text-streamer-timeout SECONDS``: the incident this project exists for, kept so the suite
can catch it at the hop that caused it.

Each request runs ``generate()`` in a thread feeding transformers' ``TextIteratorStreamer``
with ``timeout=SECONDS``, and the answer's body is a plain (sync) generator that iterates that
streamer, which Starlette runs in its thread pool: the FastAPI service of the incident. When no
token comes for ``SECONDS`` (30 streams sharing the CPU, or a ``stall_after``/``stall_s``
fault knob holding generation after that token), ``queue.Empty`` escapes the generator:
uvicorn prints its traceback and ends the answer mid-body. ``--text-streamer-timeout 0``
waits for every token as long as it takes: the fix.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from starlette.responses import StreamingResponse
from transformers import TextIteratorStreamer

from ..faults import FaultKnobs
from ..formats import StreamFormat
from ..loading import LoadedModel
from ..stream import Done, Token, now_ns
from .base import GenerationRequest
from .naive import generate_options


class _StallingStreamer(TextIteratorStreamer):
    """A ``TextIteratorStreamer`` whose ``put`` (in generate()'s thread) holds generation
    ``stall_s`` seconds after the token with index ``stall_after``."""

    def __init__(self, tokenizer: Any, timeout: float | None, fault: FaultKnobs) -> None:
        super().__init__(tokenizer, skip_prompt=True, timeout=timeout, skip_special_tokens=True)
        self._fault = fault
        self._puts = 0

    def put(self, value: Any) -> None:
        """Pass the token on; hold generation after the knob's token (the first put is the
        prompt)."""
        super().put(value)  # type: ignore[no-untyped-call]
        if self._puts - 1 == self._fault.stall_after:
            time.sleep(self._fault.stall_s)
        self._puts += 1


def incident_response(
    loaded: LoadedModel,
    request: GenerationRequest,
    fmt: StreamFormat,
    fault: FaultKnobs,
    timeout: float,
) -> StreamingResponse:
    """The incident's answer to ``request``: its tokens as ``fmt`` events, read from a
    ``TextIteratorStreamer`` with ``timeout`` seconds (0: none) in a sync generator."""
    streamer = _StallingStreamer(loaded.tokenizer, timeout or None, fault)
    import torch

    ids = torch.tensor([request.input_ids], device=loaded.device)
    options = generate_options(request, ids, streamer)
    thread = threading.Thread(
        target=loaded.model.generate,
        args=(ids,),
        kwargs=options,
        name=f"generate-{request.request_id}",
        daemon=True,
    )

    def body() -> Iterator[bytes]:
        # Started here, in Starlette's thread pool, not on the loop: Thread.start() waits for
        # the new thread to take the GIL, which 30 running generations make a wait of
        # milliseconds each, 0.1 s and more for 30 requests in a row (the ready path took
        # 0.12 s at a load's start, a blocked loop the fixed app does not have).
        thread.start()
        count = 0
        # No try/except around the streamer, as in the incident: queue.Empty escapes here.
        for text in streamer:
            if text:
                yield fmt.token(Token(count, text, now_ns()))
                count += 1
        yield fmt.done(Done(count, "length"))

    return StreamingResponse(body(), media_type="text/event-stream")
