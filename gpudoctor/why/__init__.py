"""``gpudoctor why``: why a running training process's GPU (or CPU) is not busy, with no change
to its code.

py-spy samples the process's Python stacks and its subprocesses' (DataLoader workers,
torchrun's ranks), psutil and NVML give CPU and GPU figures beside them; readable rules
(:mod:`.rules`) put each sample in a category, and :mod:`.analysis` turns the shares into one
verdict with the same codes and words as :class:`~gpudoctor.hooks.TrainingMonitor`'s, the
user's lines responsible and the fix. Nothing here imports torch: it samples other processes.
"""

from __future__ import annotations

from .analysis import CODES, FORMAT, FORMAT_VERSION, WORDS, diagnose
from .pyspy import WhyError
from .session import sample, why

__all__ = ["why", "sample", "diagnose", "WhyError", "CODES", "WORDS", "FORMAT", "FORMAT_VERSION"]
