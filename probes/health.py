"""health: temperature, power, clocks and throttling, ECC, retired pages / remapped rows, PCIe link,
and the NVLink fabric registration on NVSwitch boards.

NVML only (no torch, no CUDA context), so it runs every minute in ``--quick`` scripts.

Thresholds are the device's own (NVML temperature thresholds, enforced power limit,
maximum clocks and PCIe link); the interpretation follows NVIDIA's documentation:
- Clock event ("throttle") reasons: nvml.h, nvmlClocksEventReason*. HW slowdown, HW
  thermal and HW power brake mean the hardware is protecting itself; SW power cap is the
  normal state of a fully loaded board.
- Page retirement (before Ampere) and row remapping (Ampere and later): NVIDIA's
  "GPU Memory Error Management" guide. A pending retirement/remap needs a GPU reset to
  take effect; a remapping failure means the GPU should be replaced.
- An idle GPU lowers its PCIe link generation to save power (ASPM-like link speed
  management); a lower *width* is not a power-saving state and points at the slot/riser.
- The NVLink fabric (nvmlDeviceGetGpuFabricInfoV, Hopper and later on NVSwitch boards): until
  the fabric manager has registered the GPU, CUDA fails with error 802; a PCIe board answers
  NotSupported, which is no finding (gpudoctor.core.findings.fabric_findings).
- Utilisation is shown with SM and tensor activity (GPM, Hopper and later) and the busy verdict
  (gpudoctor.backends.busy): 100 % utilisation with few SM cycles active is a warning. The
  standard report reads GPM over a window of GPM_WINDOW_S (a bounded wait); --quick reads none.
"""

from __future__ import annotations

import os
import time
from typing import Any, Iterable, Mapping

from gpudoctor.core._num import exact_number, is_number
from gpudoctor.core._record import record
from gpudoctor.backends.base import DeviceStatic
from gpudoctor.backends.na import NA, is_na
from gpudoctor.backends.plausible import IMPLAUSIBLE, is_implausible
from gpudoctor.core import findings
from gpudoctor.backends import catalogue
from gpudoctor.backends.nvml import (GPM_MIG, GPM_MIN_INTERVAL_S, GPM_NEEDS_HOPPER, GPM_OLD_DRIVER, GPM_WARMING,
                                     power_usage_is_average, throttle_reason_names)
from gpudoctor.backends.visibility import visible_nvml_indices
from gpudoctor.core.model import Finding, ProbeResult, Status

from . import Probe, ProbeContext
from ._clock_events import GPU_IDLE

COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
#: power_draw's note where NVML's power usage is an average (Ampere except GA100, and later: nvml.h).
POWER_AVERAGE_NOTE = "1 s average (nvmlDeviceGetPowerUsage)"
# Retired pages at or above this count: NVIDIA's guidance is that the board is due for RMA.
RETIRED_PAGES_RMA = 60
# Within this many degrees of the shutdown threshold, a hot GPU is a failure, not a warning.
SHUTDOWN_MARGIN_C = 3


@record
class _Device:
    """One device's readings and where its measurements and findings go."""

    r: ProbeResult
    dev: int
    s: DeviceStatic  # static facts
    x: dict[str, Any]  # a sample
    label: str = ""
    processes: Any = None  # the processes holding a context on it (read where the compute mode needs them)

    def m(self, key_name: str, value: object, unit: str = "", reference: object = None, note: str = "") -> None:
        self.r.measure(key_name, None if is_na(value) else value, unit, device=self.dev,
                       reference=exact_number(reference, parse=True), note=value.reason if is_na(value) else note)

    def say(self, code: str, **fields: object) -> None:
        """The finding ``code`` about this GPU, in gpudoctor.core.findings' words."""
        # status and evidence named: ``fields`` only fill the wording's templates
        self.r.findings.append(findings.finding(code, label=self.label, device=self.dev, status=None, evidence=None,
                                                **fields))

    def add(self, found: Iterable[Finding | None]) -> None:
        """Findings of the shared judgements (gpudoctor.core.findings), in their words."""
        self.r.findings.extend(f for f in found if f is not None)


def check_device(r: ProbeResult, dev: int, s: DeviceStatic, x: dict[str, Any], processes: Any = None) -> None:
    """Add measurements and findings for one device: ``s`` static facts, ``x`` a sample, ``processes``
    the processes holding a context on it (NVML's list, or NA; None: not read)."""
    name = s.get("name")
    d = _Device(r, dev, s, x, label=f"GPU {dev}" + (f" ({name})" if isinstance(name, str) else ""),
                processes=processes)
    if _check_lost(d):
        return
    first = len(r.measurements)
    d.m(_name("gpu_util_pct"), x.get("gpu_util_pct"), "%")
    _check_busy(d)
    _check_temperature(d)
    _check_power(d)
    _check_clocks(d)
    _check_ecc(d)
    _check_retired_pages(d)
    _check_remapped_rows(d)
    _check_pcie(d)
    _check_modes(d)
    d.m(_name("fan_pct"), x.get("fan_pct"), "%")
    _measure_the_rest(d)
    _check_unread(d, r.measurements[first:])
    _check_fabric(d)


def _name(key: str) -> str:
    """The report's name of the reading ``key``: its catalogue entry's ``report`` (the JSON report
    kept its names when the catalogue came: ``gpu_utilization`` for ``gpu_util_pct``)."""
    return catalogue.by_key()[key].report


#: The readings a check of this probe measures itself (with a reference, words, or only where the
#: GPU has the feature); every other reading the catalogue names for the report is measured as the
#: sample has it, in the catalogue's unit (:func:`_measure_the_rest`).
CHECKED = frozenset({
    "gpu_util_pct", "fan_pct", "sm_active_pct", "tensor_active_pct", "temperature_c", "power_w", "power_instant_w",
    "clock_sm_mhz", "clock_mem_mhz", "throttle_reasons", "ecc_volatile_corrected", "ecc_volatile_uncorrected",
    "ecc_aggregate_corrected", "ecc_aggregate_uncorrected", "remapped_rows_uncorrectable",
    "remapped_rows_correctable", "pcie_gen_current", "pcie_width_current", "persistence_mode", "compute_mode"})


#: The static facts with a report name that the devices probe measures (torch's value first, NVML's
#: where torch has none): not measured again here.
STATIC_MEASURED_ELSEWHERE = frozenset({"uuid", "pci_bus_id", "compute_capability"})


def _measure_the_rest(d: _Device) -> None:
    """Every reading and static fact of the catalogue with a report name that no check measures: a
    reading or fact added to the catalogue with ``report=`` shows in the report with no change to
    this probe."""
    for r in catalogue.report_readings():
        if r.key not in CHECKED and r.key in d.x:
            d.m(r.report, d.x[r.key], r.unit)
    facts: Mapping[str, object] = d.s  # asked by names known at run time
    for f in catalogue.report_static_facts():
        if f.key not in STATIC_MEASURED_ELSEWHERE and f.key in facts:
            d.m(f.report, facts[f.key], f.unit)


def _check_busy(d: _Device) -> None:
    """SM and tensor activity (GPM) beside utilisation, and the one busy verdict over them
    (gpudoctor.backends.busy): a GPU at 100 % utilisation with its SMs mostly idle is a warning.
    Samples without GPM readings (a hand-made sample) have neither; at --quick none is read."""
    x = d.x
    if "sm_active_pct" not in x:
        return
    sm = x.get("sm_active_pct")
    d.m(_name("sm_active_pct"), sm, "%")
    d.m(_name("tensor_active_pct"), x.get("tensor_active_pct"), "%")
    if is_na(sm) and sm.reason == NOT_AT_QUICK:
        return
    from gpudoctor.backends import busy  # only where GPM was read: not on the --quick path

    verdict = busy.verdict(x)
    d.r.details.setdefault("busy", {})[str(d.dev)] = {**busy.record(verdict), "gpm_window_s": x.get(GPM_WINDOW_KEY)}
    d.say("busy_small_kernels" if verdict.code == "busy_small_kernels" else "busy_verdict", words=busy.text(verdict))


def _check_unread(d: _Device, measured: list[Any]) -> None:
    """Say what could not be read: nothing at all (never a pass), impossible values, and readings
    denied for lack of permission (shown without -v, with how to get them)."""
    measured = [m for m in measured if m.note not in GPM_ABSENT]
    unread = [m for m in measured if m.value is None and m.note]
    if measured and len(unread) == len(measured):
        reasons = sorted({m.note for m in unread})
        d.say("nothing_read", reasons=", ".join(reasons), as_root=findings.AS_ROOT if "NoPermission" in reasons else "")
        return
    implausible = [(m.name, m.note) for m in unread if m.note.startswith(IMPLAUSIBLE)]
    implausible += [(k, v.reason) for k, v in d.s.items() if is_implausible(v)]  # thresholds, limits
    if implausible:
        shown = "; ".join(f"{name} {note[len(IMPLAUSIBLE):].strip()}" for name, note in implausible)
        d.say("implausible_reading", shown=shown)
    denied = [m.name for m in unread if m.note == "NoPermission"]
    if denied:
        d.say("readings_need_permission", names=", ".join(denied))


def _check_lost(d: _Device) -> bool:
    lost = [k for k, v in list(d.s.items()) + list(d.x.items()) if is_na(v) and v.reason == "GpuIsLost"]
    if lost:
        d.say("gpu_lost")
        return True
    # NVML's "Unknown Error" for the device's very identity (name, UUID, PCI bus id) is a GPU the
    # driver enumerates but cannot talk to (NVIDIA/open-gpu-kernel-modules#387: fixed by reseating
    # the card); a single reading answering Unknown is not enough to say so.
    identity = [d.s.get(k) for k in ("name", "uuid", "pci_bus_id")]
    if all(is_na(v) and v.reason == "Unknown" for v in identity):
        d.say("gpu_unreachable", dev=d.dev)
        return True
    return False


def _check_temperature(d: _Device) -> None:
    s, x = d.s, d.x
    temp, slow, shut = (exact_number(v, parse=True) for v in (
        x.get("temperature_c"), s.get("temperature_slowdown_c"), s.get("temperature_shutdown_c")))
    d.m(_name("temperature_c"), x.get("temperature_c"), "C", reference=s.get("temperature_slowdown_c"))
    if temp is None:
        return
    if shut is not None and temp >= shut - SHUTDOWN_MARGIN_C:
        d.say("temperature_critical", temp=temp, margin=SHUTDOWN_MARGIN_C, shutdown=shut)
    elif slow is not None and temp >= slow:
        d.say("temperature_slowdown", temp=temp, slowdown=slow)


def _check_power(d: _Device) -> None:
    limit = exact_number(d.x.get("power_limit_w"), parse=True) or exact_number(d.s.get("power_limit_w"), parse=True)
    average = power_usage_is_average(d.s.get("architecture"), d.s.get("compute_capability"))
    d.m(_name("power_w"), d.x.get("power_w"), "W", reference=limit,
        note="" if average is None else POWER_AVERAGE_NOTE if average else "instantaneous")
    instant = d.x.get("power_instant_w")
    if exact_number(instant, parse=True) is not None:  # NVML_FI_DEV_POWER_INSTANT, where the driver gives it
        d.m(_name("power_instant_w"), instant, "W", reference=limit)
    default_limit = exact_number(d.s.get("power_default_limit_w"), parse=True)
    if limit is not None and default_limit is not None and limit < 0.9 * default_limit:
        d.say("power_limit_lowered", limit=limit, default=default_limit)


def _check_clocks(d: _Device) -> None:
    """Clocks against their maximum, and one finding per clock-event reason that matters."""
    d.m(_name("clock_sm_mhz"), d.x.get("clock_sm_mhz"), "MHz", reference=d.s.get("clock_sm_max_mhz"))
    d.m(_name("clock_mem_mhz"), d.x.get("clock_mem_mhz"), "MHz", reference=d.s.get("clock_mem_max_mhz"))
    reasons = d.x.get("throttle_reasons")
    if not isinstance(reasons, int):
        d.r.measure(_name("throttle_reasons"), None, device=d.dev, note=getattr(reasons, "reason", ""))
        return
    names = throttle_reason_names(reasons)
    d.r.measure(_name("throttle_reasons"), ", ".join(names) if names else "none", device=d.dev)
    d.add(findings.clock_event_findings(names, label=d.label, device=d.dev))


def _check_ecc(d: _Device) -> None:
    x = d.x
    vol_unc, agg_unc = (exact_number(x.get(k), parse=True)
                        for k in ("ecc_volatile_uncorrected", "ecc_aggregate_uncorrected"))
    vol_cor = exact_number(x.get("ecc_volatile_corrected"), parse=True)
    ecc_mode = d.s.get("ecc_mode")
    d.m("ecc_mode", ("enabled" if ecc_mode else "disabled") if isinstance(ecc_mode, int) else ecc_mode)
    for key in ("ecc_volatile_corrected", "ecc_volatile_uncorrected", "ecc_aggregate_corrected",
                "ecc_aggregate_uncorrected"):
        d.m(_name(key), x.get(key))
    d.add([findings.ecc_finding(vol_unc, agg_unc, vol_cor, label=d.label, device=d.dev)])


def _check_retired_pages(d: _Device) -> None:
    """Page retirement, the memory-error isolation before Ampere."""
    sbe, dbe, pending = d.x.get("retired_pages_sbe"), d.x.get("retired_pages_dbe"), d.x.get("retired_pages_pending")
    if is_na(sbe) and is_na(dbe):
        return
    total = (exact_number(sbe, parse=True) or 0) + (exact_number(dbe, parse=True) or 0)
    d.m("retired_pages", int(total))
    d.add(findings.retired_pages_findings(pending is True or pending == 1, total, RETIRED_PAGES_RMA,
                                          label=d.label, device=d.dev))


def _check_remapped_rows(d: _Device) -> None:
    """Row remapping, the memory-error isolation from Ampere on."""
    x = d.x
    uncorrectable = x.get("remapped_rows_uncorrectable", None)
    if is_na(uncorrectable) or uncorrectable is None:
        return
    d.m(_name("remapped_rows_uncorrectable"), uncorrectable)
    d.m(_name("remapped_rows_correctable"), x.get("remapped_rows_correctable"))
    d.add(findings.row_remap_findings(x.get("remapped_rows_failure") is True, x.get("remapped_rows_pending") is True,
                                      label=d.label, device=d.dev))


def _check_pcie(d: _Device) -> None:
    """The PCIe link's generation and width against the device's maximum (the one place the
    link's training is judged)."""
    s, x = d.s, d.x
    gen, gen_max = exact_number(x.get("pcie_gen_current"), parse=True), exact_number(s.get("pcie_gen_max"), parse=True)
    width = exact_number(x.get("pcie_width_current"), parse=True)
    width_max = exact_number(s.get("pcie_width_max"), parse=True)
    d.m(_name("pcie_gen_current"), x.get("pcie_gen_current"), reference=s.get("pcie_gen_max"))
    d.m(_name("pcie_width_current"), x.get("pcie_width_current"), "lanes", reference=s.get("pcie_width_max"))
    reasons = x.get("throttle_reasons")
    idle = ((isinstance(reasons, int) and reasons & GPU_IDLE)
            or exact_number(x.get("gpu_util_pct"), parse=True) == 0)
    if gen is not None and gen_max is not None and gen < gen_max:
        d.say("pcie_gen_idle_downshift" if idle else "pcie_gen_degraded", gen=gen, gen_max=gen_max)
    if width is not None and width_max is not None and width < width_max:
        d.say("pcie_width_degraded", width=width, width_max=width_max)


def _check_fabric(d: _Device) -> None:
    """The NVLink fabric registration, where the GPU has one (after _check_unread: a PCIe board's
    NotSupported is normal, not an unread reading)."""
    state = d.s.get("fabric_state")
    if isinstance(state, int) and not isinstance(state, bool) and state != findings.FABRIC_NOT_SUPPORTED:
        d.r.measure("fabric_state", findings.FABRIC_STATE_WORDS.get(state, f"unknown ({state})"), device=d.dev,
                    note=str(d.s.get("fabric_status") or ""))
    d.add(findings.fabric_findings(d.s, label=d.label, device=d.dev))


def _check_modes(d: _Device) -> None:
    """Persistence mode and compute mode."""
    persistence = d.x.get("persistence_mode")
    d.m(_name("persistence_mode"), ("on" if persistence else "off") if isinstance(persistence, int) else persistence)
    if persistence == 0:
        d.say("persistence_off")
    mode = d.x.get("compute_mode")
    d.m(_name("compute_mode"), COMPUTE_MODES.get(mode, mode) if isinstance(mode, int) else mode)
    if mode == 2:
        d.say("compute_prohibited")
    elif mode == 3:
        # One context at a time: another process holding it makes every new context fail with error 46,
        # although cuInit succeeds (so the CUDA start check passes). gpudoctor's own process holds none.
        others = [p for p in d.processes if p.get("pid") != os.getpid()] if isinstance(d.processes, list) else []
        if others:
            pids = ", ".join(str(p.get("pid")) for p in others[:4]) + (" and others" if len(others) > 4 else "")
            d.say("compute_exclusive_busy", pids=pids, index=d.dev)
        else:
            d.say("compute_exclusive")


#: How long the standard report's health probe waits between its two GPM samples: a bounded wait,
#: two and a half times GPM's minimum interval, so the closing read always takes a new sample (the
#: opening one may repeat a sample taken just before by someone else). Never at --quick.
GPM_WINDOW_S = max(0.25, 2.5 * GPM_MIN_INTERVAL_S)
#: The sample key that carries the window's length (seconds) to check_device.
GPM_WINDOW_KEY = "_gpm_window_s"
#: GPM's NA reason at --quick, where no window is taken (the text report leaves it out).
NOT_AT_QUICK = "QuickMode"
_ACTIVITY_KEYS = ("sm_active_pct", "tensor_active_pct")
#: Why GPM is absent where that is the board's, driver's or level's nature, not an unread reading.
GPM_ABSENT = frozenset({GPM_NEEDS_HOPPER, GPM_OLD_DRIVER, GPM_MIG, NOT_AT_QUICK})


def _not_at_quick(samples: dict[int, dict[str, Any]]) -> None:
    """At --quick GPM has only its opening sample ("Warming"): say that none was read at this level."""
    for x in samples.values():
        for key in _ACTIVITY_KEYS:
            value = x.get(key)
            if is_na(value) and value.reason == GPM_WARMING:
                x[key] = NA(NOT_AT_QUICK)


def _gpm_window(ctx: ProbeContext, samples: dict[int, dict[str, Any]], opened: dict[int, float]) -> None:
    """The GPM readings of every GPU that has GPM over a window of at least :data:`GPM_WINDOW_S`: its
    sample (taken at ``opened[n]``) opened it (its GPM part); once the last GPU's window has lasted
    that long, each such GPU's GPM is read again, through the backend (the NVML gate), and replaces
    the opening readings; ``GPM_WINDOW_KEY`` holds how long its window lasted. One wait for all GPUs,
    cut to what the probe's deadline leaves, and none when that is under GPM's minimum interval."""
    with_gpm = [n for n, x in samples.items() if _has_gpm(x.get("sm_active_pct"))]
    if not with_gpm:
        return
    lasted = time.monotonic() - max(opened[n] for n in with_gpm)  # the shortest window so far
    wait = min(GPM_WINDOW_S - lasted, ctx.time_left() - 2.0)
    if lasted + wait < GPM_MIN_INTERVAL_S:
        return  # the deadline leaves no window GPM can read
    time.sleep(max(0.0, wait))
    for n in with_gpm:
        samples[n].update(ctx.gpu.gpm(n))
        samples[n][GPM_WINDOW_KEY] = round(time.monotonic() - opened[n], 3)


def _has_gpm(value: object) -> bool:
    """Whether an opening GPM reading shows a GPU whose GPM answers (a number, or waiting for its
    second sample), not one without GPM (before Hopper, MIG mode, an old driver)."""
    return is_number(value) or (
        is_na(value) and value.reason == GPM_WARMING)


def run(ctx: ProbeContext) -> ProbeResult:
    r = ProbeResult("health")
    gpu = ctx.gpu
    count = ctx.nvml_count("health")
    if isinstance(count, ProbeResult):
        return count
    if ctx.device is not None:
        n_index = ctx.nvml_index(ctx.device)
        if n_index is None or n_index >= count:
            return findings.skipped("health", "device_not_matched", device_index=ctx.device)
        nvml_indices = [n_index]
        torch_of = {n_index: ctx.device}
    else:
        nvml_indices = list(range(count))
        visible = visible_nvml_indices(gpu)
        torch_of = {n: t for t, n in enumerate(visible)} if isinstance(visible, list) else {}
    statics = {n: gpu.static(n) for n in nvml_indices}
    samples: dict[int, dict[str, Any]] = {}
    opened: dict[int, float] = {}  # when each GPU's sample (and so its GPM window) was taken
    for n in nvml_indices:
        samples[n] = dict(gpu.sample(n))
        opened[n] = time.monotonic()
    if ctx.level == "quick":
        _not_at_quick(samples)
    elif not ctx.replay:
        _gpm_window(ctx, samples, opened)
    for n in nvml_indices:
        # the process list only where it decides something: a GPU only one process may hold
        check_device(r, n, statics[n], samples[n],
                     gpu.processes(n) if samples[n].get("compute_mode") == 3 else None)
    r.details["device_numbering"] = "nvml"
    r.details["nvml_to_torch"] = {str(k): v for k, v in torch_of.items()}
    # A skipped part (readings denied) is shown, but does not make the checks that ran a skip.
    worst = Status.worst((f.status for f in r.findings if f.status != Status.SKIP), default=Status.PASS)
    problems = [f for f in r.findings if f.status in (Status.WARN, Status.FAIL)]
    unread = [f for f in r.findings if f.code == "nothing_read"]
    if len(unread) == len(nvml_indices):
        reasons = sorted({m.note for m in r.measurements if m.value is None and m.note and m.note not in GPM_ABSENT})
        summary = f"nothing could be read: {', '.join(reasons)}"
    elif not problems:
        summary = f"{len(nvml_indices)} GPU(s) healthy"
    else:
        summary = f"{len(problems)} problem(s) on {len({f.device for f in problems})} GPU(s)"
    r.settle(summary)
    r.status = worst
    return r


PROBE = Probe.define(__name__, run, "Temperature, power, clocks, throttling, ECC, memory retirement, PCIe link and "
                     "NVLink fabric", level="quick", uses_torch=False, timeout_s=30, order=30)
