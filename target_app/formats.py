"""Wire formats of a token stream: the native SSE events and OpenAI's completion chunks."""

from __future__ import annotations

import json
import time
import uuid
from abc import ABC, abstractmethod
from typing import Any

from .stream import Done, Token, now_ns

PING = b": ping\n\n"
"""The heartbeat: an SSE comment, ignored by every SSE parser but resetting idle timers."""


def _event(data: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class StreamFormat(ABC):
    """How one kind of endpoint renders tokens, the end of the stream, errors and a full reply."""

    @abstractmethod
    def token(self, token: Token) -> bytes:
        """Render one token; called just before the write, so timestamps are fresh."""

    @abstractmethod
    def done(self, done: Done) -> bytes:
        """Render the end of a stream that finished normally."""

    @abstractmethod
    def error(self, message: str) -> bytes:
        """Render the end of a stream that failed."""

    @abstractmethod
    def complete(self, text: str, done: Done) -> dict[str, Any]:
        """The JSON body of the non-streaming reply."""


class NativeFormat(StreamFormat):
    """``POST /generate``: a ``data:`` event per token, then ``event: done`` or ``event: error``."""

    def __init__(self, prompt_tokens: int) -> None:
        self._prompt_tokens = prompt_tokens

    def token(self, token: Token) -> bytes:
        """``data: {"index", "text", "sent_ns"}`` with ``sent_ns`` taken right now."""
        return _event({"index": token.index, "text": token.text, "sent_ns": now_ns()})

    def done(self, done: Done) -> bytes:
        """``event: done`` with the token count and why generation stopped."""
        return _event(
            {
                "tokens": done.tokens,
                "finish_reason": done.finish_reason,
                "prompt_tokens": self._prompt_tokens,
            },
            "done",
        )

    def error(self, message: str) -> bytes:
        """``event: error`` with the message."""
        return _event({"error": message}, "error")

    def complete(self, text: str, done: Done) -> dict[str, Any]:
        """Not used: ``/generate`` always streams."""
        return {"text": text, "tokens": done.tokens, "finish_reason": done.finish_reason}


class _OpenAIFormat(StreamFormat):
    object_name = ""

    def __init__(self, model: str, prompt_tokens: int) -> None:
        self._model = model
        self._prompt_tokens = prompt_tokens
        self._id = f"{self.id_prefix()}-{uuid.uuid4().hex[:24]}"
        self._created = int(time.time())

    def id_prefix(self) -> str:
        return "cmpl"

    def _chunk(self, choice: dict[str, Any]) -> bytes:
        return _event(
            {
                "id": self._id,
                "object": self.object_name,
                "created": self._created,
                "model": self._model,
                "choices": [choice],
            }
        )

    def _usage(self, done: Done) -> dict[str, int]:
        return {
            "prompt_tokens": self._prompt_tokens,
            "completion_tokens": done.tokens,
            "total_tokens": self._prompt_tokens + done.tokens,
        }

    def error(self, message: str) -> bytes:
        """OpenAI's error object as a data event; no ``[DONE]`` follows a failed stream."""
        return _event({"error": {"message": message, "type": "server_error"}})


class CompletionFormat(_OpenAIFormat):
    """``POST /v1/completions``: ``text_completion`` chunks, then ``data: [DONE]``."""

    object_name = "text_completion"

    def token(self, token: Token) -> bytes:
        """One chunk carrying the token's text."""
        return self._chunk(
            {"index": 0, "text": token.text, "logprobs": None, "finish_reason": None}
        )

    def done(self, done: Done) -> bytes:
        """A last chunk with the finish reason, then the ``[DONE]`` sentinel."""
        last = self._chunk(
            {"index": 0, "text": "", "logprobs": None, "finish_reason": done.finish_reason}
        )
        return last + b"data: [DONE]\n\n"

    def complete(self, text: str, done: Done) -> dict[str, Any]:
        """A ``text_completion`` object with usage."""
        return {
            "id": self._id,
            "object": self.object_name,
            "created": self._created,
            "model": self._model,
            "choices": [
                {"index": 0, "text": text, "logprobs": None, "finish_reason": done.finish_reason}
            ],
            "usage": self._usage(done),
        }


class ChatFormat(_OpenAIFormat):
    """``POST /v1/chat/completions``: ``chat.completion.chunk`` deltas, then ``data: [DONE]``."""

    object_name = "chat.completion.chunk"

    def __init__(self, model: str, prompt_tokens: int) -> None:
        super().__init__(model, prompt_tokens)
        self._role_sent = False

    def id_prefix(self) -> str:
        return "chatcmpl"

    def token(self, token: Token) -> bytes:
        """A content delta; the first one is preceded by the assistant role delta."""
        prefix = b""
        if not self._role_sent:
            self._role_sent = True
            prefix = self._chunk(
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            )
        return prefix + self._chunk(
            {"index": 0, "delta": {"content": token.text}, "finish_reason": None}
        )

    def done(self, done: Done) -> bytes:
        """An empty delta with the finish reason, then ``[DONE]``."""
        last = self._chunk({"index": 0, "delta": {}, "finish_reason": done.finish_reason})
        return last + b"data: [DONE]\n\n"

    def complete(self, text: str, done: Done) -> dict[str, Any]:
        """A ``chat.completion`` object with the assistant message and usage."""
        return {
            "id": self._id,
            "object": "chat.completion",
            "created": self._created,
            "model": self._model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": done.finish_reason,
                }
            ],
            "usage": self._usage(done),
        }
