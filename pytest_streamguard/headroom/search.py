"""The search for the largest level that holds, over levels ``1..n`` (a level's unit index).

Written as a state machine (:class:`Search`: ask :meth:`~Search.next_level`, run that level,
:meth:`~Search.tell` whether it held) so it can be tested on synthetic predicates without
running a load. docs/headroom.md ("The search") says how it grows, bisects, confirms and
repeats; here, what bounds it:

- **Growth within a budget.** Growth alone costs about twice the log of the answer, so each
  level is kept inside the budget of :func:`max_runs`: when doubling would leave more levels
  unknown than the loads left can bisect, the next level is the lowest that keeps the bracket
  solvable.
- **Bound.** On a monotone predicate (every level up to some ``c`` holds, none above) the
  search spends at most ``floor(log2(n)) + 3`` runs, the confirmation included
  (:func:`max_runs`). A noisy predicate can cost one more confirmation (and the bisection it
  reopens) per lucky run. The repeats of the boundary (:data:`REPEATS`) add at most
  ``2 * repeats - 3`` runs and move no answer: they give its :attr:`~Search.spread`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["REPEATS", "Search", "Step", "max_runs"]

#: How many times the guard runs each boundary level in all (a noisy target showing it).
REPEATS = 3


def max_runs(levels: int) -> int:
    """The most runs a search of ``levels`` levels spends on a monotone predicate."""
    return math.floor(math.log2(levels)) + 3


@dataclass(frozen=True)
class Step:
    """One run of one level: its unit index, whether it held, and whether it re-ran a level
    that had held once (a confirmation)."""

    level: int
    held: bool
    confirming: bool = False


@dataclass
class Search:
    """The search over levels ``1..levels``; see the module docstring."""

    levels: int
    repeats: int = 0
    steps: list[Step] = field(default_factory=list)
    # The largest level believed to hold (0: none yet) and the smallest that broke
    # (levels + 1: none yet).
    _low: int = 0
    _high: int = 0
    _grown: bool = False
    _pending: int | None = None
    # The boundary once found: ``(value, broke_at index)``, for the repeats.
    _found: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.levels, bool) or not isinstance(self.levels, int) or self.levels < 1:
            raise ValueError(f"a search needs at least one level, got {self.levels!r}")
        self._high = self.levels + 1

    @property
    def value(self) -> int:
        """The largest level that held (every time it ran); 0 when none did."""
        return self._low

    @property
    def broke_at(self) -> int | None:
        """The smallest level that broke (the next above :attr:`value`), None when every level
        up to the last held."""
        return None if self._high > self.levels else self._high

    @property
    def done(self) -> bool:
        """Whether the boundary is found and the level that held is confirmed."""
        return self.next_level() is None

    def next_level(self) -> int | None:
        """The level to run next, or None when the search is over."""
        if self._found is not None:
            return self._repeat()
        if self._pending is not None:
            return self._pending
        if self._high - self._low > 1:
            return self._probe()
        if self._low >= 1 and not self._confirmed(self._low):
            return self._low
        self._found = (self._low, self._high)
        return self._repeat()

    def _repeat(self) -> int | None:
        found = self._found or ()
        return next(
            (k for k in found if 0 < k <= self.levels and self._ran(k) < self.repeats), None
        )

    @property
    def spread(self) -> tuple[int, int]:
        """The lowest and highest value consistent with the repeats: one level below
        :attr:`value` when it broke on a repeat, :attr:`broke_at` when that held on one."""
        low, high = self._low, self._high
        broke = any(not s.held for s in self.steps if s.level == low)
        held = any(s.held for s in self.steps if s.level == high)
        return (low - 1 if low and broke else low), (high if high <= self.levels and held else low)

    def tell(self, held: bool) -> None:
        """Whether the level :meth:`next_level` named held."""
        level = self.next_level()
        if level is None:
            raise RuntimeError("the search is over: no level was asked for")
        confirming = any(s.level == level for s in self.steps)
        self.steps.append(Step(level, held, confirming))
        self._pending = None
        if self._found is not None:
            return
        if held:
            self._low = max(self._low, level)
            return
        self._grown = True
        self._high = min(self._high, level)
        if self._low >= level:
            # A level believed to hold broke on its re-run: the largest level below it that
            # held is the answer again, to be confirmed in its turn.
            held_below = [s.level for s in self.steps if s.held and s.level < level]
            broke = {s.level for s in self.steps if not s.held}
            self._low = max((x for x in held_below if x not in broke), default=0)

    def _ran(self, level: int) -> int:
        return sum(s.level == level for s in self.steps)

    def _confirmed(self, level: int) -> bool:
        runs = [s for s in self.steps if s.level == level]
        return len(runs) >= 2 and all(s.held for s in runs)

    def _probe(self) -> int:
        low, high = self._low, self._high
        want = max(1, 2 * low) if not self._grown else (low + high) // 2
        # The search's own share of the budget: one run is kept for the confirmation.
        left = max_runs(self.levels) - 1 - len(self.steps)
        if left >= 1:
            # Either answer must leave a bracket the runs after this one can bisect.
            reach = 2 ** (left - 1)
            want = min(max(want, high - reach), low + reach)
        self._pending = min(max(want, low + 1), high - 1)
        return self._pending
