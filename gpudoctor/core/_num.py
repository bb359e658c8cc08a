"""A reading as a number, or None: the one test of "is this a number?".

A reading is an int or a float. ``NA``, ``None``, text and bools are not: ``True`` is an
int to Python but never a reading (a flag counted as 1 would be a made-up figure).
A reader of loose input (a driver that answers text, numpy scalars) asks with ``parse=True``:
then whatever ``float()`` reads (``"12.5"``, ``b"3"``, a numpy float) counts too, bools still not.

Standard library only: every layer may use it.
"""

from __future__ import annotations

import math
from typing import SupportsFloat, SupportsIndex, TypeGuard


def is_number(value: object) -> TypeGuard[int | float]:
    """An int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _parsed(value: object) -> object:
    """What ``float()`` makes of a value that is not already a number (None where it refuses)."""
    if is_number(value) or isinstance(value, bool):
        return value
    if not isinstance(value, (str, bytes, bytearray, memoryview, SupportsFloat, SupportsIndex)):
        return None  # what float() refuses with a TypeError
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def exact_number(value: object, *, parse: bool = False) -> int | float | None:
    """``value`` as it is where it is a number (an int stays an int: a counter is never rounded
    through a float), else None; with ``parse``, what ``float()`` reads counts too."""
    value = _parsed(value) if parse else value
    return value if is_number(value) else None


def number(value: object, *, finite: bool = False, parse: bool = False) -> float | None:
    """``value`` as a float, or None where it is no number; with ``finite``, NaN and the
    infinities are None too; with ``parse``, what ``float()`` reads counts too."""
    exact = exact_number(value, parse=parse)
    if exact is None or (finite and not math.isfinite(exact)):
        return None
    return float(exact)


__all__ = ["exact_number", "is_number", "number"]
