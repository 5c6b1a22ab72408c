"""What an OpenAI-compatible client yields for a chat stream, assembled the same way for each
client built on OpenAI's chunk types (``openai``, ``groq``): :func:`read_chunks`.

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
        for choice in chunk.choices:
            delta = choice.delta
            got.add("reasoning", _field(delta, "reasoning_content") or _field(delta, "reasoning"))
            got.add("text", delta.content)
            got.add("refusal", _field(delta, "refusal"))
            got.add("text", _transcript(_field(delta, "audio")))
            for call in delta.tool_calls or []:
                function = call.function
                got.call(bool(function and function.name))
                got.add("tool", function.arguments if function else None)
            got.ended(choice.finish_reason)


def _field(delta: Any, name: str) -> Any:
    """A delta's field, declared by the client or kept in its ``model_extra``."""
    value = getattr(delta, name, None)
    return value if value is not None else (delta.model_extra or {}).get(name)


def _transcript(audio: Any) -> str | None:
    """An audio delta's transcript (a dict in ``model_extra``, or the client's object)."""
    fields = audio if isinstance(audio, dict) else getattr(audio, "__dict__", None)
    return fields.get("transcript") if isinstance(fields, dict) else None
