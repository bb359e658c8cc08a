"""``gpudoctor why``: why a running training process's GPU (or CPU) is not busy, with no change
to its code.

py-spy samples the process's Python stacks and its subprocesses' (DataLoader workers,
torchrun's ranks), psutil and NVML give CPU and GPU figures beside them; readable rules
(:mod:`.rules`) put each sample in a category, and :mod:`.analysis` turns the shares into one
verdict with the same codes and words as :class:`~gpudoctor.hooks.TrainingMonitor`'s, the
user's lines responsible and the fix. Nothing here imports torch: it samples other processes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .analysis import CODES, FORMAT, FORMAT_VERSION, WORDS, diagnose
    from .pyspy import WhyError
    from .session import sample, why

# The package's names are loaded on first use (PEP 562): importing one light submodule
# (why.wording, which gpudoctor.core.findings' index reads for any finding code) must not pull in the
# analysis, py-spy and psutil on the quick report's path (tests/report/test_quick_start.py).
_LAZY = {"CODES": ".analysis", "FORMAT": ".analysis", "FORMAT_VERSION": ".analysis", "WORDS": ".analysis",
         "diagnose": ".analysis", "WhyError": ".pyspy", "sample": ".session", "why": ".session"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)


__all__ = ["why", "sample", "diagnose", "WhyError", "CODES", "WORDS", "FORMAT", "FORMAT_VERSION"]
