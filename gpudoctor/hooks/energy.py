"""Energy of the measured training steps: joules per step, samples per joule, average power.

The counter is the GPU's NVML total-energy counter for a CUDA loop and RAPL for a CPU loop
(:mod:`gpudoctor.backends.energy`). It is read on the training thread at step boundaries, at
most once per ``interval_s`` (an NVML call of some microseconds every half second, so no
measurable cost), and always at the first measured step and after a gap in the loop. The
cumulative counter between two readings is taken as linear, and the energy of the measured
steps is its rise over their spans (:func:`energy_in_spans`): validation, checkpoints and epoch
boundaries between readings are left out in proportion to their time. Steps that end after the
last reading are left out of the per-step figures rather than guessed.

On CUDA the host reaches a step's end before the GPU has run it; over the many steps between
readings that lag cancels out except at the two ends of the window (at most the queued steps).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from typing import TYPE_CHECKING, Any, Callable, Sequence

from gpudoctor.backends.energy import (POWERCAP, nvml_energy_mj, nvml_reason_words, rapl_reason_words,
                                       read_rapl_uj)
from gpudoctor.backends.na import is_na

if TYPE_CHECKING:
    from gpudoctor.backends.base import GpuBackend

__all__ = ["StepEnergy", "energy_in_spans", "energy_figures", "nvml_step_energy", "rapl_step_energy"]


class StepEnergy:
    """Readings of a cumulative energy counter, in joules, against the monitor's clock."""

    def __init__(self, source: str, read_j: Callable[[], Any], interval_s: float = 0.5,
                 clock: Callable[[], float] = time.perf_counter, max_readings: int = 20_000) -> None:
        self.source = source
        self.interval_s = interval_s
        self.max_readings = max_readings
        self.readings: list[tuple[float, float]] = []
        self.reason = ""  # why there are no figures: set by the first failed reading
        self._read_j = read_j
        self._clock = clock
        self._last = -float("inf")

    def maybe_read(self, now: float, force: bool = False) -> None:
        """Read the counter if ``interval_s`` has passed since the last reading (or ``force``)."""
        if self.reason or (not force and now - self._last < self.interval_s):
            return
        value = self._read_j()
        if is_na(value) or value is None:
            self.reason = value.reason if is_na(value) else "NotReadable"
            return
        if self.readings and value < self.readings[-1][1]:
            self.reason = "CounterWentBack"  # a driver reload resets NVML's counter
            return
        self._last = now
        if len(self.readings) >= self.max_readings:
            self.readings = self.readings[::2]  # bounded on very long runs
        self.readings.append((now, float(value)))

    def reason_words(self) -> str:
        if self.source == "rapl":
            return rapl_reason_words(self.reason)
        return nvml_reason_words(self.reason)


def _at(readings: Sequence[tuple[float, float]], t: float) -> float:
    """The counter at time ``t`` (inside the readings' range), linear between readings."""
    i = bisect_left(readings, (t, -float("inf")))
    if i < len(readings) and readings[i][0] == t:
        return readings[i][1]
    (t0, e0), (t1, e1) = readings[i - 1], readings[i]
    return e0 + (e1 - e0) * (t - t0) / (t1 - t0) if t1 > t0 else e1


def energy_in_spans(readings: Sequence[tuple[float, float]],
                    spans: Sequence[tuple[float, float]]) -> tuple[float, float, int]:
    """Joules, seconds and the number of spans covered: only spans wholly inside the readings."""
    if len(readings) < 2:
        return 0.0, 0.0, 0
    first, last = readings[0][0], readings[-1][0]
    joules, seconds, count = 0.0, 0.0, 0
    for start, end in spans:
        if start < first or end > last or end <= start:
            continue
        joules += _at(readings, end) - _at(readings, start)
        seconds += end - start
        count += 1
    return joules, seconds, count


def energy_figures(meter: StepEnergy | None, spans: Sequence[tuple[float, float]],
                   samples: Sequence[int]) -> tuple[dict[str, Any] | None, str | None]:
    """The summary's ``energy`` block and a note when figures are missing.

    ``samples[i]`` is the number of samples of span ``i`` (negative: unknown).
    """
    if meter is None:
        return None, None
    base: dict[str, Any] = {"source": meter.source, "joules": None, "seconds": None, "steps": 0,
                            "joules_per_step": None, "avg_power_w": None, "samples": None,
                            "samples_per_joule": None, "reason": None}
    if meter.reason:
        base["reason"] = meter.reason_words()
        return base, f"energy not measured: {base['reason']}"
    if len(meter.readings) < 2:
        base["reason"] = "the loop was too short for two readings of the energy counter"
        return base, f"energy not measured: {base['reason']}"
    first, last = meter.readings[0][0], meter.readings[-1][0]
    inside = [i for i, (start, end) in enumerate(spans) if first <= start and end <= last and end > start]
    joules, seconds, count = energy_in_spans(meter.readings, [spans[i] for i in inside])
    if not count or joules <= 0:
        base["reason"] = "no measured step lies between two readings of the energy counter"
        return base, f"energy not measured: {base['reason']}"
    base.update(joules=joules, seconds=seconds, steps=count, joules_per_step=joules / count,
                avg_power_w=joules / seconds if seconds > 0 else None)
    known = [samples[i] for i in inside if i < len(samples) and samples[i] >= 0]
    if len(known) == count:
        base["samples"] = sum(known)
        base["samples_per_joule"] = sum(known) / joules if sum(known) else None
        return base, None
    base["reason"] = "samples per joule needs the batch size: pass batch_size= to TrainingMonitor"
    return base, f"samples per joule not measured: {base['reason']}"


def nvml_step_energy(backend: GpuBackend, index: int, interval_s: float) -> StepEnergy:
    def read() -> Any:
        mj = nvml_energy_mj(backend, index)
        return mj if is_na(mj) else mj / 1000.0
    return StepEnergy("nvml", read, interval_s)


def rapl_step_energy(interval_s: float, root: str | None = None) -> StepEnergy:
    total = _RaplTotal()

    def read() -> Any:
        counters = read_rapl_uj(root or POWERCAP)
        return counters if is_na(counters) else total.add(counters)
    return StepEnergy("rapl", read, interval_s)


class _RaplTotal:
    """RAPL's per-package counters wrap: a running total in joules across wraps."""

    def __init__(self) -> None:
        self._last: tuple[dict[str, int], dict[str, int]] | None = None
        self._total_j = 0.0

    def add(self, counters: tuple[dict[str, int], dict[str, int]]) -> float:
        if self._last is not None:
            for zone, start in self._last[0].items():
                delta = counters[0].get(zone, start) - start
                if delta < 0:
                    delta += counters[1].get(zone, self._last[1][zone])
                self._total_j += delta / 1e6
        self._last = counters
        return self._total_j
