"""``--naive``: the anti-pattern from incident write-ups, kept so the suite can catch it.

``generate()`` runs in a thread feeding a sync ``TextIteratorStreamer`` and the async handler
iterates that streamer directly: every ``next()`` is a blocking ``queue.get`` on the event loop,
so while one stream waits for its next token no other stream, heartbeat or health check runs.
There is no cancellation either: a client that leaves does not stop its generation.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from transformers import TextIteratorStreamer

from ..faults import InjectedFault
from ..loading import LoadedModel
from ..stream import Done, StreamItem, Token, now_ns
from .base import GenerationRequest


class NaiveStreamerTimeout(Exception):
    """The streamer's queue stayed empty for the whole timeout."""


class _FaultyStreamer(TextIteratorStreamer):
    """A ``TextIteratorStreamer`` that can raise inside generate() after some tokens."""

    def __init__(self, tokenizer: Any, raise_after: int | None, timeout: float) -> None:
        super().__init__(tokenizer, skip_prompt=True, timeout=timeout, skip_special_tokens=True)
        self._raise_after = raise_after
        self._puts = 0

    def put(self, value: Any) -> None:
        """Count generated tokens (the first put is the prompt) and raise on the knob."""
        if self._puts > 0 and self._raise_after is not None and self._puts > self._raise_after:
            raise InjectedFault(self._raise_after)
        self._puts += 1
        super().put(value)  # type: ignore[no-untyped-call]


class NaiveRunner:
    """Starts naive generations and counts their threads."""

    def __init__(self, loaded: LoadedModel, timeout: float) -> None:
        self._loaded = loaded
        self._timeout = timeout
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()

    def open(self, request: GenerationRequest) -> NaiveGeneration:
        """Start generate() for ``request`` and return the blocking item source."""
        streamer = _FaultyStreamer(self._loaded.tokenizer, request.raise_after, self._timeout)
        thread = threading.Thread(
            target=self._generate,
            args=(request, streamer),
            name=f"streamguard-naive-{request.request_id}",
            daemon=True,
        )
        with self._lock:
            self._threads.add(thread)
        thread.start()
        return NaiveGeneration(streamer)

    def _generate(self, request: GenerationRequest, streamer: _FaultyStreamer) -> None:
        try:
            ids = _tensor(request.input_ids, self._loaded.device)
            self._loaded.model.generate(ids, **generate_options(request, ids, streamer))
        except Exception:
            # As in the write-ups: the error dies with the thread and the reader is left to
            # time out on the streamer's queue.
            pass
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def threads(self) -> int:
        """Live naive generation threads."""
        with self._lock:
            return len(self._threads)


class NaiveGeneration:
    """One naive stream's items, produced by blocking on the streamer."""

    def __init__(self, streamer: _FaultyStreamer) -> None:
        self._iterator = iter(streamer)
        self._count = 0

    def next_item(self) -> StreamItem:
        """Block until the next non-empty text (or the end) arrives: this is the anti-pattern."""
        try:
            while True:
                text: str = next(self._iterator)
                if text:
                    break
        except StopIteration:
            return Done(self._count, "length")
        except queue.Empty:
            raise NaiveStreamerTimeout from None
        token = Token(self._count, text, now_ns())
        self._count += 1
        return token


def generate_options(request: GenerationRequest, ids: Any, streamer: Any) -> dict[str, Any]:
    """``generate()``'s keyword arguments for ``request`` (prompt ``ids``), streaming into
    ``streamer``: greedy, and every token asked for when the request ignores the end token."""
    options: dict[str, Any] = {
        "attention_mask": ids.new_ones(ids.shape),
        "max_new_tokens": request.max_new_tokens,
        "do_sample": False,
        "streamer": streamer,
    }
    if request.ignore_eos:
        options["min_new_tokens"] = request.max_new_tokens
    return options


def _tensor(ids: list[int], device: Any) -> Any:
    import torch

    return torch.tensor([ids], device=device)
