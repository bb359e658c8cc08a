"""NVML's clock-event ("throttle") reason bits and the NVML gate's time limit, without NVML's backend.

What the TUI's panels and the shared presentation need of :mod:`gpudoctor.backends.nvml` to
say why the clocks are low, in a module that imports nothing else: the TUI's first frame does
not load the NVML backend (its reading comes from a fork, gpudoctor.tui.early). The NVML
backend imports these names from here; they are the same objects there.
"""

from __future__ import annotations

from gpudoctor.core.findings import CLOCK_EVENTS

# Clock-event ("throttle") reason bits, from nvml.h (nvmlClocksEventReason*), with their words
# (kept once, in gpudoctor.core.findings.CLOCK_EVENTS).
_REASON_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake",
                0x100: "display_clock"}
THROTTLE_REASONS: dict[int, tuple[str, str]] = {bit: (code, CLOCK_EVENTS[code].words)
                                                for bit, code in _REASON_BITS.items()}

# Reasons that mean "the clocks are lower than the work needs" (not idle/config).
HARMFUL_THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80

#: A call into NVML that has not come back after this many seconds is taken as a blocked driver
#: (healthy calls take micro- to milliseconds; a failing GPU can block one for minutes).
STUCK_S = 5.0


def throttle_reason_names(mask: int) -> list[str]:
    return [THROTTLE_REASONS[bit][0] for bit in sorted(THROTTLE_REASONS) if mask & bit]


def throttle_reason_words(mask: int) -> list[str]:
    return [CLOCK_EVENTS[code].words for code in throttle_reason_names(mask)]


__all__ = ["HARMFUL_THROTTLE_MASK", "STUCK_S", "THROTTLE_REASONS", "throttle_reason_names", "throttle_reason_words"]
