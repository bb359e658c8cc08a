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

from typing import Any, TypeGuard, TypeVar

from gpudoctor.core._num import is_number, number

from .catalogue import mig_readings, plausible_ranges
from .na import NA

_T = TypeVar("_T")

#: A prefix every "implausible" NA reason starts with (the health probe looks for it).
IMPLAUSIBLE = "implausible value"

# The ranges (reading key or static fact -> (lowest, highest) plausible value, both included) and
# their reasons are defined with the readings, in gpudoctor.backends.catalogue:
# catalogue.plausible_ranges(), which ``check`` reads at each call.


def implausible(value: object) -> NA:
    """The NA for an impossible ``value``; an int is written whole (never through a float)."""
    text = str(value) if isinstance(value, int) else f"{value:g}" if isinstance(value, float) else repr(value)
    return NA(f"{IMPLAUSIBLE} {text}")


def check(key: str, value: _T) -> _T | NA:
    """``value``, or NA("implausible value <v>") when it is a number outside ``key``'s range."""
    return within(plausible_ranges().get(key), value)


def within(bounds: tuple[int, int] | None, value: _T) -> _T | NA:
    """``value``, or NA("implausible value <v>") when it is a number outside ``bounds`` (None: any)."""
    reading: object = value  # narrowed below; ``value`` keeps its type for the caller
    if bounds is None or not is_number(reading):
        return value
    low, high = bounds
    if reading != reading or not low <= reading <= high:  # reading != reading: NaN
        return implausible(reading)
    return value


def screen_mig(readings: dict[str, Any]) -> dict[str, Any]:
    """A MIG device's readings (a recording's ``mig`` entry) as :func:`screen` gives a sample's, by the
    ranges of the catalogue's MIG readings (``MigReading.plausible``)."""
    for r in mig_readings():
        if r.plausible is not None and r.key in readings:
            readings[r.key] = within(r.plausible, readings[r.key])
    return cross_check(readings)


def screen(readings: dict[str, Any]) -> dict[str, Any]:
    """``readings`` with every impossible number replaced by its NA (the dict is changed in place),
    each alone and then together (:func:`cross_check`)."""
    for key in plausible_ranges().keys() & readings.keys():
        readings[key] = check(key, readings[key])
    return cross_check(readings)


#: Percentage points by which tensor activity may exceed SM activity (the two are sampled by
#: GPM over the same window, and a tensor-core cycle is an SM cycle: beyond rounding, never).
TENSOR_OVER_SM_PCT = 5.0
#: How many times its enforced limit a board's power draw may read (short spikes pass the limit;
#: several times it is no reading of a working board).
POWER_OVER_LIMIT = 3.0


def cross_check(readings: dict[str, Any]) -> dict[str, Any]:
    """Readings that physics ties together, checked against each other: tensor activity at most
    SM activity, memory used at most the total, power at most a few times the limit. An
    impossible combination makes the readings involved NA("implausible value ...") with both
    numbers in the reason: said (the health probe reports implausible values), never judged
    (no verdict is drawn from a pair that cannot both be true)."""
    tensor, sm = number(readings.get("tensor_active_pct")), number(readings.get("sm_active_pct"))
    if tensor is not None and sm is not None and tensor > sm + TENSOR_OVER_SM_PCT:
        both = NA(f"{IMPLAUSIBLE} together: tensor activity {tensor:g}% above SM activity {sm:g}%")
        for key in ("tensor_active_pct", "tensor_hmma_active_pct", "sm_active_pct"):
            if key in readings:
                readings[key] = both
    used, total = number(readings.get("memory_used_bytes")), number(readings.get("memory_total_bytes"))
    if used is not None and total is not None and used > total:
        both = NA(f"{IMPLAUSIBLE} together: memory used {used:.0f} B above the total {total:.0f} B")
        for key in ("memory_used_bytes", "memory_free_bytes"):
            if key in readings:
                readings[key] = both
    power, limit = number(readings.get("power_w")), number(readings.get("power_limit_w"))
    if power is not None and limit is not None and limit > 0 and power > POWER_OVER_LIMIT * limit:
        readings["power_w"] = NA(f"{IMPLAUSIBLE} together: power {power:g} W, over {POWER_OVER_LIMIT:g} times "
                                 f"the limit {limit:g} W")
    return readings


def is_implausible(value: object) -> TypeGuard[NA]:
    return isinstance(value, NA) and value.reason.startswith(IMPLAUSIBLE)


__all__ = ["IMPLAUSIBLE", "check", "within", "screen", "screen_mig", "implausible", "is_implausible"]
