"""Request-body decoding that answers like Go's ``encoding/json`` does for Toxiproxy's types.

The real server decodes bodies into typed Go structs: unknown keys are ignored, keys match
case-insensitively, ``null`` leaves a field alone, only the first JSON value counts, and a
value of the wrong type fails with ``json: cannot unmarshal <kind> into Go struct field ...``.
This module reproduces those rules (and their messages, closely) for the handful of field
types the API uses.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from typing import Any, Final, Literal

from .errors import BAD_REQUEST_BODY, ApiError

FieldKind = Literal["string", "bool", "int64", "int", "float32"]

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
_FLOAT32_MAX: Final = 3.4028234663852886e38

_DECODER: Final = json.JSONDecoder(parse_constant=lambda name: _reject_constant(name))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def parse_body(body: bytes) -> Any:
    """Parse the first JSON value of ``body`` (Go's ``Decoder.Decode``), or raise a 400."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BAD_REQUEST_BODY.joined(f"invalid UTF-8 at byte {exc.start}") from None
    stripped = text.lstrip(" \t\r\n")
    if not stripped:
        raise BAD_REQUEST_BODY.joined("EOF")
    try:
        value, _ = _DECODER.raw_decode(stripped)
    except ValueError as exc:
        raise BAD_REQUEST_BODY.joined(_json_error_text(stripped, exc)) from None
    return value


def _json_error_text(text: str, exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        if exc.pos >= len(text):
            return "unexpected EOF"
        return f"invalid character {text[exc.pos]!r} at offset {exc.pos + 1}: {exc.msg}"
    return str(exc)


def json_kind(value: object) -> str:
    """The JSON kind name Go's error messages use for a decoded value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return f"number {value}" if isinstance(value, float) else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def expect_object(value: object, go_type: str) -> Mapping[str, Any]:
    """Check that a decoded body is a JSON object, as decoding into a Go struct requires."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BAD_REQUEST_BODY.joined(
            f"json: cannot unmarshal {json_kind(value).split(' ')[0]} into Go value of type "
            f"{go_type}"
        )
    return value


def decode_fields(
    obj: Mapping[str, Any], fields: Mapping[str, FieldKind], go_struct: str
) -> dict[str, Any]:
    """Pick ``fields`` out of ``obj`` as Go fills a struct; absent and null keys are left out."""
    found: dict[str, Any] = {}
    lowered = {name.lower(): name for name in fields}
    for key, value in obj.items():
        name = key if key in fields else lowered.get(key.lower())
        if name is None or value is None:
            continue
        found[name] = convert(value, fields[name], f"{go_struct}.{name}")
    return found


def convert(value: object, kind: FieldKind, where: str) -> Any:
    """Convert one decoded JSON value to a Go field type, or raise Go's unmarshal error."""

    def wrong() -> ApiError:
        go_kind = "int" if kind == "int" else kind
        return BAD_REQUEST_BODY.joined(
            f"json: cannot unmarshal {json_kind(value)} into Go struct field {where} "
            f"of type {go_kind}"
        )

    if kind == "string":
        if not isinstance(value, str):
            raise wrong()
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise wrong()
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise wrong()
    if kind == "float32":
        number = float(value)
        if not math.isfinite(number) or abs(number) > _FLOAT32_MAX:
            raise wrong()
        return to_float32(number)
    if isinstance(value, float) and not value.is_integer():
        raise wrong()
    integer = int(value)
    if not INT64_MIN <= integer <= INT64_MAX:
        raise wrong()
    return integer


def to_float32(number: float) -> float:
    """Round ``number`` to the nearest float32, as Go stores ``toxicity``."""
    rounded: float = struct.unpack("f", struct.pack("f", number))[0]
    return rounded


def format_float32(number: float) -> int | float:
    """The shortest value that reads back as the same float32 (how Go prints a float32)."""
    if number.is_integer() and abs(number) < 1e21:
        return int(number)
    for digits in range(1, 10):
        candidate = float(f"{number:.{digits}g}")
        if to_float32(candidate) == number:
            return candidate
    return number
