"""Request bodies: reading them within a size cap and checking every field.

Every rejection is an ``ApiError`` whose JSON names the field and what it accepts; nothing a
client sends can produce a 500 or hold a stream slot.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request

from .errors import ApiError
from .faults import NO_FAULTS, FaultKnobs

DEFAULT_MAX_NEW_TOKENS = 32
"""``max_new_tokens`` for ``/generate`` when the body does not give one."""

OPENAI_DEFAULT_MAX_TOKENS = 16
"""OpenAI's documented default for ``max_tokens``."""

MAX_MODEL_CHARS = 256
"""Longest ``model`` name accepted; it is echoed into every chunk of the stream."""

PROMPT_CHARS_PER_POSITION = 32
"""The prompt bound checked before tokenizing: at most this many characters per context
position. Real tokenizers average 3-5 characters per token, so a prompt past the bound could
not fit the context anyway; it is refused without spending CPU on tokenizing it."""

_CHAT_ROLES = ("system", "user", "assistant")


class ClientGone(Exception):
    """The client disconnected before its body was complete; nobody is left to answer."""


@dataclass(frozen=True)
class GenerationParams:
    """A checked request, before its prompt is tokenized."""

    prompt: str | None
    messages: list[dict[str, str]] | None
    max_new_tokens: int
    ignore_eos: bool
    stream: bool
    fault: FaultKnobs
    model: str | None


async def read_body(request: Request, max_bytes: int, timeout_s: float) -> bytes:
    """Read the body: at most ``max_bytes``, all of it within ``timeout_s`` seconds.

    Raises ``ApiError`` (413 too large, 408 too slow) or ``ClientGone`` when the client
    disconnects mid-body, which is the client's choice and not a server error.
    """
    accepted_size = f"a JSON body of at most {max_bytes} bytes"
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise ApiError(
            413, f"body of {declared} bytes is too large", field="body", accepted=accepted_size
        )
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > max_bytes:
                    raise ApiError(
                        413, f"body exceeds {max_bytes} bytes", field="body", accepted=accepted_size
                    )
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(
            408,
            f"the body was not complete within {timeout_s:g} s ({size} bytes arrived)",
            field="body",
            accepted=f"a complete body within {timeout_s:g} s (--body-timeout)",
            # The rest of the body may still arrive; this connection is not reusable.
            headers={"Connection": "close"},
        ) from None
    except ClientDisconnect:
        raise ClientGone from None
    return b"".join(chunks)


def parse_generate(body: dict[str, Any], limit: int, allow_faults: bool) -> GenerationParams:
    """Check a ``POST /generate`` body."""
    _reject_unknown(body, ("prompt", "max_new_tokens", "ignore_eos", "fault"))
    return GenerationParams(
        prompt=_string(body, "prompt", required=True),
        messages=None,
        max_new_tokens=_int_in(body, "max_new_tokens", 1, limit, DEFAULT_MAX_NEW_TOKENS),
        ignore_eos=_bool(body, "ignore_eos", False),
        stream=True,
        fault=_fault(body, allow_faults),
        model=None,
    )


def parse_completion(body: dict[str, Any], limit: int, allow_faults: bool) -> GenerationParams:
    """Check a ``POST /v1/completions`` body."""
    _reject_unknown(body, ("model", "prompt", "max_tokens", "stream", "ignore_eos", "fault"))
    return GenerationParams(
        prompt=_string(body, "prompt", required=True),
        messages=None,
        max_new_tokens=_int_in(body, "max_tokens", 1, limit, OPENAI_DEFAULT_MAX_TOKENS),
        ignore_eos=_bool(body, "ignore_eos", False),
        stream=_bool(body, "stream", False),
        fault=_fault(body, allow_faults),
        model=_model(body),
    )


def parse_chat(body: dict[str, Any], limit: int, allow_faults: bool) -> GenerationParams:
    """Check a ``POST /v1/chat/completions`` body."""
    _reject_unknown(
        body,
        (
            "model",
            "messages",
            "max_tokens",
            "max_completion_tokens",
            "stream",
            "ignore_eos",
            "fault",
        ),
    )
    if "max_tokens" in body and "max_completion_tokens" in body:
        raise ApiError(
            400,
            "give max_tokens or max_completion_tokens, not both",
            field="max_completion_tokens",
            accepted="one of max_tokens, max_completion_tokens",
        )
    key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    return GenerationParams(
        prompt=None,
        messages=_messages(body),
        max_new_tokens=_int_in(body, key, 1, limit, OPENAI_DEFAULT_MAX_TOKENS),
        ignore_eos=_bool(body, "ignore_eos", False),
        stream=_bool(body, "stream", False),
        fault=_fault(body, allow_faults),
        model=_model(body),
    )


def check_prompt_chars(chars: int, context: int, field: str) -> None:
    """Refuse a prompt far too long for the context before anything tokenizes it."""
    limit = context * PROMPT_CHARS_PER_POSITION
    if chars > limit:
        raise ApiError(
            400,
            f"prompt has {chars} characters; the model's context of {context} positions "
            f"takes at most {limit}",
            field=field,
            accepted=f"a prompt of at most {limit} characters ({PROMPT_CHARS_PER_POSITION} per "
            "context position) whose tokens, with max_new_tokens, fit the context",
        )


def check_prompt_length(prompt_tokens: int, max_new_tokens: int, context: int, field: str) -> None:
    """Reject a prompt that, with the requested new tokens, does not fit the model's context."""
    if prompt_tokens < 1:
        raise ApiError(
            400,
            "prompt is empty after tokenization",
            field=field,
            accepted="at least 1 token",
        )
    room = context - max_new_tokens
    if prompt_tokens > room:
        raise ApiError(
            400,
            f"prompt has {prompt_tokens} tokens; with max_new_tokens={max_new_tokens} the "
            f"model's context of {context} positions leaves room for {max(room, 0)}",
            field=field,
            accepted=f"prompt tokens + max_new_tokens <= {context}",
        )


def _reject_unknown(body: dict[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise ApiError(
            400,
            f"unknown field(s): {', '.join(unknown)}",
            field=unknown[0],
            accepted=f"fields {', '.join(known)}",
        )


def _string(body: dict[str, Any], key: str, *, required: bool) -> str | None:
    if key not in body:
        if required:
            raise ApiError(400, f"missing field {key!r}", field=key, accepted="a string")
        return None
    value = body[key]
    if not isinstance(value, str):
        raise ApiError(
            400, f"{key} is {_kind(value)}, not a string", field=key, accepted="a string"
        )
    return value


def _model(body: dict[str, Any]) -> str | None:
    model = _string(body, "model", required=False)
    if model is not None and len(model) > MAX_MODEL_CHARS:
        raise ApiError(
            400,
            f"model name of {len(model)} characters is too long",
            field="model",
            accepted=f"a model name of at most {MAX_MODEL_CHARS} characters",
        )
    return model


def _int_in(body: dict[str, Any], key: str, low: int, high: int, default: int) -> int:
    accepted = f"an integer from {low} to {high}"
    if key not in body:
        return min(default, high)
    value = body[key]
    if type(value) is not int:
        raise ApiError(
            400, f"{key} is {_kind(value)}, not an integer", field=key, accepted=accepted
        )
    if not low <= value <= high:
        raise ApiError(400, f"{key}={value} is out of range", field=key, accepted=accepted)
    return value


def _bool(body: dict[str, Any], key: str, default: bool) -> bool:
    if key not in body:
        return default
    value = body[key]
    if not isinstance(value, bool):
        raise ApiError(
            400, f"{key} is {_kind(value)}, not a boolean", field=key, accepted="true or false"
        )
    return value


def _messages(body: dict[str, Any]) -> list[dict[str, str]]:
    accepted = 'a non-empty list of {"role": "system"|"user"|"assistant", "content": string}'
    if "messages" not in body:
        raise ApiError(400, "missing field 'messages'", field="messages", accepted=accepted)
    value = body["messages"]
    if not isinstance(value, list) or not value:
        raise ApiError(
            400, "messages must be a non-empty list", field="messages", accepted=accepted
        )
    checked: list[dict[str, str]] = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise ApiError(
                400,
                f"{where} must be an object with role and content",
                field=where,
                accepted=accepted,
            )
        role, content = message["role"], message["content"]
        if role not in _CHAT_ROLES:
            raise ApiError(
                400,
                f"{where}.role={role!r} is not accepted",
                field=f"{where}.role",
                accepted=accepted,
            )
        if not isinstance(content, str):
            raise ApiError(
                400,
                f"{where}.content is {_kind(content)}",
                field=f"{where}.content",
                accepted=accepted,
            )
        checked.append({"role": role, "content": content})
    return checked


_FAULT_FIELDS = (
    "cold_start_s",
    "stall_after",
    "stall_s",
    "raise_after",
    "accel_header",
    "pad_bytes",
    "keep_generating",
)
MAX_PAD_BYTES = 65536


def _fault(body: dict[str, Any], allowed: bool) -> FaultKnobs:
    if "fault" not in body:
        return NO_FAULTS
    if not allowed:
        raise ApiError(
            400,
            "fault knobs are disabled; start the target with --allow-fault-knobs to use them",
            field="fault",
            accepted="no 'fault' field unless the server runs with --allow-fault-knobs",
        )
    value = body["fault"]
    if not isinstance(value, dict):
        raise ApiError(
            400,
            f"fault is {_kind(value)}, not an object",
            field="fault",
            accepted=f"an object with fields {', '.join(_FAULT_FIELDS)}",
        )
    unknown = sorted(set(value) - set(_FAULT_FIELDS))
    if unknown:
        raise ApiError(
            400,
            f"unknown fault field(s): {', '.join(unknown)}",
            field=f"fault.{unknown[0]}",
            accepted=f"fields {', '.join(_FAULT_FIELDS)}",
        )
    stall_after = _optional_count(value, "stall_after")
    stall_s = _seconds(value, "stall_s", 600.0)
    if (stall_after is None) != ("stall_s" not in value):
        raise ApiError(
            400,
            "stall_after and stall_s go together",
            field="fault.stall_after" if stall_after is None else "fault.stall_s",
            accepted="both stall_after (token index) and stall_s (seconds), or neither",
        )
    accel = value.get("accel_header", True)
    if not isinstance(accel, bool):
        raise ApiError(
            400,
            f"fault.accel_header is {_kind(accel)}",
            field="fault.accel_header",
            accepted="true or false",
        )
    keep = value.get("keep_generating", False)
    if not isinstance(keep, bool):
        raise ApiError(
            400,
            f"fault.keep_generating is {_kind(keep)}",
            field="fault.keep_generating",
            accepted="true or false",
        )
    return FaultKnobs(
        cold_start_s=_seconds(value, "cold_start_s", 600.0),
        stall_after=stall_after,
        stall_s=stall_s,
        raise_after=_optional_count(value, "raise_after"),
        accel_header=accel,
        pad_bytes=_pad_bytes(value),
        keep_generating=keep,
    )


def _pad_bytes(fault: dict[str, Any]) -> int:
    value = fault.get("pad_bytes", 0)
    if type(value) is not int or not 0 <= value <= MAX_PAD_BYTES:
        raise ApiError(
            400,
            f"fault.pad_bytes={value!r} is not accepted",
            field="fault.pad_bytes",
            accepted=f"an integer from 0 to {MAX_PAD_BYTES}",
        )
    return value


def _optional_count(fault: dict[str, Any], key: str) -> int | None:
    if key not in fault:
        return None
    value = fault[key]
    if type(value) is not int or value < 0:
        raise ApiError(
            400,
            f"fault.{key}={value!r} is not accepted",
            field=f"fault.{key}",
            accepted="an integer >= 0",
        )
    return value


def _seconds(fault: dict[str, Any], key: str, high: float) -> float:
    if key not in fault:
        return 0.0
    value = fault[key]
    accepted = f"a number of seconds from 0 to {high:g}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ApiError(
            400, f"fault.{key} is {_kind(value)}", field=f"fault.{key}", accepted=accepted
        )
    if not 0 <= value <= high:
        raise ApiError(
            400, f"fault.{key}={value} is out of range", field=f"fault.{key}", accepted=accepted
        )
    return float(value)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float) and not math.isfinite(value):
        return f"the non-finite number {value}"
    names = {
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }
    return names.get(type(value), type(value).__name__)
