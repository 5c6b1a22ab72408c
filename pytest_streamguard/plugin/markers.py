"""The ``token_deadline`` marker: registration line, validation and resolution to a Deadline;
and the ``headroom`` marker's bounds, and what falls short of them."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pytest_streamguard.common.names import HEADROOM_MARKER_NAME, MARKER_NAME
from pytest_streamguard.common.numbers import finite, number
from pytest_streamguard.headroom.levels import AXES, VARY
from pytest_streamguard.headroom.result import Headroom
from pytest_streamguard.plugin.settings import Settings
from pytest_streamguard.verdict.deadlines import LONG_DEADLINE_S, Deadline, check_units
from pytest_streamguard.verdict.findings import KNOWN, parse_fail_on

ACCEPTED = (
    "token_deadline accepts only keyword arguments ttft, chunk, total (seconds, > 0; above "
    f"{LONG_DEADLINE_S:g} s only with long=True), percentile (0 < percentile <= 100, used with "
    "chunk), long (True or False) and fail_on (finding names: " + ", ".join(KNOWN) + ")"
)
_KEYS = ("ttft", "chunk", "total", "percentile")


def _check_arguments(mark: pytest.Mark, keys: set[str], accepted: str) -> None:
    if mark.args:
        raise ValueError(f"{mark.name} got positional arguments {mark.args!r}. {accepted}.")
    unknown = sorted(set(mark.kwargs) - keys)
    if unknown:
        raise ValueError(f"{mark.name} got unknown argument(s) {', '.join(unknown)}. {accepted}.")


def _check_value(key: str, value: Any) -> float | None:
    if value is None:
        return None
    if not number(value):
        raise ValueError(f"token_deadline({key}={value!r}) is not a number. {ACCEPTED}.")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"token_deadline({key}={value!r}) must be > 0. {ACCEPTED}.")
    if key == "percentile" and value > 100:
        raise ValueError(f"token_deadline(percentile={value!r}) must be <= 100. {ACCEPTED}.")
    return float(value)


def resolve_deadline(item: pytest.Item, settings: Settings) -> Deadline | None:
    """The merged deadline of ``item``'s markers (closest wins per key), or None if unmarked.

    Raises ValueError naming what is accepted for positional or unknown arguments and bad values."""
    merged: dict[str, Any] = {}
    seen = False
    for mark in item.iter_markers(MARKER_NAME):
        seen = True
        _check_arguments(mark, {*_KEYS, "long", "fail_on"}, ACCEPTED)
        merged = dict(mark.kwargs) | merged
    if not seen:
        return None
    merged.pop("fail_on", None)
    long = merged.pop("long", False)
    if not isinstance(long, bool):
        raise ValueError(f"token_deadline(long={long!r}) is not True or False. {ACCEPTED}.")
    values = {key: _check_value(key, merged.get(key)) for key in _KEYS}
    check_units(Deadline(**values), long=long, call=MARKER_NAME, where=" on the marker")
    if not merged:
        values["ttft"] = settings.ttft
        values["chunk"] = settings.chunk
    if values["percentile"] is not None and values["chunk"] is None:
        raise ValueError(f"token_deadline(percentile=...) needs chunk=... to bound. {ACCEPTED}.")
    return Deadline(**values)


def resolve_fail_on(item: pytest.Item, settings: Settings) -> tuple[str, ...]:
    """The findings that fail ``item``: ``--streamguard-fail-on`` and every marker's
    ``fail_on=`` (a name or a list of names). Raises ValueError naming an unknown one."""
    names = list(settings.fail_on)
    for mark in item.iter_markers(MARKER_NAME):
        value = mark.kwargs.get("fail_on")
        if value is None:
            continue
        if not isinstance(value, str) and not (
            isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        ):
            raise ValueError(
                f"token_deadline(fail_on={value!r}) is not a finding name or a list of them. "
                f"{ACCEPTED}."
            )
        names.extend(parse_fail_on(value, where=f"token_deadline(fail_on={value!r})"))
    return tuple(dict.fromkeys(names))


HEADROOM_ACCEPTED = (
    "headroom accepts only keyword arguments vary (one of " + ", ".join(VARY) + ") and "
    "at_least (a number >= 0, in that vary's unit)"
)


def resolve_headroom(item: pytest.Item) -> tuple[tuple[str, float], ...]:
    """The ``(vary, at_least)`` bounds of ``item``'s ``headroom`` markers. Raises ValueError
    naming what is accepted for a bad argument."""
    bounds: list[tuple[str, float]] = []
    for mark in item.iter_markers(HEADROOM_MARKER_NAME):
        _check_arguments(mark, {"vary", "at_least"}, HEADROOM_ACCEPTED)
        vary = mark.kwargs.get("vary", "streams")
        at_least = mark.kwargs.get("at_least")
        if vary not in VARY:
            raise ValueError(f"headroom(vary={vary!r}) is not known. {HEADROOM_ACCEPTED}.")
        if not finite(at_least) or at_least < 0:
            raise ValueError(
                f"headroom(at_least={at_least!r}) is not a number >= 0. {HEADROOM_ACCEPTED}."
            )
        bounds.append((vary, float(at_least)))
    return tuple(bounds)


def headroom_shortfalls(bounds: tuple[tuple[str, float], ...], found: list[Headroom]) -> list[str]:
    """One line per bound of the ``headroom`` markers that the test's searches (``found``)
    fall short of, or that no search of its ``vary`` measured (for bandwidth, whose search
    runs down, a value above the bound falls short)."""
    lines = []
    for vary, at_least in bounds:
        measured = [h for h in found if h.vary == vary]
        if not measured:
            lines.append(
                f"headroom(vary={vary!r}, at_least={at_least:g}): the test measured no "
                f"headroom of {vary} (call streamguard.headroom(vary={vary!r}))"
            )
            continue
        downward = AXES[vary].downward
        for h in measured:
            if (h.value > at_least) if downward else (h.value < at_least):
                word = "above" if downward else "below"
                lines.append(f"{h.describe()}: {word} at_least={at_least:g} {h.unit}")
    return lines
