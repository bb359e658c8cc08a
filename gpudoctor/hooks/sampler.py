"""GPU readings during training, from NVML in a background thread.

The thread asks the backend (:class:`gpudoctor.backends.NvmlBackend`, or anything with
the same ``fast_sample(index)``, else ``sample(index)``) for one device's readings every
``interval_s`` and keeps the few fields the diagnosis uses, with ``t_mono``: the time of
the reading on the monitor's clock (``time.perf_counter``), so the summary can keep only
the readings taken during the measured steps. ``fast_sample`` leaves out the PCIe
throughput counters (20 ms each) and the slow, rarely changing readings. NVML calls do
not touch the CUDA context, so sampling adds no work to the training stream.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from gpudoctor.backends import is_na, throttle_reason_names

log = logging.getLogger("gpudoctor.hooks")

KEPT_FIELDS = ("t", "gpu_util_pct", "memory_used_bytes", "memory_total_bytes", "power_w",
               "power_limit_w", "clock_sm_mhz", "temperature_c")


def nvml_index_for(backend: Any, cuda_index: int, pci_bus_id: str | None) -> int | None:
    """The NVML index of torch's CUDA device: matched by PCI bus id (the one torch->NVML
    matcher, :func:`gpudoctor.backends.visibility.match_torch_to_nvml`), else by the order
    CUDA_VISIBLE_DEVICES gives."""
    from gpudoctor.backends.visibility import match_torch_to_nvml, visible_nvml_indices

    count = backend.device_count()
    if is_na(count):
        return None
    if pci_bus_id:
        static = [dict(backend.static(i), index=i) for i in range(count)]
        found = match_torch_to_nvml([{"index": cuda_index, "pci_bus_id": pci_bus_id}], static).get(cuda_index)
        if found is not None:
            return found
    visible = visible_nvml_indices(backend)
    if is_na(visible) or cuda_index >= len(visible):
        return None
    return visible[cuda_index]


class GpuSampler:
    """Samples one GPU every ``interval_s`` seconds until :meth:`stop`."""

    def __init__(self, backend: Any, index: int, interval_s: float = 0.5, max_samples: int = 100_000) -> None:
        self.backend = backend
        self.index = index
        self.interval_s = interval_s
        self.max_samples = max_samples
        self.samples: list[dict[str, Any]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        fast = getattr(backend, "fast_sample", None)
        self._read = fast if callable(fast) else backend.sample

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gpudoctor-nvml-sampler", daemon=True)
        self._thread.start()

    def sample_once(self) -> None:
        reading = self._read(self.index)
        kept = {k: (None if is_na(reading.get(k)) else reading.get(k)) for k in KEPT_FIELDS}
        kept["t_mono"] = time.perf_counter()  # the monitor's clock: placed against the step spans
        reasons = reading.get("throttle_reasons")
        kept["throttle_reason_names"] = [] if is_na(reasons) or reasons is None else throttle_reason_names(int(reasons))
        with self._lock:
            if len(self.samples) >= self.max_samples:
                # Keep memory bounded on very long runs: thin out to every other sample.
                self.samples = self.samples[::2]
            self.samples.append(kept)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # a sampler fault costs the GPU figures, never the training
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("gpudoctor: GPU sampling stopped: %s", self.error)
                return
            self._stop.wait(self.interval_s)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.samples)

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
