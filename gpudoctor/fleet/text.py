"""fleet's output: the table in words, and the exit codes."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpudoctor.sampling.presentation import fmt_age

from .rows import STATUS_ORDER, FleetError, FleetRow, FleetView

if TYPE_CHECKING:
    from gpudoctor.backends.catalogue import Reading


def exit_code(view: FleetView, fail_on: str = "warn") -> int:
    from gpudoctor.core import exitcodes

    counts = view.counts()
    if counts["fail"]:
        return exitcodes.FAIL
    if counts["stale"]:
        return exitcodes.PROBE_ERROR
    if counts["warn"] and fail_on == "warn":
        return exitcodes.WARN
    return exitcodes.OK


def error_exit_code(error: FleetError) -> int:
    from gpudoctor.core import exitcodes

    return {"usage": exitcodes.USAGE, "query": exitcodes.USAGE, "empty": exitcodes.NO_GPU}.get(
        error.kind, exitcodes.UNREACHABLE)


def fmt_number(value: float | None, scale: float, unit: str, digits: int = 0) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value * scale:.{digits}f}{unit}"


def fmt_mem(row: FleetRow) -> str:
    if row.memory_used_bytes is None:
        return "-"
    used = row.memory_used_bytes / 2 ** 30
    if row.memory_total_bytes:
        return f"{used:.0f}/{row.memory_total_bytes / 2 ** 30:.0f}G"
    return f"{used:.0f}G"


def reading_cell(row: FleetRow, reading: Reading) -> str:
    """A row's reading as fleet's table shows it: in the reading's own unit ("93%", "61C"), or
    used/total GiB for memory."""
    if reading.fmt == "memory":
        return fmt_mem(row)
    return fmt_number(getattr(row, reading.fleet), 1.0 / reading.scale, reading.unit.replace("°", ""))


def reading_columns() -> tuple[Reading, ...]:
    """The readings shown as columns (header, place and width from the catalogue's ``column``)."""
    from gpudoctor.backends import catalogue

    return catalogue.fleet_columns()


def render_text(view: FleetView, width: int = 120) -> str:
    counts = view.counts()
    nodes = len({row.instance for row in view.rows})
    lines = [f"fleet: {len(view.rows)} GPU row(s) on {nodes} node(s) from {view.prometheus}"
             + (f" {view.selector}" if view.selector != "{}" else "")
             + " · " + ", ".join(f"{counts[s]} {s}" for s in STATUS_ORDER)]
    columns = reading_columns()
    header = f"{'STATUS':<6} {'INSTANCE':<24} {'GPU':>3} " + "".join(f"{r.column[0]:>{r.column[2]}} " for r in columns) \
        + f"{'XID':>4} {'REPORT':<11} REASON"
    lines.append(header)
    fixed = len(header) - len("REASON")
    for row in view.rows:
        report = "-" if row.report_status is None else row.report_status
        if row.report_age_s is not None and row.report_status is not None:
            report += f" {fmt_age(row.report_age_s).replace(' ', '')}"
        instance = row.instance if len(row.instance) <= 24 else row.instance[:23] + "…"
        xid_text = "-" if row.xid_last is None else str(row.xid_last)
        line = (f"{row.status.upper():<6} {instance:<24} {row.gpu or '-':>3} "
                + "".join(f"{reading_cell(row, r):>{r.column[2]}} " for r in columns)
                + f"{xid_text:>4} {report:<11} ")
        lines.extend(_wrap_reason(line, row.reason, fixed, width))
    lines.extend(held_idle_lines(view))
    return "\n".join(lines) + "\n"


def held_idle_summary(view: FleetView) -> str:
    """"held but idle for 30 min or more: 2 GPU(s), 3.5 GPU-hours, 1.20 kWh", or "" when none."""
    idle = view.held_idle()
    if not idle:
        return ""
    hours = sum(r.idle_gpu_hours or 0.0 for r in idle)
    energy = [r.idle_energy_kwh for r in idle if r.idle_energy_kwh is not None]
    return (f"held but idle for {view.idle_window} or more: {len(idle)} GPU(s), {hours:.1f} GPU-hours"
            + (f", {sum(energy):.2f} kWh" if energy else ""))


def held_idle_lines(view: FleetView) -> list[str]:
    """The held-but-idle GPUs under the table, longest idle first, each with its holder."""
    summary = held_idle_summary(view)
    if not summary:
        return []
    lines = ["", summary]
    for row in view.held_idle():
        energy = "" if row.idle_energy_kwh is None else f", {row.idle_energy_kwh:.2f} kWh"
        lines.append(f"  {row.instance} GPU {row.gpu}: {row.holder}, idle {fmt_age(row.idle_for_s or 0.0)} "
                     f"({row.idle_gpu_hours or 0.0:.1f} GPU-hours{energy})")
    return lines


def _wrap_reason(prefix: str, reason: str, indent: int, width: int) -> list[str]:
    import textwrap

    room = max(30, width - indent)
    parts = textwrap.wrap(reason, room) or [""]
    return [prefix + parts[0]] + [" " * indent + part for part in parts[1:]]


# --------------------------------------------------------------------------- docs/fleet.md's name table
_BASE_UNITS = (("_ratio", "ratio 0-1"), ("_bytes_per_second", "B/s"), ("_bytes", "B"), ("_celsius", "°C"),
               ("_watts", "W"), ("_hertz", "Hz"), ("_joules_total", "J"))


def _base_unit(metric: str) -> str:
    return next((unit for suffix, unit in _BASE_UNITS if metric.endswith(suffix)), "count or state")


def dcgm_names_table() -> str:
    """The Markdown table of docs/fleet.md: every reading's name and unit in gpudoctor's exporter,
    dcgm-exporter 4.8 and earlier and 4.9 and later, and whether fleet reads it (from the catalogue)."""
    from gpudoctor.backends import catalogue

    from .rules import DCGM_XID

    lines = ["| reading | gpudoctor's exporter | dcgm-exporter 4.8 and earlier | dcgm-exporter 4.9 and later | fleet |",
             "| --- | --- | --- | --- | --- |"]
    for r in catalogue.readings():
        fields = [f for f in catalogue.dcgm_fields() if f.key == r.key]
        if not fields:
            continue
        cells = []
        for exporters in (catalogue.DCGM_OLD, catalogue.DCGM_NEW):
            found = [f for f in fields if f.exporters == exporters]
            cells.append(" ".join(f"`{f.name}` ({f.unit or 'unit not stated'}{'' if f.scale in (None, 1.0) else f', ×{f.scale:.10g}'})"
                                  for f in found) or "same name, or not confirmed")
        reads = ("reads all (" + r.fleet + ")") if r.fleet and catalogue.dcgm_read(r.key) else (
            "judges it" if r.key in _JUDGED else "")
        lines.append(f"| `{r.key}` | `{r.prometheus}` ({_base_unit(r.prometheus)}) | {cells[0]} | {cells[1]} | {reads} |")
    lines.append(f"| last Xid | `gpudoctor_gpu_last_xid` (code) | `{DCGM_XID[0]}` (code) | `{DCGM_XID[1]}` (code) | judges it |")
    for old, new, since in catalogue.DCGM_LABELS:
        lines.append(f"| label | | `{old}` | `{new}` (renamed in {since}) | reads both |")
    return "\n".join(lines) + "\n"


def gpu_metrics_table() -> str:
    """The Markdown table of docs/fleet.md of every per-GPU metric the exporter writes from the
    catalogue: its name, meaning (the help, then the reading's ``doc``), unit and DCGM counterpart.
    Readings that share a metric (the ECC counts) are one row, their labels and DCGM fields joined;
    the static facts' gauges follow, then ``gpudoctor_gpu_info`` with its labels (the series labels,
    the driver's version and the static facts labelled there: ``catalogue.gpu_info_labels()``)."""
    from gpudoctor.backends import catalogue

    lines = ["| metric | meaning | unit | dcgm-exporter counterpart |", "|--------|---------|------|---------------------------|"]
    by_metric: dict[str, list[Reading]] = {}
    for r in catalogue.exported():
        by_metric.setdefault(r.prometheus, []).append(r)
    for name, shared in by_metric.items():
        first = shared[0]
        meaning = first.help + "".join(f"; {r.doc}" for r in shared[:1] if r.doc)
        unit = _base_unit(name)
        dcgm_scale = catalogue.DCGM_UNITS.get(first.dcgm_unit)
        if first.dcgm_unit and dcgm_scale != 1.0:
            unit += f" (DCGM: {first.dcgm_unit})"
        dcgm = ", ".join(r.dcgm for r in shared if r.dcgm) or "none"
        lines.append(f"| `{name}` | {meaning} | {unit} | {dcgm} |")
    for fact in catalogue.static_gauges():  # static facts with a gauge of their own, after the readings
        lines.append(f"| `{fact.prometheus}` | {fact.help} (read once per GPU) | {_base_unit(fact.prometheus)} | none |")
    labels = ", ".join(f"`{label}`" for label in catalogue.gpu_info_labels() if label != "gpu")
    lines.append(f"| `gpudoctor_gpu_info` | 1 per GPU; labels {labels} | | "
                 f"DCGM_FI_DRIVER_VERSION is a label there too |")
    return "\n".join(lines) + "\n"


def mig_metrics_table() -> str:
    """The Markdown table of docs/fleet.md of the per-MIG-device gauges from the catalogue's MIG
    readings (the info series and the process count, which are no readings, first and last)."""
    from gpudoctor.backends import catalogue

    lines = ["| metric | what | unit | DCGM |", "| --- | --- | --- | --- |",
             "| `gpudoctor_mig_info` | 1 per MIG device; labels as above and `profile` (`3g.40gb`) | 1 | "
             "dcgm-exporter labels its series with `GPU_I_PROFILE`, `GPU_I_ID` |"]
    for r in catalogue.mig_readings():
        if r.prometheus:
            lines.append(f"| `{r.prometheus}` | {r.help} | {_base_unit(r.prometheus)} | {r.dcgm} |")
    lines.append("| `gpudoctor_mig_processes` | compute processes on the MIG device; absent where NVML refuses the "
                 "list (NoPermission: in MIG mode NVML asks for privileges to list processes) | count | none |")
    return "\n".join(lines) + "\n"


_JUDGED = ("ecc_volatile_uncorrected", "remapped_rows_failure", "remapped_rows_pending", "throttle_reasons",
           "memory_free_bytes", "memory_reserved_bytes")
