"""Held but idle: GPUs a job or pod holds that did no work for the idle window, with what that costs.

Who holds a GPU: dcgm-exporter's ``namespace``/``pod``/``container`` labels (read from the
kubelet's pod-resources socket) or its ``hpc_job`` label (its HPC job mapping files), or gpudoctor's
exporter's ``gpudoctor_gpu_holder_info`` (the Slurm job or Kubernetes pod of the processes on the
GPU, read from their cgroups).

Did no work: over the whole window, the GPU's SM activity (NVML GPM, or DCGM profiling's SM
activity) never reached 1 %; where neither exports SM activity, its utilisation never reached 1 %.
The GPU must also have been held for at least the window (a job that started ten minutes ago and is
still loading data is not listed with a thirty-minute window).

How long: since the last moment it worked or the holder first appeared in the look-back window,
whichever is later; the cost is that time in GPU-hours, and its energy at the mean power of the
window (None where no power reading is exported).

The same expressions, built here from the catalogue, make deploy/prometheus/gpudoctor-held-idle.rules.yml
(:func:`rule_file`), so fleet and the rules judge alike. Every reading is taken in gpudoctor's unit
whichever name a node exports it under (the catalogue's DCGM names and units).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Sequence

from gpudoctor.core import findings
from gpudoctor.backends import catalogue
from gpudoctor.sampling.presentation import fmt_age

from . import rules
from .rows import DEFAULT_IDLE_WINDOW, DEFAULT_LOOKBACK, FleetRow, Key, Series, key_of
from .selector import Matcher, names_regex, selector as _selector

if TYPE_CHECKING:
    from .client import Prometheus

#: Below this share of the window's peak (SM activity, else utilisation) a held GPU did no work.
IDLE_BELOW = 0.01
#: The labels that name a holder (dcgm-exporter's, then gpudoctor's exporter's).
HOLDER_LABELS = (*rules.DCGM_HOLDER_LABELS, "slurm_job", "pod_uid", "container_id")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(duration: str) -> float:
    """A Prometheus duration such as ``30m`` in seconds."""
    match = re.fullmatch(r"([1-9][0-9]{0,5})([smhd])", duration)
    if not match:
        raise ValueError(f"not a Prometheus duration like 30m: {duration!r}")
    return float(int(match.group(1)) * _UNITS[match.group(2)])


def step(window: str) -> str:
    """The subquery resolution: thirty points per window, at least one a second."""
    return f"{max(1, int(seconds(window) // 30))}s"


def reading(key: str, selector: str = "", offset: str = "") -> str:
    """The reading ``key`` of every GPU in gpudoctor's unit, from gpudoctor's gauge or any DCGM name."""
    at = f" offset {offset}" if offset else ""
    parts = [f"{catalogue.by_key()[key].prometheus}{selector}{at}"]
    parts += [f"({f.name}{selector}{at} * {f.scale!r})" for f in catalogue.dcgm_read(key)]
    return " or ".join(parts)


def holders(matchers: Sequence[Matcher] = (), offset: str = "") -> str:
    """One series per GPU and holder (value 1), from either exporter's labels."""
    at = f" offset {offset}" if offset else ""
    names = names_regex((*rules.dcgm_gpu_names(), rules.GPUDOCTOR_HOLDER))
    alternatives = " or ".join(f"{_selector([*matchers, Matcher(label, '!=', '')], names)}{at}"
                               for label in ("pod", "hpc_job", "slurm_job", "pod_uid"))
    return f"group by (instance, gpu, {', '.join(HOLDER_LABELS)}) ({alternatives})"


def _by_key(series: list[Series], pick: Callable[[float, float], float] = max) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for s in series:
        key = key_of(s.labels)
        out[key] = pick(out[key], s.value) if key in out else s.value
    return out


def judge(client: Prometheus, matchers: Sequence[Matcher], rows: dict[Key, FleetRow], now: float, *,
          window: str = DEFAULT_IDLE_WINDOW, lookback: str = DEFAULT_LOOKBACK) -> None:
    """Mark the held rows that did no work for ``window``: six queries, none without a held GPU."""
    held = [row for row in rows.values() if row.holder and not row.last_known]
    if not held:
        return
    sel, res = _selector(matchers), step(window)
    sm, util = reading("sm_active_pct", sel), reading("gpu_util_pct", sel)

    def ask(expr: str, pick: Callable[[float, float], float] = max) -> dict[Key, float]:
        return _by_key(client.query(expr, at=now), pick)

    peak_sm = ask(f"max_over_time(({sm})[{window}:{res}])")
    peak_util = ask(f"max_over_time(({util})[{window}:{res}])")
    power = ask(f"avg_over_time(({reading('power_w', sel)})[{window}:{res}])")
    busy_sm = ask(f"max_over_time(timestamp(({sm}) >= {IDLE_BELOW!r})[{lookback}:{res}])")
    busy_util = ask(f"max_over_time(timestamp(({util}) >= {IDLE_BELOW!r})[{lookback}:{res}])")
    first_held = ask(f"min_over_time(timestamp({holders(matchers)})[{lookback}:{res}])", min)
    for row in held:
        key = (row.instance, row.gpu)
        has_sm = key in peak_sm
        peak = peak_sm.get(key) if has_sm else peak_util.get(key)
        if peak is None or peak >= IDLE_BELOW:
            continue
        since = [t for t in ((busy_sm if has_sm else busy_util).get(key), first_held.get(key)) if t is not None]
        idle_for = now - max(since) if since else seconds(lookback)
        if idle_for < seconds(window):
            continue  # held for less than the window: too soon to say
        _mark(row, idle_for, power.get(key), "SM activity" if has_sm else "utilisation")


def _mark(row: FleetRow, idle_for: float, watts: float | None, measure: str) -> None:
    row.idle_for_s = idle_for
    row.idle_gpu_hours = idle_for / 3600.0
    row.idle_energy_kwh = None if watts is None else watts * idle_for / 3.6e6
    energy = "" if row.idle_energy_kwh is None else f", {row.idle_energy_kwh:.2f} kWh"
    row.add(findings.finding("held_idle", holder=row.holder, idle_for=fmt_age(idle_for),
                             gpu_hours=f"{row.idle_gpu_hours:.1f}", energy=energy, measure=measure,
                             evidence={"idle_for_s": round(idle_for, 1)}))


# --------------------------------------------------------------------------- the rule file
def rule_file(window: str = DEFAULT_IDLE_WINDOW) -> str:
    """deploy/prometheus/gpudoctor-held-idle.rules.yml: the same judgement as :func:`judge`."""
    res = step(window)
    peak = (f"max by (instance, gpu) (max_over_time(gpudoctor:gpu_sm_active:ratio[{window}])) or "
            f"max by (instance, gpu) (max_over_time(gpudoctor:gpu_utilization:ratio[{window}]))")
    held_before = f"present_over_time(({holders(offset=window)})[{res}:{res}])"
    records = [
        ("gpudoctor:gpu_utilization:ratio", reading("gpu_util_pct")),
        ("gpudoctor:gpu_sm_active:ratio", reading("sm_active_pct")),
        ("gpudoctor:gpu_power:watts", reading("power_w")),
        ("gpudoctor:gpu_holder:info", holders()),
        ("gpudoctor:gpu_idle_peak:ratio", peak),
        ("gpudoctor:gpu_held_idle:info",
         f"gpudoctor:gpu_holder:info and on (instance, gpu) (gpudoctor:gpu_idle_peak:ratio < {IDLE_BELOW!r}) "
         f"and on (instance, gpu, {', '.join(HOLDER_LABELS)}) {held_before}"),
        ("gpudoctor:gpu_held_idle_power:watts",
         f"avg by (instance, gpu) (avg_over_time(gpudoctor:gpu_power:watts[{window}])) "
         "and on (instance, gpu) gpudoctor:gpu_held_idle:info"),
    ]
    lines = ["# Generated by gpudoctor.fleet.idle.rule_file(); tests/fleet/test_fleet_held_idle.py keeps it current.",
             f"# A GPU held by a job or pod that did no work for {window}: SM activity (else utilisation) below",
             f"# {IDLE_BELOW:.0%} for the whole window, the holder present {window} ago too (docs/fleet.md).",
             "groups:", "  - name: gpudoctor-held-idle", "    rules:"]
    for name, expr in records:
        lines += [f"      - record: {name}", f"        expr: {_quoted(expr)}"]
    lines += ["      - alert: GpuHeldButIdle", "        expr: gpudoctor:gpu_held_idle:info",
              "        labels:", "          severity: warning", "        annotations:",
              f"          summary: 'GPU {{{{ $labels.gpu }}}} on {{{{ $labels.instance }}}} is held but did no work for {window}'",
              "          description: 'Holder: {{ $labels.namespace }}{{ $labels.pod }}{{ $labels.hpc_job }}"
              "{{ $labels.slurm_job }}{{ $labels.pod_uid }}. gpudoctor fleet lists it with its GPU-hours and energy.'"]
    return "\n".join(lines) + "\n"


def _quoted(expr: str) -> str:
    return "'" + expr.replace("'", "''") + "'"
