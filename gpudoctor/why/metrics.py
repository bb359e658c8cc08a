"""Per-process training metrics for the Prometheus exporter, from the live summaries that
processes using TrainingMonitor publish (:mod:`gpudoctor.system._published`).

Read at scrape time (a few small files); labelled by ``pid``, ``command`` (bounded, plain) and
``rank``. A process that stops publishing leaves at the next scrape. The exporter sees the
summaries of its own user (the directory is per user), or of ``GPUDOCTOR_RUNTIME_DIR``.
"""

from __future__ import annotations

from typing import Any, Iterable

from gpudoctor.system import _published
from gpudoctor.core._num import number
from gpudoctor.sampling.presentation import plain_text

MAX_COMMAND_CHARS = 120

# name -> (help, key in the published record)
TRAINING_METRICS: dict[str, tuple[str, str]] = {
    "gpudoctor_training_step_time_p50_seconds": ("median time of a training step (with the wait for its batch), "
                                                 "recent steps", "step_time_p50_s"),
    "gpudoctor_training_data_wait_share": ("share of the training time spent waiting for the next batch (0-1)",
                                           "data_wait_share"),
    "gpudoctor_training_samples_per_second": ("training samples per second over the recent steps",
                                              "samples_per_s"),
    "gpudoctor_training_host_syncs_per_step": ("host<->GPU synchronisations per step (CUDA only)",
                                               "host_syncs_per_step"),
    "gpudoctor_training_steps": ("steps the TrainingMonitor has seen", "steps"),
}
OTHER_TRAINING_METRICS = {
    "gpudoctor_training_processes": "processes publishing a TrainingMonitor summary",
    "gpudoctor_training_diagnosis_info": "the live verdict of a training process (code: input_bound, "
                                         "host_sync_bound, ... or ok); value 1",
}
LABELS = ["pid", "command", "rank"]


def metric_names() -> list[str]:
    return list(TRAINING_METRICS) + list(OTHER_TRAINING_METRICS)


class TrainingCollector:
    """A prometheus_client collector of every publishing process's figures."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        records = _published.read_all(self.directory)
        families = {name: GaugeMetricFamily(name, help_text, labels=LABELS)
                    for name, (help_text, _) in TRAINING_METRICS.items()}
        verdicts = GaugeMetricFamily("gpudoctor_training_diagnosis_info",
                                     OTHER_TRAINING_METRICS["gpudoctor_training_diagnosis_info"],
                                     labels=LABELS + ["code"])
        for pid, record in sorted(records.items()):
            labels = [str(pid), plain_text(record.get("command", ""), limit=MAX_COMMAND_CHARS),
                      str(record.get("rank", 0))]
            for name, (_, key) in TRAINING_METRICS.items():
                value = number(record.get(key))
                if value is not None:
                    families[name].add_metric(labels, value)
            verdicts.add_metric(labels + [plain_text(record.get("verdict", "ok"), limit=40)], 1.0)
        yield GaugeMetricFamily("gpudoctor_training_processes",
                                OTHER_TRAINING_METRICS["gpudoctor_training_processes"], value=len(records))
        yield from families.values()
        yield verdicts


__all__ = ["TrainingCollector", "TRAINING_METRICS", "OTHER_TRAINING_METRICS", "metric_names"]
