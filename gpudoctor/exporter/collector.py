"""The prometheus_client collector: the latest sample, the event watcher's counts and the last
report, turned into metric families at scrape time (nothing here reads NVML)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterable

# What a scrape uses is imported with the module (prometheus_client when the collector is made),
# never during a scrape: a scrape may run with every file descriptor taken, and an import opens files.
from gpudoctor import _version
from gpudoctor.core._num import number
from gpudoctor.backends.busy import READS, verdict
from gpudoctor.backends.clock_reasons import HARMFUL_THROTTLE_MASK, THROTTLE_REASONS
from gpudoctor.backends.events import critical_events
from gpudoctor.core._text import plain_text
from gpudoctor.backends.na import is_na
from gpudoctor.backends import catalogue
from gpudoctor.exporter.metrics import (GPU_LABELS, MIG_LABELS, OTHER_METRICS, counter_metrics, gpu_info_help,
                                       gpu_info_labels, gpu_metrics, mig_metrics, static_metrics)
from gpudoctor.exporter.report_status import STATUSES, ReportStatus
from gpudoctor.exporter.sampler import STALE_AFTER_INTERVALS, GpuSampler, Published

if TYPE_CHECKING:  # prometheus_client is imported at scrape time, not with the command line
    from prometheus_client.core import GaugeMetricFamily

    from gpudoctor.backends.events import EventSource
    from gpudoctor.backends.holders import Holder
    from gpudoctor.sampling.sampler import DeviceSnapshot, Snapshot


def _gauge(name: str, labels: list[str] | None = None, value: float | None = None, help_text: str = "") -> Any:
    """A gauge family of one of the exporter's own metrics (its help from :data:`OTHER_METRICS`
    unless given: a catalogue reading's)."""
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(name, help_text or OTHER_METRICS[name], value=value, labels=labels)


def _counter(name: str, labels: list[str] | None = None, value: float | None = None) -> Any:
    """A counter family of one of the exporter's own metrics; ``name`` ends in ``_total``, which
    prometheus_client adds back to the samples."""
    from prometheus_client.core import CounterMetricFamily

    return CounterMetricFamily(name[:-len("_total")], OTHER_METRICS[name], value=value, labels=labels)


def _state_set(family: GaugeMetricFamily, labels: list[str], current: object) -> None:
    """A state set: one series per status, 1 for ``current`` and 0 for the others."""
    for status in STATUSES:
        family.add_metric(labels + [status], 1.0 if current == status else 0.0)


def _gpu_label_values(dev: DeviceSnapshot) -> list[str]:
    """The values of :data:`GPU_LABELS` for one device of a sample."""
    static = dev.static
    return [str(dev.index)] + [_label(static.get(k)) for k in GPU_LABELS[1:]]


def _gauge_value(value: object) -> float | None:
    """A flag is 1 or 0; NA, None, text leave the series out (absent, as Prometheus expects)."""
    return float(value) if isinstance(value, bool) else number(value)


class GpudoctorCollector:
    """A prometheus_client collector built from the latest sample and report."""

    def __init__(self, sampler: GpuSampler, reports: ReportStatus | None = None, source: str = "nvml",
                 events: EventSource | None = None) -> None:
        self.sampler = sampler
        self.reports = reports
        self.source = source
        self.events = events
        import prometheus_client.core  # noqa: F401 - loaded now, so that no scrape imports it

    def describe(self) -> list[Any]:
        return []  # collected on demand; no fixed description

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import InfoMetricFamily

        info = InfoMetricFamily("gpudoctor_exporter", OTHER_METRICS["gpudoctor_exporter_info"])
        info.add_metric([], {"version": _version.__version__, "source": self.source})
        yield info
        published = self.sampler.published  # one read: the sampler thread swaps in whole samples
        snap = None if published is None else published.snapshot
        yield from self._nvml_metrics(snap)
        if published is not None and snap is not None:
            yield from self._sample_metrics(snap)
            yield from self._gpu_metrics(published)
            if self.events is not None:
                yield from self._event_metrics(self.events, snap.devices)
        yield from self._report_metrics()

    def _stale_after_s(self) -> float:
        return STALE_AFTER_INTERVALS * self.sampler.interval + 1.0

    def _nvml_metrics(self, snap: Snapshot | None) -> Iterable[Any]:
        """gpudoctor_nvml_up and why it is 0: NVML down, or the sample stale (the sampler is
        inside a driver call that has not come back, the first one included)."""
        nvml_up = _gauge("gpudoctor_nvml_up")
        nvml_err = _gauge("gpudoctor_nvml_error_info", labels=["reason"])
        if snap is None:
            started = self.sampler.started_at
            waited = None if started is None else time.monotonic() - started
            nvml_up.add_metric([], 0.0)
            stale = waited is not None and waited > self._stale_after_s()
            nvml_err.add_metric(["SampleStale" if stale else "NotSampledYet"], 1.0)
            yield nvml_up
            yield nvml_err
            if waited is not None:
                yield _gauge("gpudoctor_sample_age_seconds", value=max(0.0, waited))
            return
        stale = time.time() - snap.time > self._stale_after_s()
        status = snap.nvml_status
        nvml_up.add_metric([], 0.0 if (status is not None or stale) else 1.0)
        if status is not None:
            nvml_err.add_metric([status.reason if is_na(status) else str(status)], 1.0)
        elif stale:
            nvml_err.add_metric(["SampleStale"], 1.0)
        yield nvml_up
        yield nvml_err

    def _sample_metrics(self, snap: Snapshot) -> Iterable[Any]:
        yield _counter("gpudoctor_nvml_reinit_total", value=float(snap.reinits or 0))
        yield _gauge("gpudoctor_sample_timestamp_seconds", value=snap.time)
        yield _gauge("gpudoctor_sample_duration_seconds", value=snap.read_s)
        yield _gauge("gpudoctor_sample_age_seconds", value=max(0.0, time.time() - snap.time))
        if snap.count is not None:
            yield _gauge("gpudoctor_gpu_count", value=snap.count)

    def _gpu_metrics(self, published: Published) -> Iterable[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = list(GPU_LABELS)
        fam = {
            "info": _gauge("gpudoctor_gpu_info", labels=list(gpu_info_labels()), help_text=gpu_info_help()),
            "up": _gauge("gpudoctor_gpu_up", labels=["gpu"]),
            "err": _gauge("gpudoctor_gpu_error_info", labels=["gpu", "reason"]),
            **{m.name: GaugeMetricFamily(m.name, m.help + (f" (DCGM: {m.dcgm})" if m.dcgm else ""), labels=labels)
               for m in gpu_metrics() + static_metrics()},
            "throttled": _gauge("gpudoctor_gpu_throttled", labels=labels + ["reason"]),
            "verdict": _gauge("gpudoctor_gpu_work_verdict_info", labels=labels + ["verdict"]),
            **{name: CounterMetricFamily(name[:-len("_total")], readings[0].help,
                                         labels=labels + [label for label, _ in readings[0].labels])
               for name, readings in counter_metrics().items()},
        }
        devices = published.snapshot.devices
        for dev in devices:
            _add_device(fam, dev, published.snapshot.driver_version)
        yield from fam.values()
        yield _holder_metric(devices, published.holders)
        yield from _mig_metrics(devices)

    def _event_metrics(self, events: EventSource, devices: list[DeviceSnapshot]) -> Iterable[Any]:
        gpu_labels = list(GPU_LABELS)
        xids = _counter("gpudoctor_gpu_xid_errors_total", labels=gpu_labels)
        logged = _gauge("gpudoctor_gpu_kernel_log_xids", labels=gpu_labels)
        last = _gauge("gpudoctor_gpu_last_xid", labels=gpu_labels)
        last_t = _gauge("gpudoctor_gpu_last_xid_timestamp_seconds", labels=gpu_labels)
        kinds = _counter("gpudoctor_gpu_events_total", labels=gpu_labels + ["kind"])
        supported = _gauge("gpudoctor_gpu_events_supported", labels=gpu_labels)
        unsupported = _gauge("gpudoctor_gpu_events_error_info", labels=gpu_labels + ["reason"])
        for dev in devices:
            labels = _gpu_label_values(dev)
            state = events.snapshot(dev.index)
            supported.add_metric(labels, 0.0 if state.supported is not None else 1.0)
            if state.supported is not None:
                unsupported.add_metric(labels + [state.supported.reason], 1.0)
            else:
                xids.add_metric(labels, float(state.xid_count))
                for kind, count in sorted(state.counts.items()):
                    kinds.add_metric(labels + [kind], float(count))
            logged.add_metric(labels, float(len(state.logged_xids)))
            newest = state.last_xid()
            if newest is not None:
                last.add_metric(labels, float(newest.code or 0))
                last_t.add_metric(labels, float(newest.time))
        yield from (xids, logged, last, last_t, kinds, supported, unsupported)
        readable = events.kernel_log_readable
        if readable is not None:
            yield _gauge("gpudoctor_kernel_log_readable", value=1.0 if readable else 0.0)
            if not readable:
                reason = _gauge("gpudoctor_kernel_log_error_info", labels=["reason"])
                reason.add_metric([_label(events.kernel_log_reason)[:200]], 1.0)
                yield reason

    def _critical_event_seen(self) -> bool:
        events = self.events
        if events is None:
            return False
        count = events.count
        indices = range(count) if isinstance(count, int) else ()
        try:
            return any(critical_events(events.snapshot(index)) for index in indices)
        except Exception:  # a watcher that cannot answer costs this fold, not the scrape
            return False

    def _report_metrics(self) -> Iterable[Any]:
        if self.reports is None:
            return
        yield _gauge("gpudoctor_report_up", value=float(self.reports.up))
        report = self.reports.report
        if report is None:
            return
        # A critical event seen since the last report (Xid 79 mid-job) fails the status now, not at
        # the next report: the same judgement as the report's events probe.
        critical = self._critical_event_seen()
        overall = _gauge("gpudoctor_report_status", labels=["status"])
        _state_set(overall, [], "fail" if critical else report.get("status"))
        yield overall
        probes = _gauge("gpudoctor_probe_status", labels=["probe", "status"])
        for result in report.get("results", []):
            probe_now = "fail" if critical and result.get("probe") == "events" else result.get("status")
            _state_set(probes, [str(result.get("probe"))], probe_now)
        yield probes
        yield _report_findings(report)
        if self.reports.finished_at is not None:
            yield _gauge("gpudoctor_report_timestamp_seconds", value=self.reports.finished_at)
        if self.reports.duration_s is not None:
            yield _gauge("gpudoctor_report_duration_seconds", value=self.reports.duration_s)


def _add_device(fam: dict[str, Any], dev: DeviceSnapshot, driver_version: object) -> None:
    """One GPU's series into the families of :meth:`GpudoctorCollector._gpu_metrics`."""
    static, sample = dev.static, dev.sample
    labels = _gpu_label_values(dev)
    fam["info"].add_metric(labels + [_label(driver_version)] + [_label(static.get(k)) for k in catalogue.info_labels()],
                           1.0)
    for metric in static_metrics():
        fact = _gauge_value(static.get(metric.key))
        if fact is not None:
            fam[metric.name].add_metric(labels, fact * metric.scale)
    if any(k != "t" for k, v in sample.items() if not is_na(v)):
        fam["up"].add_metric([labels[0]], 1.0)
    else:
        fam["up"].add_metric([labels[0]], 0.0)
        reasons = [v.reason for v in sample.values() if is_na(v)]
        fam["err"].add_metric([labels[0], reasons[0] if reasons else "NoReading"], 1.0)
    for metric in gpu_metrics():
        value = _gauge_value(sample.get(metric.key))
        if value is not None:
            fam[metric.name].add_metric(labels, value * metric.scale)
    if fam["up"].samples[-1].value == 1.0:  # the one busy verdict, on the readings a GPU that answers gave
        fam["verdict"].add_metric(labels + [verdict({k: sample.get(k, static.get(k)) for k in READS}).code], 1.0)
    mask = sample.get("throttle_reasons")
    if isinstance(mask, int) and not isinstance(mask, bool):
        for bit, (name, _words) in sorted(THROTTLE_REASONS.items()):
            fam["throttled"].add_metric(labels + [name], 1.0 if mask & bit else 0.0)
        fam["throttled"].add_metric(labels + ["any_harmful"], 1.0 if mask & HARMFUL_THROTTLE_MASK else 0.0)
    for name, readings in counter_metrics().items():
        for reading in readings:
            value = _gauge_value(sample.get(reading.key))
            if value is not None:  # divided by the reciprocal: mJ -> J is the exact / 1000
                fam[name].add_metric(labels + [v for _, v in reading.labels], value / (1.0 / reading.scale))


HOLDER_LABELS = ["kind", "slurm_job", "pod_uid", "container_id", "reason"]


def _holder_metric(devices: list[DeviceSnapshot], held: dict[int, list[Holder] | str | None]) -> Any:
    """gpudoctor_gpu_holder_info: per GPU, one series per Slurm job or Kubernetes pod of its
    processes (from their cgroups), or kind="unknown" with the reason it cannot be told."""
    family = _gauge("gpudoctor_gpu_holder_info", labels=list(GPU_LABELS) + HOLDER_LABELS)
    for dev in devices:
        holders = held.get(dev.index)
        labels = _gpu_label_values(dev)
        if isinstance(holders, str):
            family.add_metric(labels + ["unknown", "", "", "", holders[:200]], 1.0)
            continue
        for holder in holders or ():
            family.add_metric(labels + [holder.kind, holder.job, holder.pod_uid, holder.container_id,
                                        holder.reason[:200]], 1.0)
    return family


def _mig_metrics(devices: list[DeviceSnapshot]) -> Iterable[Any]:
    """The per-MIG-device series (gpudoctor_mig_*), only when some GPU is in MIG mode and its MIG
    devices were read: memory, SMs, processes and GPM SM activity per slice. No utilisation or
    energy per slice: NVML has energy for the whole GPU only (a share would be made up) and no
    utilisation rates in MIG mode."""
    slices = [(dev.index, m) for dev in devices if isinstance(dev.mig, list) for m in dev.mig]
    if not slices:
        return
    labels = list(MIG_LABELS)
    info = _gauge("gpudoctor_mig_info", labels=labels + ["profile"])
    # the catalogue's MIG readings (gpudoctor.backends.catalogue.MIG_READINGS), then the process count
    families = {r.key: (_gauge(r.prometheus, help_text=r.help, labels=labels), r.scale) for r in mig_metrics()}
    families["processes"] = (_gauge("gpudoctor_mig_processes", labels=labels), 1.0)
    for index, mig in slices:
        values = [str(index), _label(mig.gpu_instance_id), _label(mig.compute_instance_id), _label(mig.uuid)]
        info.add_metric(values + [_label(mig.profile)], 1.0)
        for key, (family, scale) in families.items():
            raw = mig.get(key)
            value = float(len(raw)) if key == "processes" and isinstance(raw, list) else _gauge_value(raw)
            if value is not None:
                family.add_metric(values, value * scale)
    yield info
    yield from (family for family, _scale in families.values())


#: The findings of the last report shown as series, at most (a report file is someone else's data).
REPORT_FINDINGS_MAX = 100
#: A finding's summary as a label value, at most this long.
FINDING_LABEL_MAX = 200


def _report_findings(report: dict[str, Any]) -> Any:
    """gpudoctor_report_finding_info: the last report's warn, fail and error findings in their own
    words (the finding's summary, plain text and bounded), so an alert can say what is wrong."""
    family = _gauge("gpudoctor_report_finding_info", labels=["probe", "code", "status", "summary"])
    shown = 0
    for result in report.get("results", []):
        for found in result.get("findings") or []:
            if shown >= REPORT_FINDINGS_MAX:
                return family
            if not isinstance(found, dict) or found.get("status") not in ("warn", "fail", "error"):
                continue
            family.add_metric([plain_text(str(result.get("probe")), limit=200),
                               plain_text(_label(found.get("code")), limit=200), str(found["status"]),
                               plain_text(_label(found.get("summary")), limit=FINDING_LABEL_MAX)], 1.0)
            shown += 1
    return family


def _label(value: object) -> str:
    if value is None or is_na(value):
        return ""
    return str(value)


def build_registry(collector: GpudoctorCollector) -> Any:
    """A registry with our collector and the exporter's own process metrics (RSS, CPU)."""
    from prometheus_client import CollectorRegistry, ProcessCollector

    from gpudoctor.why.metrics import TrainingCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    registry.register(TrainingCollector())  # per-process training metrics (published summaries)
    ProcessCollector(registry=registry)
    return registry
