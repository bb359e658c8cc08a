"""GPU readings during training: the one sampler (:class:`gpudoctor.sampling.sampler.Sampler`) on
one device, keeping the few fields the diagnosis uses.

The sampler's daemon thread reads the device's cheap readings (``fast_sample``: no PCIe
throughput counters, which cost 20 ms each, nor the slow, rarely changing readings) every
``interval_s``. Each reading is kept with ``t_mono``: the time of the reading on the
monitor's clock (``time.perf_counter``), so the summary can keep only the readings taken
during the measured steps. NVML calls do not touch the CUDA context, so sampling adds no
work to the training stream.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from gpudoctor.backends import catalogue, is_na, throttle_reason_names
from gpudoctor.backends.visibility import nvml_index_for
from gpudoctor.sampling.sampler import Sampler, Snapshot

if TYPE_CHECKING:
    from gpudoctor.backends.base import GpuBackend

log = logging.getLogger("gpudoctor.hooks")

#: GPM readings kept per sample beside the fast ones (Hopper and later; NA elsewhere), read at most
#: this often: one read costs the sampler thread well under a millisecond and touches no CUDA work.
GPM_FIELDS = ("sm_active_pct", "tensor_active_pct")
GPM_EVERY_S = 1.0

__all__ = ["TrainingSampler", "nvml_index_for"]


class TrainingSampler:
    """The diagnosis fields of one GPU every ``interval_s`` seconds until :meth:`stop`
    (bounded: past ``max_samples`` the kept readings are thinned to every other one)."""

    def __init__(self, backend: GpuBackend, index: int, interval_s: float = 0.5, max_samples: int = 100_000) -> None:
        self.backend = backend
        self.index = index
        self.interval_s = interval_s
        self.max_samples = max_samples
        self.samples: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._gpm_at: float | None = None  # the monitor's clock at the last GPM read
        self._gpm_ok = hasattr(backend, "gpm")
        self.core = Sampler(backend, None, with_processes=False, reads="fast", devices=[index],
                            interval_s=interval_s, history_length=1, on_sample=self._keep, stop_on_error=True)

    @property
    def error(self) -> str | None:
        return self.core.error

    @property
    def _thread(self) -> threading.Thread | None:  # the monitor restarts a sampler that ended
        return self.core._thread

    def start(self) -> None:
        self.core.start()

    def sample_once(self) -> None:
        self.core.read()

    def _keep(self, snap: Snapshot) -> None:
        if not snap.devices:  # NVML down: nothing to keep for the diagnosis
            return
        reading = snap.devices[0].sample
        kept = {k: (None if is_na(reading.get(k)) else reading.get(k)) for k in catalogue.hooks_keys()}
        kept["t_mono"] = snap.t_mono  # the monitor's clock: placed against the step spans
        kept.update(self._gpm(snap.t_mono))
        reasons = reading.get("throttle_reasons")
        kept["throttle_reason_names"] = [] if is_na(reasons) or reasons is None else throttle_reason_names(int(reasons))
        with self._lock:
            if len(self.samples) >= self.max_samples:
                # Keep memory bounded on very long runs: thin out to every other sample.
                self.samples = self.samples[::2]
            self.samples.append(kept)

    def _gpm(self, now: float) -> dict[str, Any]:
        """SM and tensor activity since the last GPM read (the first read only arms the pair), at
        most every GPM_EVERY_S; {} between reads or where the device has no GPM."""
        if not self._gpm_ok or (self._gpm_at is not None and now - self._gpm_at < GPM_EVERY_S):
            return {}
        self._gpm_at = now
        try:
            found: dict[str, Any] | None = self.backend.gpm(self.index)
        except Exception:
            found = None
        if found is None:  # a backend without GPM answers: stop asking
            self._gpm_ok = False
            return {}
        if all(is_na(value) and value.reason != "Warming" for value in (found.get(k) for k in GPM_FIELDS)):
            self._gpm_ok = False  # no GPM on this device: no further reads
        return {k: found.get(k) for k in GPM_FIELDS if not is_na(found.get(k))}

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.samples)

    def stop(self) -> None:
        if not self.core.stop(5.0) and self.core.error is None:
            log.debug("gpudoctor: the GPU sampler is still inside an NVML call; left to finish")
        if self.core.error is not None:
            log.warning("gpudoctor: GPU sampling stopped: %s", self.core.error)


