"""transformers' continuous-batching manager: one model loop serving every stream."""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import time
from typing import Any

from transformers import ContinuousBatchingConfig

from ..decoding import TokenDecoder
from ..faults import InjectedFault
from ..stream import Done, Failed, Token, TokenStream, now_ns
from .base import Engine, GenerationRequest, failure_message, finish_reason

PAGE_SIZE = 256
"""Tokens per KV-cache page (transformers' default)."""

SWEEP_INTERVAL_S = 0.1
"""How often cancelled requests are checked for having left the manager's scheduler."""

RETIRE_AFTER_S = 1.0
"""How long a cancelled request's handler stays registered after the scheduler dropped it:
outputs of a step already running when the cancel landed still arrive (and are discarded)
this long after, many steps' worth."""

HEADROOM = 1.25
"""Extra KV blocks over the worst case: a cancelled request's blocks are freed by the
generation thread a step later, so admission can briefly run ahead of the cache."""


class _KnownNoise(logging.Filter):
    """Drops two manager messages that do not apply here: the CPU memory breakdown it cannot
    compute without psutil (the cache is sized explicitly, so it is never used), and the
    "might not be supported" note on SuppressTokensLogitsProcessor, which the tiny model uses
    to keep special tokens out of streams (the tests check that it works under batching)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record except the two known ones."""
        message = record.getMessage()
        return "psutil" not in message and "SuppressTokensLogitsProcessor" not in message


def cache_sizing(max_concurrency: int, context_length: int) -> dict[str, int]:
    """KV-cache size for ``max_concurrency`` requests of the longest admissible length.

    Left to size itself on a CPU, the manager probes memory and warms up for ~20 s; sized, it is
    ready in well under a second. Requests never exceed ``context_length`` tokens (validation),
    so this many blocks cannot run out while admission holds.
    """
    blocks_per_request = math.ceil(context_length / PAGE_SIZE)
    num_blocks = math.ceil((max_concurrency + 1) * blocks_per_request * HEADROOM)
    # One decode token per stream plus room to prefill new prompts in the same step.
    max_batch_tokens = max(512, max_concurrency + 256)
    return {
        "page_size": PAGE_SIZE,
        "num_blocks": num_blocks,
        "max_batch_tokens": max_batch_tokens,
        "max_requests_per_batch": max_concurrency + 1,
    }


class BatchEngine(Engine):
    """The engine ``transformers serve`` uses: ``init_continuous_batching`` with a sized cache,
    ``add_request(streaming=True)`` + ``register_result_handler`` per stream, ``cancel_request``
    on disconnect. Results arrive on the event loop through ``call_soon_threadsafe``."""

    name = "batch"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._manager: Any = None
        self._cancelled: dict[str, float | None] = {}
        """Cancelled request id -> when the scheduler was first seen without it (or None)."""
        self._sweep: asyncio.TimerHandle | None = None
        self.discarded_outputs = 0
        """Outputs of cancelled requests that reached the manager's shared queue and were
        dropped by a sweep."""

    def start(self) -> None:
        """Create the manager with an explicitly sized cache, warm it up and start its thread."""
        logging.getLogger("ContinuousBatchingLogger").addFilter(_KnownNoise())
        sizing = cache_sizing(self.config.max_concurrency, self.loaded.context_length)
        cb_config = ContinuousBatchingConfig(
            page_size=sizing["page_size"],
            num_blocks=sizing["num_blocks"],
            max_batch_tokens=sizing["max_batch_tokens"],
            max_requests_per_batch=sizing["max_requests_per_batch"],
            seed=self.config.seed,
        )
        model = self.loaded.model
        manager = model.init_continuous_batching(
            generation_config=model.generation_config, continuous_batching_config=cb_config
        )
        manager.warmup()
        manager.start()
        self._manager = manager

    def submit(self, request: GenerationRequest, stream: TokenStream) -> None:
        """Register the result handler first (so no output can miss it), then add the request."""
        manager = self._manager
        decoder = TokenDecoder(self.loaded.tokenizer)
        eos_ids = self.loaded.eos_token_ids
        state = {"sent": 0, "finished": False}
        last: list[int] = []

        def on_output(output: Any) -> None:
            # Runs on the event loop. It must not raise: the manager runs several streams'
            # callbacks in one batch and an exception would starve the rest.
            if stream.closed or state["finished"]:
                return
            try:
                for token_id in output.generated_tokens[state["sent"] :]:
                    if request.raise_after is not None and state["sent"] >= request.raise_after:
                        raise InjectedFault(request.raise_after)
                    stream.push(Token(state["sent"], decoder.step(int(token_id)), now_ns()))
                    state["sent"] += 1
                    last[:] = [int(token_id)]
                if output.error is not None:
                    state["finished"] = True
                    stream.push(Failed(f"generation failed: {output.error}"))
                elif output.is_finished():
                    state["finished"] = True
                    reason = finish_reason(last[0] if last else None, eos_ids, request.ignore_eos)
                    stream.push(Done(state["sent"], reason))
            except Exception as exc:
                cancel()
                stream.push(Failed(failure_message(exc)))

        def cancel() -> None:
            if state["finished"]:
                return
            state["finished"] = True
            manager.cancel_request(request.request_id)
            # The handler stays registered (it discards: the stream is closed) so outputs of a
            # step already under way do not fall into the manager's shared output queue,
            # which nothing here reads. The sweep unregisters it once the request is gone.
            self._cancelled[request.request_id] = None
            self._schedule_sweep(loop)

        loop = asyncio.get_running_loop()

        stream.bind_cancel(cancel)
        manager.register_result_handler(request.request_id, on_output)
        manager.add_request(
            request.input_ids,
            request_id=request.request_id,
            max_new_tokens=request.max_new_tokens,
            streaming=True,
            # -1 disables EOS for this request, so it runs to max_new_tokens.
            eos_token_id=-1 if request.ignore_eos else None,
        )

    def _schedule_sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._sweep is None:
            self._sweep = loop.call_later(SWEEP_INTERVAL_S, self._sweep_cancelled, loop)

    def _sweep_cancelled(self, loop: asyncio.AbstractEventLoop) -> None:
        """Unregister the handlers of cancelled requests the scheduler has dropped, and drop
        any of their outputs that reached the shared output queue (on the event loop)."""
        self._sweep = None
        manager = self._manager
        if manager is None:
            self._cancelled.clear()
            return
        router = manager.output_router
        processor = manager.batch_processor
        scheduler = processor.scheduler if processor is not None else None
        now = time.monotonic()
        for request_id, gone_since in list(self._cancelled.items()):
            held = scheduler is not None and (
                request_id in scheduler.active_requests or request_id in scheduler.waiting_requests
            )
            if held:
                self._cancelled[request_id] = None
            elif gone_since is None:
                self._cancelled[request_id] = now
            elif now - gone_since >= RETIRE_AFTER_S:
                with router._lock:
                    router.result_handlers.pop(request_id, None)
                del self._cancelled[request_id]
        self._drain_orphans(router.output_queue)
        if self._cancelled:
            self._schedule_sweep(loop)

    def _drain_orphans(self, outputs: queue.Queue[Any]) -> None:
        # Every request here has a result handler, so an output on the shared queue belongs
        # to a cancelled request whose handler is gone: nobody will ever read it.
        while True:
            try:
                outputs.get_nowait()
            except queue.Empty:
                return
            self.discarded_outputs += 1

    def queue_depths(self) -> dict[str, int]:
        """The manager's queues: requests not yet taken (input), outputs nobody reads
        (output), registered result handlers, and cancelled requests not yet retired."""
        manager = self._manager
        if manager is None:
            return {"input": 0, "output": 0, "handlers": 0, "cancelled": 0}
        return {
            "input": manager.input_queue.qsize(),
            "output": manager.output_router.output_queue.qsize(),
            "handlers": len(manager.output_router.result_handlers),
            "cancelled": len(self._cancelled),
        }

    def in_flight(self) -> int:
        """Requests queued for, waiting in, or active in the manager's scheduler."""
        manager = self._manager
        if manager is None:
            return 0
        queued: int = manager.input_queue.qsize()
        processor = manager.batch_processor
        if processor is None:
            return queued
        scheduler = processor.scheduler
        return queued + len(scheduler.active_requests) + len(scheduler.waiting_requests)

    def failure(self) -> str | None:
        """The manager thread's fatal error, if it died."""
        manager = self._manager
        if manager is None:
            return None
        error = manager.background_thread_status.fatal_error
        return None if error is None else f"continuous batching loop died: {error}"

    def close(self) -> None:
        """Hard-stop the manager thread (pending requests fail) and release it."""
        manager = self._manager
        if manager is None:
            return
        # A sweep still scheduled finds no manager and stops (this runs off the loop, where
        # its timer cannot be cancelled safely).
        self._manager = None
        manager.stop(block=True, timeout=5.0, hard_stop=True)
        manager.destroy()
