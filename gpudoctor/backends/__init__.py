"""The only code that touches hardware libraries (NVML, torch.cuda, psutil), with what reads
their facts from elsewhere: a recording (``recording``), the torch build of an interpreter read
without importing torch (``torch_build``), and the driver against the CUDA build (``cuda_compat``).

``open_gpu_backend()`` gives live NVML readings, or a recording's readings when
``replay`` names a file made by ``gpudoctor record``; both satisfy :class:`GpuBackend`
(gpudoctor.backends.base), the one seam, with typed readings.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .na import NA, is_na, value_or

if TYPE_CHECKING:  # pathlib costs `report --quick` ~5 ms of imports; only replays need it
    from pathlib import Path

    from .base import GpuBackend, MemoryReading, ProcessReading, UtilizationReading
    from .nvml import NvmlBackend, NvmlGate, normalise_bus_id, throttle_reason_names, throttle_reason_words
    from .replay import RecordingError, ReplayBackend, load_recording

# Imported on first use: `from gpudoctor.backends.na import NA` (every probe, the model's
# neighbours) must not load NVML's backend, the catalogue and the recording loader with it.
_LAZY: dict[str, str] = {
    "GpuBackend": "base", "MemoryReading": "base", "ProcessReading": "base", "UtilizationReading": "base",
    "NvmlBackend": "nvml", "NvmlGate": "nvml", "normalise_bus_id": "nvml", "throttle_reason_names": "nvml",
    "throttle_reason_words": "nvml", "RecordingError": "replay", "ReplayBackend": "replay",
    "load_recording": "replay",
}

__all__ = [
    "NA", "is_na", "value_or", "NvmlBackend", "NvmlGate", "ReplayBackend", "RecordingError",
    "load_recording", "open_gpu_backend", "normalise_bus_id", "throttle_reason_names",
    "throttle_reason_words", "GpuBackend", "MemoryReading", "UtilizationReading", "ProcessReading",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def open_gpu_backend(replay: str | Path | None = None, *, loop: bool = False) -> GpuBackend:
    """Live NVML, or the recording at ``replay``."""
    if replay:
        from .replay import ReplayBackend

        return ReplayBackend.from_file(replay, loop=loop)
    import sys

    # through the package's attribute (lazy: __getattr__ above), which tests may replace
    backend: type[GpuBackend] = sys.modules[__name__].NvmlBackend
    return backend()
