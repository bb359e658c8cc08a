"""Hooks inside the user's training loop: :class:`TrainingMonitor` and friends.

Instrumentation inside the user's process: nothing here imports torch at module level
(``import gpudoctor`` stays free of torch); torch is reached through
:mod:`gpudoctor.hooks.torch_support` when a step first runs. The Lightning callback lives
in :mod:`gpudoctor.hooks.lightning` (optional dependency, imported only when asked for).
"""

from __future__ import annotations

from .devices import DeviceMismatchError, check_devices, explain_device_error
from .monitor import MonitorUsageError, MonitorUsageWarning, TrainingMonitor
from .summary import CODES, DiagnosisItem, Summary

__all__ = [
    "TrainingMonitor", "Summary", "DiagnosisItem", "CODES", "check_devices", "explain_device_error",
    "DeviceMismatchError", "MonitorUsageError", "MonitorUsageWarning",
]
