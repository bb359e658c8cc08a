"""Small stand-ins on the fake pynvml: one GPU without a fan that hides its serial, and NVML's v2
memory call."""

from __future__ import annotations

import types

from support.nvml_fake import FakePynvml, nvml_error


def fake_pynvml(*, init_error=None, lost=False):
    """The shared fake with one GPU that has no fan and hides its serial, running one process."""
    nvml = FakePynvml(init_error=init_error, readings={
        "nvmlDeviceGetSerial": nvml_error("NoPermission"),
        "nvmlDeviceGetComputeRunningProcesses": [types.SimpleNamespace(pid=7, usedGpuMemory=2**20)]})
    nvml.mode = "lost" if lost else "ok"
    return nvml


def v2_memory_nvml(v2_answer, v1_used=(3 << 30) + (1 << 29)):
    """The stand-in with NVML's v2 memory call answering ``v2_answer()``; returns (module, versions asked)."""
    mod = fake_pynvml()
    mod.nvmlMemory_v2 = 0x2000028
    seen = []

    def memory_info(handle, version=None):
        seen.append(version)
        if version:
            return v2_answer()
        return types.SimpleNamespace(used=v1_used, free=76 << 30, total=80 << 30)
    mod.nvmlDeviceGetMemoryInfo = memory_info
    return mod, seen


def v2_answer():
    return types.SimpleNamespace(used=3 << 30, free=76 << 30, total=80 << 30, reserved=1 << 29)
