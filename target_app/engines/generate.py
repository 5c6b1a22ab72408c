"""One ``generate()`` per request in a worker thread, with a streamer and a cancel criterion."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from ..decoding import TokenDecoder
from ..faults import InjectedFault
from ..stream import Done, Failed, StreamItem, Token, TokenStream, now_ns
from .base import Engine, GenerationRequest, failure_message, finish_reason, thread_poster


class _Cancelled(Exception):
    """Raised inside generate() to abort it at the next token once the client is gone."""


class _CancelCriterion(StoppingCriteria):
    """Stops generate() after the current step once ``event`` is set (a second brake)."""

    def __init__(self, event: threading.Event) -> None:
        self._event = event

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any
    ) -> Any:
        return torch.full(
            (input_ids.shape[0],), self._event.is_set(), dtype=torch.bool, device=input_ids.device
        )


class _QueueStreamer(BaseStreamer):
    """Hands each generated token to the event loop as it is produced, one token per item."""

    def __init__(
        self,
        request: GenerationRequest,
        decoder: TokenDecoder,
        post: Any,
        cancelled: threading.Event,
    ) -> None:
        self._request = request
        self._decoder = decoder
        self._post = post
        self._cancelled = cancelled
        self._prompt_seen = False
        self.count = 0
        self.last_token: int | None = None

    def put(self, value: torch.Tensor) -> None:
        """Called by generate(): first with the prompt (skipped), then once per step."""
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        if self._cancelled.is_set():
            raise _Cancelled
        for token_id in value.reshape(-1).tolist():
            limit = self._request.raise_after
            if limit is not None and self.count >= limit:
                raise InjectedFault(limit)
            self._post(Token(self.count, self._decoder.step(int(token_id)), now_ns()))
            self.count += 1
            self.last_token = int(token_id)

    def end(self) -> None:
        """Called by generate() when it returns normally; the worker posts the end."""


class GenerateEngine(Engine):
    """The pattern most incident write-ups use, made safe: a thread per request that always ends
    its stream (done or error), stops within one token of a cancel, and never blocks the loop."""

    name = "generate"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._threads: dict[threading.Thread, threading.Event] = {}

    def start(self) -> None:
        """Nothing to prepare: each request starts its own thread."""

    def submit(self, request: GenerationRequest, stream: TokenStream) -> None:
        """Start the worker thread for ``request``."""
        cancelled = threading.Event()
        post = thread_poster(asyncio.get_running_loop(), stream)
        thread = threading.Thread(
            target=self._run,
            args=(request, post, cancelled),
            name=f"streamguard-generate-{request.request_id}",
            daemon=True,
        )
        stream.bind_cancel(cancelled.set)
        with self._lock:
            self._threads[thread] = cancelled
        thread.start()

    def _run(self, request: GenerationRequest, post: Any, cancelled: threading.Event) -> None:
        streamer = _QueueStreamer(request, TokenDecoder(self.loaded.tokenizer), post, cancelled)
        item: StreamItem | None = None
        try:
            # inference_mode is thread-local: entering it in the handler would not reach here.
            with torch.inference_mode():
                input_ids = torch.tensor([request.input_ids], device=self.loaded.device)
                options: dict[str, Any] = {
                    "attention_mask": torch.ones_like(input_ids),
                    "max_new_tokens": request.max_new_tokens,
                    "do_sample": False,
                    "streamer": streamer,
                    "stopping_criteria": StoppingCriteriaList([_CancelCriterion(cancelled)]),
                }
                if request.ignore_eos:
                    options["min_new_tokens"] = request.max_new_tokens
                self.loaded.model.generate(input_ids, **options)
            if not cancelled.is_set():
                reason = finish_reason(
                    streamer.last_token, self.loaded.eos_token_ids, request.ignore_eos
                )
                item = Done(streamer.count, reason)
        except _Cancelled:
            item = None
        except Exception as exc:
            item = Failed(failure_message(exc))
        finally:
            with self._lock:
                self._threads.pop(threading.current_thread(), None)
        if item is not None:
            post(item)

    def in_flight(self) -> int:
        """Live worker threads: each is one request still generating."""
        with self._lock:
            return len(self._threads)

    def threads(self) -> int:
        """Same as :meth:`in_flight`: one thread per request."""
        return self.in_flight()

    def close(self) -> None:
        """Cancel every running generation and wait briefly for the threads to leave."""
        with self._lock:
            running = list(self._threads.items())
        for _, cancelled in running:
            cancelled.set()
        for thread, _ in running:
            thread.join(timeout=2.0)
