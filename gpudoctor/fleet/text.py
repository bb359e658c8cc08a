"""fleet's output: the table in words, and the exit codes."""

from __future__ import annotations

import math

from gpudoctor.presentation import fmt_age

from .model import STATUS_ORDER, FleetError, FleetRow, FleetView


def exit_code(view: FleetView, fail_on: str = "warn") -> int:
    from gpudoctor import exitcodes

    counts = view.counts()
    if counts["fail"]:
        return exitcodes.FAIL
    if counts["stale"]:
        return exitcodes.PROBE_ERROR
    if counts["warn"] and fail_on == "warn":
        return exitcodes.WARN
    return exitcodes.OK


def error_exit_code(error: FleetError) -> int:
    from gpudoctor import exitcodes

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


def render_text(view: FleetView, width: int = 120) -> str:
    counts = view.counts()
    nodes = len({row.instance for row in view.rows})
    lines = [f"fleet: {len(view.rows)} GPU row(s) on {nodes} node(s) from {view.prometheus}"
             + (f" {view.selector}" if view.selector != "{}" else "")
             + " · " + ", ".join(f"{counts[s]} {s}" for s in STATUS_ORDER)]
    header = f"{'STATUS':<6} {'INSTANCE':<24} {'GPU':>3} {'UTIL':>5} {'MEM':>9} {'TEMP':>5} {'POWER':>6} " \
             f"{'XID':>4} {'REPORT':<11} REASON"
    lines.append(header)
    fixed = len(header) - len("REASON")
    for row in view.rows:
        report = "-" if row.report_status is None else row.report_status
        if row.report_age_s is not None and row.report_status is not None:
            report += f" {fmt_age(row.report_age_s).replace(' ', '')}"
        instance = row.instance if len(row.instance) <= 24 else row.instance[:23] + "…"
        xid_text = "-" if row.xid_last is None else str(row.xid_last)
        line = (f"{row.status.upper():<6} {instance:<24} {row.gpu or '-':>3} {fmt_number(row.utilization, 100, '%'):>5} "
                f"{fmt_mem(row):>9} {fmt_number(row.temperature_c, 1, 'C'):>5} {fmt_number(row.power_w, 1, 'W'):>6} "
                f"{xid_text:>4} {report:<11} ")
        lines.extend(_wrap_reason(line, row.reason, fixed, width))
    return "\n".join(lines) + "\n"


def _wrap_reason(prefix: str, reason: str, indent: int, width: int) -> list[str]:
    import textwrap

    room = max(30, width - indent)
    parts = textwrap.wrap(reason, room) or [""]
    return [prefix + parts[0]] + [" " * indent + part for part in parts[1:]]
