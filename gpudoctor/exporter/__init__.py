"""``gpudoctor exporter``: Prometheus metrics for every GPU, and the last report's verdict.

How it works:

* A sampler thread reads every GPU through the NVML backend (or a recording, with
  ``--replay``) every ``--interval`` seconds. Scrapes never touch NVML: they serve the
  latest sample, so 50 scrapes a second cost no NVML calls, and an NVML call that blocks
  (a GPU falling off the bus) cannot stall the endpoint.
* NVML trouble is a metric, not a dead endpoint: ``gpudoctor_nvml_up`` is 0 when NVML
  cannot start, or when the last sample is stale (older than 3 intervals: the sampler is
  stuck in the driver); ``gpudoctor_gpu_up`` is 0 for a GPU that stopped answering
  (``GpuIsLost``), with the reason in ``gpudoctor_gpu_error_info``.
* The report: the quick report (NVML and host facts, no torch, no CUDA context) runs once
  at start and then every ``--report-interval`` seconds (default 300; 0 = at start only),
  in a background thread. ``--report-file FILE`` exposes instead a report written by
  someone else (e.g. a nightly ``gpudoctor report --full -o FILE``), re-read when it
  changes. Each probe's status is ``gpudoctor_probe_status{probe, status}`` (a state set:
  1 for the current status, 0 for the others); each warn, fail or error finding is
  ``gpudoctor_report_finding_info{probe, code, status, summary}``, in its own words.

* The HTTP server (:func:`serve_metrics`) gives each connection at most 10 s and serves at
  most 128 at once (more are answered 503 and closed), so idle or half-sent requests cannot
  hold threads and file descriptors until scrapes fail; ``--report-file`` is read within
  bounds (16 MiB, 64 levels) and a bad file only sets ``gpudoctor_report_up`` to 0.

The package, by job: :mod:`~gpudoctor.exporter.metrics` (the metric table, derived from the
reading catalogue), :mod:`~gpudoctor.exporter.sampler` (the view on the one sampler),
:mod:`~gpudoctor.exporter.report_status` (the report refresh), :mod:`~gpudoctor.exporter.collector`
(the exposition) and :mod:`~gpudoctor.exporter.server` (HTTP). The names below are re-exported
here: ``from gpudoctor.exporter import X`` is the way in.

Metric names, units and their dcgm-exporter counterparts: docs/fleet.md (the table there
is generated from the catalogue by gpudoctor.tools.regenerate). Units are Prometheus base units
(bytes, watts, hertz, ratios 0-1); dcgm-exporter uses MiB, MHz and percent.

Front end: never imports torch or pynvml (NVML goes through gpudoctor.backends).
"""

from __future__ import annotations

from gpudoctor.exporter.collector import GpudoctorCollector, build_registry
from gpudoctor.exporter.metrics import (GPU_LABELS, OTHER_METRICS, GpuMetric, all_metric_names, counter_metrics,
                                        ecc_counters, gpu_metrics, mig_metrics)
from gpudoctor.exporter.report_status import (DEFAULT_REPORT_INTERVAL_S, REPORT_FILE_MAX_BYTES,
                                              REPORT_FILE_MAX_DEPTH, REPORT_FILE_MAX_RESULTS, STATUSES,
                                              ReportStatus, quick_report_producer)
from gpudoctor.exporter.sampler import (DEFAULT_INTERVAL_S, RETRY_FIRST_S, RETRY_MAX_S, STALE_AFTER_INTERVALS,
                                        GpuSampler, Published, stop_sampler_then_close)
from gpudoctor.exporter.server import (DEFAULT_MAX_CONNECTIONS, DEFAULT_PORT, DEFAULT_REQUEST_TIMEOUT_S, LOOPBACK,
                                       serve_metrics)

__all__ = ["GpuSampler", "Published", "ReportStatus", "serve_metrics", "stop_sampler_then_close",
           "GpudoctorCollector", "build_registry", "ecc_counters", "OTHER_METRICS", "all_metric_names",
           "gpu_metrics", "counter_metrics", "mig_metrics",
           # the constants and the rest the command and the tests import
           "GpuMetric", "GPU_LABELS", "STATUSES", "DEFAULT_PORT", "LOOPBACK", "DEFAULT_INTERVAL_S",
           "STALE_AFTER_INTERVALS", "RETRY_FIRST_S", "RETRY_MAX_S", "DEFAULT_REPORT_INTERVAL_S",
           "REPORT_FILE_MAX_BYTES", "REPORT_FILE_MAX_DEPTH", "REPORT_FILE_MAX_RESULTS", "quick_report_producer",
           "DEFAULT_MAX_CONNECTIONS", "DEFAULT_REQUEST_TIMEOUT_S"]
