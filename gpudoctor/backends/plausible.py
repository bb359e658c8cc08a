"""What a reading can possibly be: the one table of plausible ranges.

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

from typing import Any

from .na import NA

#: A prefix every "implausible" NA reason starts with (the health probe looks for it).
IMPLAUSIBLE = "implausible value"

_C_SENSOR = (-40, 150)
# A GPU die is read from -40 C (a board in cold storage, the lowest rating of the sensors)
# up to 150 C: silicon shuts the board down near 90-110 C, so a hotter reading is a broken
# sensor or a garbage answer, not a temperature.
_C_THRESHOLD = (30, 150)
# The driver's slowdown/shutdown thresholds are 80-110 C on every board; one at or below 30 C
# (an idle GPU's temperature) would throttle or power off every GPU at rest: a garbage answer.
_PCT = (0, 100)
# NVML's utilisation rates are shares of a sample period.
_FAN_PCT = (0, 200)
# Fan speed is a share of the "maximum noise tolerance" speed and NVML documents that it may
# exceed 100 %; twice that is beyond any fan.
_WATTS = (0, 5000)
# The largest single GPUs draw about 1-1.4 kW (B200, GB200's per-GPU share); 5 kW leaves room.
_SM_MHZ = (0, 10_000)
# GPU core clocks top out near 3 GHz; 10 GHz is beyond any silicon in sight.
_MEM_MHZ = (0, 100_000)
# NVML reports GDDR data rates as clocks (an RTX 4090: 10501 MHz; GDDR7 near 15000 MHz).
_BYTES = (0, 1 << 44)
# The largest GPU memories are under 300 GB; 16 TiB is beyond any board in sight.
_PCIE_GEN = (1, 7)
# PCIe generations 1 to 6 exist and 7 is specified; a link has no generation 0.
_PCIE_WIDTH = (1, 32)
# x32 is the widest link the PCIe specification defines.
_PCIE_KBPS = (0, 1 << 30)
# NVML gives KB/s; a gen 6 x16 link moves about 1.3e8 KB/s per direction, 2**30 is 8x that.
_ERROR_COUNT = (0, 1 << 48)
# Failing boards log millions of ECC errors, never 2**48; 2**64 - 1 is NVML's "not available"
# sentinel (or a counter read as -1), not a count.
_ROWS = (0, 1 << 20)
# Spare rows are a few per memory bank: a board has thousands, never a million.
_ENERGY_MJ = (0, 1 << 53)
# 2**53 mJ is 285 years at 1 kW: no counter since the driver loaded holds that much.
_PSTATE = (0, 32)
# P0..P15, and 32 for NVML_PSTATE_UNKNOWN.

#: reading key -> (lowest, highest) plausible value, both included.
PLAUSIBLE: dict[str, tuple[int, int]] = {
    "temperature_c": _C_SENSOR,
    "temperature_slowdown_c": _C_THRESHOLD,
    "temperature_shutdown_c": _C_THRESHOLD,
    "temperature_gpu_max_c": _C_THRESHOLD,
    "gpu_util_pct": _PCT,
    "mem_util_pct": _PCT,
    "fan_pct": _FAN_PCT,
    "power_w": _WATTS,
    "power_limit_w": _WATTS,
    "power_default_limit_w": _WATTS,
    "clock_sm_mhz": _SM_MHZ,
    "clock_graphics_mhz": _SM_MHZ,
    "clock_sm_max_mhz": _SM_MHZ,
    "clock_mem_mhz": _MEM_MHZ,
    "clock_mem_max_mhz": _MEM_MHZ,
    "memory_used_bytes": _BYTES,
    "memory_free_bytes": _BYTES,
    "memory_total_bytes": _BYTES,
    "memory_reserved_bytes": _BYTES,
    "pcie_gen_current": _PCIE_GEN,
    "pcie_gen_max": _PCIE_GEN,
    "pcie_gen_gpu_max": _PCIE_GEN,
    "pcie_width_current": _PCIE_WIDTH,
    "pcie_width_max": _PCIE_WIDTH,
    "pcie_tx_kbps": _PCIE_KBPS,
    "pcie_rx_kbps": _PCIE_KBPS,
    "ecc_volatile_corrected": _ERROR_COUNT,
    "ecc_volatile_uncorrected": _ERROR_COUNT,
    "ecc_aggregate_corrected": _ERROR_COUNT,
    "ecc_aggregate_uncorrected": _ERROR_COUNT,
    "remapped_rows_correctable": _ROWS,
    "remapped_rows_uncorrectable": _ROWS,
    "energy_mj": _ENERGY_MJ,
    "performance_state": _PSTATE,
}


def implausible(value: Any) -> NA:
    """The NA for an impossible ``value``; an int is written whole (never through a float)."""
    text = str(value) if isinstance(value, int) else f"{value:g}" if isinstance(value, float) else repr(value)
    return NA(f"{IMPLAUSIBLE} {text}")


def check(key: str, value: Any) -> Any:
    """``value``, or NA("implausible value <v>") when it is a number outside ``key``'s range."""
    bounds = PLAUSIBLE.get(key)
    if bounds is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    low, high = bounds
    if value != value or not low <= value <= high:  # value != value: NaN
        return implausible(value)
    return value


def screen(readings: dict[str, Any]) -> dict[str, Any]:
    """``readings`` with every impossible number replaced by its NA (the dict is changed in place)."""
    for key in PLAUSIBLE.keys() & readings.keys():
        readings[key] = check(key, readings[key])
    return readings


def is_implausible(value: Any) -> bool:
    return isinstance(value, NA) and value.reason.startswith(IMPLAUSIBLE)


__all__ = ["PLAUSIBLE", "IMPLAUSIBLE", "check", "screen", "implausible", "is_implausible"]
