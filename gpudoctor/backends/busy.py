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

from typing import Any, Mapping

from gpudoctor.core import findings
from gpudoctor.core._num import is_number, number
from gpudoctor.core.model import Finding

from .na import NA

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


#: The verdict is a :class:`~gpudoctor.core.model.Finding`: ``code`` (one of :data:`CODES`), ``summary``
#: (the whole sentence with its numbers), ``fix`` (what to try; "" when nothing), and in
#: ``evidence`` its ``headline`` (a few words for a log line), its ``basis`` ("gpm": SM activity read;
#: "utilisation": idle by utilisation alone, which bounds activity from above; "power": only the
#: weaker evidence; "none") and the readings it was judged on. Its words are gpudoctor.core.findings'
#: ``work:<code>`` entries.
Verdict = Finding


def headline(found: Finding) -> str:
    """The verdict in a few words (``watch``'s line)."""
    return str(found.evidence.get("headline") or found.summary)


def basis(found: Finding) -> str:
    """What the verdict rests on: "gpm", "utilisation", "power" or "none"."""
    return str(found.evidence.get("basis", "gpm"))


def text(found: Finding) -> str:
    """The verdict and its fix on one line."""
    return f"{found.summary}; {found.fix}" if found.fix else found.summary


def record(found: Finding) -> dict[str, str]:
    """The verdict as ``watch --json`` and the health probe's details write it (docs/watch.schema.json)."""
    return {"code": found.code, "headline": headline(found), "words": found.summary, "fix": found.fix,
            "evidence": basis(found)}


def _said(code: str, way: str = "", *, basis: str = "gpm", **fields: Any) -> Finding:
    """The verdict ``code`` in its words (``work:code`` or ``work:code:way``), filled from ``fields``."""
    key = f"work:{code}" + (f":{way}" if way else "")
    worded = findings.wording(key)
    summary, _why, fix = findings.words(key, **fields)
    figures = {k: v for k, v in fields.items() if is_number(v)}
    return Finding(worded.status, code, summary, "", fix,
                   evidence={"basis": basis, "headline": worded.short.format(**fields), **figures})


#: The readings the verdict reads (a front end hands these over, from a sample or a snapshot).
READS = ("gpu_util_pct", "sm_active_pct", "tensor_active_pct", "dram_active_pct", "power_w", "power_limit_w")

#: Every verdict code, in the order of the docs.
CODES = ("idle", "tensor_bound", "busy_small_kernels", "memory_bound", "sm_bound", "waiting", "partly_busy",
         "warming", "no_gpm", "no_reading")


def _phrase(name: str, **fields: Any) -> str:
    return findings.WORK_PHRASES[name].format(**fields)


def verdict(readings: Mapping[str, Any]) -> Finding:
    """Whether the GPU really works, in words, from a sample's readings (``gpu_util_pct``,
    ``sm_active_pct``, ``tensor_active_pct``, ``dram_active_pct``, ``fp32_active_pct``,
    ``power_w``, ``power_limit_w``): percent, NA where not read."""
    util = number(readings.get("gpu_util_pct"), finite=True)
    sm_raw = readings.get("sm_active_pct", NA("NotRecorded"))
    sm = number(sm_raw, finite=True)
    if util is None and sm is None:
        return _said("no_reading", basis="none")
    if sm is None:
        reason = sm_raw.reason if isinstance(sm_raw, NA) else "not read"
        if reason in _WARMING:
            return _said("warming", basis="none")
        if util is not None and util < IDLE_PCT:  # utilisation bounds activity from above: certain
            return _said("idle", "by_utilisation", basis="utilisation", util=util)
        return _without_gpm(util, reason, readings)
    tensor = number(readings.get("tensor_active_pct"), finite=True)
    dram = number(readings.get("dram_active_pct"), finite=True)
    util_text = _phrase("util", util=util) if util is not None else _phrase("util_unknown")
    if (util is None or util < IDLE_PCT) and sm < IDLE_PCT:
        return _said("idle", util=util or 0.0, sm=sm)
    if tensor is not None and tensor >= TENSOR_BUSY_PCT:
        return _said("tensor_bound", tensor=tensor, sm=sm)
    if dram is not None and dram >= DRAM_BOUND_PCT:
        return _said("memory_bound", dram=dram, sm=sm)
    no_tensor = tensor is None or tensor < TENSOR_NONE_PCT
    tensor_text = _phrase("no_tensor") if no_tensor or tensor is None else _phrase("tensor", tensor=tensor)
    if util is not None and util >= BUSY_UTIL_PCT and sm < SM_LOW_PCT:
        return _said("busy_small_kernels", util=util, sm=sm, util_text=util_text, tensor_text=tensor_text)
    if sm >= SM_HIGH_PCT:
        if no_tensor or tensor is None:
            return _said("sm_bound", "no_tensor", sm=sm)
        return _said("sm_bound", sm=sm, tensor=tensor)
    if util is not None and util < BUSY_UTIL_PCT:
        return _said("waiting", util=util, sm=sm)
    return _said("partly_busy", sm=sm, util_text=util_text, tensor_text=tensor_text)


def _without_gpm(util: float | None, reason: str, readings: Mapping[str, Any]) -> Finding:
    """What can be said without SM activity: that it cannot be told, and power as weaker evidence."""
    why = _phrase("not_recorded") if reason == "NotRecorded" else reason
    power, limit = number(readings.get("power_w"), finite=True), number(readings.get("power_limit_w"), finite=True)
    if power is None or limit is None or limit <= 0:
        return _said("no_gpm", "" if util is not None else "no_util", basis="none", util=util, reason=why, power="")
    share = power / limit
    hint = _phrase("power", power=power, limit=limit, share=share)
    if util is not None and util >= BUSY_UTIL_PCT and share < LOW_POWER_SHARE:
        hint += _phrase("power_low")
    return _said("no_gpm", "" if util is not None else "no_util", basis="power", util=util, reason=why, power=hint)


__all__ = ["Verdict", "verdict", "headline", "basis", "text", "record", "CODES", "READS", "BUSY_UTIL_PCT", "IDLE_PCT", "SM_LOW_PCT", "SM_HIGH_PCT",
           "TENSOR_BUSY_PCT", "TENSOR_NONE_PCT", "DRAM_BOUND_PCT", "LOW_POWER_SHARE"]
