"""What a :class:`~gpudoctor.hooks.TrainingMonitor` found: the figures, and a diagnosis in words.

Plain data (no torch): a :class:`Summary` is built from the monitor's raw timings by
:func:`build_summary`, and :func:`diagnose` turns its figures into findings
(:class:`~gpudoctor.core.model.Finding`) with stable codes. The thresholds are named constants below, each with the
reason for its value.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from gpudoctor.core._num import is_number, number
from gpudoctor.system.fileio import atomic_write_text
from gpudoctor.core import findings
from gpudoctor.core.model import Finding, Status
from gpudoctor.system.safejson import json_safe
from gpudoctor.core.stats import percentile
from .energy import StepEnergy, energy_figures

SUMMARY_FORMAT = "gpudoctor-training-summary"
SUMMARY_FORMAT_VERSION = 1

# Stable diagnosis codes (scripts match on them; add new ones, never rename).
INPUT_BOUND = "input_bound"
HOST_SYNC_BOUND = "host_sync_bound"
GPU_UNDERUTILISED = "gpu_underutilised"
LAUNCH_BOUND = "launch_bound"
MEMORY_NEAR_LIMIT = "memory_near_limit"
FRAGMENTATION = "fragmentation"
STRAGGLER = "straggler"
CODES = (INPUT_BOUND, HOST_SYNC_BOUND, GPU_UNDERUTILISED, MEMORY_NEAR_LIMIT, FRAGMENTATION, STRAGGLER)

# A loop that spends a fifth of its wall time in next(loader) would be at least 25%
# faster with a loader that keeps up; below that, loader tuning is rarely the first fix.
INPUT_BOUND_SHARE = 0.20
# On CUDA the host may wait for data while the GPU still works through queued steps; only
# call it input-bound when NVML also saw the GPU idle for a real part of the training time.
INPUT_BOUND_MAX_GPU_UTIL_PCT = 85.0
# Without NVML: the host's waits are hidden when the steps' device spans (first to last
# event of each step) cover this share of the wall time, i.e. the GPU still had the queued
# step to run while the host waited. A span is not busy time (see ``device_span_share``),
# so this only stops the diagnosis; it is never quoted as GPU activity.
INPUT_BOUND_MAX_DEVICE_SPAN = 0.85
# A sync site hit in at least half of the steps is "every step" for practical purposes
# (logging every other step costs the same kind of stall).
SYNC_SITE_STEP_SHARE = 0.5
# NVML utilisation is the share of sample periods in which a kernel ran; a training loop
# that keeps the GPU fed sits above 90%. Below 60% more than a third of the GPU is idle.
GPU_UNDERUTILISED_PCT = 60.0
GPU_UNDERUTILISED_MIN_SAMPLES = 3
# The caching allocator needs headroom for temporaries; above 90% of the card's memory one
# larger batch or a longer sequence ends in an out-of-memory error.
MEMORY_NEAR_LIMIT_SHARE = 0.90
# Whole-device use (other processes included), as NVML reports it.
MEMORY_NEAR_LIMIT_DEVICE_SHARE = 0.95
# Memory the allocator holds in split, unused blocks; a third of the cache unusable for
# large tensors is where expandable segments start to pay.
FRAGMENTED_SHARE = 0.30
FRAGMENTED_MIN_RESERVED = 1 << 30
# A rank this much slower than the median rank holds every rank back at each all-reduce;
# the excess must also be a real part of an iteration (not 1 ms of noise on a 50 ms step).
STRAGGLER_RATIO = 1.20
STRAGGLER_MIN_EXCESS_S = 0.001
STRAGGLER_MIN_EXCESS_SHARE = 0.05


#: A training loop's finding is gpudoctor's one :class:`~gpudoctor.core.model.Finding` (its summary the
#: message, its fix the advice); the name stays for the hooks' public surface.
DiagnosisItem = Finding


def worded(key: str, evidence: dict[str, Any], **fields: Any) -> Finding:
    """The finding for ``key`` (a code, or ``code:way``) in its wording table's words."""
    return findings.finding(key, evidence=evidence, **fields)


def diagnosis_record(item: Finding) -> dict[str, Any]:
    """A finding as the training summary publishes it (code, severity, message, advice, evidence)."""
    return {"code": item.code, "severity": item.status.value, "message": item.summary,
            "advice": item.fix, "evidence": json_safe(item.evidence)}


def diagnosis_from_record(data: Mapping[str, Any]) -> Finding:
    """A finding read back from :func:`diagnosis_record`'s shape."""
    return Finding(Status(data.get("severity", "warn")), data["code"], data["message"], fix=data["advice"],
                   evidence=dict(data.get("evidence") or {}))


@dataclass
class Summary:
    """A training loop's figures and diagnosis. ``to_dict()`` is JSON-safe; ``str()`` is words."""

    steps: int = 0
    steps_measured: int = 0
    warmup_steps: int = 0
    device: str = "cpu"
    timing: str = "host_clock"
    rank: int = 0
    world_size: int = 1
    wall_time_s: float | None = None
    data_wait_share: float | None = None
    data_wait_p50_s: float | None = None
    data_wait_total_s: float | None = None
    step_time_p50_s: float | None = None
    step_time_p90_s: float | None = None
    step_time_mean_s: float | None = None
    host_step_time_p50_s: float | None = None
    device_span_share: float | None = None
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    gpu: dict[str, Any] | None = None
    energy: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None
    host_syncs: dict[str, Any] | None = None
    diagnosis: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ranks: list[dict[str, Any]] | None = None

    @property
    def codes(self) -> list[str]:
        return [item.code for item in self.diagnosis]

    @property
    def device_busy_share(self) -> float | None:
        """Deprecated name of :attr:`device_span_share` (it never measured busy time)."""
        return self.device_span_share

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": SUMMARY_FORMAT, "format_version": SUMMARY_FORMAT_VERSION}
        for name in ("steps", "steps_measured", "warmup_steps", "device", "timing", "rank", "world_size",
                     "wall_time_s", "data_wait_share", "data_wait_p50_s", "data_wait_total_s",
                     "step_time_p50_s", "step_time_p90_s", "step_time_mean_s", "host_step_time_p50_s",
                     "device_span_share", "steps_per_s", "samples_per_s", "gpu", "energy", "memory",
                     "host_syncs"):
            out[name] = json_safe(getattr(self, name))
        out["device_busy_share"] = out["device_span_share"]  # deprecated copy, for old readers
        out["diagnosis"] = [diagnosis_record(item) for item in self.diagnosis]
        out["notes"] = list(self.notes)
        if self.ranks is not None:
            out["ranks"] = json_safe(self.ranks)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Summary":
        kwargs = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "diagnosis"}
        if "device_span_share" not in data and "device_busy_share" in data:  # written before the rename
            kwargs["device_span_share"] = data["device_busy_share"]
        summary = cls(**kwargs)
        summary.diagnosis = [diagnosis_from_record(d) for d in data.get("diagnosis", [])]
        return summary

    def to_json(self, path: str | os.PathLike[str] | None = None, indent: int | None = 2) -> str:
        """The summary as JSON text; written atomically to ``path`` when one is given."""
        text = json.dumps(self.to_dict(), indent=indent, allow_nan=False) + "\n"
        if path is not None:
            atomic_write_text(path, text)
        return text

    def __str__(self) -> str:
        return render_text(self)


# -- figures ------------------------------------------------------------------------------------

def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def in_spans(samples: Sequence[dict[str, Any]], spans: Sequence[tuple[float, float]]) -> list[dict[str, Any]]:
    """The samples whose ``t_mono`` (the monitor's clock) falls inside one of ``spans``
    (``(start, end)`` pairs, sorted by start and not overlapping). Samples without
    ``t_mono`` cannot be placed and are kept."""
    import bisect

    starts = [a for a, _ in spans]
    kept = []
    for sample in samples:
        t = sample.get("t_mono")
        if not isinstance(t, (int, float)):
            kept.append(sample)
            continue
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and t <= spans[i][1]:
            kept.append(sample)
    return kept


def gpu_stats(samples: Sequence[dict[str, Any]],
              spans: Sequence[tuple[float, float]] | None = None) -> dict[str, Any] | None:
    """Summarise NVML samples taken during training (numbers only; NA readings skipped).

    With ``spans`` (the measured iterations), utilisation, power and clocks come only from
    the samples taken inside them (``util_samples`` counts those), so validation runs,
    checkpoints and epoch boundaries do not pull the utilisation down; memory and throttle
    reasons come from every sample.
    """
    if not samples:
        return None
    inside = list(samples) if spans is None else in_spans(samples, spans)

    def nums(key: str, among: Sequence[dict[str, Any]] = samples) -> list[float]:
        return [float(s[key]) for s in among if is_number(s.get(key))]

    util = sorted(nums("gpu_util_pct", inside))
    used = nums("memory_used_bytes")
    total = nums("memory_total_bytes")
    power = nums("power_w", inside)
    sm_active = sorted(nums("sm_active_pct", inside))
    tensor_active = sorted(nums("tensor_active_pct", inside))
    limit = nums("power_limit_w")
    sm = nums("clock_sm_mhz", inside)
    reasons: set[str] = set()
    for s in samples:
        for name in s.get("throttle_reason_names") or []:
            reasons.add(name)
    return {
        "samples": len(samples),
        "samples_in_steps": len(inside),
        "util_samples": len(util),
        "util_mean_pct": _mean(util),
        "util_p50_pct": percentile(util, 50),
        "memory_used_max_bytes": int(max(used)) if used else None,
        "memory_total_bytes": int(total[-1]) if total else None,
        "power_mean_w": _mean(power),
        "power_limit_w": limit[-1] if limit else None,
        "clock_sm_mean_mhz": _mean(sm),
        "clock_sm_max_seen_mhz": max(sm) if sm else None,
        "gpm_samples": len(sm_active),
        "sm_active_p50_pct": percentile(sm_active, 50),
        "tensor_active_p50_pct": percentile(tensor_active, 50),
        "throttle_reasons_seen": sorted(reasons),
    }


def iteration_spans(starts: Sequence[float], ends: Sequence[float], passes: Sequence[int],
                    first: int = 0) -> list[float]:
    """Wall time of each iteration from ``first`` on: from the moment it asked the loader for
    a batch to the moment the next one did, within one pass over a wrapped loader. The
    last step of a pass, and steps outside ``wrap()``, end with their step, so time spent
    between epochs (validation, checkpoints) is not counted as training time."""
    n = len(ends)
    spans = []
    for i in range(first, n):
        if i + 1 < n and passes[i] >= 0 and passes[i + 1] == passes[i]:
            spans.append(starts[i + 1] - starts[i])
        else:
            spans.append(ends[i] - starts[i])
    return spans


@dataclass
class RawTimings:
    """What the monitor hands to :func:`build_summary` (seconds, host clock unless said)."""

    waits: Sequence[float]
    host_steps: Sequence[float]
    iter_starts: Sequence[float]
    ends: Sequence[float]
    passes: Sequence[int]
    device_steps: Sequence[float] | None
    device: str
    rank: int = 0
    world_size: int = 1
    warmup_steps: int = 1
    gpu_samples: Sequence[dict[str, Any]] = ()
    memory: dict[str, Any] | None = None
    host_syncs: dict[str, Any] | None = None
    notes: Sequence[str] = ()
    samples: Sequence[int] = ()  # samples in each step (-1: unknown)
    energy: StepEnergy | None = None


def build_summary(raw: RawTimings) -> Summary:
    steps = len(raw.host_steps)
    summary = Summary(steps=steps, device=raw.device, rank=raw.rank, world_size=raw.world_size,
                      timing="cuda_events" if raw.device_steps is not None else "host_clock")
    summary.notes.extend(raw.notes)
    if steps == 0:
        summary.notes.append(findings.NOTE_NO_STEPS)
        summary.host_syncs = raw.host_syncs
        summary.gpu = gpu_stats(raw.gpu_samples, spans=[])
        summary.memory = raw.memory
        return summary
    # The first step pays for start-up (DataLoader workers, CUDA context, cuDNN autotuning):
    # leave it out of the figures, unless it is all there is.
    skip = raw.warmup_steps if steps > raw.warmup_steps else 0
    summary.warmup_steps = skip
    summary.steps_measured = steps - skip
    host = list(raw.host_steps[skip:])
    lengths = iteration_spans(raw.iter_starts, raw.ends, raw.passes, skip)
    wall = max(sum(lengths), 1e-12)
    summary.wall_time_s = wall
    summary.steps_per_s = len(host) / wall
    summary.host_step_time_p50_s = percentile(sorted(host), 50)
    _data_wait_figures(summary, list(raw.waits[skip:]), wall)
    _step_time_figures(summary, raw, host, skip, wall)
    spans = [(raw.iter_starts[i], raw.iter_starts[i] + length) for i, length in enumerate(lengths, start=skip)]
    _throughput_figures(summary, raw, spans, skip, wall)
    summary.memory = raw.memory
    if raw.host_syncs is not None:
        syncs = dict(raw.host_syncs)
        syncs["per_step"] = syncs.get("total", 0) / steps
        for site in syncs.get("sites", []):
            site["per_step"] = site["count"] / steps
        summary.host_syncs = syncs
    summary.diagnosis = diagnose(summary)
    return summary


def _data_wait_figures(summary: Summary, waits: list[float], wall: float) -> None:
    """How long the loop waited for its batches (NaN: a step outside ``monitor.wrap(loader)``)."""
    known_waits = [w for w in waits if not math.isnan(w)]
    if not known_waits:
        summary.notes.append(findings.NOTE_OUTSIDE_WRAP)
        return
    summary.data_wait_total_s = sum(known_waits)
    summary.data_wait_p50_s = percentile(sorted(known_waits), 50)
    summary.data_wait_share = min(1.0, max(0.0, sum(known_waits) / wall))
    if len(known_waits) < len(waits):
        summary.notes.append(findings.NOTE_SOME_OUTSIDE_WRAP.format(outside=len(waits) - len(known_waits),
                                                                    steps=len(waits)))


def _step_time_figures(summary: Summary, raw: RawTimings, host: list[float], skip: int, wall: float) -> None:
    """Step times: the device's (CUDA events) where measured, else the host clock's."""
    times = sorted(host)
    if raw.device_steps is not None:
        device = list(raw.device_steps)
        # Device times arrive in step order; drop the same warm-up steps when all are present.
        if len(device) == len(raw.host_steps):
            device = device[skip:]
        if len(device) < len(host):
            summary.notes.append(findings.NOTE_NO_DEVICE_TIME.format(count=len(host) - len(device)))
        times = sorted(device)
        if device:
            summary.device_span_share = min(1.0, sum(device) * (len(host) / len(device)) / wall)
    summary.step_time_p50_s = percentile(times, 50)
    summary.step_time_p90_s = percentile(times, 90)
    summary.step_time_mean_s = _mean(times)


def _throughput_figures(summary: Summary, raw: RawTimings, spans: list[tuple[float, float]], skip: int,
                        wall: float) -> None:
    """Samples per second, energy, and the GPU's figures during the measured steps."""
    measured_samples = list(raw.samples[skip:])
    if measured_samples and min(measured_samples) >= 0:
        summary.samples_per_s = sum(measured_samples) / wall
    summary.energy, energy_note = energy_figures(raw.energy, spans, measured_samples)
    if energy_note:
        summary.notes.append(energy_note)
    summary.gpu = gpu_stats(raw.gpu_samples, spans=spans)
    if summary.gpu is not None and summary.gpu["samples"] > summary.gpu["samples_in_steps"]:
        summary.notes.append(findings.NOTE_GPU_OUTSIDE_STEPS.format(
            outside=summary.gpu["samples"] - summary.gpu["samples_in_steps"], samples=summary.gpu["samples"]))


# -- diagnosis ----------------------------------------------------------------------------------

def _pct(share: float) -> str:
    return f"{share * 100:.0f}%"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1000:.1f} ms"


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def sync_pattern_words(pattern: str) -> tuple[str, str]:
    return findings.SYNC_PATTERNS.get(pattern, findings.SYNC_PATTERNS["other"])


def sync_site_words(site: dict[str, Any]) -> tuple[str, str]:
    """(what made the sync, what to do) for one site; framework lines get framework advice."""
    what, advice = sync_pattern_words(site.get("pattern", "other"))
    if site.get("origin") == "framework":
        return findings.FRAMEWORK_SYNC.format(what=what), findings.FRAMEWORK_SYNC_FIX
    return what, advice


def diagnose(s: Summary) -> list[Finding]:
    """The problems these figures show, most important first (one function per problem)."""
    on_cuda = s.device.startswith("cuda")
    gpu = s.gpu or {}
    # GPU activity comes from NVML only: CUDA events give each step's device *span* (first
    # to last event), which includes the GPU's idle gaps while it waits for the host.
    util = gpu.get("util_mean_pct") if gpu.get("util_samples", gpu.get("samples", 0)) else None
    # the watched GPU held no tensor: the loop trained elsewhere, so its utilisation says nothing
    trained_here = on_cuda and (s.memory or {}).get("peak_allocated_bytes") != 0
    found = [_input_bound(s, on_cuda, util), _host_sync_bound(s, on_cuda, util),
             _gpu_underused(s, gpu, util) if trained_here else None,
             _launch_bound(gpu, util) if trained_here else None, _memory_near_limit(s, gpu),
             _fragmentation(s)]
    return [item for item in found if item is not None]


def _input_bound(s: Summary, on_cuda: bool, util: float | None) -> Finding | None:
    if on_cuda and util is not None:
        gpu_idle_too = util < INPUT_BOUND_MAX_GPU_UTIL_PCT
    else:
        gpu_idle_too = s.device_span_share is None or s.device_span_share < INPUT_BOUND_MAX_DEVICE_SPAN
    if s.data_wait_share is not None and s.data_wait_share >= INPUT_BOUND_SHARE and gpu_idle_too:
        return worded(
            INPUT_BOUND,
            {"data_wait_share": s.data_wait_share, "data_wait_p50_s": s.data_wait_p50_s,
             "step_time_p50_s": s.step_time_p50_s, "gpu_util_mean_pct": util if on_cuda else None,
             "device_span_share": s.device_span_share},
            share=_pct(s.data_wait_share), wait=_ms(s.data_wait_p50_s), step=_ms(s.step_time_p50_s),
            where=findings.INPUT_BOUND_WHERE_GPU if on_cuda else findings.INPUT_BOUND_WHERE_CPU, busy=_kernel_running(on_cuda, util),
            cpu_note="" if on_cuda else findings.CPU_LOADER_NOTE)

    return None


def _host_sync_bound(s: Summary, on_cuda: bool, util: float | None) -> Finding | None:
    syncs = s.host_syncs or {}
    steps = max(s.steps, 1)
    frequent = [site for site in syncs.get("sites", []) if site["count"] >= SYNC_SITE_STEP_SHARE * steps]
    if frequent:
        top = frequent[0]
        what, advice = sync_site_words(top)
        where = f"{top['file']}:{top['line']}"
        code_text = f" (`{top['code']}`)" if top.get("code") else ""
        others = ""
        if len(frequent) > 1:
            others = findings.SYNC_ALSO_EVERY_STEP.format(sites="; ".join(
                f"{site['file']}:{site['line']} ({sync_site_words(site)[0]})" for site in frequent[1:4]))
        return worded(
            HOST_SYNC_BOUND, {"per_step": syncs.get("per_step"), "sites": frequent[:4]},
            per_step=syncs.get("per_step", 0), what=what, where=where, code_text=code_text,
            site_per_step=top["count"] / steps, busy=_kernel_running(on_cuda, util), others=others, advice=advice)

    return None


def _kernel_running(on_cuda: bool, util: float | None) -> str:
    """What NVML saw of the GPU during the steps, as a sentence to add; "" without it."""
    return findings.KERNEL_RUNNING.format(util=util) if on_cuda and util is not None else ""


def _gpu_underused(s: Summary, gpu: dict[str, Any], util: float | None) -> Finding | None:
    counted = gpu.get("util_samples", gpu.get("samples", 0))
    if util is not None and counted >= GPU_UNDERUTILISED_MIN_SAMPLES \
            and util < GPU_UNDERUTILISED_PCT:
        return worded(GPU_UNDERUTILISED, {"util_mean_pct": util}, util=util, samples=counted)

    return None


def _launch_bound(gpu: dict[str, Any], util: float | None) -> Finding | None:
    """Busy by utilisation, idle by SM activity (GPM, Hopper and later): the loop is launch-bound,
    its kernels too small to fill the GPU. The judgement is gpudoctor's one verdict on "is the GPU
    really busy" (gpudoctor.backends.busy), here on the medians of the samples taken in the steps."""
    from gpudoctor.backends.busy import verdict

    if util is None or not gpu.get("gpm_samples"):
        return None
    found = verdict({"gpu_util_pct": util, "sm_active_pct": gpu.get("sm_active_p50_pct"),
                     "tensor_active_pct": gpu.get("tensor_active_p50_pct")})
    if found.code != "busy_small_kernels":
        return None
    return worded(
        LAUNCH_BOUND, {"util_mean_pct": util, "sm_active_p50_pct": gpu.get("sm_active_p50_pct"),
                       "tensor_active_p50_pct": gpu.get("tensor_active_p50_pct")},
        words=found.summary, samples=gpu["gpm_samples"])


def _memory_near_limit(s: Summary, gpu: dict[str, Any]) -> Finding | None:
    mem = s.memory or {}
    total = mem.get("total_bytes") or gpu.get("memory_total_bytes")
    peak = mem.get("peak_reserved_bytes")
    if total and peak is not None and peak >= MEMORY_NEAR_LIMIT_SHARE * total:
        return worded(f"{MEMORY_NEAR_LIMIT}:allocator", {"peak_reserved_bytes": peak, "total_bytes": total},
                                    peak=_gib(peak), total=_gib(total), share=_pct(peak / total))
    elif gpu.get("memory_used_max_bytes") and gpu.get("memory_total_bytes") and \
            gpu["memory_used_max_bytes"] >= MEMORY_NEAR_LIMIT_DEVICE_SHARE * gpu["memory_total_bytes"]:
        used, dev_total = gpu["memory_used_max_bytes"], gpu["memory_total_bytes"]
        return worded(f"{MEMORY_NEAR_LIMIT}:device",
                                    {"memory_used_max_bytes": used, "memory_total_bytes": dev_total},
                                    share=_pct(used / dev_total), used=_gib(used), total=_gib(dev_total))

    return None


def _fragmentation(s: Summary) -> Finding | None:
    mem = s.memory or {}
    retries = mem.get("alloc_retries") or 0
    reserved = mem.get("reserved_bytes") or 0
    inactive = mem.get("inactive_split_bytes") or 0
    if retries > 0 or (reserved >= FRAGMENTED_MIN_RESERVED and inactive >= FRAGMENTED_SHARE * reserved):
        seen = []
        if retries:
            seen.append(findings.FRAGMENTED_RETRIES.format(retries=retries))
        if reserved and inactive >= FRAGMENTED_SHARE * reserved:
            seen.append(findings.FRAGMENTED_SPLIT.format(inactive=_gib(inactive), reserved=_gib(reserved)))
        return worded(
            FRAGMENTATION, {"alloc_retries": retries, "inactive_split_bytes": inactive, "reserved_bytes": reserved},
            seen="; ".join(seen))
    return None


# -- across ranks -------------------------------------------------------------------------------

def find_stragglers(ranks: Sequence[dict[str, Any]]) -> list[Finding]:
    """Ranks much slower than the median rank, and why.

    Under DistributedDataParallel the ranks run in lockstep: every rank waits at each
    gradient all-reduce for the slowest one, so a rank that is slow to get its data shows
    a long data wait while the others show long *steps* (the waiting happens inside
    backward). Hence: a long data wait names the rank; a long step names it only when
    its whole iteration (wait + step) is also longer than the median's, i.e. when the
    ranks are not simply waiting for each other.

    "The median rank" is a real rank's figure (``statistics.median_low``: of an even count the
    lower middle one), so with two ranks the faster one is the yardstick, not their mean.
    """
    items: list[Finding] = []
    if len(ranks) < 2:
        return items

    waits = {r.get("rank", i): number(r.get("data_wait_p50_s")) for i, r in enumerate(ranks)}
    steps = {r.get("rank", i): number(r.get("step_time_p50_s")) for i, r in enumerate(ranks)}
    known_waits = [v for v in waits.values() if v is not None]
    known_steps = [v for v in steps.values() if v is not None]
    if not known_steps:
        return items
    iterations = {k: (waits[k] or 0.0) + step for k, step in steps.items() if step is not None}
    median_iteration = statistics.median_low(list(iterations.values()))
    min_excess = max(STRAGGLER_MIN_EXCESS_S, STRAGGLER_MIN_EXCESS_SHARE * median_iteration)

    def slower(value: float | None, med: float) -> bool:
        return value is not None and value >= STRAGGLER_RATIO * med and value - med >= min_excess

    if len(known_waits) >= 2:
        median_wait = statistics.median_low(known_waits)
        for rank, wait in waits.items():
            if slower(wait, median_wait):
                items.append(worded(
                    f"{STRAGGLER}:data", {"rank": rank, "data_wait_p50_s": wait, "median_data_wait_p50_s": median_wait},
                    rank=rank, wait=_ms(wait), median=_ms(median_wait)))
    median_step = statistics.median_low(known_steps)
    for rank, step in steps.items():
        if slower(step, median_step) and slower(iterations.get(rank), median_iteration):
            items.append(worded(
                f"{STRAGGLER}:steps", {"rank": rank, "step_time_p50_s": step, "median_step_time_p50_s": median_step},
                rank=rank, step=_ms(step), median=_ms(median_step)))
    return items


# -- words ----------------------------------------------------------------------------------------

def render_text(s: Summary) -> str:
    who = f"rank {s.rank}/{s.world_size}, " if s.world_size > 1 else ""
    if s.steps == 0:
        lines = [f"gpudoctor: no training steps were recorded ({who}{s.device})."]
        lines += [f"  note: {n}" for n in s.notes]
        return "\n".join(lines)
    clock = "CUDA events" if s.timing == "cuda_events" else "host clock"
    head = (f"gpudoctor: {s.steps} steps on {s.device} ({who}{clock}): "
            f"{_ms(s.step_time_p50_s)} per step (median)")
    if s.steps_per_s:
        head += f", {s.steps_per_s:.1f} steps/s"
    lines = [head + "."]
    facts = []
    if s.data_wait_share is not None:
        facts.append(f"waiting for data {_pct(s.data_wait_share)} of the time")
    if s.device_span_share is not None:
        facts.append(f"steps' device span {_pct(s.device_span_share)} of the wall time (not GPU busy time)")
    if s.gpu and s.gpu.get("util_mean_pct") is not None:
        facts.append(f"NVML utilisation {s.gpu['util_mean_pct']:.0f}%")
    energy = s.energy or {}
    if energy.get("joules_per_step") is not None:
        per_joule = energy.get("samples_per_joule")
        facts.append(f"{energy['joules_per_step']:.3g} J per step"
                     + (f", {per_joule:.3g} samples per joule" if per_joule is not None else "")
                     + (f" at {energy['avg_power_w']:.0f} W" if energy.get("avg_power_w") is not None else "")
                     + f" ({'GPU' if energy.get('source') == 'nvml' else 'CPU'} energy counter)")
    if s.host_syncs and "per_step" in s.host_syncs:
        facts.append(f"{s.host_syncs['per_step']:.1f} host syncs per step")
    if facts:
        lines.append("  " + "; ".join(facts) + ".")
    if s.diagnosis:
        for item in s.diagnosis:
            lines.append(f"[{item.code}] {item.summary}")
            lines.append(f"  What to do: {item.fix}")
    else:
        also = findings.ALL_CLEAR_ALSO_ON_GPU if s.device.startswith("cuda") else ""
        lines.append(findings.words("training_all_clear", also=also)[0])
    for note in s.notes:
        lines.append(f"  note: {note}")
    if s.ranks:
        lines.append("  per rank: " + "; ".join(
            f"rank {r.get('rank')}: {_ms(r.get('step_time_p50_s'))}/step, data wait {_ms(r.get('data_wait_p50_s'))}"
            for r in s.ranks))
    return "\n".join(lines)
