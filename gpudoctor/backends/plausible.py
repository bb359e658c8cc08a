"""What a reading can possibly be: impossible numbers become NA.

A driver sometimes answers a number no GPU can have: a 4000 C temperature, an ECC counter
of 2**64 - 1 (NVML's "not available" sentinel, or a counter that wrapped), a clock of
2**40 MHz. Shown as facts, they become nonsense findings ("within 3 C of its shutdown
threshold (0 C)"). The backends (live NVML and replay alike) pass every reading through
:func:`screen`, which turns a number outside its range into ``NA("implausible value <v>")``,
so every front end (report, TUI, watch, exporter, recordings) shows it as unavailable, and
the health probe can say that the driver returned an impossible value.

The bounds are wide on purpose: they catch values no present or near-future GPU can have,
never a reading that is merely unusual.
"""

from __future__ import annotations

from typing import Any, TypeVar

from .catalogue import plausible_ranges
from .na import NA

_T = TypeVar("_T")

#: A prefix every "implausible" NA reason starts with (the health probe looks for it).
IMPLAUSIBLE = "implausible value"

#: reading key (or static fact) -> (lowest, highest) plausible value, both included. The ranges
#: and their reasons are defined with the readings, in gpudoctor.backends.catalogue; this is
#: the table as it stood at import (``check`` reads the catalogue itself).
PLAUSIBLE: dict[str, tuple[int, int]] = plausible_ranges()


def implausible(value: object) -> NA:
    """The NA for an impossible ``value``; an int is written whole (never through a float)."""
    text = str(value) if isinstance(value, int) else f"{value:g}" if isinstance(value, float) else repr(value)
    return NA(f"{IMPLAUSIBLE} {text}")


def check(key: str, value: _T) -> _T | NA:
    """``value``, or NA("implausible value <v>") when it is a number outside ``key``'s range."""
    bounds = plausible_ranges().get(key)
    if bounds is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    low, high = bounds
    if value != value or not low <= value <= high:  # value != value: NaN
        return implausible(value)
    return value


def screen(readings: dict[str, Any]) -> dict[str, Any]:
    """``readings`` with every impossible number replaced by its NA (the dict is changed in place)."""
    for key in plausible_ranges().keys() & readings.keys():
        readings[key] = check(key, readings[key])
    return readings


def is_implausible(value: object) -> bool:
    return isinstance(value, NA) and value.reason.startswith(IMPLAUSIBLE)


__all__ = ["PLAUSIBLE", "IMPLAUSIBLE", "check", "screen", "implausible", "is_implausible"]
