"""Energy of a training run: the GPU's NVML total-energy counter for a CUDA run, RAPL for a CPU
run (gpudoctor.backends.energy), read around the timed epochs only.

Each run gets joules, average power and samples per joule, or ``None`` with the reason in
words (no counter on this GPU, no RAPL in this VM, RAPL readable by root only).
"""

from __future__ import annotations

from typing import Any

from gpudoctor.backends.energy import EnergyMeter, EnergyUse, cpu_meter, gpu_meter, nvml_reason_words, rapl_reason_words


class RunEnergy:
    """Start before the timed epochs, stop after; ``fill`` writes the figures into a run's result."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self._backend: Any = None
        self._meter: EnergyMeter | None = None
        self._why_not = ""
        if device.type == "cuda":
            self._meter = self._gpu_meter(device.index or 0)
        elif device.type == "cpu":
            self._meter = cpu_meter()
        else:
            self._why_not = f"no energy counter is read for {device.type} devices"

    def _gpu_meter(self, cuda_index: int) -> EnergyMeter | None:
        from gpudoctor.backends import NvmlBackend
        from gpudoctor.backends.visibility import nvml_index_for, torch_device_ids

        backend = NvmlBackend()
        status = backend.status()
        if status is not None:
            self._why_not = f"NVML not available ({status.reason})"
            return None
        index = nvml_index_for(backend, cuda_index, *torch_device_ids(cuda_index))
        if index is None:
            self._why_not = f"no NVML device matches torch device cuda:{cuda_index}"
            return None
        self._backend = backend
        return gpu_meter(backend, index)

    def start(self) -> "RunEnergy":
        if self._meter is not None:
            self._meter.start()
        return self

    def stop(self) -> EnergyUse:
        if self._meter is None:
            return EnergyUse(None, 0.0, "", self._why_not)
        use = self._meter.stop()
        if use.joules is None:
            words = rapl_reason_words(use.reason) if use.source == "rapl" else nvml_reason_words(use.reason)
            use = EnergyUse(None, use.seconds, use.source, words)
        return use

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None


def fill(result: Any, use: EnergyUse, samples: int, epochs: int) -> None:
    """Joules per epoch, average power and samples per joule, or the reason there are none."""
    result.energy_source = use.source or None
    if use.joules is None:
        result.energy_note = use.reason or "not measured"
        return
    result.energy_j = round(use.joules, 3)
    result.energy_per_epoch_j = round(use.joules / max(epochs, 1), 3)
    result.avg_power_w = round(use.watts, 2) if use.watts is not None else None
    per = use.per(samples)
    result.samples_per_joule = round(per, 3) if per is not None else None
