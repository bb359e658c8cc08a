"""Helpers shared by the measuring probes (memory, transfer, compute, correctness).

Not a probe itself (the leading underscore keeps it out of the registry). Imports torch
only inside functions: these probes run in the runner's child process.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from gpudoctor.core._num import is_number
from gpudoctor.core._record import record
from gpudoctor.backends.na import is_na
from gpudoctor.backends.nvml import THROTTLE_REASONS
from gpudoctor.core.errors import first_sentence as _first_line
from gpudoctor.core.findings import words
from gpudoctor.core.model import Finding, ProbeResult, Status

from ._wording import NO_CUDA_DEVICE_SEEN

if TYPE_CHECKING:  # torch is an optional extra: imported for its types only, never at run time here
    import torch as _torch

    from gpudoctor.backends.base import DeviceStatic, GpuBackend, GpuSample
    from gpudoctor.sampling.sampler import Snapshot

    from . import ProbeContext
    from ._timing import CudaEventClock

_Answer = TypeVar("_Answer")

GPU_IDLE = next(bit for bit, (name, _words) in THROTTLE_REASONS.items() if name == "gpu_idle")


@record
class Device:
    """One torch device to measure, with its NVML index (None when NVML cannot tell)."""

    index: int
    nvml_index: int | None
    name: str
    total_memory: int
    compute_capability: tuple[int, int]

    @property
    def label(self) -> str:
        return f"cuda:{self.index} ({self.name})"


#: Why there is nothing to measure: a ``skip`` finding, which :func:`skip_result` makes the probe's result.
NoDevice = Finding


def skip_result(reason: Finding, probe: str) -> ProbeResult:
    """The probe's ``skip`` result for the finding that says why nothing was measured."""
    return ProbeResult.skip(probe, reason.summary, code=reason.code, why=reason.why, fix=reason.fix)


def _no_device(code: str, **fields: str) -> NoDevice:
    """The reason ``code`` (a key of probes/_wording.py) in its table's words, filled from ``fields``."""
    return Finding(Status.SKIP, code.partition(":")[0], *words(code, **fields))


def precheck(ctx: ProbeContext) -> NoDevice | None:
    """Reasons not to measure that need no torch import (--quick must never load torch)."""
    if ctx.replay:
        return _no_device("replay_no_device")
    if not ctx.torch_allowed():
        return _no_device("quick_mode")
    return None


def import_torch_or_reason() -> ModuleType | NoDevice:
    """torch, or why it cannot be imported."""
    from gpudoctor.backends.torch_cuda import import_torch

    torch = import_torch()
    if is_na(torch):
        return _no_device("torch_unavailable", reason=str(torch.reason))
    return torch


def cuda_devices(ctx: ProbeContext, torch: ModuleType) -> list[Device] | NoDevice:
    """The devices to measure (``ctx.device`` or all visible), or why there are none."""
    early = precheck(ctx)
    if early is not None:
        return early
    if not getattr(torch.version, "cuda", None):
        return _no_device("torch_without_cuda", version=str(torch.__version__))
    try:
        available = torch.cuda.is_available()
    except Exception as exc:  # pragma: no cover - is_available does not raise in practice
        available, reason = False, _first_line(exc)
    else:
        reason = ""
    if not available:
        if not reason:
            try:
                torch.cuda.init()
                reason = NO_CUDA_DEVICE_SEEN
            except Exception as exc:
                reason = _first_line(exc)
        return _no_device("no_cuda_device:measuring", reason=reason)
    count = torch.cuda.device_count()
    if ctx.device is not None and not 0 <= ctx.device < count:
        return _no_device("device_out_of_range", device_index=str(ctx.device), count=str(count))
    indices = [ctx.device] if ctx.device is not None else list(range(count))
    nvml_map = _nvml_indices(ctx.gpu, torch, indices)
    devices = []
    for index in indices:
        props = torch.cuda.get_device_properties(index)
        devices.append(Device(index, nvml_map.get(index), str(props.name), int(props.total_memory),
                              (int(props.major), int(props.minor))))
    return devices


def _nvml_indices(gpu: GpuBackend, torch: ModuleType, indices: list[int]) -> dict[int, int | None]:
    """torch index -> NVML index (CUDA and NVML number devices differently): the one resolver,
    :func:`gpudoctor.backends.visibility.nvml_index_for`."""
    from gpudoctor.backends.visibility import nvml_index_for, torch_device_ids

    try:
        return {index: nvml_index_for(gpu, index, *torch_device_ids(index, torch)) for index in indices}
    except Exception:
        return {}


def _nvml_read(device: Device, read: Callable[[int], _Answer]) -> _Answer | dict[str, Any]:
    """``read(index)`` of the device's NVML index; {} when it has none or the read fails."""
    if device.nvml_index is None:
        return {}
    try:
        return read(device.nvml_index)
    except Exception:
        return {}


def nvml_sample(ctx: ProbeContext, device: Device) -> GpuSample | dict[str, Any]:
    return _nvml_read(device, lambda index: ctx.gpu.sample(index))


def nvml_used(ctx: ProbeContext, device: Device) -> int | None:
    """Device memory in use according to the driver (nvidia-smi's 'Memory-Usage'), or None.

    One NVML call (``memory()``), not a whole sample: the allocator walk reads it often.
    """
    if device.nvml_index is None:
        return None
    try:
        value = ctx.gpu.memory(device.nvml_index).get("memory_used_bytes")
    except Exception:
        return None
    return int(value) if isinstance(value, int) else None


def nvml_static(ctx: ProbeContext, device: Device) -> DeviceStatic | dict[str, Any]:
    return _nvml_read(device, lambda index: ctx.gpu.static(index))


def work_budget(ctx: ProbeContext, target_s: float, devices: int = 1, reserve_s: float = 2.0) -> float:
    """Seconds of measuring per device: the probe's target, cut to what its deadline leaves."""
    left = ctx.time_left() - reserve_s
    return max(0.2, min(target_s, left) / max(1, devices))


def own_pid() -> int:
    return os.getpid()


# The few CUDA-specific calls, in one place (tests run the probes' device paths on CPU
# tensors by replacing these).
def torch_device(torch: ModuleType, device: Device) -> _torch.device:
    return torch.device("cuda", device.index)


def event_clock(torch: ModuleType, device: _torch.device | None) -> CudaEventClock:
    from ._timing import CudaEventClock

    return CudaEventClock(torch, device)


def pinned_empty(torch: ModuleType, nbytes: int) -> _torch.Tensor:
    """Page-locked host memory: the DMA engines copy from it directly."""
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)


def has_context(torch: ModuleType, index: int) -> bool:
    """Whether this process already created the device's primary CUDA context."""
    try:
        return bool(torch._C._cuda_hasPrimaryContext(index))
    except Exception:  # private API: when it cannot answer, measure in a fresh process
        return True


class LoadSampler:
    """What NVML says while a load runs on ``device``: the one sampler
    (:class:`gpudoctor.sampling.sampler.Sampler`) reading ``fast_sample`` every ``interval_s``.

    Throttle reasons read after a benchmark finds an idle GPU; reading during it finds
    the thermal or power limits the load actually ran into. Collects the union of
    throttle reasons (minus "idle"), and the lowest SM clock and highest power seen: the
    instant power (NVML_FI_DEV_POWER_INSTANT) where the driver gives it, since the power usage
    call is a 1-second average on Ampere (except GA100) and later and smooths the spikes away;
    ``max_power_source`` says which ("instant" or "power usage").
    """

    def __init__(self, ctx: ProbeContext, device: Device, interval_s: float = 0.1) -> None:
        from gpudoctor.sampling.sampler import Sampler

        self.ctx, self.device, self.interval_s = ctx, device, interval_s
        self.reasons = 0
        self.samples = 0
        self.min_sm_clock: int | None = None
        self.max_power_w: float | None = None
        self.max_power_source: str | None = None
        self.core = Sampler(ctx.gpu, None, with_processes=False, reads="fast",
                            devices=[] if device.nvml_index is None else [device.nvml_index],
                            interval_s=interval_s, history_length=1, on_sample=self._keep, stop_on_error=True)

    def _keep(self, snap: Snapshot) -> None:
        if not snap.devices:
            return
        x = snap.devices[0].sample
        reasons, clock = x.get("throttle_reasons"), x.get("clock_sm_mhz")
        if isinstance(reasons, int) and not reasons & GPU_IDLE:  # skip samples where the GPU sat idle
            self.samples += 1
            self.reasons |= reasons
            if isinstance(clock, int):
                self.min_sm_clock = clock if self.min_sm_clock is None else min(self.min_sm_clock, clock)
            self._keep_power(x.get("power_instant_w"), x.get("power_w"))

    def _keep_power(self, instant: object, usage: object) -> None:
        """The highest power: instant readings once one came (a 1-second average is never mixed in)."""
        if is_number(instant):
            if self.max_power_source != "instant":
                self.max_power_w, self.max_power_source = None, "instant"
            power = float(instant)
        elif self.max_power_source != "instant" and is_number(usage):
            power, self.max_power_source = float(usage), "power usage"
        else:
            return
        self.max_power_w = power if self.max_power_w is None else max(self.max_power_w, power)

    def start(self) -> "LoadSampler":
        if self.device.nvml_index is not None:
            self.core.start()
        return self

    def stop(self) -> None:
        self.core.stop(2)
