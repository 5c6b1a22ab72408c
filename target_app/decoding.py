"""Turning generated token ids into text one token at a time (no word buffering)."""

from __future__ import annotations

from typing import Any


class TokenDecoder:
    """Decode one request's tokens incrementally: each token yields the text it adds.

    Fast tokenizers use ``tokenizers.decoders.DecodeStream``, which returns ``None`` only inside
    an incomplete UTF-8 character; that token then adds ``""`` and the next one carries the
    character. Unlike ``TextIteratorStreamer`` nothing waits for a word boundary.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        backend = getattr(tokenizer, "_tokenizer", None)
        self._backend = backend
        self._stream: Any = None
        if backend is not None:
            from tokenizers.decoders import DecodeStream

            self._stream = DecodeStream(skip_special_tokens=True)
        self._ids: list[int] = []
        self._text = ""

    def step(self, token_id: int) -> str:
        """Return the text that ``token_id`` adds to the decoded output so far."""
        if self._stream is not None:
            piece = self._stream.step(self._backend, token_id)
            return piece or ""
        # Slow tokenizers: decode the whole sequence and return what grew.
        self._ids.append(token_id)
        text: str = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        added = text[len(self._text) :]
        self._text = text
        return added
