"""Energy of a training run: the GPU's NVML total-energy counter for a CUDA run, RAPL for a CPU
run (gpudoctor.backends.energy), read around the timed epochs only.

Each run gets joules, average power and samples per joule, or ``None`` with the reason in
words (no counter on this GPU, a GPU in MIG mode, whose counter is the whole GPU's and not the
run's slice's, no RAPL in this VM, RAPL readable by root only, a window too short for the
counter, an average power above the GPU's limit).

Thresholds, and why:

- ``MIN_ENERGY_WINDOW_S``: a counter read twice is exact only to one of its update steps, so
  the window must span many steps. NVML's energy counter advances at the driver's
  power-sampling cadence, which NVML does not document for the counter; its power and
  utilisation sample periods are 1/6 s to 1 s by product. Over 5 s one step is at most 20 %
  of the window at a 1 s cadence and 3 % at 1/6 s; a millisecond window reads 0 J or one
  whole step (absurd watts). RAPL's counters update about every millisecond, so 10 ms spans
  about ten steps. A run whose timed epochs are shorter is topped up with more epochs of the
  same configuration on a throw-away copy of the network (its accuracy is the real run's);
  when that cannot be done the figure is ``None``: "too short to measure".
- ``POWER_LIMIT_MARGIN`` 5 %: the GPU's power controller holds its average draw at or below
  the enforced power limit, and NVML states its power readings as accurate to within about
  +/- 5 %. An average over the window more than 5 % above the limit is a measurement error
  (a counter step, another clock), not power the GPU drew: no figure, and the note says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from gpudoctor.backends.energy import EnergyMeter, EnergyUse, cpu_meter, gpu_meter, nvml_reason_words, rapl_reason_words

if TYPE_CHECKING:
    import torch

    from gpudoctor.backends.base import GpuBackend
    from gpudoctor.workload.run import RunResult


MIN_ENERGY_WINDOW_S = {"nvml": 5.0, "rapl": 0.01}
POWER_LIMIT_MARGIN = 0.05


class RunEnergy:
    """Start before the timed epochs, stop after; ``fill`` writes the figures into a run's result."""

    def __init__(self, device: torch.device, backend: GpuBackend | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        """``backend``/``clock``: an NVML backend and a clock for tests (default: live NVML,
        ``time.monotonic``)."""
        self.device = device
        self._backend: Any = None
        self._given_backend = backend
        self._clock = clock
        self._meter: EnergyMeter | None = None
        self._why_not = ""
        self.power_limit_w: float | None = None
        if device.type == "cuda":
            self._meter = self._gpu_meter(device.index or 0)
        elif device.type == "cpu":
            self._meter = cpu_meter()
        else:
            self._why_not = f"no energy counter is read for {device.type} devices"

    def _gpu_meter(self, cuda_index: int) -> EnergyMeter | None:
        from gpudoctor.backends import NvmlBackend
        from gpudoctor.backends.visibility import nvml_index_for, torch_device_ids

        backend = self._given_backend if self._given_backend is not None else NvmlBackend()
        status = backend.status()
        if status is not None:
            self._why_not = f"NVML not available ({status.reason})"
            return None
        index = nvml_index_for(backend, cuda_index, *torch_device_ids(cuda_index))
        if index is None:
            self._why_not = f"no NVML device matches torch device cuda:{cuda_index}"
            return None
        self._backend = backend
        static = backend.static(index)
        if static.get("mig_mode") == 1:
            # The counter is the whole GPU's: with MIG slices, other slices' work would count as this run's.
            self._why_not = ("the GPU is in MIG mode: NVML counts energy for the whole GPU only, not for this "
                             "run's MIG slice, so no energy figure")
            return None
        limit = static.get("power_limit_w")
        if isinstance(limit, (int, float)) and limit > 0:
            self.power_limit_w = float(limit)
        return gpu_meter(backend, index) if self._clock is None else gpu_meter(backend, index, clock=self._clock)

    def start(self) -> "RunEnergy":
        if self._meter is not None:
            self._meter.start()
        return self

    @property
    def min_window_s(self) -> float:
        return MIN_ENERGY_WINDOW_S.get(self._meter.source, 0.0) if self._meter is not None else 0.0

    def needs_more(self) -> bool:
        """The counter is counting and the window is still shorter than it needs."""
        return self._meter is not None and self._meter.counting and self._meter.elapsed_s() < self.min_window_s

    def stop(self) -> EnergyUse:
        if self._meter is None:
            return EnergyUse(None, 0.0, "", self._why_not)
        use = self._meter.stop()
        if use.joules is None:
            words = rapl_reason_words(use.reason) if use.source == "rapl" else nvml_reason_words(use.reason)
            return EnergyUse(None, use.seconds, use.source, words)
        return self.judge(use)

    def judge(self, use: EnergyUse) -> EnergyUse:
        """A figure only over a long enough window, that advanced, below the power limit."""
        need = self.min_window_s
        if use.seconds < need:
            return EnergyUse(None, use.seconds, use.source,
                             f"too short to measure: the energy window lasted {use.seconds * 1000:.0f} ms; the "
                             f"{'GPU' if use.source == 'nvml' else 'RAPL'} counter needs at least {need:g} s "
                             f"(it advances in steps at the driver's sampling cadence)")
        if not use.joules:
            return EnergyUse(None, use.seconds, use.source,
                             f"the energy counter did not advance over {use.seconds:.2f} s: no figure")
        watts = use.watts
        limit = self.power_limit_w
        if watts is not None and limit is not None and watts > limit * (1 + POWER_LIMIT_MARGIN):
            return EnergyUse(None, use.seconds, use.source,
                             f"measurement error: {use.joules:.1f} J over {use.seconds:.2f} s is {watts:.0f} W, above "
                             f"the GPU's {limit:.0f} W power limit; no energy figure")
        return use

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None


def fill(result: RunResult, use: EnergyUse, samples: int, epochs: int) -> None:
    """Joules per epoch, average power and samples per joule, or the reason there are none.
    ``samples``/``epochs``: what ran inside the energy window (top-up epochs included)."""
    result.energy_source = use.source or None
    result.energy_window_s = round(use.seconds, 3) if use.source else None
    result.energy_epochs = epochs if use.source else None
    if use.joules is None:
        result.energy_note = use.reason or "not measured"
        return
    result.energy_j = round(use.joules, 3)
    result.energy_per_epoch_j = round(use.joules / max(epochs, 1), 3)
    result.avg_power_w = round(use.watts, 2) if use.watts is not None else None
    per = use.per(samples)
    result.samples_per_joule = round(per, 3) if per is not None else None
