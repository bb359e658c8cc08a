"""gpudoctor: GPU diagnostics and utilisation monitor for people who train with PyTorch.

The public surface is ``__all__``. Importing ``gpudoctor`` is cheap: it loads neither
torch, nor pynvml, nor textual; names that need them are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from gpudoctor._version import __version__
from gpudoctor.core.errors import DeviceSelectionError, GpudoctorError, UsageError
from gpudoctor.core.model import SCHEMA_VERSION, Finding, Measurement, ProbeResult, Report, Status

# Public names loaded on first use: name -> module that defines it.
_LAZY: dict[str, str] = {
    "GpudoctorApp": "gpudoctor.tui.app",
    "SweepConfig": "gpudoctor.workload",
    "run_sweep": "gpudoctor.workload",
    "TrainingMonitor": "gpudoctor.hooks",
    "Summary": "gpudoctor.hooks",
    "DiagnosisItem": "gpudoctor.hooks",
    "check_devices": "gpudoctor.hooks",
    "DeviceMismatchError": "gpudoctor.hooks",
}

__all__ = [
    "__version__",
    "SCHEMA_VERSION",
    "Status",
    "Measurement",
    "Finding",
    "ProbeResult",
    "Report",
    "GpudoctorError",
    "UsageError",
    "DeviceSelectionError",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpudoctor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
