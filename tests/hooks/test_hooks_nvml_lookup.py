"""TrainingMonitor on CUDA finds its GPU among NVML's devices once, for both the sampler and the
energy meter: what each says when NVML is unavailable or the device is not found, and which
backend and NVML index they read when it is. No GPU needed: the CUDA device's bus id and the
NVML side are stand-ins."""

from __future__ import annotations

import pytest

from gpudoctor.backends.na import NA
from gpudoctor.hooks import energy as hook_energy
from gpudoctor.hooks import sampler as hook_sampler
from gpudoctor.hooks import torch_support
from gpudoctor.hooks.monitor import TrainingMonitor


class _Backend:
    kind = "nvml"

    def __init__(self, status: NA | None) -> None:
        self._status = status

    def status(self) -> NA | None:
        return self._status


class _Sampler:
    def __init__(self, backend: object, index: int, interval_s: float) -> None:
        self.backend, self.index, self.interval_s = backend, index, interval_s
        self.started = False

    def start(self) -> None:
        self.started = True


def _cuda_monitor(monkeypatch: pytest.MonkeyPatch, backend: _Backend,
                  found: int | None) -> tuple[TrainingMonitor, list[tuple[object, int, str | None]]]:
    """A monitor whose first step chose cuda:1, and the NVML index look-ups it makes."""
    asked: list[tuple[object, int, str | None]] = []

    def index_for(gpu: object, torch_index: int, bus_id: str | None) -> int | None:
        asked.append((gpu, torch_index, bus_id))
        return found

    monkeypatch.setattr(hook_sampler, "nvml_index_for", index_for)
    monkeypatch.setattr(hook_sampler, "TrainingSampler", _Sampler)
    monkeypatch.setattr(torch_support, "cuda_pci_bus_id", lambda index: f"0000:0{index}:00.0")
    monkeypatch.setattr(hook_energy, "nvml_step_energy", lambda gpu, index, interval: ("meter", gpu, index))
    monitor = TrainingMonitor(gpu_backend=backend, publish=False)
    monitor._device, monitor._device_kind, monitor._device_index = "cuda:1", "cuda", 1
    return monitor, asked


def test_nvml_unavailable_is_one_note_for_each_and_turns_both_off(monkeypatch):
    monitor, asked = _cuda_monitor(monkeypatch, _Backend(NA("LibraryNotFound")), found=0)
    monitor._start_sampler()
    monitor._start_energy()
    assert monitor._notes == [
        "GPU utilisation, power and clocks not sampled: NVML unavailable (LibraryNotFound)",
        "energy not measured: NVML unavailable (LibraryNotFound)"]
    assert monitor.sample_gpu is False and monitor.measure_energy is False
    assert monitor._sampler is None and monitor._energy is None
    assert asked == []  # no index is looked up without NVML


def test_a_device_nvml_does_not_list_is_named(monkeypatch):
    monitor, asked = _cuda_monitor(monkeypatch, _Backend(None), found=None)
    monitor._start_sampler()
    monitor._start_energy()
    assert monitor._notes == ["GPU utilisation not sampled: cuda:1 not found among NVML's devices",
                              "energy not measured: cuda:1 not found among NVML's devices"]
    assert monitor.sample_gpu is False and monitor.measure_energy is False
    assert [(index, bus) for _gpu, index, bus in asked] == [(1, "0000:01:00.0"), (1, "0000:01:00.0")]


def test_the_found_index_is_what_the_sampler_and_the_meter_read(monkeypatch):
    backend = _Backend(None)
    monitor, asked = _cuda_monitor(monkeypatch, backend, found=3)
    monitor._start_sampler()
    assert monitor._sampler.backend is backend and monitor._sampler.index == 3 and monitor._sampler.started
    monitor._start_energy()  # reuses the sampler's backend and index: no second look-up
    assert monitor._energy == ("meter", backend, 3)
    assert len(asked) == 1 and monitor._notes == []


def test_the_energy_meter_finds_the_device_itself_when_sampling_is_off(monkeypatch):
    backend = _Backend(None)
    monitor, asked = _cuda_monitor(monkeypatch, backend, found=2)
    monitor._start_energy()
    assert monitor._energy == ("meter", backend, 2) and len(asked) == 1
