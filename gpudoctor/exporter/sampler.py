"""The exporter's view of the one sampler (:class:`gpudoctor.sampling.sampler.Sampler`): the latest
sample as the collector reads it. Scrapes never touch NVML: they serve this sample, so 50
scrapes a second cost no NVML calls, and an NVML call that blocks (a GPU falling off the bus)
cannot stall the endpoint.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Callable, TypedDict

from gpudoctor.backends.na import NA, is_na

if TYPE_CHECKING:
    from gpudoctor.backends.base import DeviceStatic, GpuBackend, GpuSample, MigDeviceReading, ProcessReading
    from gpudoctor.backends.holders import Holder
    from gpudoctor.sampling.sampler import Snapshot

DEFAULT_INTERVAL_S = 5.0
STALE_AFTER_INTERVALS = 3

# The sampling (and NVML's restart after a driver reload) is gpudoctor.sampling.sampler.Sampler's.
RETRY_FIRST_S = 5.0
RETRY_MAX_S = 60.0


class ExportedDevice(TypedDict):
    """One GPU of :attr:`GpuSampler.snapshot`: the sampler's DeviceSnapshot with its processes
    read as the Slurm jobs and Kubernetes pods holding it."""

    index: int
    static: DeviceStatic
    sample: GpuSample
    mig: list[MigDeviceReading] | NA | None
    #: the holders, a reason where the processes cannot be read, None where they are not read
    holders: list[Holder] | str | None


class ExportedSample(TypedDict):
    """What the collector reads from :attr:`GpuSampler.snapshot`: one whole sample."""

    t: float
    status: NA | None
    count: int | None
    driver_version: str | None
    devices: list[ExportedDevice]
    reinits: int
    retry_in_s: float | None
    duration_s: float


def recoverable_trouble(snap: ExportedSample) -> str | None:
    """The reason a fresh NVML start-up may help with this exporter sample, or None."""
    from gpudoctor.sampling.sampler import RECOVERABLE_NVML_REASONS, all_lost

    status = snap.get("status")
    if is_na(status) and status.reason in RECOVERABLE_NVML_REASONS:
        return status.reason
    devices = snap.get("devices") or []
    if devices and all(all_lost(dev["sample"]) for dev in devices):
        return "GpuIsLost"
    return None


class GpuSampler:
    """The exporter's view of the one sampler (:class:`gpudoctor.sampling.sampler.Sampler`): every GPU
    read in full every ``interval`` seconds in its daemon thread, NVML restarted with
    back-off when a new start-up can cure it (first after ``retry_first_s``, then at doubling
    intervals up to ``retry_max_s``). :attr:`snapshot` is the latest sample as the collector
    reads it (None until the first read comes back: scrapes are served before that, the
    sample counted stale).
    """

    def __init__(self, gpu: GpuBackend, interval: float = DEFAULT_INTERVAL_S, *, retry_first_s: float = RETRY_FIRST_S,
                 retry_max_s: float = RETRY_MAX_S, clock: Callable[[], float] = time.monotonic,
                 proc_root: str | None = "/proc") -> None:
        from gpudoctor.sampling.sampler import Sampler

        self.gpu = gpu
        self.interval = interval
        self.snapshot: ExportedSample | None = None
        # Where the processes' cgroups are read to name each GPU's Slurm job or Kubernetes pod
        # (None: processes are not read, no holder series).
        self.proc_root = proc_root
        self.core = Sampler(gpu, None, with_processes=proc_root is not None, reads="full", interval_s=interval,
                            history_length=1,
                            recover=True, retry_first_s=retry_first_s, retry_max_s=retry_max_s,
                            on_sample=self._publish, clock=clock)

    @property
    def reinits(self) -> int:
        return self.core.reinits

    @property
    def started_at(self) -> float | None:
        return self.core.started_at

    def _publish(self, snap: Snapshot) -> None:
        driver = snap.driver_version
        self.snapshot = {  # one reference swap: scrapes see a whole sample or the previous one
            "t": snap.time, "status": snap.nvml_status, "count": snap.count,
            "driver_version": None if is_na(driver) else driver,
            "devices": [{"index": d.index, "static": d.static, "sample": d.sample, "mig": d.mig,
                         "holders": self._holders(d.processes)} for d in snap.devices],
            "reinits": snap.reinits, "retry_in_s": snap.retry_in_s, "duration_s": snap.read_s}

    def _holders(self, processes: list[ProcessReading] | NA) -> list[Holder] | str | None:
        """The Slurm jobs and Kubernetes pods of a GPU's processes (gpudoctor.backends.holders), a
        reason string where the process list cannot be read, or None when processes are not read."""
        if self.proc_root is None:
            return None
        if is_na(processes) or not isinstance(processes, list):
            return f"the GPU's processes cannot be read ({getattr(processes, 'reason', 'no list')})"
        from gpudoctor.backends.holders import of_processes

        return of_processes((p.pid for p in processes), self.proc_root)

    def sample_once(self) -> ExportedSample:
        self.core.read()
        assert self.snapshot is not None
        return self.snapshot

    def start(self) -> None:
        self.core.start()

    def wait_first(self, timeout: float) -> bool:
        return self.core.wait_first(timeout)

    def stop(self, join_s: float | None = None) -> bool:
        """Stop sampling; True once the thread has ended (False: still inside a backend call)."""
        return self.core.stop(join_s)


def stop_sampler_then_close(sampler: GpuSampler, gpu: GpuBackend, join_s: float | None = None) -> bool:
    """Stop the sampler, then close the backend only if the sampler thread has ended.

    A sampler stuck in a driver call (a GPU falling off the bus) must not see nvmlShutdown
    pulled from under it; the process is exiting anyway, and the driver cleans up after it.
    Returns whether the backend was closed.
    """
    if not sampler.stop(join_s):
        print("gpudoctor exporter: the sampler is still inside an NVML call; leaving NVML open",
              file=sys.stderr, flush=True)
        return False
    gpu.close()
    return True

