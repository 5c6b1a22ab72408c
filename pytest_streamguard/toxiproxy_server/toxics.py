"""Toxic definitions: types, attributes, validation and the JSON the API shows for them.

Attribute names, types, defaults and order follow the Go structs in ``toxics/*.go``. Bounds
are ours: the real server accepts e.g. a negative bandwidth rate and then panics on the data
path, so such values get a 400 here that says what is accepted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from .decode import FieldKind, convert, decode_fields, expect_object, format_float32
from .errors import INVALID_STREAM, INVALID_TOXIC_TYPE, TOXIC_EXISTS, invalid_input

NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9._-]{1,64}")
NAME_RULE: Final = "1 to 64 characters from A-Z a-z 0-9 . _ -"

_DAY_MS: Final = 86_400_000


class Direction(Enum):
    """Which way a toxic acts: ``upstream`` is client to server, ``downstream`` the reply."""

    UPSTREAM = "upstream"
    DOWNSTREAM = "downstream"


@dataclass(frozen=True)
class AttributeSpec:
    """One toxic attribute: its JSON name, Go type and the range this server accepts."""

    name: str
    kind: FieldKind
    minimum: int
    maximum: int
    unit: str


@dataclass(frozen=True)
class ToxicType:
    """A registered toxic type and its attributes, in Go struct order."""

    name: str
    go_struct: str
    attributes: tuple[AttributeSpec, ...]
    buffer_size: int = 0


def _ms(name: str) -> AttributeSpec:
    return AttributeSpec(name, "int64", 0, _DAY_MS, "milliseconds")


TOXIC_TYPES: Final[Mapping[str, ToxicType]] = {
    t.name: t
    for t in (
        ToxicType("noop", "NoopToxic", ()),
        ToxicType("latency", "LatencyToxic", (_ms("latency"), _ms("jitter")), buffer_size=1024),
        ToxicType(
            "bandwidth",
            "BandwidthToxic",
            (AttributeSpec("rate", "int64", 0, 10_000_000, "KB/s"),),
        ),
        ToxicType("slow_close", "SlowCloseToxic", (_ms("delay"),)),
        ToxicType("timeout", "TimeoutToxic", (_ms("timeout"),)),
        ToxicType("reset_peer", "ResetToxic", (_ms("timeout"),)),
        ToxicType(
            "slicer",
            "SlicerToxic",
            (
                AttributeSpec("average_size", "int", 1, 1 << 30, "bytes"),
                AttributeSpec("size_variation", "int", 0, 1 << 30, "bytes"),
                AttributeSpec("delay", "int", 0, _DAY_MS * 1000, "microseconds"),
            ),
        ),
        ToxicType(
            "limit_data",
            "LimitDataToxic",
            (AttributeSpec("bytes", "int64", 0, 2**63 - 1, "bytes"),),
        ),
    )
}


@dataclass
class Toxic:
    """A toxic as configured on a proxy (shared by every connection through it)."""

    name: str
    type: ToxicType
    stream: str
    direction: Direction
    toxicity: float
    attributes: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The object the API shows (Go's ``ToxicWrapper`` field order)."""
        return {
            "attributes": dict(self.attributes),
            "name": self.name,
            "type": self.type.name,
            "stream": self.stream,
            "toxicity": format_float32(self.toxicity),
        }

    def attr(self, name: str) -> int:
        """The value of one attribute."""
        return self.attributes[name]


def check_name(name: str, what: str) -> None:
    """Reject a proxy or toxic name outside the allow-list with a 400 that states it."""
    if not NAME_PATTERN.fullmatch(name):
        raise invalid_input(f"invalid {what} name {name!r}: use {NAME_RULE}")


def parse_direction(stream: str) -> Direction:
    """Parse ``stream`` case-insensitively, as the real server does."""
    lowered = stream.lower()
    for direction in Direction:
        if direction.value == lowered:
            return direction
    raise INVALID_STREAM


def _decode_attributes(toxic_type: ToxicType, raw: object, into: dict[str, int]) -> None:
    if raw is None:
        return
    obj = expect_object(raw, f"toxics.{toxic_type.go_struct}")
    kinds = {spec.name: spec.kind for spec in toxic_type.attributes}
    values = decode_fields(obj, kinds, f".attributes.{toxic_type.go_struct}")
    for spec in toxic_type.attributes:
        if spec.name not in values:
            continue
        value = values[spec.name]
        if not spec.minimum <= value <= spec.maximum:
            raise invalid_input(
                f"invalid {toxic_type.name} attribute {spec.name}={value}: accepted is an "
                f"integer from {spec.minimum} to {spec.maximum} ({spec.unit})"
            )
        into[spec.name] = value


def new_toxic(body: object, taken: Callable[[str], bool]) -> Toxic:
    """Build a toxic from a ``POST /proxies/{p}/toxics`` body, checking in the real order.

    ``taken`` says whether a name is already used on the proxy (a 409 comes before any
    attribute error, as in Toxiproxy's ``AddToxicJson``).
    """
    obj = expect_object(body, "toxics.ToxicWrapper")
    top: dict[str, FieldKind] = {
        "name": "string",
        "type": "string",
        "stream": "string",
        "toxicity": "float32",
    }
    fields = decode_fields(obj, top, "ToxicWrapper")
    stream = fields.get("stream", "downstream")
    direction = parse_direction(stream)
    type_name = fields.get("type", "")
    name = fields.get("name", "") or f"{type_name}_{stream}"
    toxic_type = TOXIC_TYPES.get(type_name)
    if toxic_type is None:
        raise INVALID_TOXIC_TYPE
    check_name(name, "toxic")
    if taken(name):
        raise TOXIC_EXISTS
    attributes = {spec.name: 0 for spec in toxic_type.attributes}
    _decode_attributes(toxic_type, _field(obj, "attributes"), attributes)
    _check_consistency(toxic_type, attributes)
    return Toxic(
        name=name,
        type=toxic_type,
        stream=stream,
        direction=direction,
        toxicity=fields.get("toxicity", 1.0),
        attributes=attributes,
    )


def updated_toxic(current: Toxic, body: object) -> Toxic:
    """Apply a ``PATCH`` body: attributes decode into the current ones, toxicity is optional."""
    obj = expect_object(body, "struct { Attributes interface {}; Toxicity float32 }")
    attributes = dict(current.attributes)
    _decode_attributes(current.type, _field(obj, "attributes"), attributes)
    _check_consistency(current.type, attributes)
    raw_toxicity = _field(obj, "toxicity")
    toxicity = current.toxicity
    if raw_toxicity is not None:
        toxicity = convert(raw_toxicity, "float32", ".Toxicity")
    return Toxic(
        name=current.name,
        type=current.type,
        stream=current.stream,
        direction=current.direction,
        toxicity=toxicity,
        attributes=attributes,
    )


def _field(obj: Mapping[str, Any], name: str) -> object:
    found: object = None
    for key, value in obj.items():
        if key == name or key.lower() == name:
            found = value
    return found


def _check_consistency(toxic_type: ToxicType, attributes: Mapping[str, int]) -> None:
    if toxic_type.name == "slicer" and attributes["average_size"] < 1:
        raise invalid_input(
            "invalid slicer attribute average_size=0: accepted is an integer from 1 to "
            f"{1 << 30} (bytes)"
        )
