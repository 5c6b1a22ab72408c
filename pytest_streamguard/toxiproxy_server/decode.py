"""Request-body decoding that answers like Go's ``encoding/json`` does for Toxiproxy's types.

The real server decodes bodies into typed Go structs: unknown keys are ignored, keys match
case-insensitively (Unicode simple folding: U+017F long s is ``s``, U+212A Kelvin is ``k``), every
occurrence of a repeated key is applied in document order (the last valid one wins), ``null``
leaves a field alone, only the first JSON value counts, and a value of the wrong type fails
with ``json: cannot unmarshal <kind> into Go struct field ...``, the first such error in
document order being the one reported. This module reproduces those rules (and their
messages, closely) for the handful of field types the API uses.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final, Literal

from .errors import BAD_REQUEST_BODY, ApiError

FieldKind = Literal["string", "bool", "int64", "int", "float32"]

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
# A literal at or past the midpoint between the largest float32 and 2**128 rounds to
# infinity, which Go's ParseFloat(s, 32) refuses; anything below rounds to a finite float32.
_FLOAT32_OVERFLOW: Final = Decimal(2**128 - 2**103)


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


class JsonObject(dict[str, Any]):
    """A decoded JSON object that also keeps every key/value pair in document order, repeated
    keys included (as a dict it holds the last value of each key)."""

    pairs: list[tuple[str, Any]]


def _object(pairs: list[tuple[str, Any]]) -> JsonObject:
    obj = JsonObject(pairs)
    obj.pairs = pairs
    return obj


def pairs(obj: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Every key/value pair of a decoded object in document order, repeated keys included."""
    return obj.pairs if isinstance(obj, JsonObject) else list(obj.items())


# Go folds a key with unicode.SimpleFold; only two non-ASCII letters fold onto the ASCII
# letters a field name is made of.
_FOLD: Final = str.maketrans(
    {chr(c): chr(c - 32) for c in range(ord("a"), ord("z") + 1)} | {"\u017f": "S", "\u212a": "K"}
)


def fold(key: str) -> str:
    """``key`` folded as Go matches a JSON key to a struct field name."""
    return key.translate(_FOLD)


_DECODER: Final = json.JSONDecoder(
    parse_constant=lambda name: _reject_constant(name),
    parse_float=JsonNumber,
    object_pairs_hook=_object,
)
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def parse_body(body: bytes) -> Any:
    """Parse the first JSON value of ``body`` (Go's ``Decoder.Decode``), or raise a 400 with
    Go's text (``invalid character 'x' looking for beginning of value``, ``unexpected EOF``).

    As in Go, bytes that are not UTF-8 become U+FFFD inside strings (and a syntax error
    outside them). A value that Go's scanner accepts but that nests deeper than Python's
    decoder can follow (about 900 levels) is a 400 ``exceeded max depth`` here; Go scans up to
    10,000 levels (a divergence that only matters for deep values under unknown keys)."""
    text = body.decode("utf-8", "replace")
    stripped = text.lstrip(" \t\r\n")
    if not stripped:
        raise BAD_REQUEST_BODY.joined("EOF")
    try:
        value, _ = _DECODER.raw_decode(stripped)
    except (RecursionError, ValueError):
        raise BAD_REQUEST_BODY.joined(go_syntax_error(body) or "exceeded max depth") from None
    if isinstance(value, int | float) and not isinstance(value, bool):
        # Python stops a top-level number where Go reads on ("1." is Go's unexpected EOF).
        problem = go_syntax_error(body)
        if problem is not None:
            raise BAD_REQUEST_BODY.joined(problem)
    return value


MAX_DEPTH: Final = 10_000
_SPACE: Final = b" \t\r\n"
_PLAIN: Final = re.compile(rb'[^"\\\x00-\x1f]*')
_DIGITS: Final = re.compile(rb"[0-9]*")
_HEX: Final = b"0123456789abcdefABCDEF"
_AFTER: Final = {"key": "after object key", "value": "after object key:value pair"}


def go_quote_char(byte: int) -> str:
    """Go's ``quoteChar``: a byte as a quoted character (read as a Latin-1 rune)."""
    if byte == 0x27:
        return "'\\''"
    if byte == 0x22:
        return "'\"'"
    if byte == 0x5C:
        return "'\\\\'"
    if 0x20 <= byte <= 0x7E or (0xA1 <= byte <= 0xFF and byte != 0xAD):
        return f"'{chr(byte)}'"
    named = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r"}
    if byte in named:
        return f"'\\{named[byte]}'"
    if byte < 0x20 or byte == 0x7F:
        return f"'\\x{byte:02x}'"
    return f"'\\u{byte:04x}'"


@dataclass
class _Scan:
    """Where Go's scanner is in a body: the next byte, the open containers, what comes next."""

    body: bytes
    i: int = 0
    # "key", "value" (in an object) or "array", innermost last.
    stack: list[str] = field(default_factory=list)
    # "value", "key_or_end", "key", "value_or_end" or "end" (after a complete value).
    expect: str = "value"

    def bad(self, at: int, context: str) -> str:
        """Go's error for the byte at ``at``: ``invalid character 'x' <context>``."""
        return f"invalid character {go_quote_char(self.body[at])} {context}"

    def skip_space(self) -> None:
        """Move past JSON whitespace."""
        while self.i < len(self.body) and self.body[self.i] in _SPACE:
            self.i += 1

    def at_end(self) -> bool:
        """Whether every byte was read."""
        return self.i == len(self.body)


def go_syntax_error(body: bytes) -> str | None:
    """What Go's ``Decoder.Decode`` answers for the first value of ``body``: a scanner error
    (``invalid character ...``), ``unexpected EOF`` or ``EOF``; None when Go's scanner accepts
    it. Iterative, so any depth is scanned (Go stops at 10,000 levels)."""
    scan = _Scan(body)
    scan.skip_space()
    if scan.at_end():
        return "EOF"
    while True:
        scan.skip_space()
        if scan.expect == "end":
            if not scan.stack:
                return None
            problem = _after_value(scan)
        else:
            problem = _next_value(scan)
        if problem is not None:
            return problem


def _after_value(scan: _Scan) -> str | None:
    """Read what follows a complete value inside a container: ``:`` after a key, ``,`` or the
    container's close after a value or element."""
    if scan.at_end():
        return "unexpected EOF"
    top, c = scan.stack[-1], scan.body[scan.i]
    if top == "key":
        if c != 0x3A:
            return scan.bad(scan.i, _AFTER["key"])
        scan.stack[-1], scan.expect = "value", "value"
    elif top == "value":
        if c == 0x2C:
            scan.stack[-1], scan.expect = "key", "key"
        elif c == 0x7D:
            scan.stack.pop()
        else:
            return scan.bad(scan.i, _AFTER["value"])
    elif c == 0x2C:
        scan.expect = "value"
    elif c == 0x5D:
        scan.stack.pop()
    else:
        return scan.bad(scan.i, "after array element")
    scan.i += 1
    return None


def _next_value(scan: _Scan) -> str | None:
    """Read where a value (or an object key) is expected: an empty container's close, a
    container's opening, or a whole string, number or literal."""
    if scan.at_end():
        return "unexpected EOF"
    c = scan.body[scan.i]
    if scan.expect in ("key", "key_or_end"):
        if c == 0x7D and scan.expect == "key_or_end":
            _close_empty(scan)
            return None
        if c != 0x22:
            return scan.bad(scan.i, "looking for beginning of object key string")
    elif c == 0x5D and scan.expect == "value_or_end":
        _close_empty(scan)
        return None
    if c in b"[{":
        if len(scan.stack) >= MAX_DEPTH:
            return scan.bad(scan.i, "exceeded max depth")
        scan.stack.append("array" if c == 0x5B else "key")
        scan.expect = "value_or_end" if c == 0x5B else "key_or_end"
        scan.i += 1
        return None
    problem, scan.i = _scan_scalar(scan.body, scan.i, scan.bad)
    scan.expect = "end"
    return problem


def _close_empty(scan: _Scan) -> None:
    """Close the container just opened (``{}`` or ``[]``)."""
    scan.stack.pop()
    scan.expect = "end"
    scan.i += 1


def _scan_scalar(body: bytes, i: int, bad: Callable[[int, str], str]) -> tuple[str | None, int]:
    """Read the string, number or literal starting at ``i``; the problem (or None) and the
    index after it."""
    c = body[i]
    if c == 0x22:
        return _scan_string(body, i, bad)
    if c == 0x2D or 0x30 <= c <= 0x39:
        return _scan_number(body, i, bad)
    if c in b"tfn":
        return _scan_literal(body, i, bad)
    return bad(i, "looking for beginning of value"), i


def _scan_string(body: bytes, i: int, bad: Callable[[int, str], str]) -> tuple[str | None, int]:
    """Read the string whose opening quote is at ``i``, escapes checked as Go does."""
    n = len(body)
    i += 1
    while True:
        i = _PLAIN.match(body, i).end()  # type: ignore[union-attr]
        if i == n:
            return "unexpected EOF", i
        if body[i] == 0x22:
            return None, i + 1
        if body[i] < 0x20:
            return bad(i, "in string literal"), i
        i += 1  # a backslash
        if i == n:
            return "unexpected EOF", i
        if body[i] == 0x75:
            for _ in range(4):
                i += 1
                if i == n:
                    return "unexpected EOF", i
                if body[i] not in _HEX:
                    return bad(i, "in \\u hexadecimal character escape"), i
        elif body[i] not in b'bfnrt\\/"':
            return bad(i, "in string escape code"), i
        i += 1


def _scan_literal(body: bytes, i: int, bad: Callable[[int, str], str]) -> tuple[str | None, int]:
    """Read ``true``, ``false`` or ``null`` starting at ``i``."""
    word = {0x74: b"true", 0x66: b"false", 0x6E: b"null"}[body[i]]
    for k in range(1, len(word)):
        if i + k == len(body):
            return "unexpected EOF", i + k
        if body[i + k] != word[k]:
            name = word.decode()
            return bad(i + k, f"in literal {name} (expecting {chr(word[k])!r})"), i + k
    return None, i + len(word)


def _scan_number(body: bytes, i: int, bad: Callable[[int, str], str]) -> tuple[str | None, int]:
    n = len(body)

    def no_digit(at: int, context: str) -> str | None:
        """The problem when no digit stands at ``at`` (None when one does)."""
        if at == n:
            return "unexpected EOF"
        return None if 0x30 <= body[at] <= 0x39 else bad(at, context)

    if body[i] == 0x2D:
        i += 1
        if problem := no_digit(i, "in numeric literal"):
            return problem, i
    i = i + 1 if body[i] == 0x30 else _DIGITS.match(body, i).end()  # type: ignore[union-attr]
    if i < n and body[i] == 0x2E:
        i += 1
        if problem := no_digit(i, "after decimal point in numeric literal"):
            return problem, i
        i = _DIGITS.match(body, i).end()  # type: ignore[union-attr]
    if i < n and body[i] in b"eE":
        i += 1
        if i < n and body[i] in b"+-":
            i += 1
        if problem := no_digit(i, "in exponent of numeric literal"):
            return problem, i
        i = _DIGITS.match(body, i).end()  # type: ignore[union-attr]
    return None, i


def go_string(text: str) -> str:
    """``text`` as Go decodes it: a lone surrogate escape (``"\\ud800"``) becomes U+FFFD."""
    return _LONE_SURROGATE.sub("\ufffd", text)


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
            f"json: cannot unmarshal {json_kind(value)} into Go value of type {go_type}"
        )
    return value


def go_json(data: object) -> str:
    """``data`` as Go's ``json.Marshal`` writes it: compact, UTF-8 as is, ``<``, ``>``, ``&``,
    U+2028 and U+2029 escaped, a lone surrogate as U+FFFD."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return go_string(text).translate(_GO_ESCAPES)


_GO_ESCAPES: Final = str.maketrans({c: f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"})


def decode_fields(
    obj: Mapping[str, Any],
    fields: Mapping[str, FieldKind],
    go_struct: str,
    others: Mapping[str, Callable[[object], None]] | None = None,
) -> dict[str, Any]:
    """Pick ``fields`` out of ``obj`` as Go fills a struct: every occurrence of a field's key,
    in any case, is type-checked and applied in document order; absent and null keys are left
    out. ``others`` are checks for further fields (called with every occurrence, null
    included). The first error in document order is raised once every pair was seen."""
    found: dict[str, Any] = {}
    names = {fold(name): name for name in [*fields, *(others or {})]}
    first: ApiError | None = None
    for key, value in pairs(obj):
        name = names.get(fold(key))
        if name is None:
            continue
        try:
            if name not in fields:
                assert others is not None
                others[name](value)
            elif value is not None:
                found[name] = convert(value, fields[name], f"{go_struct}.{name}")
        except ApiError as error:
            first = first or error
    if first is not None:
        raise first
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
        literal = Decimal(value.text if isinstance(value, JsonNumber) else int(value))
        if not literal.is_finite() or abs(literal) >= _FLOAT32_OVERFLOW:
            raise wrong()
        return to_float32(float(value))
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
