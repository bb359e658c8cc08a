"""The exporter's view of the one sampler (:class:`gpudoctor.sampling.sampler.Sampler`): the latest
sample as the collector reads it. Scrapes never touch NVML: they serve this sample, so 50
scrapes a second cost no NVML calls, and an NVML call that blocks (a GPU falling off the bus)
cannot stall the endpoint.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Callable

from gpudoctor.backends.na import NA, is_na
from gpudoctor.core._record import record

if TYPE_CHECKING:
    from gpudoctor.backends.base import GpuBackend, ProcessReading
    from gpudoctor.backends.holders import Holder
    from gpudoctor.sampling.sampler import Snapshot

DEFAULT_INTERVAL_S = 5.0
STALE_AFTER_INTERVALS = 3

# The sampling (and NVML's restart after a driver reload) is gpudoctor.sampling.sampler.Sampler's.
RETRY_FIRST_S = 5.0
RETRY_MAX_S = 60.0


@record(frozen=True, eq=False)
class Published:
    """What the collector reads (:attr:`GpuSampler.published`): the sampler's Snapshot itself, as
    the sampling core made it (its DeviceSnapshots typed with the catalogue's GpuSample), and what
    is the exporter's own: each device's holders, worked out once per sample, not per scrape."""

    snapshot: Snapshot
    #: NVML index -> the Slurm jobs and Kubernetes pods holding the GPU, a reason where its
    #: processes cannot be read, None where processes are not read (no holder series).
    holders: dict[int, list[Holder] | str | None]


class GpuSampler:
    """The exporter's view of the one sampler (:class:`gpudoctor.sampling.sampler.Sampler`): every GPU
    read in full every ``interval`` seconds in its daemon thread, NVML restarted with
    back-off when a new start-up can cure it (first after ``retry_first_s``, then at doubling
    intervals up to ``retry_max_s``). :attr:`published` is the latest sample as the collector
    reads it (None until the first read comes back: scrapes are served before that, the
    sample counted stale); :attr:`snapshot` its Snapshot.
    """

    def __init__(self, gpu: GpuBackend, interval: float = DEFAULT_INTERVAL_S, *, retry_first_s: float = RETRY_FIRST_S,
                 retry_max_s: float = RETRY_MAX_S, clock: Callable[[], float] = time.monotonic,
                 proc_root: str | None = "/proc") -> None:
        from gpudoctor.sampling.sampler import Sampler

        self.gpu = gpu
        self.interval = interval
        self.published: Published | None = None
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

    @property
    def snapshot(self) -> Snapshot | None:
        """The latest Snapshot the collector serves (None before the first read comes back)."""
        published = self.published
        return None if published is None else published.snapshot

    def _publish(self, snap: Snapshot) -> None:
        holders = {d.index: self._holders(d.processes) for d in snap.devices}
        self.published = Published(snap, holders)  # one reference swap: scrapes see a whole sample or the previous one

    def _holders(self, processes: list[ProcessReading] | NA) -> list[Holder] | str | None:
        """The Slurm jobs and Kubernetes pods of a GPU's processes (gpudoctor.backends.holders), a
        reason string where the process list cannot be read, or None when processes are not read."""
        if self.proc_root is None:
            return None
        if is_na(processes) or not isinstance(processes, list):
            return f"the GPU's processes cannot be read ({getattr(processes, 'reason', 'no list')})"
        from gpudoctor.backends.holders import of_processes

        return of_processes((p.pid for p in processes), self.proc_root)

    def sample_once(self) -> Snapshot:
        self.core.read()
        snap = self.snapshot
        assert snap is not None
        return snap

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

