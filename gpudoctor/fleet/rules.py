"""fleet's rules: the series it reads, and each row's findings from them.

The judgements are gpudoctor.core.findings' (the health probe's, over the same readings built from
Prometheus series) and their words are that table's; what is fleet's own here is where each
reading comes from: gpudoctor's exporter (``gpudoctor_gpu_*``) or dcgm-exporter (``DCGM_*``).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from gpudoctor.core import findings, xid
from gpudoctor.backends import busy, catalogue
from gpudoctor.backends.nvml import THROTTLE_REASONS
from gpudoctor.core.model import Finding, Status
from gpudoctor.sampling.presentation import fmt_age

from .rows import FleetRow, Key, Series, key_of

# The series read, by source. Each query is one HTTP request; the selector is the user's --match.
# The readings a row shows are the catalogue's fleet readings (gpudoctor.backends.catalogue): their
# gauges, and the DCGM fields of those fleet reads from dcgm-exporter too. The lists are made from
# the catalogue when asked for (once per catalogue), so a reading added there is read here.
@catalogue.per_catalogue
def gpudoctor_metrics() -> tuple[str, ...]:
    """Every gpudoctor exporter series fleet reads."""
    return (
        "gpudoctor_gpu_info", "gpudoctor_gpu_up", "gpudoctor_gpu_error_info",
        *(r.prometheus for r in catalogue.fleet_readings()), "gpudoctor_gpu_throttled",
        "gpudoctor_gpu_ecc_errors_total", "gpudoctor_gpu_remapped_rows_failure", "gpudoctor_gpu_remapped_rows_pending",
        "gpudoctor_gpu_retired_pages_pending", "gpudoctor_gpu_xid_errors_total", "gpudoctor_gpu_kernel_log_xids",
        "gpudoctor_gpu_last_xid",
        "gpudoctor_gpu_last_xid_timestamp_seconds", "gpudoctor_nvml_up", "gpudoctor_nvml_error_info",
        "gpudoctor_sample_age_seconds", "gpudoctor_report_status", "gpudoctor_report_timestamp_seconds",
        "gpudoctor_gpu_holder_info",
    )


def dcgm_names(key: str) -> tuple[str, ...]:
    """Every DCGM name of the reading ``key`` (dcgm-exporter 4.8 and earlier, then 4.9 and later):
    counts and flags, whose unit is a count under either name."""
    return tuple(f.name for f in catalogue.dcgm_fields() if f.key == key)


# dcgm-exporter's last Xid gauge, before and after dcgm-exporter 4.9.0 (DCGM 4.7's name); the
# value (the last Xid's code) is the same under both.
DCGM_XID = ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR")


@catalogue.per_catalogue
def dcgm_gpu_names() -> tuple[str, ...]:
    """The names that make a DCGM GPU a row: every name of the readings fleet shows, temperature first."""
    return tuple(dict.fromkeys(f.name for key in ("temperature_c", *(r.key for r in catalogue.fleet_readings()))
                               for f in catalogue.dcgm_read(key)))


@catalogue.per_catalogue
def dcgm_metrics() -> tuple[str, ...]:
    """Every dcgm-exporter series fleet reads."""
    return (
        *dict.fromkeys(dcgm_gpu_names()), *(f.name for f in catalogue.dcgm_read("memory_free_bytes")),
        *(f.name for f in catalogue.dcgm_read("memory_reserved_bytes")),
        *DCGM_XID, "DCGM_EXP_XID_ERRORS_COUNT", *dcgm_names("ecc_volatile_uncorrected"),
        *dcgm_names("remapped_rows_failure"), *dcgm_names("remapped_rows_pending"), *dcgm_names("throttle_reasons"),
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_EXP_CLOCK_EVENTS_COUNT",
    )


# dcgm-exporter's labels that say who holds a GPU: the Kubernetes pod (from the kubelet's
# pod-resources socket) and the HPC job (from its --hpc-job-mapping-dir files).
DCGM_HOLDER_LABELS = ("namespace", "pod", "container", "hpc_job")
# gpudoctor's exporter: one series per GPU and holder of the processes on it (from their cgroups).
GPUDOCTOR_HOLDER = "gpudoctor_gpu_holder_info"

# What is kept of a GPU or node that Prometheus no longer gets (a stopped target, a GPU gone from a
# live exporter): the last value of each of these in the look-back window. Not the moment's state
# (throttling, clock events in the last minutes, NVML up, sample age), which says nothing once the
# node is silent.
_NOT_KEPT = ("gpudoctor_gpu_info", "gpudoctor_gpu_throttled", "gpudoctor_nvml_up", "gpudoctor_nvml_error_info",
             "gpudoctor_sample_age_seconds", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
             "DCGM_EXP_CLOCK_EVENTS_COUNT")


def last_known_metrics() -> tuple[str, ...]:
    return tuple(name for name in gpudoctor_metrics() + dcgm_metrics() if name not in _NOT_KEPT)


# dcgm-exporter's ``clock_event`` label (its clock-events collector) by NVML's reason code.
DCGM_CLOCK_EVENTS = {"gpu_idle": "gpu_idle", "clocks_setting": "applications_clocks", "power_cap": "sw_power_cap",
                     "sw_power_cap": "sw_power_cap", "hw_slowdown": "hw_slowdown", "sync_boost": "sync_boost",
                     "sw_thermal": "sw_thermal_slowdown", "hw_thermal": "hw_thermal_slowdown",
                     "hw_power_brake": "hw_power_brake", "display_clocks": "display_clock"}

Rows = dict[Key, FleetRow]
ByMetric = dict[str, list[Series]]


def values(by_metric: ByMetric, name: str) -> dict[Key, list[Series]]:
    out: dict[Key, list[Series]] = {}
    for s in by_metric.get(name, []):
        out.setdefault(key_of(s.labels), []).append(s)
    return out


def one(by_metric: ByMetric, name: str) -> dict[Key, float]:
    return {key: series[0].value for key, series in values(by_metric, name).items()}


def per_instance(by_metric: ByMetric, name: str) -> dict[str, list[Series]]:
    out: dict[str, list[Series]] = {}
    for s in by_metric.get(name, []):
        out.setdefault(s.labels.get("instance", ""), []).append(s)
    return out


def _window(series: Iterable[Series]) -> str:
    """" in the last 5 min" from dcgm-exporter's ``window_size_in_ms`` label, or ""."""
    window = ""
    for s in series:
        ms = s.labels.get("window_size_in_ms", "")
        if ms.isascii() and ms.isdigit() and 0 < len(ms) <= 10:
            window = findings.fleet_phrase("in_the_last", age=fmt_age(int(ms) / 1000))
    return window


# --------------------------------------------------------------------------- gpudoctor's exporter
def judge_gpudoctor(rows: Rows, m: ByMetric, now: float, stale_after_s: float, report_max_age_s: float) -> None:
    simple = {r.fleet: one(m, r.prometheus) for r in catalogue.fleet_readings()}
    for attr, found in simple.items():
        for key, value in found.items():
            if key in rows:
                setattr(rows[key], attr, value)
    errors = {key: [s.labels.get("reason", "") for s in series]
              for key, series in values(m, "gpudoctor_gpu_error_info").items()}
    for key, value in one(m, "gpudoctor_gpu_up").items():
        if key in rows and value == 0:
            reasons = [r for r in errors.get(key, []) if r]
            # a GPU lost to the bus is the health probe's gpu_lost, in its words
            rows[key].add(findings.finding("gpu_lost") if "GpuIsLost" in reasons else
                          findings.finding("gpu_not_answering",
                                           reason=", ".join(reasons) or findings.fleet_phrase("no_reading")))
    uncorrected = {key: sum(s.value for s in series if s.labels.get("error_type") == "uncorrected"
                            and s.labels.get("counter") == "volatile")
                   for key, series in values(m, "gpudoctor_gpu_ecc_errors_total").items()}
    judge_memory(rows, uncorrected, one(m, "gpudoctor_gpu_remapped_rows_failure"),
                 one(m, "gpudoctor_gpu_remapped_rows_pending"), one(m, "gpudoctor_gpu_retired_pages_pending"))
    for key, series in values(m, "gpudoctor_gpu_throttled").items():
        if key in rows:
            judge_clocks(rows[key], [s.labels["reason"] for s in series if s.value >= 1])
    judge_xids(rows, m, now)
    judge_instances(rows, m, now, stale_after_s, report_max_age_s)


def judge_xids(rows: Rows, m: ByMetric, now: float) -> None:
    """The last Xid of each GPU, with its count (seen while watching + logged before it began)."""
    counts = one(m, "gpudoctor_gpu_xid_errors_total")
    for key, logged in one(m, "gpudoctor_gpu_kernel_log_xids").items():
        counts[key] = counts.get(key, 0.0) + logged
    times = {k: v for k, v in one(m, "gpudoctor_gpu_last_xid_timestamp_seconds").items() if v > 0}
    for key, value in one(m, "gpudoctor_gpu_last_xid").items():
        if key in rows:
            add_xid(rows[key], int(value), counts.get(key), times.get(key), now)
    for key, value in counts.items():
        if key in rows:
            rows[key].xid_count = int(value)


def judge_memory(rows: Rows, uncorrected: dict[Key, float], remap_failed: dict[Key, float],
                 remap_pending: dict[Key, float], pages_pending: dict[Key, float] | None = None) -> None:
    """Device memory faults, the same facts whichever exporter sent them, judged as the health probe does."""
    for key, row in rows.items():
        row.add(findings.ecc_finding(max(0.0, uncorrected.get(key, 0.0))))
        for found in findings.row_remap_findings(remap_failed.get(key, 0.0) >= 1, remap_pending.get(key, 0.0) >= 1):
            row.add(found)
        for found in findings.retired_pages_findings((pages_pending or {}).get(key, 0.0) >= 1):
            row.add(found)


def judge_clocks(row: FleetRow, reasons: Iterable[str]) -> None:
    """Clocks held down by heat or by the hardware: a warning, naming the power cap too when it is
    also active. The power cap alone is the normal state of a fully loaded board (as the health
    probe judges it), so it is no warning by itself."""
    row.add(findings.clocks_held_down(reasons))


def judge_instances(rows: Rows, m: ByMetric, now: float, stale_after_s: float, report_max_age_s: float) -> None:
    by_instance: dict[str, list[FleetRow]] = {}
    for row in rows.values():
        by_instance.setdefault(row.instance, []).append(row)
    nvml_errors = {i: [s.labels.get("reason", "") for s in ss]
                   for i, ss in per_instance(m, "gpudoctor_nvml_error_info").items()}
    for instance, series in per_instance(m, "gpudoctor_nvml_up").items():
        if series[0].value >= 1:
            continue
        reasons = [r for r in nvml_errors.get(instance, []) if r]
        for row in by_instance.get(instance, []):
            row.add(findings.finding("sampler_stuck") if "SampleStale" in reasons else
                    findings.finding("nvml_down", reasons=", ".join(reasons) or findings.fleet_phrase("no_reason")))
    for instance, series in per_instance(m, "gpudoctor_sample_age_seconds").items():
        if series[0].value > stale_after_s:
            for row in by_instance.get(instance, []):
                row.add(findings.finding("readings_old", age=fmt_age(series[0].value)))
    stamps = {i: ss[0].value for i, ss in per_instance(m, "gpudoctor_report_timestamp_seconds").items()}
    for instance, series in per_instance(m, "gpudoctor_report_status").items():
        current = next((s.labels.get("status") for s in series if s.value >= 1), None)
        age = now - stamps[instance] if instance in stamps else None
        for row in by_instance.get(instance, []):
            row.report_status, row.report_age_s = current, age
            if current == "fail":
                row.add(findings.finding("report_failed"))
            elif current in ("warn", "error"):
                row.add(findings.finding("report_warned", verdict=current))
            if age is not None and age > report_max_age_s:
                row.add(findings.finding("report_old", age=fmt_age(age)))


# --------------------------------------------------------------------------- Xid
def _xid_finding(code: int, when: str) -> Finding:
    entry = xid.explain(code)
    return findings.finding("xid", status=Status.FAIL if entry.severity == "critical" else Status.WARN,
                            xid=code, when=when, words=entry.words, action=entry.action, evidence={"xid": code})


def add_xid(row: FleetRow, code: int, count: float | None, when: float | None, now: float) -> None:
    if code <= 0:
        return
    row.xid_last = code
    row.xid_last_time = when
    row.xid_last_words = xid.explain(code).words
    row.add(_xid_finding(code, findings.fleet_phrase("xid_ago", age=fmt_age(now - when)) if when else ""))
    if count is not None:
        row.xid_count = int(count)


def judge_xid_window(row: FleetRow, series: list[Series]) -> None:
    """Every Xid code counted in dcgm-exporter's window, each judged; the worst is the row's last Xid."""
    counts: dict[int, int] = {}
    for s in series:
        code = s.labels.get("xid", "")
        if not (code.isascii() and code.isdigit() and 0 < len(code) <= 4) or not s.value > 0:
            continue
        counts[int(code)] = counts.get(int(code), 0) + int(min(s.value, 1e9))
    if not counts:
        return
    window = _window(s for s in series if s.value > 0)
    ranked = sorted(counts, key=lambda c: (xid.explain(c).severity == "critical", c))
    for number in ranked:
        row.add(_xid_finding(number, findings.fleet_phrase("xid_count", count=counts[number], window=window)))
    row.xid_last, row.xid_last_words = ranked[-1], xid.explain(ranked[-1]).words
    row.xid_count = sum(counts.values())


#: A last-Xid gauge's samples over the look-back window, ``[(time, value)]`` oldest first.
XidHistory = list[tuple[float, float]]
# A gauge whose first sample in the window came this close to the window's start was there all along.
_WINDOW_START_SLACK = 0.1


def judge_xid_gauge(row: FleetRow, code: int, history: XidHistory | None,
                    window: tuple[float, str] | None = None) -> None:
    """dcgm-exporter's last-Xid gauge (DCGM_FI_DEV_XID_ERRORS), judged as a sequence where its history
    in the look-back window was read: a critical Xid that a harmless one (45) followed is not hidden
    by it; a value unchanged since before the window is said to be possibly stale (the gauge keeps the
    last Xid until the exporter restarts); a 45 alone says that what it followed is unknown."""
    if code <= 0:
        return
    steps = xid.gauge_steps(history or [])
    codes = [c for _t, c in steps]
    if not codes or codes[-1] != code:
        codes.append(code)  # the instant query may be newer than the history's last sample
    sequence = xid.judge_sequence(codes)
    entry = xid.explain(code)
    words = findings.fleet_phrase("xid_last", window=window[1]) if window else ""
    if window and history and len(steps) == 1 and steps[0][1] == code and len(sequence.codes) == 1 \
            and steps[0][0] <= window[0] + _WINDOW_START_SLACK * (history[-1][0] - window[0]):
        variant = "xid_gauge_stale:critical" if entry.severity == "critical" else "xid_gauge_stale"
        row.add(findings.finding(variant, xid=code, words=entry.words, action=entry.action, window=words,
                                 evidence={"xid": code}))
        row.xid_last, row.xid_last_words = code, entry.words
        return
    if sequence.follow_up_alone:
        row.add(findings.finding("xid_follow_up_alone", xid=code, when="", words=entry.words, evidence={"xid": code}))
        row.xid_last, row.xid_last_words = code, entry.words
        return
    add_xid(row, code, None, None, 0.0)
    for hidden in sequence.hidden:
        earlier = xid.explain(hidden)
        action = findings.sentence(earlier.action) + "."
        row.add(findings.finding("xid_hidden", xid=hidden, last=code, words=earlier.words, action=action,
                                 window=findings.fleet_phrase("xid_within", window=words) if words else "",
                                 evidence={"xid": hidden}))
    if sequence.worst is not None:
        row.xid_last, row.xid_last_words = sequence.worst, xid.explain(sequence.worst).words


# --------------------------------------------------------------------------- dcgm-exporter
def scaled(m: ByMetric, key: str) -> dict[Key, float]:
    """The reading ``key`` of each GPU from whichever DCGM name a node exports (old or new), in
    gpudoctor's unit (the catalogue's DCGM units: dcgm-exporter 4.9 changed some). Where a GPU has a
    value under both (the last known values of a node upgraded within the look-back window), the
    newer release's name wins: it is the node's latest word."""
    out: dict[Key, float] = {}
    for field in reversed(catalogue.dcgm_read(key)):
        for gpu_key, value in one(m, field.name).items():
            out.setdefault(gpu_key, value * (field.scale or 1.0))
    return out


def either(m: ByMetric, names: Iterable[str]) -> dict[Key, float]:
    """A count or flag of each GPU under whichever of ``names`` (old, then new) a node exports; the
    newer name's where both have one (as :func:`scaled`)."""
    out: dict[Key, float] = {}
    for name in reversed(tuple(names)):
        for key, value in one(m, name).items():
            out.setdefault(key, value)
    return out


def holder_text(labels: dict[str, str]) -> str:
    """Who holds a GPU, from one series' labels (dcgm-exporter's or gpudoctor's exporter's): "" none."""
    if labels.get("pod"):
        where = f"{labels['namespace']}/" if labels.get("namespace") else ""
        container = f" (container {labels['container']})" if labels.get("container") else ""
        return f"pod {where}{labels['pod']}{container}"
    if labels.get("hpc_job"):
        return f"HPC job {labels['hpc_job']}"
    if labels.get("slurm_job"):
        return f"Slurm job {labels['slurm_job']}"
    if labels.get("pod_uid"):
        container = f" (container {labels['container_id'][:12]})" if labels.get("container_id") else ""
        return f"Kubernetes pod {labels['pod_uid']}{container}"
    return ""


def read_labels(rows: Rows, m: ByMetric) -> None:
    """Each row's host name, driver version (dcgm-exporter's labels, either spelling: catalogue.DCGM_LABELS)
    and holders (dcgm-exporter's pod and HPC job labels, gpudoctor's holder series), at most four shown."""
    holders: dict[Key, list[str]] = {}
    for name in (*dcgm_gpu_names(), GPUDOCTOR_HOLDER):
        for s in m.get(name, []):
            row = rows.get(key_of(s.labels))
            if row is None:
                continue
            for old, new, _since in catalogue.DCGM_LABELS:
                value = s.labels.get(new) or s.labels.get(old) or ""
                if new == "hostname" and value and not row.hostname:
                    row.hostname = value
                elif new != "hostname" and value and not row.driver_version:
                    row.driver_version = value
            text = holder_text(s.labels)
            if text and text not in holders.setdefault(row_key(row), []):
                holders[row_key(row)].append(text)
    for key, found in holders.items():
        rows[key].holder = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")


def row_key(row: FleetRow) -> Key:
    return row.instance, row.gpu


def judge_dcgm(rows: Rows, m: ByMetric, xid_history: dict[Key, XidHistory] | None = None,
               window: tuple[float, str] | None = None) -> None:
    """dcgm-exporter's series, under either name of each field (4.8 and 4.9). ``xid_history``: each
    GPU's last-Xid gauge over the look-back window (``window``: its start time and its words, "1h"),
    read only where the gauge shows an Xid."""
    read_labels(rows, m)
    for r in catalogue.fleet_readings():
        for key, value in scaled(m, r.key).items():
            if key in rows and getattr(rows[key], r.fleet) is None:
                setattr(rows[key], r.fleet, value)
    # Without a total (dcgm-exporter 4.8 and earlier do not export FB_TOTAL by default; 4.9 exports
    # FB_CAPACITY_BYTES) it is used + free + reserved, as NVML's v2 memory info and DCGM count it:
    # the reserved memory is in neither, so a node on either release shows the same total.
    free, reserved = scaled(m, "memory_free_bytes"), scaled(m, "memory_reserved_bytes")
    for key, row in rows.items():
        if key in free and row.memory_used_bytes is not None and row.memory_total_bytes is None:
            row.memory_total_bytes = row.memory_used_bytes + free[key] + reserved.get(key, 0.0)
    # dcgm-exporter's windowed count (--xid-count-window-size): one series per GPU and Xid code seen
    # in the window. Where a node exports it, it is judged instead of the last-Xid gauge, which
    # keeps its last value for ever and shows only the newest code (a critical Xid followed by a
    # harmless one disappeared behind it).
    windowed = values(m, "DCGM_EXP_XID_ERRORS_COUNT")
    for key, series in windowed.items():
        if key in rows:
            judge_xid_window(rows[key], series)
    counted = {instance for instance, _gpu in windowed}
    for key, value in either(m, DCGM_XID).items():
        if key in rows and rows[key].xid_last is None and key[0] not in counted:
            judge_xid_gauge(rows[key], int(value), (xid_history or {}).get(key), window)
    judge_memory(rows, either(m, dcgm_names("ecc_volatile_uncorrected")), either(m, dcgm_names("remapped_rows_failure")),
                 either(m, dcgm_names("remapped_rows_pending")))
    judge_dcgm_clocks(rows, m)


def judge_dcgm_clocks(rows: Rows, m: ByMetric) -> None:
    """dcgm-exporter's clock events. Its windowed count (DCGM_EXP_CLOCK_EVENTS_COUNT, enabled in its
    collectors file; --clock-events-count-window-size): one series per GPU and reason seen in the
    window, label ``clock_event``. Where a node exports it, it is judged instead of the reasons
    bit mask, which is the state at the instant of the scrape only (a slowdown between two scrapes
    was never seen)."""
    windowed = values(m, "DCGM_EXP_CLOCK_EVENTS_COUNT")
    for key, series in windowed.items():
        if key not in rows or rows[key].source != "dcgm-exporter":
            continue
        counts: dict[str, int] = {}
        for s in series:
            code = DCGM_CLOCK_EVENTS.get(s.labels.get("clock_event", ""))
            if code is not None and s.value > 0:
                counts[code] = counts.get(code, 0) + int(min(s.value, 1e9))
        rows[key].add(findings.clocks_held_down(counts, counts, _window(s for s in series if s.value > 0)))
    counted = {instance for instance, _gpu in windowed}
    masks = either(m, dcgm_names("throttle_reasons"))
    masks.update(one(m, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"))
    for key, value in masks.items():
        if key in rows and rows[key].source == "dcgm-exporter" and key[0] not in counted:
            judge_clocks(rows[key], [code for bit, (code, _words) in THROTTLE_REASONS.items() if int(value) & bit])


# --------------------------------------------------------------------------- every source
def busy_verdict(row: FleetRow) -> Finding | None:
    """The verdict of gpudoctor.backends.busy over a row's ratios (None without SM activity:
    fleet does not repeat "cannot tell" on every pre-Hopper row)."""
    if row.sm_active is None or row.utilization is None:
        return None
    pct = {"gpu_util_pct": row.utilization * 100, "sm_active_pct": row.sm_active * 100}
    if row.tensor_active is not None:
        pct["tensor_active_pct"] = row.tensor_active * 100
    return busy.verdict(pct)


def judge_busy(rows: Rows) -> None:
    """Busy but not working (utilisation high, SM activity low): a warning, in the verdict's words."""
    for row in rows.values():
        verdict = busy_verdict(row)
        if verdict is not None and verdict.code == "busy_small_kernels":
            row.add(findings.finding("busy_small_kernels", words=busy.text(verdict)))


def not_working_first(row: FleetRow) -> tuple[int, float]:
    """Within a status, "busy but not working" GPUs first, the least SM activity first."""
    verdict = busy_verdict(row)
    if verdict is not None and verdict.code == "busy_small_kernels" and row.sm_active is not None:
        return (0, row.sm_active)
    return (1, 0.0)


def judge_targets(rows: Rows, targets: dict[str, int], sampled_at: dict[str, float], now: float) -> None:
    for row in rows.values():
        if targets.get(row.instance, 1) == 0:
            since = sampled_at.get(row.instance)
            row.add(findings.finding("target_down",
                                     since=findings.fleet_phrase("last_reading", age=fmt_age(now - since)) if since else ""))
    covered = {row.instance for row in rows.values()}
    for instance, value in targets.items():
        if value == 0 and instance not in covered:
            row = rows[(instance, "")] = FleetRow(instance=instance, gpu="", source="")
            row.add(findings.finding("target_down_unseen"))


def mark_last_known(rows: Rows, gone: dict[Key, float | None]) -> None:
    """Say of each finding of a GPU no longer exported that it is the last known state, with its age.
    A critical last-known Xid keeps the row failing: the node has probably died of it."""
    for key, age in gone.items():
        row = rows[key]
        row.last_known, row.last_known_age_s = True, age
        words = findings.fleet_phrase("last_known") + (
            findings.fleet_phrase("ago", age=fmt_age(age)) if age is not None else "")
        row.findings = [f if f.code == "gpu_not_exported" else dataclasses.replace(f, summary=f"{words}: {f.summary}")
                        for f in row.findings]
