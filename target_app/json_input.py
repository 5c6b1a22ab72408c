"""The one JSON decoder for request bodies, with limits on depth, numbers and strings.

``json.loads`` alone lets a client reach three unhandled exceptions: a ``RecursionError`` for
deep nesting, a ``ValueError`` from Python's 4,300-digit limit on ``int()``, and lone UTF-16
surrogates (``"\\ud800"``) that decode into a ``str`` no tokenizer or encoder accepts. Every
limit here turns into an ``ApiError`` that says what was wrong and what is accepted.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .errors import ApiError

MAX_DEPTH = 32
"""Deepest nesting of arrays and objects accepted; request bodies need 3."""

MAX_NUMBER_CHARS = 40
"""Longest number literal accepted, sign and exponent included."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def decode_json_object(raw: bytes) -> dict[str, Any]:
    """Decode ``raw`` as a UTF-8 JSON object within the limits, or raise ``ApiError`` (400)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(
            400,
            f"body is not valid UTF-8 (byte {exc.start})",
            field="body",
            accepted="a UTF-8 encoded JSON object",
        ) from None
    if not text.strip():
        raise ApiError(400, "body is empty", field="body", accepted="a JSON object")
    try:
        value = json.loads(
            text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_reject_constant
        )
    except json.JSONDecodeError as exc:
        raise ApiError(
            400,
            f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            field="body",
            accepted="a JSON object",
        ) from None
    except RecursionError:
        # The C scanner recurses per nesting level; the stack gives out long before the body
        # size limit does. Same answer as the explicit depth check below.
        raise _too_deep() from None
    if not isinstance(value, dict):
        raise ApiError(
            400,
            f"body is a JSON {_json_kind(value)}, not an object",
            field="body",
            accepted="a JSON object",
        )
    _check_tree(value)
    return value


def _parse_int(literal: str) -> int:
    if len(literal) > MAX_NUMBER_CHARS:
        raise _number_too_long(literal)
    return int(literal)


def _parse_float(literal: str) -> float:
    if len(literal) > MAX_NUMBER_CHARS:
        raise _number_too_long(literal)
    return float(literal)


def _reject_constant(name: str) -> Any:
    raise ApiError(
        400,
        f"{name} is not JSON",
        field="body",
        accepted="finite JSON numbers only (no NaN, Infinity or -Infinity)",
    )


def _number_too_long(literal: str) -> ApiError:
    return ApiError(
        400,
        f"a number literal of {len(literal)} characters is too long",
        field="body",
        accepted=f"number literals of at most {MAX_NUMBER_CHARS} characters",
    )


def _too_deep() -> ApiError:
    return ApiError(
        400,
        f"JSON is nested deeper than {MAX_DEPTH} levels",
        field="body",
        accepted=f"arrays and objects nested at most {MAX_DEPTH} deep",
    )


def _check_tree(root: dict[str, Any]) -> None:
    """Walk the decoded value without recursion: depth, and no lone surrogate in any string."""
    pending: list[tuple[Any, str, int]] = [(root, "", 1)]
    while pending:
        value, path, depth = pending.pop()
        if isinstance(value, str):
            _check_string(value, path or "body")
        elif isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise _too_deep()
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, child in items:
                if isinstance(key, str):
                    _check_string(key, path or "body", "a key in ")
                    child_path = f"{path}.{key}" if path else key
                else:
                    child_path = f"{path}[{key}]"
                pending.append((child, child_path, depth + 1))


def _check_string(value: str, path: str, where: str = "") -> None:
    found = _SURROGATE.search(value)
    if found is not None:
        raise ApiError(
            400,
            f"{where}{path} contains the lone UTF-16 surrogate \\u{ord(found.group()):04x} at "
            f"character {found.start()}",
            field=path,
            accepted="strings of Unicode scalar values (a \\ud800-\\udbff escape must be "
            "followed by a \\udc00-\\udfff escape, forming one character)",
        )


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"
