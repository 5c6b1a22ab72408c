"""transformers' continuous-batching manager: one model loop serving every stream."""

from __future__ import annotations

import logging
import math
from typing import Any

from transformers import ContinuousBatchingConfig

from ..decoding import TokenDecoder
from ..faults import InjectedFault
from ..stream import Done, Failed, Token, TokenStream, now_ns
from .base import Engine, GenerationRequest, failure_message, finish_reason

PAGE_SIZE = 256
"""Tokens per KV-cache page (transformers' default)."""

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
            # The manager drops a handler only when its request finishes; a cancelled request
            # never does, so the handler would stay in its table forever.
            router = manager.output_router
            with router._lock:
                router.result_handlers.pop(request.request_id, None)

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
        self._manager = None
        manager.stop(block=True, timeout=5.0, hard_stop=True)
        manager.destroy()
