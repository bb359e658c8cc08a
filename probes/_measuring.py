"""The common start of the probes that exercise the GPU (memory, transfer, correctness).

Not a probe itself (the leading underscore keeps it out of the registry).
"""

from __future__ import annotations

from typing import Any

from gpudoctor.model import ProbeResult

from . import _gpu


def torch_and_devices(ctx: Any, probe: str) -> tuple[Any, list[_gpu.Device]] | ProbeResult:
    """torch and the CUDA devices to measure, or ``probe``'s skip result saying why there are none
    (a replay, ``--quick``, no torch, no CUDA device)."""
    early = _gpu.precheck(ctx)
    if early is not None:
        return early.result(probe)
    torch, missing = _gpu.import_torch_or_reason()
    if missing is not None:
        return missing.result(probe)
    devices = _gpu.cuda_devices(ctx, torch)
    if isinstance(devices, _gpu.NoDevice):
        return devices.result(probe)
    return torch, devices
