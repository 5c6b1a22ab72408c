"""Toxic definitions: types, attributes, validation and the JSON the API shows for them.

Attribute names, types, defaults and order follow the Go structs in ``toxics/*.go``. Bounds
are ours: the real server accepts e.g. a negative bandwidth rate and then panics on the data
path, so such values get a 400 here that says what is accepted.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from .decode import (
    FieldKind,
    decode_fields,
    expect_object,
    format_float32,
    json_kind,
)
from .errors import (
    BAD_REQUEST_BODY,
    INVALID_STREAM,
    INVALID_TOXIC_TYPE,
    TOXIC_EXISTS,
    invalid_input,
)

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


def _chunks() -> AttributeSpec:
    return AttributeSpec("after_chunks", "int64", 1, 2**31 - 1, "chunks")


def _aimed() -> AttributeSpec:
    # 1: only on requests that name the toxic in an x-streamguard-aim header (events.py).
    return AttributeSpec(
        "aimed", "int64", 0, 1, "1: only requests that name it in x-streamguard-aim"
    )


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
        # Our extension: act right after the Nth chunk of each response (events.py).
        ToxicType("chunk_stall", "ChunkStallToxic", (_chunks(), _ms("duration"), _aimed())),
        ToxicType("chunk_cut", "ChunkCutToxic", (_chunks(), _aimed())),
        ToxicType("chunk_reset", "ChunkResetToxic", (_chunks(), _aimed())),
    )
}
CHUNK_TYPES: Final = ("chunk_stall", "chunk_cut", "chunk_reset")
"""The toxic types of ours, not Toxiproxy's: the plugin's chunk faults on this server."""


@dataclass
class ProxyToxic:
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


class _Attributes:
    """Every ``attributes`` occurrence decoded as Go decodes it into the toxic struct held by
    an ``interface{}``: objects merge in document order, a non-object is a type error, and a
    ``null`` empties the interface, so whatever follows decodes into a throwaway value."""

    def __init__(self, toxic_type: ToxicType) -> None:
        self.type = toxic_type
        self.held = True
        self.values: dict[str, Any] = {}

    def __call__(self, value: object) -> None:
        if value is None:
            self.held = False
        if not self.held:
            return
        go_struct = self.type.go_struct
        if not isinstance(value, dict):
            raise BAD_REQUEST_BODY.joined(
                f"json: cannot unmarshal {json_kind(value)} into Go struct field .attributes "
                f"of type toxics.{go_struct}"
            )
        kinds = {spec.name: spec.kind for spec in self.type.attributes}
        self.values.update(decode_fields(value, kinds, f".attributes.{go_struct}"))

    def apply(self, into: dict[str, int]) -> None:
        """Check the decoded values against this server's bounds and store them in ``into``."""
        for spec in self.type.attributes:
            if spec.name not in self.values:
                continue
            value = self.values[spec.name]
            if not spec.minimum <= value <= spec.maximum:
                raise invalid_input(
                    f"invalid {self.type.name} attribute {spec.name}={value}: accepted is an "
                    f"integer from {spec.minimum} to {spec.maximum} ({spec.unit})"
                )
            into[spec.name] = value


class _WrapperAttributes:
    """Go's first pass over a new toxic's body: ``attributes`` decodes into the ``Toxic``
    interface holding a ``NoopToxic``, so an object passes, anything else is a type error, and
    after a ``null`` (which empties the interface) nothing but ``null`` can be decoded."""

    def __init__(self) -> None:
        self.held = True

    def __call__(self, value: object) -> None:
        if value is None:
            self.held = False
        elif not self.held or not isinstance(value, dict):
            go_type = "toxics.NoopToxic" if self.held else "toxics.Toxic"
            raise BAD_REQUEST_BODY.joined(
                f"json: cannot unmarshal {json_kind(value)} into Go struct field "
                f"ToxicWrapper.attributes of type {go_type}"
            )


def new_toxic(body: object, taken: Callable[[str], bool]) -> ProxyToxic:
    """Build a toxic from a ``POST /proxies/{p}/toxics`` body, checking in the real order:
    the wrapper's fields (and that ``attributes`` is an object), the stream, the type, the
    name (a 409 comes before any attribute error, as in Toxiproxy's ``AddToxicJson``), then
    the attributes against the type."""
    obj = expect_object(body, "toxics.ToxicWrapper")
    top: dict[str, FieldKind] = {
        "name": "string",
        "type": "string",
        "stream": "string",
        "toxicity": "float32",
    }
    fields = decode_fields(obj, top, "ToxicWrapper", {"attributes": _WrapperAttributes()})
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
    decoded = _Attributes(toxic_type)
    decode_fields(obj, {}, "", {"attributes": decoded})
    decoded.apply(attributes)
    _check_consistency(toxic_type, attributes)
    toxicity = fields.get("toxicity", 1.0)
    return ProxyToxic(name, toxic_type, stream, direction, toxicity, attributes)


_PATCH_BODY: Final = (
    'struct { Attributes interface {} "json:\\"attributes\\""; '
    'Toxicity float32 "json:\\"toxicity\\"" }'
)


def updated_toxic(current: ProxyToxic, body: object) -> ProxyToxic:
    """Apply a ``PATCH`` body: attributes decode into the current ones, toxicity is optional.

    A body with any error changes nothing (Go has by then written the attributes decoded
    before the error into the live toxic; see the docs' divergences)."""
    obj = expect_object(body, _PATCH_BODY)
    attributes = dict(current.attributes)
    decoded = _Attributes(current.type)
    fields = decode_fields(obj, {"toxicity": "float32"}, "", {"attributes": decoded})
    decoded.apply(attributes)
    _check_consistency(current.type, attributes)
    toxicity = fields.get("toxicity", current.toxicity)
    return dataclasses.replace(current, toxicity=toxicity, attributes=attributes)


def _check_consistency(toxic_type: ToxicType, attributes: Mapping[str, int]) -> None:
    if toxic_type.name == "slicer" and attributes["average_size"] < 1:
        raise invalid_input(
            "invalid slicer attribute average_size=0: accepted is an integer from 1 to "
            f"{1 << 30} (bytes)"
        )
    if toxic_type.name in CHUNK_TYPES and attributes["after_chunks"] < 1:
        raise invalid_input(
            f"invalid {toxic_type.name} attribute after_chunks={attributes['after_chunks']}: "
            f"accepted is an integer from 1 to {2**31 - 1} (chunks)"
        )
