"""The common start of the probes that exercise the GPU (memory, transfer, correctness).

Not a probe itself (the leading underscore keeps it out of the registry).
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Callable

from gpudoctor.core.model import ProbeResult

from . import _gpu

if TYPE_CHECKING:
    from . import ProbeContext

#: ``measure_one(ctx, result, torch, device, budget_s)``: one device's measurements and findings
MeasureOne = Callable[["ProbeContext", ProbeResult, ModuleType, _gpu.Device, float], None]


def torch_and_devices(ctx: ProbeContext, probe: str) -> tuple[ModuleType, list[_gpu.Device]] | ProbeResult:
    """torch and the CUDA devices to measure, or ``probe``'s skip result saying why there are none
    (a replay, ``--quick``, no torch, no CUDA device)."""
    early = _gpu.precheck(ctx)
    if early is not None:
        return _gpu.skip_result(early, probe)
    torch = _gpu.import_torch_or_reason()
    if isinstance(torch, _gpu.NoDevice):
        return _gpu.skip_result(torch, probe)
    devices = _gpu.cuda_devices(ctx, torch)
    if isinstance(devices, _gpu.NoDevice):
        return _gpu.skip_result(devices, probe)
    return torch, devices


def measure_each_device(ctx: ProbeContext, probe: str, measure_one: MeasureOne,
                        summarise: Callable[[ProbeResult], str], *, target_s: float,
                        reserve_s: float = 2.0) -> ProbeResult:
    """The whole ``run`` of a probe that measures each device in turn.

    ``measure_one(ctx, result, torch, device, budget_s)`` adds one device's measurements and
    findings; ``budget_s`` is its share of ``target_s`` seconds, cut to the deadline.
    ``summarise(result)`` gives the one-line summary once every device is done.
    """
    found = torch_and_devices(ctx, probe)
    if isinstance(found, ProbeResult):
        return found
    torch, devices = found
    result = ProbeResult(probe)
    for dev in devices:
        measure_one(ctx, result, torch, dev, _gpu.work_budget(ctx, target_s, len(devices), reserve_s=reserve_s))
    return result.settle(summarise(result))
