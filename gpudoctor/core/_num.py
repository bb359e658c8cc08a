"""A reading as a number, or None: the one test of "is this a number?".

A reading is an int or a float. ``NA``, ``None``, text and bools are not: ``True`` is an
int to Python but never a reading (a flag counted as 1 would be a made-up figure).

Standard library only: every layer may use it.
"""

from __future__ import annotations

import math
from typing import TypeGuard


def is_number(value: object) -> TypeGuard[int | float]:
    """An int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number(value: object, *, finite: bool = False) -> float | None:
    """``value`` as a float, or None where it is no number; with ``finite``, NaN and the
    infinities are None too."""
    if not is_number(value) or (finite and not math.isfinite(value)):
        return None
    return float(value)


__all__ = ["is_number", "number"]
