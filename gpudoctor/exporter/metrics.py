"""The exporter's metrics: the per-GPU gauges and counters (derived from the reading catalogue,
:mod:`gpudoctor.backends.catalogue`) and every other metric it writes, with its help text.

Metric names, units and their dcgm-exporter counterparts: docs/fleet.md (the table there
is generated from the catalogue: gpudoctor.tools.regenerate). Units are Prometheus base units
(bytes, watts, hertz, ratios 0-1); dcgm-exporter uses MiB, MHz and percent.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.backends import catalogue


@dataclass(frozen=True)
class GpuMetric:
    """One per-GPU gauge: Prometheus name, sample key, scale to base units, help, DCGM field."""

    name: str
    key: str
    scale: float
    help: str
    dcgm: str = ""


def gpu_metrics() -> tuple[GpuMetric, ...]:
    """The per-GPU gauges: every gauge reading of gpudoctor.backends.catalogue with a Prometheus name."""
    return _gauges()


@catalogue.per_catalogue
def _gauges() -> tuple[GpuMetric, ...]:
    return tuple(GpuMetric(r.prometheus, r.key, r.scale, r.help, r.dcgm) for r in catalogue.exported()
                 if r.kind == "gauge")


@catalogue.per_catalogue
def counter_metrics() -> dict[str, tuple[catalogue.Reading, ...]]:
    """The per-GPU counters: metric name (with ``_total``) -> the readings it holds, told apart
    by their labels (the four ECC counts share one)."""
    names: dict[str, tuple[catalogue.Reading, ...]] = {}
    for r in catalogue.exported():
        if r.kind == "counter":
            names[r.prometheus] = names.get(r.prometheus, ()) + (r,)
    return names


@catalogue.per_catalogue
def static_metrics() -> tuple[GpuMetric, ...]:
    """The per-GPU gauges of static facts (gpudoctor.backends.catalogue.STATIC_FACTS with a Prometheus
    name): read once per device, written with every sample, labelled as the readings' gauges."""
    return tuple(GpuMetric(f.prometheus, f.key, f.scale, f.help) for f in catalogue.static_gauges())


def gpu_info_labels() -> tuple[str, ...]:
    """The labels of ``gpudoctor_gpu_info``: :data:`GPU_LABELS`, ``driver_version``, then the static
    facts the catalogue makes its labels (``info_label``): the catalogue's :func:`gpu_info_labels`."""
    return catalogue.gpu_info_labels()


def gpu_info_help() -> str:
    """``gpudoctor_gpu_info``'s help, naming its labels from the catalogue: the series labels (in catalogue
    order), ``driver_version``, then the info labels."""
    series = [f.key for f in catalogue.STATIC_FACTS if f.series_label]
    labels = series + [catalogue.DRIVER_LABEL] + list(catalogue.info_labels())
    return OTHER_METRICS["gpudoctor_gpu_info"].format(labels=", ".join(labels))


def mig_metrics() -> tuple[catalogue.MigReading, ...]:
    """The per-MIG-device gauges (gpudoctor_mig_*): the catalogue's MIG readings with a Prometheus name."""
    return tuple(r for r in catalogue.mig_readings() if r.prometheus)


@catalogue.per_catalogue
def ecc_counters() -> dict[tuple[str, str], tuple[str, str]]:
    """The ECC counters: (error type, counter kind) -> sample key, DCGM field (from the catalogue)."""
    return {(dict(r.labels)["error_type"], dict(r.labels)["counter"]): (r.key, r.dcgm)
            for r in counter_metrics().get("gpudoctor_gpu_ecc_errors_total", ())}


# Every other metric this exporter writes (name -> help), for the docs check: the readings' own
# metrics are in the catalogue.
OTHER_METRICS: dict[str, str] = {
    "gpudoctor_exporter_info": "Exporter version and data source (label source: nvml or replay:FILE)",
    "gpudoctor_nvml_up": "1 when NVML answers and the last sample is fresh, else 0",
    "gpudoctor_nvml_error_info": "The reason NVML is down (label reason), 1 while it is",
    "gpudoctor_nvml_reinit_total": "NVML restarts tried after a driver (re)load or every GPU lost",
    "gpudoctor_gpu_count": "GPUs NVML reports",
    "gpudoctor_sample_timestamp_seconds": "Unix time of the last sample",
    "gpudoctor_sample_duration_seconds": "How long reading every GPU took, last sample",
    "gpudoctor_sample_age_seconds": "Seconds since the last sample, at scrape time",
    "gpudoctor_gpu_info": "1 per GPU, with labels {labels}",
    "gpudoctor_gpu_up": "1 when the GPU answered the last sample, 0 when it did not (e.g. GpuIsLost)",
    "gpudoctor_gpu_error_info": "Why a GPU is down (label reason), 1 while it is",
    "gpudoctor_gpu_work_verdict_info": "Whether the GPU really works, as gpudoctor judges utilisation with SM, tensor "
                                       "and DRAM activity (label verdict: idle, tensor_bound, memory_bound, "
                                       "busy_small_kernels, sm_bound, waiting, partly_busy, warming, no_gpm, "
                                       "no_reading; docs/utilisation.md), 1 for the current one",
    "gpudoctor_gpu_throttled": "1 per clock event reason that is active (label reason)",
    "gpudoctor_gpu_holder_info": "1 per Slurm job or Kubernetes pod holding the GPU, read from its processes' "
                                 "cgroups (labels kind: slurm, kubernetes or unknown; slurm_job; pod_uid; "
                                 "container_id; reason: why it cannot be told)",
    "gpudoctor_report_up": "1 when the last report ran (or the report file was read), else 0",
    "gpudoctor_report_status": "Overall status of the last report, as a state set (label status)",
    "gpudoctor_probe_status": "Each probe's status in the last report, as a state set (labels probe, status)",
    "gpudoctor_report_finding_info": "1 per warn, fail or error finding of the last report, in its words (labels "
                                     "probe, code, status, summary)",
    "gpudoctor_report_timestamp_seconds": "Unix time the last report finished (or the file was written)",
    "gpudoctor_report_duration_seconds": "How long the last report took",
    "gpudoctor_gpu_xid_errors_total": "Xid errors NVML reported for the GPU since the exporter started watching",
    "gpudoctor_gpu_kernel_log_xids": "Xid errors for the GPU found in the kernel log when the exporter started",
    "gpudoctor_gpu_last_xid": "The most recent Xid of the GPU (NVML event or kernel log); see docs/fleet.md",
    "gpudoctor_gpu_last_xid_timestamp_seconds": "Unix time of the most recent Xid (0 when the log gave no time)",
    "gpudoctor_gpu_events_total": "Critical events NVML reported since watching began (label kind: xid, "
                                  "ecc_double_bit, ecc_single_bit, ecc_single_bit_storm, clock_change, ...)",
    "gpudoctor_gpu_events_supported": "1 when the GPU reports critical events to NVML, else 0 (reason in "
                                      "gpudoctor_gpu_events_error_info)",
    "gpudoctor_gpu_events_error_info": "Why the GPU's events cannot be watched (label reason), 1 while so",
    "gpudoctor_kernel_log_readable": "1 when the kernel log could be read for Xids from before the exporter "
                                     "started, else 0 (reason in gpudoctor_kernel_log_error_info)",
    "gpudoctor_kernel_log_error_info": "Why the kernel log could not be read (label reason)",
    "gpudoctor_mig_info": "1 per MIG device of a GPU in MIG mode, with labels gpu, gpu_instance, compute_instance, "
                          "uuid (MIG-...), profile (3g.40gb)",
    "gpudoctor_mig_processes": "Compute processes on the MIG device (absent where NVML refuses the list: "
                               "NoPermission without root)",
}

#: The labels of the per-MIG-device series (gpudoctor_mig_*). Power and energy have no per-slice
#: series (NVML gives them for the whole GPU only: the gpudoctor_gpu_* series), utilisation none
#: at all (NVML has no utilisation rates in MIG mode).
MIG_LABELS = ("gpu", "gpu_instance", "compute_instance", "uuid")

#: The labels of every per-GPU series: ``gpu`` (NVML's index), then the static facts the catalogue
#: places there (``series_label``: uuid, name, pci_bus_id), as the catalogue stood at import (a
#: series' identity: a change to it is a change to every series).
GPU_LABELS = ("gpu",) + catalogue.series_labels()


def all_metric_names() -> list[str]:
    return ([m.name for m in gpu_metrics()] + list(counter_metrics()) + [m.name for m in static_metrics()]
            + [r.prometheus for r in mig_metrics()]
            + list(OTHER_METRICS))

