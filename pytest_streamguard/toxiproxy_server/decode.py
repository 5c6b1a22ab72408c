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
import re
import struct
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final, Literal

from .errors import BAD_REQUEST_BODY, ApiError

FieldKind = Literal["string", "bool", "int64", "int", "float32"]

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
_FLOAT32_MAX: Final = 3.4028234663852886e38


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


class JsonNumber(float):
    """A decoded JSON number with a fraction or exponent, keeping its literal for messages
    (Go names the literal: ``cannot unmarshal number 1e3 into ... of type int64``)."""

    text: str

    def __new__(cls, text: str) -> JsonNumber:
        number = super().__new__(cls, text)
        number.text = text
        return number


_DECODER: Final = json.JSONDecoder(
    parse_constant=lambda name: _reject_constant(name), parse_float=JsonNumber
)
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def parse_body(body: bytes) -> Any:
    """Parse the first JSON value of ``body`` (Go's ``Decoder.Decode``), or raise a 400.

    As in Go, bytes that are not UTF-8 become U+FFFD inside strings (and a syntax error
    outside them). Nesting deeper than Python's decoder can follow is a 400 here, where Go
    allows 10,000 levels (a divergence that only matters for deep values under unknown keys).
    """
    text = body.decode("utf-8", "replace")
    stripped = text.lstrip(" \t\r\n")
    if not stripped:
        raise BAD_REQUEST_BODY.joined("EOF")
    try:
        value, _ = _DECODER.raw_decode(stripped)
    except RecursionError:
        raise BAD_REQUEST_BODY.joined("exceeded max depth") from None
    except ValueError as exc:
        raise BAD_REQUEST_BODY.joined(_json_error_text(stripped, exc)) from None
    return value


def go_string(text: str) -> str:
    """``text`` as Go decodes it: a lone surrogate escape (``"\\ud800"``) becomes U+FFFD."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def _json_error_text(text: str, exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        if exc.pos >= len(text):
            return "unexpected EOF"
        return f"invalid character {text[exc.pos]!r} at offset {exc.pos + 1}: {exc.msg}"
    return str(exc)


def json_kind(value: object, *, literal: bool = False) -> str:
    """The JSON kind name Go's error messages use for a decoded value; ``literal`` adds a
    number's literal, as Go does when the target is a number."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        if not literal:
            return "number"
        return f"number {value.text if isinstance(value, JsonNumber) else value}"
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
        numeric = kind in ("int64", "int", "float32")
        return BAD_REQUEST_BODY.joined(
            f"json: cannot unmarshal {json_kind(value, literal=numeric)} into Go struct field "
            f"{where} of type {kind}"
        )

    if kind == "string":
        if not isinstance(value, str):
            raise wrong()
        return go_string(value)
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
    if isinstance(value, float):
        # Go parses an integer field's literal as an integer: 1.0 and 1e3 do not fit.
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
    """A float32 as Go's JSON encoder writes it: the shortest decimal that reads back as the
    same float32, without an exponent below 1e21 (``1e20`` is ``100000000000000000000``)."""
    shortest = number
    for digits in range(1, 10):
        candidate = float(f"{number:.{digits}g}")
        if to_float32(candidate) == number:
            shortest = candidate
            break
    if shortest.is_integer() and abs(shortest) < 1e21:
        return int(Decimal(repr(shortest)))
    return shortest
