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
  1 for the current status, 0 for the others).

* The HTTP server (:func:`serve_metrics`) gives each connection at most 10 s and serves at
  most 128 at once (more are answered 503 and closed), so idle or half-sent requests cannot
  hold threads and file descriptors until scrapes fail; ``--report-file`` is read within
  bounds (16 MiB, 64 levels) and a bad file only sets ``gpudoctor_report_up`` to 0.

Metric names, units and their dcgm-exporter counterparts: docs/fleet.md (the table there
is checked against :data:`GPU_METRICS` by a test). Units are Prometheus base units
(bytes, watts, hertz, ratios 0-1); dcgm-exporter uses MiB, MHz and percent.

Front end: never imports torch or pynvml (NVML goes through gpudoctor.backends).
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from gpudoctor.backends import catalogue
from gpudoctor.backends.na import is_na


DEFAULT_PORT = 9402
DEFAULT_INTERVAL_S = 5.0
DEFAULT_REPORT_INTERVAL_S = 300.0
STALE_AFTER_INTERVALS = 3
STATUSES = ("pass", "skip", "warn", "fail", "error")
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


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


#: The per-GPU gauges as the catalogue stood at import (the collector reads gpu_metrics()).
GPU_METRICS: tuple[GpuMetric, ...] = gpu_metrics()

# ECC counters: (error type, counter kind) -> sample key, DCGM field (from the catalogue).
ECC_COUNTERS: dict[tuple[str, str], tuple[str, str]] = {
    (dict(r.labels)["error_type"], dict(r.labels)["counter"]): (r.key, r.dcgm)
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
    "gpudoctor_gpu_info": "1 per GPU, with labels name, uuid, pci_bus_id, driver_version",
    "gpudoctor_gpu_up": "1 when the GPU answered the last sample, 0 when it did not (e.g. GpuIsLost)",
    "gpudoctor_gpu_error_info": "Why a GPU is down (label reason), 1 while it is",
    "gpudoctor_gpu_work_verdict_info": "Whether the GPU really works, as gpudoctor judges utilisation with SM, tensor "
                                       "and DRAM activity (label verdict: idle, tensor_bound, memory_bound, "
                                       "busy_small_kernels, sm_bound, waiting, partly_busy, warming, no_gpm, "
                                       "no_reading; docs/utilisation.md), 1 for the current one",
    "gpudoctor_gpu_throttled": "1 per clock event reason that is active (label reason)",
    "gpudoctor_report_up": "1 when the last report ran (or the report file was read), else 0",
    "gpudoctor_report_status": "Overall status of the last report, as a state set (label status)",
    "gpudoctor_probe_status": "Each probe's status in the last report, as a state set (labels probe, status)",
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
}

GPU_LABELS = ("gpu", "uuid", "name", "pci_bus_id")


def all_metric_names() -> list[str]:
    return [m.name for m in gpu_metrics()] + list(counter_metrics()) + list(OTHER_METRICS)


# --------------------------------------------------------------------------- sampling
# The sampling (and NVML's restart after a driver reload) is gpudoctor.sampling.Sampler's.
RETRY_FIRST_S = 5.0
RETRY_MAX_S = 60.0


def recoverable_trouble(snap: dict[str, Any]) -> str | None:
    """The reason a fresh NVML start-up may help with this exporter sample, or None."""
    from gpudoctor.sampling import RECOVERABLE_NVML_REASONS, all_lost

    status = snap.get("status")
    if is_na(status) and status.reason in RECOVERABLE_NVML_REASONS:
        return status.reason
    devices = snap.get("devices") or []
    if devices and all(all_lost(dev["sample"]) for dev in devices):
        return "GpuIsLost"
    return None


class GpuSampler:
    """The exporter's view of the one sampler (:class:`gpudoctor.sampling.Sampler`): every GPU
    read in full every ``interval`` seconds in its daemon thread, NVML restarted with
    back-off when a new start-up can cure it (first after ``retry_first_s``, then at doubling
    intervals up to ``retry_max_s``). :attr:`snapshot` is the latest sample as the collector
    reads it (None until the first read comes back: scrapes are served before that, the
    sample counted stale).
    """

    def __init__(self, gpu: Any, interval: float = DEFAULT_INTERVAL_S, *, retry_first_s: float = RETRY_FIRST_S,
                 retry_max_s: float = RETRY_MAX_S, clock: Callable[[], float] = time.monotonic) -> None:
        from gpudoctor.sampling import Sampler

        self.gpu = gpu
        self.interval = interval
        self.snapshot: dict[str, Any] | None = None
        self.core = Sampler(gpu, None, with_processes=False, reads="full", interval_s=interval, history_length=1,
                            recover=True, retry_first_s=retry_first_s, retry_max_s=retry_max_s,
                            on_sample=self._publish, clock=clock)

    @property
    def reinits(self) -> int:
        return self.core.reinits

    @property
    def started_at(self) -> float | None:
        return self.core.started_at

    def _publish(self, snap: Any) -> None:
        driver = snap.driver_version
        self.snapshot = {  # one reference swap: scrapes see a whole sample or the previous one
            "t": snap.time, "status": snap.nvml_status, "count": snap.count,
            "driver_version": None if is_na(driver) else driver,
            "devices": [{"index": d.index, "static": d.static, "sample": d.sample} for d in snap.devices],
            "reinits": snap.reinits, "retry_in_s": snap.retry_in_s, "duration_s": snap.read_s}

    def sample_once(self) -> dict[str, Any]:
        self.core.read()
        assert self.snapshot is not None
        return self.snapshot

    def start(self) -> None:
        self.core.start()

    def wait_first(self, timeout: float) -> bool:
        return self.core.wait_first(timeout)

    def stop(self, join_s: float | None = None) -> bool:
        """Stop sampling; True once the thread has ended (False: still inside a backend call)."""
        return self.core.stop(join_s)


def stop_sampler_then_close(sampler: GpuSampler, gpu: Any, join_s: float | None = None) -> bool:
    """Stop the sampler, then close the backend only if the sampler thread has ended.

    A sampler stuck in a driver call (a GPU falling off the bus) must not see nvmlShutdown
    pulled from under it; the process is exiting anyway, and the driver cleans up after it.
    Returns whether the backend was closed.
    """
    if not sampler.stop(join_s):
        print("gpudoctor exporter: the sampler is still inside an NVML call; leaving NVML open",
              file=sys.stderr, flush=True)
        return False
    gpu.close()
    return True


REPORT_FILE_MAX_BYTES = 16 << 20  # a full report of 64 GPUs is well under 1 MiB
REPORT_FILE_MAX_DEPTH = 64
REPORT_FILE_MAX_RESULTS = 1000


def _report_duration(data: Any) -> float:
    """Sum of the results' durations, after checking the fields the collector reads.

    ValueError for anything that is not a gpudoctor report of the expected shape.
    """
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise ValueError("not a gpudoctor report")
    if len(results) > REPORT_FILE_MAX_RESULTS:
        raise ValueError(f"more than {REPORT_FILE_MAX_RESULTS} results")
    if not isinstance(data.get("status"), (str, type(None))):
        raise ValueError("status is not a string")
    total = 0.0
    for result in results:
        if not isinstance(result, dict) or not isinstance(result.get("probe"), str) \
                or len(result["probe"]) > 200 or not isinstance(result.get("status"), (str, type(None))):
            raise ValueError("a result is not a probe result")
        duration = result.get("duration_s")
        if isinstance(duration, (int, float)) and not isinstance(duration, bool) and duration == duration:
            total += float(duration)
    return total


class ReportStatus:
    """The last report: run periodically by ``produce`` or read from ``path`` when it changes."""

    def __init__(self, produce: Callable[[], Any] | None = None, path: str | None = None,
                 interval: float = DEFAULT_REPORT_INTERVAL_S) -> None:
        self.produce = produce
        self.path = path
        self.interval = interval
        self.report: dict[str, Any] | None = None
        self.up = 0
        self.finished_at: float | None = None
        self.duration_s: float | None = None
        self._mtime: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> None:
        if self.path is not None:
            self._read_file()
        elif self.produce is not None:
            start = time.monotonic()
            try:
                report = self.produce()
                self.report = report.to_dict() if hasattr(report, "to_dict") else dict(report)
                self.up = 1
            except Exception:
                self.up = 0
            self.duration_s = time.monotonic() - start
            self.finished_at = time.time()

    def _read_file(self) -> None:
        """Read the report file if it changed. A file that is missing, too big, nested too deep,
        not JSON or not a report sets ``up`` to 0; the next change is read again."""
        from gpudoctor.safejson import JsonFileError, read_json_file

        try:
            st = os.stat(self.path)  # type: ignore[arg-type]
        except (OSError, ValueError):
            self.up = 0
            return
        mtime = st.st_mtime
        if mtime == self._mtime and self.report is not None:
            return
        try:
            data = read_json_file(self.path, max_bytes=REPORT_FILE_MAX_BYTES,  # type: ignore[arg-type]
                                  max_depth=REPORT_FILE_MAX_DEPTH)
            duration = _report_duration(data)
        except (JsonFileError, ValueError):
            self.up = 0
            return
        self.report, self.up, self._mtime, self.finished_at = data, 1, mtime, mtime
        self.duration_s = duration

    def _loop(self) -> None:
        while True:
            try:
                self.refresh()
            except Exception as exc:  # never let one bad file or report end the thread for good
                self.up = 0
                print(f"gpudoctor exporter: report: {type(exc).__name__}: {str(exc)[:200]}",
                      file=sys.stderr, flush=True)
            wait = 5.0 if self.path is not None else self.interval
            if wait <= 0 or self._stop.wait(wait):
                return

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gpudoctor-report", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()


def quick_report_producer(replay: str | None, events: Any = None) -> Callable[[], Any]:
    """The quick report, run on demand; ``events``: the exporter's running event watcher, whose
    NVML stream the report's events probe reads."""
    def produce() -> Any:
        from gpudoctor.quick import quick_report  # the verdict report --quick and the TUI give

        return quick_report(replay=replay, events=events)

    return produce


# --------------------------------------------------------------------------- exposition
def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    return None  # NA, None, text: the series is left out (absent, as Prometheus expects)


class GpudoctorCollector:
    """A prometheus_client collector built from the latest sample and report."""

    def __init__(self, sampler: GpuSampler, reports: ReportStatus | None = None, source: str = "nvml",
                 events: Any = None) -> None:
        self.sampler = sampler
        self.reports = reports
        self.source = source
        self.events = events  # an EventWatcher / ReplayEvents (gpudoctor.backends.events), or None

    def describe(self) -> list[Any]:
        return []  # collected on demand; no fixed description

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import InfoMetricFamily

        from gpudoctor import _version

        info = InfoMetricFamily("gpudoctor_exporter", OTHER_METRICS["gpudoctor_exporter_info"])
        info.add_metric([], {"version": _version.__version__, "source": self.source})
        yield info
        snap = self.sampler.snapshot  # one read: the sampler thread swaps in whole samples
        yield from self._nvml_metrics(snap)
        if snap is not None:
            yield from self._sample_metrics(snap)
            yield from self._gpu_metrics(snap)
            if self.events is not None:
                yield from self._event_metrics(snap["devices"])
        yield from self._report_metrics()

    def _stale_after_s(self) -> float:
        return STALE_AFTER_INTERVALS * self.sampler.interval + 1.0

    def _nvml_metrics(self, snap: dict[str, Any] | None) -> Iterable[Any]:
        """gpudoctor_nvml_up and why it is 0: NVML down, or the sample stale (the sampler is
        inside a driver call that has not come back, the first one included)."""
        from prometheus_client.core import GaugeMetricFamily

        nvml_up = GaugeMetricFamily("gpudoctor_nvml_up", OTHER_METRICS["gpudoctor_nvml_up"])
        nvml_err = GaugeMetricFamily("gpudoctor_nvml_error_info", OTHER_METRICS["gpudoctor_nvml_error_info"],
                                     labels=["reason"])
        if snap is None:
            started = self.sampler.started_at
            waited = None if started is None else time.monotonic() - started
            nvml_up.add_metric([], 0.0)
            stale = waited is not None and waited > self._stale_after_s()
            nvml_err.add_metric(["SampleStale" if stale else "NotSampledYet"], 1.0)
            yield nvml_up
            yield nvml_err
            if waited is not None:
                yield GaugeMetricFamily("gpudoctor_sample_age_seconds", OTHER_METRICS["gpudoctor_sample_age_seconds"],
                                        value=max(0.0, waited))
            return
        stale = time.time() - snap["t"] > self._stale_after_s()
        status = snap["status"]
        nvml_up.add_metric([], 0.0 if (status is not None or stale) else 1.0)
        if status is not None:
            nvml_err.add_metric([status.reason if is_na(status) else str(status)], 1.0)
        elif stale:
            nvml_err.add_metric(["SampleStale"], 1.0)
        yield nvml_up
        yield nvml_err

    def _sample_metrics(self, snap: dict[str, Any]) -> Iterable[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        yield CounterMetricFamily("gpudoctor_nvml_reinit", OTHER_METRICS["gpudoctor_nvml_reinit_total"],
                                  value=float(snap.get("reinits") or 0))
        yield GaugeMetricFamily("gpudoctor_sample_timestamp_seconds",
                                OTHER_METRICS["gpudoctor_sample_timestamp_seconds"], value=snap["t"])
        yield GaugeMetricFamily("gpudoctor_sample_duration_seconds",
                                OTHER_METRICS["gpudoctor_sample_duration_seconds"], value=snap["duration_s"])
        yield GaugeMetricFamily("gpudoctor_sample_age_seconds", OTHER_METRICS["gpudoctor_sample_age_seconds"],
                                value=max(0.0, time.time() - snap["t"]))
        if snap.get("count") is not None:
            yield GaugeMetricFamily("gpudoctor_gpu_count", OTHER_METRICS["gpudoctor_gpu_count"],
                                    value=snap["count"])

    def _gpu_metrics(self, snap: dict[str, Any]) -> Iterable[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = list(GPU_LABELS)
        fam = {
            "info": GaugeMetricFamily("gpudoctor_gpu_info", OTHER_METRICS["gpudoctor_gpu_info"],
                                      labels=labels + ["driver_version"]),
            "up": GaugeMetricFamily("gpudoctor_gpu_up", OTHER_METRICS["gpudoctor_gpu_up"], labels=["gpu"]),
            "err": GaugeMetricFamily("gpudoctor_gpu_error_info", OTHER_METRICS["gpudoctor_gpu_error_info"],
                                     labels=["gpu", "reason"]),
            **{m.name: GaugeMetricFamily(m.name, m.help + (f" (DCGM: {m.dcgm})" if m.dcgm else ""), labels=labels)
               for m in gpu_metrics()},
            "throttled": GaugeMetricFamily("gpudoctor_gpu_throttled", OTHER_METRICS["gpudoctor_gpu_throttled"],
                                           labels=labels + ["reason"]),
            "verdict": GaugeMetricFamily("gpudoctor_gpu_work_verdict_info",
                                         OTHER_METRICS["gpudoctor_gpu_work_verdict_info"], labels=labels + ["verdict"]),
            **{name: CounterMetricFamily(name[:-len("_total")], readings[0].help,
                                         labels=labels + [label for label, _ in readings[0].labels])
               for name, readings in counter_metrics().items()},
        }
        for dev in snap["devices"]:
            _add_device(fam, dev, snap.get("driver_version"))
        yield from fam.values()

    def _event_metrics(self, devices: list[dict[str, Any]]) -> Iterable[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        names = OTHER_METRICS
        gpu_labels = list(GPU_LABELS)
        xids = CounterMetricFamily("gpudoctor_gpu_xid_errors", names["gpudoctor_gpu_xid_errors_total"], labels=gpu_labels)
        logged = GaugeMetricFamily("gpudoctor_gpu_kernel_log_xids", names["gpudoctor_gpu_kernel_log_xids"],
                                   labels=gpu_labels)
        last = GaugeMetricFamily("gpudoctor_gpu_last_xid", names["gpudoctor_gpu_last_xid"], labels=gpu_labels)
        last_t = GaugeMetricFamily("gpudoctor_gpu_last_xid_timestamp_seconds",
                                   names["gpudoctor_gpu_last_xid_timestamp_seconds"], labels=gpu_labels)
        kinds = CounterMetricFamily("gpudoctor_gpu_events", names["gpudoctor_gpu_events_total"],
                                    labels=gpu_labels + ["kind"])
        supported = GaugeMetricFamily("gpudoctor_gpu_events_supported", names["gpudoctor_gpu_events_supported"],
                                      labels=gpu_labels)
        unsupported = GaugeMetricFamily("gpudoctor_gpu_events_error_info", names["gpudoctor_gpu_events_error_info"],
                                        labels=gpu_labels + ["reason"])
        for dev in devices:
            static = dev["static"]
            labels = [str(dev["index"])] + [_label(static.get(k)) for k in ("uuid", "name", "pci_bus_id")]
            state = self.events.snapshot(dev["index"])
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
        readable = getattr(self.events, "kernel_log_readable", None)
        if readable is not None:
            yield GaugeMetricFamily("gpudoctor_kernel_log_readable", names["gpudoctor_kernel_log_readable"],
                                    value=1.0 if readable else 0.0)
            if not readable:
                reason = GaugeMetricFamily("gpudoctor_kernel_log_error_info", names["gpudoctor_kernel_log_error_info"],
                                           labels=["reason"])
                reason.add_metric([_label(self.events.kernel_log_reason)[:200]], 1.0)
                yield reason

    def _critical_event_seen(self) -> bool:
        if self.events is None:
            return False
        from gpudoctor.backends.events import critical_events

        count = getattr(self.events, "count", None)
        indices = range(count) if isinstance(count, int) else ()
        try:
            return any(critical_events(self.events.snapshot(index)) for index in indices)
        except Exception:  # a watcher that cannot answer costs this fold, not the scrape
            return False

    def _report_metrics(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        if self.reports is None:
            return
        yield GaugeMetricFamily("gpudoctor_report_up", OTHER_METRICS["gpudoctor_report_up"],
                                value=float(self.reports.up))
        report = self.reports.report
        if report is None:
            return
        # A critical event seen since the last report (Xid 79 mid-job) fails the status now, not at
        # the next report: the same judgement as the report's events probe.
        critical = self._critical_event_seen()
        overall = GaugeMetricFamily("gpudoctor_report_status", OTHER_METRICS["gpudoctor_report_status"],
                                    labels=["status"])
        status_now = "fail" if critical else report.get("status")
        for status in STATUSES:
            overall.add_metric([status], 1.0 if status_now == status else 0.0)
        yield overall
        probes = GaugeMetricFamily("gpudoctor_probe_status", OTHER_METRICS["gpudoctor_probe_status"],
                                   labels=["probe", "status"])
        for result in report.get("results", []):
            probe_now = "fail" if critical and result.get("probe") == "events" else result.get("status")
            for status in STATUSES:
                probes.add_metric([str(result.get("probe")), status], 1.0 if probe_now == status else 0.0)
        yield probes
        if self.reports.finished_at is not None:
            yield GaugeMetricFamily("gpudoctor_report_timestamp_seconds",
                                    OTHER_METRICS["gpudoctor_report_timestamp_seconds"],
                                    value=self.reports.finished_at)
        if self.reports.duration_s is not None:
            yield GaugeMetricFamily("gpudoctor_report_duration_seconds",
                                    OTHER_METRICS["gpudoctor_report_duration_seconds"],
                                    value=self.reports.duration_s)


def _add_device(fam: dict[str, Any], dev: dict[str, Any], driver_version: Any) -> None:
    """One GPU's series into the families of :meth:`GpudoctorCollector._gpu_metrics`."""
    from gpudoctor.backends.nvml import HARMFUL_THROTTLE_MASK, THROTTLE_REASONS

    static, sample = dev["static"], dev["sample"]
    labels = [str(dev["index"])] + [_label(static.get(k)) for k in ("uuid", "name", "pci_bus_id")]
    fam["info"].add_metric(labels + [_label(driver_version)], 1.0)
    if any(k != "t" for k, v in sample.items() if not is_na(v)):
        fam["up"].add_metric([labels[0]], 1.0)
    else:
        fam["up"].add_metric([labels[0]], 0.0)
        reasons = [v.reason for v in sample.values() if is_na(v)]
        fam["err"].add_metric([labels[0], reasons[0] if reasons else "NoReading"], 1.0)
    for metric in gpu_metrics():
        value = _number(sample.get(metric.key))
        if value is not None:
            fam[metric.name].add_metric(labels, value * metric.scale)
    if fam["up"].samples[-1].value == 1.0:  # the one busy verdict, on the readings a GPU that answers gave
        from gpudoctor.backends.busy import READS, verdict

        fam["verdict"].add_metric(labels + [verdict({k: sample.get(k, static.get(k)) for k in READS}).code], 1.0)
    mask = sample.get("throttle_reasons")
    if isinstance(mask, int) and not isinstance(mask, bool):
        for bit, (name, _words) in sorted(THROTTLE_REASONS.items()):
            fam["throttled"].add_metric(labels + [name], 1.0 if mask & bit else 0.0)
        fam["throttled"].add_metric(labels + ["any_harmful"], 1.0 if mask & HARMFUL_THROTTLE_MASK else 0.0)
    for name, readings in counter_metrics().items():
        for reading in readings:
            value = _number(sample.get(reading.key))
            if value is not None:  # divided by the reciprocal: mJ -> J is the exact / 1000
                fam[name].add_metric(labels + [v for _, v in reading.labels], value / (1.0 / reading.scale))


def _label(value: Any) -> str:
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


# --------------------------------------------------------------------------- HTTP server
DEFAULT_MAX_CONNECTIONS = 128    # open connections served at once; more are answered 503 and closed
DEFAULT_REQUEST_TIMEOUT_S = 10.0  # a connection's whole life (Prometheus' default scrape timeout)
_FD_SHORTAGE = {getattr(errno, name) for name in ("EMFILE", "ENFILE", "ENOBUFS", "ENOMEM") if hasattr(errno, name)}
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class _OneLineErrors:
    """Where wsgiref writes a failed request's traceback: only its last line reaches stderr."""

    def __init__(self) -> None:
        self._parts: list[str] = []

    def write(self, text: str) -> int:
        if sum(map(len, self._parts)) < 65536:
            self._parts.append(text)
        return len(text)

    def flush(self) -> None:
        lines = [line for line in "".join(self._parts).splitlines() if line.strip()]
        self._parts.clear()
        if lines:
            print(f"gpudoctor exporter: request failed: {lines[-1].strip()[:200]}", file=sys.stderr, flush=True)


class _LimitedServer:
    """A thread per connection, at most ``max_connections`` at once, each for at most
    ``request_timeout_s``: idle or half-sent requests (slowloris) cannot hold threads and
    file descriptors until scrapes fail. Connections over the cap are answered 503 and
    closed at once; running out of file descriptors costs one pause, never a traceback."""

    handler_class: Any = None  # set by _metrics_server_class (wsgiref is imported there)
    # The kernel's queue of connections not yet accepted (socketserver's default is 5): with a short
    # one, a burst of scrapes (many Prometheus replicas, a dashboard reload) lost its SYNs and timed
    # out instead of being served or answered 503. Linux caps it at net.core.somaxconn.
    request_queue_size = 1024

    def __init__(self, address: tuple[Any, ...], family: int, *, max_connections: int,
                 request_timeout_s: float) -> None:
        self.address_family = family
        self.max_connections = max_connections
        self.request_timeout_s = request_timeout_s
        self.refused = 0          # connections closed because the cap was reached
        self.timed_out = 0        # connections ended by request_timeout_s
        self.fd_shortages = 0     # accept() failures for want of file descriptors
        self.peak_connections = 0  # most connections served at once
        self._active: dict[Any, float] = {}
        self._lock = threading.Lock()
        super().__init__(address, self.handler_class)  # type: ignore[call-arg]

    def get_request(self) -> Any:
        try:
            return super().get_request()  # type: ignore[misc]
        except OSError as exc:
            if exc.errno in _FD_SHORTAGE:
                # The listening socket stays readable: pause instead of spinning, and let
                # the connections being served finish and give their descriptors back.
                self.fd_shortages += 1
                time.sleep(0.05)
            raise  # socketserver drops a failed accept() quietly

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            full = len(self._active) >= self.max_connections
            if not full:
                self._active[request] = time.monotonic()
                self.peak_connections = max(self.peak_connections, len(self._active))
        if full:
            self.refused += 1
            self._refuse(request)
            return
        try:
            threading.Thread(target=self._serve, args=(request, client_address),
                             name="gpudoctor-http", daemon=True).start()
        except RuntimeError:  # no thread could be started: this connection only
            self._forget(request)
            self._refuse(request)

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self._forget(request)
            self.shutdown_request(request)

    def _forget(self, request: Any) -> None:
        with self._lock:
            self._active.pop(request, None)

    def _refuse(self, request: Any) -> None:
        try:
            request.setblocking(False)
            request.send(_BUSY)
        except OSError:
            pass
        self.shutdown_request(request)

    def service_actions(self) -> None:
        """Between polls of serve_forever: cut connections older than the timeout. Their
        threads see end-of-file, finish and close; shutdown() frees no descriptor under them."""
        limit = time.monotonic() - self.request_timeout_s
        with self._lock:
            old = [r for r, started in self._active.items() if started < limit]
        for request in old:
            with self._lock:
                self.timed_out += 1
            try:
                request.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, TimeoutError):  # one read or write took the whole timeout
            with self._lock:
                self.timed_out += 1
            return
        if isinstance(exc, OSError):  # resets, broken pipes: the client's side
            return
        print(f"gpudoctor exporter: request failed: {type(exc).__name__}: {str(exc)[:200]}",
              file=sys.stderr, flush=True)


def _metrics_server_class() -> Any:
    """The server class, built on first use (wsgiref is only imported by the exporter command)."""
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

    class Handler(WSGIRequestHandler):
        """One connection: a socket timeout on every read and write, no access log."""

        def setup(self) -> None:
            self.timeout = self.server.request_timeout_s  # StreamRequestHandler.setup applies it
            super().setup()

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def get_stderr(self) -> Any:
            return _OneLineErrors()

    class MetricsServer(_LimitedServer, WSGIServer):
        handler_class = Handler

    return MetricsServer


def serve_metrics(registry: Any, host: str, port: int, *, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                  request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
                  poll_interval_s: float | None = None) -> tuple[Any, threading.Thread]:
    """Serve ``registry`` at http://host:port/metrics from a background thread.

    Returns (server, thread); ``server.server_address`` has the port chosen for port 0.
    ``server.shutdown()`` then ``server.server_close()`` stop it. OSError if it cannot listen.
    """
    from prometheus_client import make_wsgi_app
    # Imported now, not inside the first scrape: an import needs a file descriptor, and one
    # that fails for want of one (EMFILE) leaves the module half-initialised for good.
    import prometheus_client.core  # noqa: F401  (the collector's metric families)

    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _type, _proto, _name, address = infos[0]
    server = _metrics_server_class()(address, family, max_connections=max_connections,
                                     request_timeout_s=request_timeout_s)
    server.set_app(make_wsgi_app(registry))
    poll = poll_interval_s if poll_interval_s is not None else min(0.5, request_timeout_s / 4)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": poll},
                              name="gpudoctor-http-server", daemon=True)
    thread.start()
    return server, thread


__all__ = ["GpuSampler", "ReportStatus", "serve_metrics", "stop_sampler_then_close", "recoverable_trouble", "GpudoctorCollector", "build_registry", "GPU_METRICS",
           "ECC_COUNTERS", "OTHER_METRICS", "all_metric_names", "gpu_metrics", "counter_metrics"]
