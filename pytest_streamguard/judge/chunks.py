"""What an OpenAI-compatible client yields for a chat stream, assembled the same way for each
client built on OpenAI's chunk types (``openai``, ``groq``, and a judge of one's own for
another such client): :func:`read_chunks`, public as ``pytest_streamguard.read_chunks``.

Without importing any client: the chunks are read by attribute. A delta's
``reasoning_content``/``reasoning`` and ``audio`` are fields a client may not declare, which
it keeps in ``model_extra``; the audio's transcript is text, as the plugin's reader counts it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pytest_streamguard.judge.base import Assembly


def read_chunks(chunks: Iterable[Any], got: Assembly) -> None:
    """Assemble every choice's deltas of ``chunks`` (as the client yields them) into ``got``."""
    for chunk in chunks:
        # A usage chunk's choices may be null, and Azure's content-filter chunks carry a
        # choice without a delta: the clients yield both.
        for choice in getattr(chunk, "choices", None) or []:
            got.ended(getattr(choice, "finish_reason", None))
            delta = getattr(choice, "delta", None)
            if delta is None:
                continue
            got.add("reasoning", _field(delta, "reasoning_content") or _field(delta, "reasoning"))
            _content(delta.content, got)
            got.add("refusal", _field(delta, "refusal"))
            if _field(delta, "images"):
                got.other()
            got.add("text", _transcript(_field(delta, "audio")))
            for call in delta.tool_calls or []:
                function = call.function
                got.call(bool(function and function.name))
                got.add("tool", function.arguments if function else None)
            # The legacy functions API's field, which the client yields too (unless the same
            # delta carries tool_calls: llama.cpp's server repeats every piece in it).
            legacy = _field(delta, "function_call")
            if legacy is not None and not delta.tool_calls:
                got.call(bool(_field(legacy, "name")))
                got.add("tool", _field(legacy, "arguments"))


def _content(content: Any, got: Assembly, kind: str = "text") -> None:
    """A delta's content as the client yields it: a string, or a list of parts (kept as sent,
    dicts): a part's ``text`` is of ``kind``, a ``thinking`` part's parts reasoning, any other
    part (an image) output without text."""
    if not isinstance(content, list):
        got.add(kind, content if isinstance(content, str) else None)
        return
    for part in content:
        if isinstance(part, dict) and part.get("type") == "thinking":
            _content(part.get("thinking"), got, "reasoning")
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            got.add(kind, part["text"])
        elif part is not None:
            got.other()


def _field(delta: Any, name: str) -> Any:
    """A delta's field, declared by the client or kept in its ``model_extra`` (or a dict's
    key, where the client kept an undeclared object as sent)."""
    if isinstance(delta, dict):
        return delta.get(name)
    value = getattr(delta, name, None)
    return value if value is not None else (getattr(delta, "model_extra", None) or {}).get(name)


def _transcript(audio: Any) -> str | None:
    """An audio delta's transcript (a dict in ``model_extra``, or the client's object)."""
    fields = audio if isinstance(audio, dict) else getattr(audio, "__dict__", None)
    return fields.get("transcript") if isinstance(fields, dict) else None
