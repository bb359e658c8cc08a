"""Energy counters: joules a GPU or the CPU used over an interval.

* GPU: NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules since
  the driver was loaded; Volta and newer). Reading it twice and subtracting gives the energy of
  what ran in between, exactly, without sampling power.
* CPU: Linux RAPL through the powercap sysfs tree (``/sys/class/powercap/intel-rapl:N/energy_uj``,
  microjoules, one counter per CPU package, wrapping at ``max_energy_range_uj``; AMD Zen exposes
  the same files). Since 2020 the files are readable by root only on most kernels
  (CVE-2020-8694), and virtual machines usually have none: then the reading is ``NA`` with the
  reason.

A reading that cannot be had is ``NA(reason)``, never 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .na import NA, is_na

if TYPE_CHECKING:
    from .base import GpuBackend

POWERCAP = "/sys/class/powercap"


@dataclass(frozen=True)
class EnergyUse:
    """Energy over an interval: joules, seconds and the average power, or why it is unknown."""

    joules: float | None
    seconds: float
    source: str  # "nvml", "rapl" or ""
    reason: str = ""  # why joules is None

    @property
    def watts(self) -> float | None:
        return None if self.joules is None or self.seconds <= 0 else self.joules / self.seconds

    def per(self, samples: float) -> float | None:
        """Samples per joule."""
        return None if not self.joules or samples <= 0 else samples / self.joules

    def to_dict(self) -> dict[str, Any]:
        return {"joules": self.joules, "seconds": self.seconds, "watts": self.watts, "source": self.source,
                "reason": self.reason}


# --------------------------------------------------------------------------- RAPL
def rapl_packages(root: str = POWERCAP) -> list[Path] | NA:
    """The package-level RAPL zones (``intel-rapl:0``, ``intel-rapl:1``...), or NA with the reason."""
    base = Path(root)
    if not base.is_dir():
        return NA("NoRaplInterface")  # no powercap: a VM, a non-x86 host, or the module not loaded
    zones = sorted(p for p in base.glob("intel-rapl:*") if p.name.count(":") == 1)
    if not zones:
        return NA("NoRaplInterface")
    return zones


def read_rapl_uj(root: str = POWERCAP) -> tuple[dict[str, int], dict[str, int]] | NA:
    """Each package zone's counter and wrap range, in microjoules."""
    zones = rapl_packages(root)
    if is_na(zones):
        return zones
    counters, ranges = {}, {}
    for zone in zones:
        try:
            counters[zone.name] = int((zone / "energy_uj").read_text().strip())
            ranges[zone.name] = int((zone / "max_energy_range_uj").read_text().strip())
        except PermissionError:
            return NA("NoPermission")  # root only since CVE-2020-8694
        except (OSError, ValueError):
            return NA("Unreadable")
    return counters, ranges


def _rapl_delta_j(before: tuple[dict[str, int], dict[str, int]], after: tuple[dict[str, int], dict[str, int]]) -> float:
    total_uj = 0
    for zone, start in before[0].items():
        end = after[0].get(zone, start)
        delta = end - start
        if delta < 0:  # the counter wrapped (it does every few minutes to hours under load)
            delta += after[1].get(zone, before[1][zone])
        total_uj += delta
    return total_uj / 1e6


# --------------------------------------------------------------------------- meters
class EnergyMeter:
    """Measures the energy of what runs between :meth:`start` and :meth:`stop`.

    ``read`` returns a counter in joules or NA; GPU and CPU meters are built by
    :func:`gpu_meter` and :func:`cpu_meter`.
    """

    def __init__(self, source: str, read: Callable[[], Any], delta: Callable[[Any, Any], float],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self._read = read
        self._delta = delta
        self._clock = clock
        self._start: Any = None
        self._t0 = 0.0

    def start(self) -> None:
        self._start = self._read()
        self._t0 = self._clock()

    @property
    def counting(self) -> bool:
        """Started, and the counter answered (so :meth:`stop` can give joules)."""
        return self._start is not None and not is_na(self._start)

    def elapsed_s(self) -> float:
        """Seconds since :meth:`start`, on the meter's clock, without reading the counter."""
        return max(0.0, self._clock() - self._t0)

    def stop(self) -> EnergyUse:
        end = self._read()
        seconds = max(0.0, self._clock() - self._t0)
        if is_na(self._start) or self._start is None:
            return EnergyUse(None, seconds, self.source, self._start.reason if is_na(self._start) else "NotStarted")
        if is_na(end):
            return EnergyUse(None, seconds, self.source, end.reason)
        joules = self._delta(self._start, end)
        if joules < 0:
            return EnergyUse(None, seconds, self.source, "CounterWentBack")  # the driver was reloaded
        return EnergyUse(joules, seconds, self.source)


def nvml_energy_mj(backend: GpuBackend, index: int) -> Any:
    """The GPU's total-energy counter in millijoules (NVML ``nvmlDeviceGetTotalEnergyConsumption``)."""
    return backend.total_energy_mj(index)


def gpu_meter(backend: GpuBackend, index: int, clock: Callable[[], float] = time.monotonic) -> EnergyMeter:
    return EnergyMeter("nvml", lambda: nvml_energy_mj(backend, index), lambda a, b: (b - a) / 1000.0, clock)


def cpu_meter(root: str = POWERCAP, clock: Callable[[], float] = time.monotonic) -> EnergyMeter:
    return EnergyMeter("rapl", lambda: read_rapl_uj(root), _rapl_delta_j, clock)


def rapl_reason_words(reason: str) -> str:
    return {
        "NoRaplInterface": "no RAPL energy counters on this host (/sys/class/powercap; virtual machines have none)",
        "NoPermission": "RAPL energy counters are readable by root only on this kernel",
        "Unreadable": "RAPL energy counters could not be read",
    }.get(reason, reason)


def nvml_reason_words(reason: str) -> str:
    return {
        "NotSupported": "this GPU has no total-energy counter (Volta and newer have one)",
        "NotRecorded": "the recording holds no energy counter",
        "CounterWentBack": "the energy counter went back (the driver was reloaded during the run)",
    }.get(reason, f"the GPU's energy counter is not available ({reason})")

