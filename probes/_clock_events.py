"""Clock-event ("throttle") reason bits by name, for the probes that judge them.

nvml.py's ``THROTTLE_REASONS`` maps each nvml.h bit (nvmlClocksEventReason*) to a code and
its words; the codes are the names used here, so a probe says ``GPU_IDLE``, never ``0x1``.
"""

from __future__ import annotations

from gpudoctor.core import findings
from gpudoctor.backends.nvml import THROTTLE_REASONS

_BIT = {code: bit for bit, (code, _words) in THROTTLE_REASONS.items()}

GPU_IDLE = _BIT["gpu_idle"]
SW_POWER_CAP = _BIT["sw_power_cap"]
SW_THERMAL_SLOWDOWN = _BIT["sw_thermal_slowdown"]
#: The hardware protecting itself: HW slowdown, HW thermal slowdown, HW power brake
#: (gpudoctor.core.findings.HW_PROTECTION, as bits).
HW_PROTECTION = sum(_BIT[code] for code in findings.HW_PROTECTION)
#: Clocks held down by heat or by the hardware: the harmful reasons but the power cap, which
#: is the normal state of a fully loaded board (gpudoctor.core.findings.HELD_DOWN, as bits).
HEAT_OR_HW = sum(_BIT[code] for code in findings.HELD_DOWN)
