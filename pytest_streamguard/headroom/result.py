"""What a headroom search found: :class:`Headroom` and each :class:`HeadroomLevel` it ran.

Both are builtin-typed through ``to_dict``/``from_dict``, so a test's headroom crosses from a
pytest-xdist worker and into the JSON report (a test record's ``headroom``) and back out of a
saved baseline unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Headroom", "HeadroomLevel"]


def shown(value: float) -> str:
    """A level as written (``8``, ``0.25``)."""
    return f"{value:g}"


@dataclass(frozen=True)
class HeadroomLevel:
    """One run of one level: the level (in the search's unit), whether it held against the
    test's deadline, the figures it was judged on (``ttft_p95_s``, ``gap_p95_s``,
    ``total_p95_s``, ``streams``, ``completed``: seconds and counts), the bounds it broke (one
    line each) and its findings in a line (read with the probe beside the level's load, whose
    figures are ``probe_samples``, ``probe_unanswered``, ``probe_longest_s``); ``confirming``:
    a re-run of a level that held once; ``forwarding``: the hop's forwarding delay the level's
    streams showed, in a line (``p50 0.41 ms, p99 1.7 ms, ...`` or ``not measured: why``; its
    figures ``forwarding_p50_s``, ``forwarding_p99_s``, ``forwarding_max_s``; see
    :mod:`pytest_streamguard.headroom.forwarding`)."""

    level: float
    held: bool
    figures: dict[str, Any] = field(default_factory=dict)
    violations: tuple[str, ...] = ()
    findings: str = ""
    confirming: bool = False
    forwarding: str = "not measured"

    @property
    def cause(self) -> str:
        """What broke the level, with its likely cause: ``TTFT p95 0.62 s > 0.45 s; likely
        cause: ...`` (empty for a level that held)."""
        if self.held:
            return ""
        text = "; ".join(self.violations)
        return f"{text}; likely cause: {self.findings}" if self.findings else text

    def to_dict(self) -> dict[str, Any]:
        """Builtin-typed form."""
        return {**asdict(self), "violations": list(self.violations)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> HeadroomLevel:
        """Inverse of :meth:`to_dict`."""
        return cls(
            level=float(raw["level"]),
            held=bool(raw["held"]),
            figures=dict(raw.get("figures", {})),
            violations=tuple(raw.get("violations", ())),
            findings=str(raw.get("findings", "")),
            confirming=bool(raw.get("confirming", False)),
            forwarding=str(raw.get("forwarding", "not measured")),
        )


@dataclass(frozen=True)
class Headroom:
    """How far a stream is from breaking: the largest level of ``vary`` that held the test's
    ``token_deadline`` (``value``; 0 when even the first level broke), the next level, which
    did not (``broke_at``; None when every level up to ``up_to`` held), what broke it
    (``cause``: the violations and findings at ``broke_at``), every level run in the order
    run (``levels``) and how many loads the search spent (``runs``). ``unit`` names the
    level's unit (``streams``, ``ms``, ...); ``deadline`` is the bounds it was judged by.
    ``spread``: the lowest and highest value the repeats of the boundary levels were consistent
    with (:attr:`span`; None, as in a report saved before them: ``value`` alone)."""

    vary: str
    unit: str
    value: float
    broke_at: float | None
    cause: str
    levels: tuple[HeadroomLevel, ...]
    up_to: float
    precision: float
    deadline: dict[str, Any] = field(default_factory=dict)
    spread: tuple[float, float] | None = None

    @property
    def span(self) -> tuple[float, float]:
        """The lowest and highest value consistent with the repeats (``value`` twice if none)."""
        return self.spread or (self.value, self.value)

    @property
    def runs(self) -> int:
        """The loads the search spent (a confirmation counts)."""
        return len(self.levels)

    def forwarding(self) -> str:
        """The hop's forwarding delay at the boundary: at ``broke_at`` (at ``value`` when every
        level held), ``forwarding p99 1.7 ms at 9 streams`` or ``forwarding not measured``."""
        at = self.broke_at if self.broke_at is not None else self.value
        level = next((kept for kept in reversed(self.levels) if kept.level == at), None)
        p99 = None if level is None else level.figures.get("forwarding_p99_s")
        if level is None or not isinstance(p99, int | float):
            return "forwarding not measured"
        return f"forwarding p99 {p99 * 1e3:.3g} ms at {shown(at)} {self.unit}"

    def describe(self) -> str:
        """``headroom streams: 8 (9 broke: TTFT p95 0.62 s > 0.45 s; likely cause: ...;
        forwarding p99 1.7 ms at 9 streams)``."""
        unit = "" if self.unit == self.vary else f" {self.unit}"
        if self.broke_at is None:
            tail = f"every level up to {shown(self.up_to)}{unit} held"
        else:
            tail = f"{shown(self.broke_at)}{unit} broke: {self.cause}"
        low, high = self.span
        spread = f"; spread {shown(low)}-{shown(high)}" if low != high else ""
        return (
            f"headroom {self.vary}: {shown(self.value)}{unit} ({tail}{spread}; {self.forwarding()})"
        )

    def to_dict(self) -> dict[str, Any]:
        """Builtin-typed form."""
        return {
            "vary": self.vary,
            "unit": self.unit,
            "value": self.value,
            "broke_at": self.broke_at,
            "cause": self.cause,
            "runs": self.runs,
            "up_to": self.up_to,
            "precision": self.precision,
            "deadline": dict(self.deadline),
            "spread": list(self.span),
            "levels": [level.to_dict() for level in self.levels],
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Headroom:
        """Inverse of :meth:`to_dict`."""
        broke_at, spread = raw.get("broke_at"), raw.get("spread")
        return cls(
            vary=str(raw["vary"]),
            unit=str(raw["unit"]),
            value=float(raw["value"]),
            broke_at=None if broke_at is None else float(broke_at),
            cause=str(raw.get("cause", "")),
            levels=tuple(HeadroomLevel.from_dict(level) for level in raw.get("levels", [])),
            up_to=float(raw["up_to"]),
            precision=float(raw["precision"]),
            deadline=dict(raw.get("deadline", {})),
            spread=None if spread is None else (float(spread[0]), float(spread[1])),
        )
