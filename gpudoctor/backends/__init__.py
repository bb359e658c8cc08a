"""The only code that touches hardware libraries (NVML, torch.cuda, psutil), with what reads
their facts from elsewhere: a recording (``recording``), the torch build of an interpreter read
without importing torch (``torch_build``), and the driver against the CUDA build (``cuda_compat``).

``open_gpu_backend()`` gives live NVML readings, or a recording's readings when
``replay`` names a file made by ``gpudoctor record``; both satisfy :class:`GpuBackend`
(gpudoctor.backends.base), the one seam, with typed readings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import GpuBackend, MemoryReading, ProcessReading, UtilizationReading
from .na import NA, is_na, value_or
from .nvml import NvmlBackend, NvmlGate, normalise_bus_id, throttle_reason_names, throttle_reason_words
from .replay import RecordingError, ReplayBackend, load_recording

if TYPE_CHECKING:  # pathlib costs `report --quick` ~5 ms of imports; only replays need it
    from pathlib import Path

__all__ = [
    "NA", "is_na", "value_or", "NvmlBackend", "NvmlGate", "ReplayBackend", "RecordingError",
    "load_recording", "open_gpu_backend", "normalise_bus_id", "throttle_reason_names",
    "throttle_reason_words", "GpuBackend", "MemoryReading", "UtilizationReading", "ProcessReading",
]


def open_gpu_backend(replay: str | Path | None = None, *, loop: bool = False) -> GpuBackend:
    """Live NVML, or the recording at ``replay``."""
    if replay:
        return ReplayBackend.from_file(replay, loop=loop)
    return NvmlBackend()
