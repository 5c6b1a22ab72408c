"""Named fault profiles: the incidents a ``streamguard_matrix`` test runs under.

A profile is a list of toxics in Toxiproxy's own JSON toxic format (the body of
``POST /proxies/{proxy}/toxics``: ``name``, ``type``, ``stream``, ``toxicity``,
``attributes``), so the files under ``toxiproxy/profiles/`` can be loaded into a real
toxiproxy-server as they are. Incidents the network alone cannot express (a stall or a cut that
starts after a stream's Nth chunk, a slow reader, a disabled proxy) are built-in profiles that
use the fault vocabulary of :class:`~pytest_streamguard.faults.inject.Faults` instead.

A user's own profiles are ``*.json`` files in the directory named by the
``streamguard_profiles`` ini key: each file is one profile
named by its stem, holding either a JSON list of toxics or an object
``{"description": "...", "toxics": [...]}``. A file profile with a built-in name replaces it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_streamguard.common.numbers import finite, whole
from pytest_streamguard.errors import ProfileError

# Toxiproxy 2.x toxic types and the attributes each takes (all integers).
TOXIC_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "latency": ("latency", "jitter"),
    "bandwidth": ("rate",),
    "slow_close": ("delay",),
    "timeout": ("timeout",),
    "reset_peer": ("timeout",),
    "slicer": ("average_size", "size_variation", "delay"),
    "limit_data": ("bytes",),
}
STREAMS = ("upstream", "downstream")
ACCEPTED_FILE = (
    "a profile file is JSON: a list of Toxiproxy toxics, or an object "
    '{"description": "...", "toxics": [...]}; each toxic is an object with "type" (one of '
    + ", ".join(TOXIC_ATTRIBUTES)
    + '), optional "name", "stream" (upstream or downstream, default downstream), '
    '"toxicity" (0 to 1, default 1) and "attributes" (integers, by type: '
    + "; ".join(f"{t}: {', '.join(a)}" for t, a in TOXIC_ATTRIBUTES.items())
    + ")"
)


@dataclass(frozen=True)
class Toxic:
    """One toxic of a profile, as Toxiproxy's API takes it."""

    type: str
    attributes: dict[str, int]
    stream: str = "downstream"
    toxicity: float = 1.0
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Toxiproxy's JSON form (``name`` only when given)."""
        raw: dict[str, Any] = {
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": dict(self.attributes),
        }
        if self.name is not None:
            raw = {"name": self.name, **raw}
        return raw


@dataclass(frozen=True)
class Profile:
    """A named incident: toxics added to the test's proxy, and fault-vocabulary calls.

    ``faults`` holds ``(word, kwargs)`` pairs for :class:`~pytest_streamguard.faults.inject.Faults`
    (``stall``, ``cut``, ``slow_reader``, ``down``, ``blackhole``); ``source`` is ``built-in``
    or the file the profile came from."""

    name: str
    description: str
    toxics: tuple[Toxic, ...] = ()
    faults: tuple[tuple[str, dict[str, Any]], ...] = ()
    source: str = "built-in"

    def to_dict(self) -> dict[str, Any]:
        """Builtin-typed form, as the JSON report shows it."""
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "toxics": [t.to_dict() for t in self.toxics],
            "faults": [{"fault": word, **kwargs} for word, kwargs in self.faults],
        }


def _latency(ms: int, jitter: int = 0, stream: str = "downstream") -> Toxic:
    return Toxic("latency", {"latency": ms, "jitter": jitter}, stream)


BUILTIN: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("none", "no fault: the baseline column of a matrix"),
        Profile("latency-200", "200 ms added to every response chunk", (_latency(200),)),
        Profile(
            "jitter-150",
            "150 ms ± 150 ms on every response chunk (0 to 300 ms)",
            (_latency(150, 150),),
        ),
        Profile(
            "mobile-3g",
            "a regular 3G link: 100 ms latency each way, 93 KB/s down, 31 KB/s up",
            (
                _latency(100),
                _latency(100, stream="upstream"),
                Toxic("bandwidth", {"rate": 93}),
                Toxic("bandwidth", {"rate": 31}, "upstream"),
            ),
        ),
        Profile(
            "slow-reader-2kbps",
            "a client behind a 2 KB/s network that reads slowly (backpressure on the server)",
            faults=(("slow_reader", {"bytes_per_second": 2000}),),
        ),
        Profile(
            "stall-1s",
            "the stream pauses for 1 s after its third chunk, then flows again",
            faults=(("stall", {"after_chunks": 3, "seconds": 1.0}),),
        ),
        Profile(
            "cut-mid-stream",
            "each stream's connection is closed (FIN) right after its third chunk, whatever "
            "the stream's length (exact and with nothing held before it on the embedded server)",
            faults=(("cut", {"after_chunks": 3}),),
        ),
        Profile(
            "reset",
            "each connection is reset (RST) as its response starts",
            (Toxic("reset_peer", {"timeout": 0}),),
        ),
        Profile("down", "the proxy is disabled: connections are refused", faults=(("down", {}),)),
    )
}


def _bad(source: str, what: str) -> ProfileError:
    return ProfileError(f"{source}: {what}; {ACCEPTED_FILE}")


def _toxic(raw: Any, source: str, index: int) -> Toxic:
    where = f"toxic {index + 1}"
    if not isinstance(raw, dict):
        raise _bad(source, f"{where} is {type(raw).__name__}, not an object")
    unknown = sorted(set(raw) - {"name", "type", "stream", "toxicity", "attributes"})
    if unknown:
        raise _bad(source, f"{where} has unknown key(s) {', '.join(unknown)}")
    type_ = raw.get("type")
    if type_ not in TOXIC_ATTRIBUTES:
        raise _bad(source, f"{where} has type {type_!r}")
    stream = raw.get("stream", "downstream")
    if stream not in STREAMS:
        raise _bad(source, f"{where} has stream {stream!r}")
    toxicity = raw.get("toxicity", 1.0)
    if not finite(toxicity) or not 0 <= toxicity <= 1:
        raise _bad(source, f"{where} has toxicity {toxicity!r}")
    name = raw.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise _bad(source, f"{where} has name {name!r}")
    attributes = raw.get("attributes", {})
    if not isinstance(attributes, dict):
        raise _bad(source, f"{where} has attributes {attributes!r}")
    extra = sorted(set(attributes) - set(TOXIC_ATTRIBUTES[type_]))
    if extra:
        raise _bad(source, f"{where} ({type_}) has unknown attribute(s) {', '.join(extra)}")
    for key, value in attributes.items():
        if not whole(value) or value < 0:
            raise _bad(source, f"{where} ({type_}) has {key}={value!r}, not an integer >= 0")
    return Toxic(type_, dict(attributes), stream, float(toxicity), name)


def profile_from_json(name: str, raw: Any, source: str) -> Profile:
    """A profile from its parsed JSON (a toxics list or an object with ``toxics``)."""
    description = f"toxics from {Path(source).name}"
    if isinstance(raw, dict):
        unknown = sorted(set(raw) - {"description", "toxics"})
        if unknown:
            raise _bad(source, f"unknown key(s) {', '.join(unknown)}")
        if not isinstance(raw.get("description", ""), str):
            raise _bad(source, "description is not a string")
        description = raw.get("description") or description
        raw = raw.get("toxics")
    if not isinstance(raw, list):
        raise _bad(source, f"the toxics are {type(raw).__name__}, not a list")
    toxics = tuple(_toxic(t, source, i) for i, t in enumerate(raw))
    return Profile(name, description, toxics, source=source)


def load_file(path: Path) -> Profile:
    """One profile file, named by its stem; :class:`ProfileError` naming the file if bad."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise _bad(str(path), f"cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise _bad(str(path), f"not JSON ({exc})") from None
    return profile_from_json(path.stem, raw, str(path))


def load_profiles(directory: Path | None) -> dict[str, Profile]:
    """The built-in profiles, plus (replacing same-named ones) every ``*.json`` in ``directory``."""
    profiles = dict(BUILTIN)
    if directory is None:
        return profiles
    if not directory.is_dir():
        raise ProfileError(
            f"{directory}: not a directory; streamguard_profiles names a directory of "
            "*.json profile files"
        )
    for path in sorted(directory.glob("*.json")):
        profiles[path.stem] = load_file(path)
    return profiles
