"""What an option's value is, before its range is checked: a bool is no number here, though
Python's ``bool`` is an ``int``."""

from __future__ import annotations

import math
from typing import TypeGuard


def whole(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def number(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is an ``int`` or a ``float`` (not a bool); NaN and infinities are."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def finite(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is a finite ``int`` or ``float`` (not a bool)."""
    return number(value) and math.isfinite(value)
