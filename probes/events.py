"""Xid errors and other critical GPU events: what the driver reported since boot, and whether
each GPU can report events at all.

Sources: the kernel log (``NVRM: Xid (PCI:...): N``), read once, matched to GPUs by PCI bus id;
for a replayed recording, the events it holds; NVML's event stream. A one-shot report registers an
event set and frees it at once (it shows whether each GPU *can* report events); the TUI and the
exporter pass the watcher they run (``ProbeContext.events``), so the events it saw count here.

Judgement (meanings and actions: gpudoctor/core/xid.py, from NVIDIA's Xid documentation):
* a critical Xid since boot (48, 61, 62, 64, 74, 79, 95, 119, 120, 149, 154): fail, with what to
  do. The GPU may answer now, but the Xid says it failed and that a reset or a hardware check is
  due: the same verdict as the TUI's header, ``watch`` and the exporter give for the same event;
* an uncorrectable ECC event or a failed page retirement seen on NVML's stream (the TUI and the
  exporter hand this probe the watcher they run): fail;
* an application-class Xid (13, 31, 43, 68, 69...): a pass note, with its words: it is usually
  the job's own fault;
* the same application-class Xid 3 or more times on one GPU while the node's other GPUs show
  none of it: warn ``xid_repeated_on_one_gpu`` (the GPU, not the programs, is the common factor);
* Xid 31 (MMU fault) on every GPU of a node of 2+ GPUs within one 10-minute window: fail
  ``xid_on_every_gpu`` (a node-wide episode that hangs the GPUs: they need a reset or the node a
  reboot before the next job, so the node is drained like for a critical Xid);
* a critical Xid followed by a follow-up one (45: the driver cleaning up the killed job's channels)
  is judged by the critical one: each code is judged, the sequence in order, so the later 45 never
  hides it (the follow-up's note names what it followed);
* the kernel log unreadable (no root or CAP_SYSLOG with kernel.dmesg_restrict=1, a container):
  a skip that says so; unknown is not "no Xid".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpudoctor.backends.events import (DeviceEvents, EventSource, GpuEvent, critical_events,
                                       describe_event)
from gpudoctor.core import findings
from gpudoctor.core.model import ProbeResult, Status

from . import Probe, ProbeContext, _wording

if TYPE_CHECKING:
    from gpudoctor.backends.base import GpuBackend


def _judge_gpu(r: ProbeResult, index: int, state: DeviceEvents) -> None:
    label = f"GPU {index}"
    xids = sorted(state.logged_xids + [e for e in state.recent if e.kind == "xid"], key=lambda e: e.time)
    r.measure("xid_since_boot", len(xids), device=index)
    supported = state.supported
    r.measure("events_supported", supported is None, device=index,
              note="" if supported is None else supported.reason)
    by_code: dict[int, list[GpuEvent]] = {}
    for event in xids:
        by_code.setdefault(int(event.code or 0), []).append(event)
    for code, events in sorted(by_code.items()):
        from gpudoctor.core import xid  # the catalogue's tables, only when there is an Xid to judge

        info = xid.explain(code)
        said: dict[str, Any] = {"gpu": label, "xid": code, "words": info.words, "action": findings.sentence(info.action),
                "times": _wording.XID_TIMES.format(count=len(events)) if len(events) > 1 else _wording.XID_ONCE}
        if info.severity == "critical":
            r.findings.append(findings.finding("xid_critical", device=index, **said))
            continue
        before = _followed(xids, code)
        r.findings.append(findings.finding("xid_application:follow_up", device=index, before=before, **said) if before
                          else findings.finding("xid_application", device=index, **said))
    hardware = [e for e in critical_events(state) if e.kind != "xid"]
    if hardware:
        r.findings.append(findings.finding("ecc_event_critical", device=index, event=describe_event(index, hardware[-1]),
                                           count=_wording.ECC_EVENTS.format(count=len(hardware))
                                           if len(hardware) > 1 else ""))


def _followed(xids: list[GpuEvent], code: int) -> int | None:
    """For a follow-up Xid (45), the Xid logged just before its first occurrence, if another."""
    from gpudoctor.core import xid

    if code not in xid.FOLLOW_UP_XIDS:
        return None
    earlier = None
    for event in xids:
        if int(event.code or 0) == code:
            return earlier
        earlier = int(event.code or 0)
    return None


# Why 3: one Xid 13/31/43 is an application fault; a second on the same GPU can be the same job
# restarted by its scheduler or its user with the same bug; a third, with the node's other GPUs
# clean of it, is more than one job's bad luck and worth the few minutes of moving the job.
REPEATED_ON_ONE_GPU = 3
# Why 10 minutes: a node-wide fault reaches every GPU within seconds (one in each GPU's running
# channel); the window leaves room for GPUs whose jobs touch memory later, and stays one episode.
EVERY_GPU_WINDOW_S = 600.0


def _xids(state: DeviceEvents) -> list[GpuEvent]:
    return [e for e in state.logged_xids + state.recent if e.kind == "xid"]


def _judge_node(r: ProbeResult, states: dict[int, DeviceEvents], judged: list[int]) -> None:
    """What only the node's GPUs side by side show: one GPU that keeps faulting while its
    neighbours do not, and an MMU fault on every GPU at once. ``states`` holds every GPU of the
    node (the comparison needs them all); findings about one GPU are made for ``judged`` only."""
    if len(states) < 2:
        return  # nothing to compare with: one GPU cannot stand out from itself
    from gpudoctor.core import xid

    counts: dict[int, dict[int, int]] = {}
    for index, state in states.items():
        for event in _xids(state):
            code = int(event.code or 0)
            if code in xid.APPLICATION_XIDS:
                counts.setdefault(code, {}).setdefault(index, 0)
                counts[code][index] += 1
    for code, per_gpu in sorted(counts.items()):
        if len(per_gpu) != 1:
            continue  # the same Xid on two or more GPUs: the program is the common factor
        (index, n), = per_gpu.items()
        if n < REPEATED_ON_ONE_GPU or index not in judged:
            continue
        r.findings.append(findings.finding("xid_repeated_on_one_gpu", device=index, gpu=index, xid=code, count=n,
                                           others=len(states) - 1, words=xid.explain(code).words))
    faults = {index: sorted(e.time for e in _xids(state) if e.code == xid.MMU_FAULT_XID)
              for index, state in states.items()}
    if not all(faults.values()):
        return
    for start in sorted(t for times in faults.values() for t in times):
        if all(any(start <= t <= start + EVERY_GPU_WINDOW_S for t in times) for times in faults.values()):
            r.findings.append(findings.finding("xid_on_every_gpu", count=len(states),
                                               minutes=int(EVERY_GPU_WINDOW_S // 60)))
            return


def _own_watcher(gpu: GpuBackend) -> EventSource:
    """An event watcher for this report alone, registered: that registration learns what each GPU
    supports, and reads the kernel log."""
    from gpudoctor.backends.events import open_event_watcher

    watcher = open_event_watcher(gpu)
    watcher.register()  # a replay's has nothing to do
    return watcher


def _settled(r: ProbeResult, watcher: EventSource, own: bool, indices: list[int]) -> ProbeResult:
    """The judged GPUs' result with what the kernel log's absence means, and its summary."""
    readable = watcher.kernel_log_readable
    r.details["kernel_log_readable"] = readable
    if not own:
        r.details["nvml_stream"] = "watched by this process"
    if readable is False:
        r.findings.append(findings.finding("kernel_log_unreadable",
                                           reason=watcher.kernel_log_reason or _wording.KERNEL_LOG_CLOSED))
    recorded = [m for m in r.measurements if m.name == "events_supported" and m.note == "NotRecorded"]
    if readable is None and len(recorded) == len(indices):
        return findings.skipped("events", "events_not_recorded")
    problems = [f for f in r.findings if f.status == Status.FAIL]
    total = sum(m.value for m in r.measurements if m.name == "xid_since_boot")
    if readable is False and not total and not problems:
        summary = "kernel log not readable: Xids since boot unknown"
    elif total or problems:
        summary = (f"{total} Xid(s) since boot" if total else "no Xid since boot") + \
            (f", {len(problems)} critical" if problems else "")
    else:
        summary = "no Xid since boot"
    r.settle(summary)
    if readable is False and r.status == Status.PASS:
        r.status = Status.SKIP
    return r


def run(ctx: ProbeContext) -> ProbeResult:
    gpu = ctx.gpu
    count = ctx.nvml_count("events")
    if isinstance(count, ProbeResult):
        return count
    # A long-running front end (the TUI, the exporter) hands over the watcher it runs: its NVML
    # stream holds what happened while it watched. Otherwise this probe registers its own.
    watcher = ctx.events
    own = watcher is None
    if watcher is None:
        watcher = _own_watcher(gpu)
    try:
        # --device is torch's index; the events are NVML's (CUDA_VISIBLE_DEVICES=3 --device 0 is GPU 3)
        matched = ctx.nvml_index(ctx.device) if ctx.device is not None else None
        if ctx.device is not None and (matched is None or matched >= count):
            return findings.skipped("events", "device_not_matched", device_index=ctx.device)
        indices = list(range(count)) if matched is None else [matched]  # matched is None: no --device
        r = ProbeResult("events")
        states = {index: watcher.snapshot(index) for index in range(count)}
        for index in indices:
            _judge_gpu(r, index, states[index])
        _judge_node(r, states, indices)
    finally:
        if own:
            watcher.stop()
    return _settled(r, watcher, own, indices)


PROBE = Probe.define(__name__, run, "Xid errors since boot (kernel log) and whether each GPU reports critical events",
                     level="quick", uses_torch=False, timeout_s=20, order=35)
