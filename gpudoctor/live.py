"""Names the TUI and ``watch`` used from one module before the sampling core existed.

What ``live`` held now lives where it belongs; these names stay importable from here:

* sampling over time, snapshots, device faults and history: :mod:`gpudoctor.sampling`
  (``LiveSampler`` is :class:`gpudoctor.sampling.Sampler`, the one sampler);
* host readings and process details through psutil: :mod:`gpudoctor.backends.host`;
* words, numbers, sparklines, the watch line and process rows: :mod:`gpudoctor.presentation`.

New code imports from those modules.
"""

from __future__ import annotations

from gpudoctor.backends.host import PsutilProcessInfo, default_host_sampler
from gpudoctor.presentation import (
    FAULT_WORDS, NO_NVML_REASONS, PROCESS_SORT_KEYS, SPARK_CHARS, WATCH_FIELDS, ProcessRow, fault_words, fmt_bytes,
    fmt_memory, fmt_num, fmt_power, fmt_rate_kbps, no_gpu_words, process_rows, recorded_process_info, short_na,
    sparkline, throttle_text, watch_line, watch_record,
)
from gpudoctor.sampling import (
    DEVICE_METRICS, HISTORY_LENGTH, SLOW_READ_INTERVAL_S, DeviceSnapshot, History, Sampler, Snapshot, device_fault,
)

#: The one sampler (gpudoctor.sampling.Sampler), under the name the TUI and watch knew.
LiveSampler = Sampler

__all__ = [
    "DeviceSnapshot", "Snapshot", "LiveSampler", "History", "sparkline", "watch_line", "watch_record",
    "ProcessRow", "process_rows", "PROCESS_SORT_KEYS", "PsutilProcessInfo", "recorded_process_info",
    "default_host_sampler", "device_fault", "fault_words", "no_gpu_words", "throttle_text",
    "FAULT_WORDS", "NO_NVML_REASONS", "SPARK_CHARS", "WATCH_FIELDS", "fmt_bytes", "fmt_memory", "fmt_num",
    "fmt_power", "fmt_rate_kbps", "short_na", "DEVICE_METRICS", "HISTORY_LENGTH", "SLOW_READ_INTERVAL_S",
]
