"""Is the GPU really busy? The one verdict in words, over one sample's readings.

NVML's utilisation (``gpu_util_pct``) is the share of time in which any kernel ran: one tiny
kernel after another reads 100 %. GPM's SM activity (``sm_active_pct``, Hopper and later) is the
share of SM cycles with work resident, averaged over every SM, so it tells a GPU doing real work
from one kept merely busy. :func:`verdict` reads both (and tensor, DRAM, fp32 activity), and where
GPM is missing says what cannot be told, with the weaker evidence of power draw against the power
limit, labelled as such. It is a pure function of a mapping of readings (a sample, a snapshot's
readings, a fleet row's values in percent), shared by the TUI, ``watch``, the exporter and fleet.

The thresholds are named below with their reasoning; docs/utilisation.md explains them for users.
None of them has been measured on a GPU by gpudoctor yet: they follow from what the counters count.

This module sits in the backends layer and imports nothing above it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from .na import NA, is_na

# --------------------------------------------------------------------------- thresholds
#: Utilisation at or above this reads "busy": a kernel ran for at least 80 % of the sample period,
#: so the host keeps the GPU fed most of the time (gaps for data loading and syncs are below 20 %).
BUSY_UTIL_PCT = 80.0
#: Utilisation and SM activity both below this read "idle": a desktop, a monitor or a stray context
#: keeps a few percent, no training does.
IDLE_PCT = 5.0
#: SM activity below this beside busy utilisation means the kernels occupy few SMs: one thread
#: block per kernel fills 1 of an H100's 132 SMs (under 1 %), and a kernel filling every SM for
#: half its time reads 50 %. Below 30 % most of the GPU idles while utilisation says it is busy.
SM_LOW_PCT = 30.0
#: SM activity at or above this means the SMs are kept full: the GPU, not the host, sets the pace.
SM_HIGH_PCT = 70.0
#: Tensor activity at or above this means the work is matrix math on tensor cores that keeps them
#: busy at least half the time: the GPU is the bottleneck, the right kind of busy.
TENSOR_BUSY_PCT = 50.0
#: Tensor activity below this counts as "no tensor work" (fp32 math, elementwise kernels).
TENSOR_NONE_PCT = 1.0
#: DRAM bandwidth use at or above this, with tensor cores not busy, means memory-bound: more than
#: 60 % of peak bandwidth is hard to exceed in practice, so the kernels wait on memory.
DRAM_BOUND_PCT = 60.0
#: Without GPM: power below this share of the limit beside busy utilisation is a weak hint of small
#: kernels (a GPU working hard draws most of its limit); only a hint, since clocks, memory-bound work
#: and the board's idle draw move power too.
LOW_POWER_SHARE = 0.4

# NA reasons that mean "GPM has not read yet" rather than "this GPU cannot".
_WARMING = {"Warming"}


@dataclass(frozen=True)
class Verdict:
    """``code`` (one word for machines), ``headline`` (a few words for a log line), ``words``
    (the whole sentence with its numbers), ``fix`` (what to try; "" when nothing), ``evidence``
    ("gpm": SM activity read; "utilisation": idle by utilisation alone, which bounds activity from
    above; "power": only the weaker evidence; "none")."""

    code: str
    headline: str
    words: str
    fix: str = ""
    evidence: str = "gpm"

    def text(self) -> str:
        return f"{self.words}; {self.fix}" if self.fix else self.words

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "headline": self.headline, "words": self.words, "fix": self.fix,
                "evidence": self.evidence}


#: The readings the verdict reads (a front end hands these over, from a sample or a snapshot).
READS = ("gpu_util_pct", "sm_active_pct", "tensor_active_pct", "dram_active_pct", "power_w", "power_limit_w")

#: Every verdict code, in the order of the docs.
CODES = ("idle", "tensor_bound", "busy_small_kernels", "memory_bound", "sm_bound", "waiting", "partly_busy",
         "warming", "no_gpm", "no_reading")


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or is_na(value):
        return None
    return float(value) if math.isfinite(value) else None


def _pct(value: float) -> str:
    return f"{value:.0f}%"


def verdict(readings: Mapping[str, Any]) -> Verdict:
    """Whether the GPU really works, in words, from a sample's readings (``gpu_util_pct``,
    ``sm_active_pct``, ``tensor_active_pct``, ``dram_active_pct``, ``fp32_active_pct``,
    ``power_w``, ``power_limit_w``): percent, NA where not read."""
    util = _num(readings.get("gpu_util_pct"))
    sm_raw = readings.get("sm_active_pct", NA("NotRecorded"))
    sm = _num(sm_raw)
    if util is None and sm is None:
        return Verdict("no_reading", "no reading", "no utilisation reading: nothing to judge", evidence="none")
    if sm is None:
        reason = sm_raw.reason if isinstance(sm_raw, NA) else "not read"
        if reason in _WARMING:
            return Verdict("warming", "not enough to judge yet",
                           "not enough to judge yet: SM activity needs two GPM samples (next reading)",
                           evidence="none")
        if util is not None and util < IDLE_PCT:  # utilisation bounds activity from above: certain
            return Verdict("idle", "idle", f"idle: kernels ran {_pct(util)} of the time", evidence="utilisation")
        return _without_gpm(util, reason, readings)
    tensor = _num(readings.get("tensor_active_pct"))
    dram = _num(readings.get("dram_active_pct"))
    util_text = f"busy {_pct(util)} of the time" if util is not None else "utilisation unknown"
    if (util is None or util < IDLE_PCT) and sm < IDLE_PCT:
        return Verdict("idle", "idle", f"idle: kernels ran {_pct(util or 0.0)} of the time, SM activity {_pct(sm)}")
    if tensor is not None and tensor >= TENSOR_BUSY_PCT:
        return Verdict("tensor_bound", f"tensor cores {_pct(tensor)} active: GPU-bound",
                       f"tensor cores {_pct(tensor)} active (SM activity {_pct(sm)}): the GPU is the bottleneck, "
                       "doing the right kind of work")
    if dram is not None and dram >= DRAM_BOUND_PCT:
        return Verdict("memory_bound", f"memory-bound: DRAM {_pct(dram)}, SM {_pct(sm)}",
                       f"memory-bound: DRAM bandwidth {_pct(dram)} used, SM activity {_pct(sm)}",
                       "fuse elementwise work (torch.compile), use bf16 to halve the bytes moved, "
                       "or larger batches for more math per byte")
    no_tensor = tensor is None or tensor < TENSOR_NONE_PCT
    tensor_text = "no tensor work" if no_tensor or tensor is None else f"tensor cores {_pct(tensor)} active"
    if util is not None and util >= BUSY_UTIL_PCT and sm < SM_LOW_PCT:
        return Verdict("busy_small_kernels", f"busy {_pct(util)} but SM only {_pct(sm)}: small kernels",
                       f"{util_text}, but only {_pct(sm)} of SM cycles active and {tensor_text}: "
                       "small kernels or fp32 math",
                       "try larger batches, bf16/TF32 autocast or CUDA graphs")
    if sm >= SM_HIGH_PCT:
        if no_tensor:
            return Verdict("sm_bound", f"SMs {_pct(sm)} active, no tensor work",
                           f"SMs {_pct(sm)} active with {tensor_text}: the GPU is the bottleneck on CUDA cores",
                           "bf16 or TF32 autocast moves matrix math onto the tensor cores")
        return Verdict("sm_bound", f"SMs {_pct(sm)} active: GPU-bound",
                       f"SMs {_pct(sm)} active, {tensor_text}: the GPU is the bottleneck")
    if util is not None and util < BUSY_UTIL_PCT:
        return Verdict("waiting", f"kernels ran {_pct(util)}: GPU waits on the host",
                       f"kernels ran only {_pct(util)} of the time (SM activity {_pct(sm)}): the GPU waits on "
                       "the host", "feed it faster: DataLoader workers, pinned memory, fewer host syncs (.item())")
    return Verdict("partly_busy", f"SM {_pct(sm)} active: partly working",
                   f"{util_text}, SM activity {_pct(sm)} with {tensor_text}: part of the GPU works",
                   "larger batches or bf16 autocast give the SMs more to do")


def _without_gpm(util: float | None, reason: str, readings: Mapping[str, Any]) -> Verdict:
    """What can be said without SM activity: that it cannot be told, and power as weaker evidence."""
    why = {"NotRecorded": "not recorded"}.get(reason, reason)
    head = (f"kernels ran {_pct(util)} of the time" if util is not None else "no reading of how often kernels ran")
    words = f"{head}; how much of the GPU worked cannot be told (SM activity: {why})"
    headline = f"{head}; SM activity {why}"
    power, limit = _num(readings.get("power_w")), _num(readings.get("power_limit_w"))
    if power is None or limit is None or limit <= 0:
        return Verdict("no_gpm", headline, words, evidence="none")
    share = power / limit
    hint = f"weaker evidence: power {power:.0f}/{limit:.0f} W ({share:.0%} of the limit)"
    if util is not None and util >= BUSY_UTIL_PCT and share < LOW_POWER_SHARE:
        hint += ", low for a busy GPU: perhaps small kernels"
    return Verdict("no_gpm", headline, f"{words}; {hint}", evidence="power")


__all__ = ["Verdict", "verdict", "CODES", "READS", "BUSY_UTIL_PCT", "IDLE_PCT", "SM_LOW_PCT", "SM_HIGH_PCT",
           "TENSOR_BUSY_PCT", "TENSOR_NONE_PCT", "DRAM_BOUND_PCT", "LOW_POWER_SHARE"]
