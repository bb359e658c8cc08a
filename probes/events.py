"""Xid errors and other critical GPU events: what the driver reported since boot, and whether
each GPU can report events at all.

Sources: the kernel log (``NVRM: Xid (PCI:...): N``), read once, matched to GPUs by PCI bus id;
for a replayed recording, the events it holds; NVML's event stream. A one-shot report registers an
event set and frees it at once (it shows whether each GPU *can* report events); the TUI and the
exporter pass the watcher they run (``ProbeContext.events``), so the events it saw count here.

Judgement (meanings and actions: gpudoctor/xid.py, from NVIDIA's Xid documentation):
* a critical Xid since boot (48, 61, 62, 64, 74, 79, 95, 119, 120, 149, 154): fail, with what to
  do. The GPU may answer now, but the Xid says it failed and that a reset or a hardware check is
  due: the same verdict as the TUI's header, ``watch`` and the exporter give for the same event;
* an uncorrectable ECC event or a failed page retirement seen on NVML's stream (the TUI and the
  exporter hand this probe the watcher they run): fail;
* an application-class Xid (13, 31, 43, 68, 69...): a pass note, with its words: it is usually
  the job's own fault;
* the kernel log unreadable (no root or CAP_SYSLOG with kernel.dmesg_restrict=1, a container):
  a skip that says so; unknown is not "no Xid".
"""

from __future__ import annotations

from gpudoctor.backends.events import DeviceEvents, GpuEvent, critical_events, describe_event
from gpudoctor.model import ProbeResult, Status
from gpudoctor.probes import Probe, ProbeContext


def _judge_gpu(r: ProbeResult, index: int, state: DeviceEvents) -> None:
    from gpudoctor import xid

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
        info = xid.explain(code)
        times = f"{len(events)} time(s)" if len(events) > 1 else "once"
        summary = f"{label}: Xid {code} {times} since boot: {info.words}."
        if info.severity == "critical":
            r.find(Status.FAIL, "xid_critical", summary,
                   why="A critical Xid means the GPU or its link failed; it can fail again mid-job.",
                   fix=info.action[:1].upper() + info.action[1:] + ".", device=index)
        else:
            r.find(Status.PASS, "xid_application", summary,
                   why="This class of Xid is usually raised by a fault in the application, not the GPU.",
                   fix=info.action[:1].upper() + info.action[1:] + ".", device=index)
    hardware = [e for e in critical_events(state) if e.kind != "xid"]
    if hardware:
        r.find(Status.FAIL, "ecc_event_critical",
               f"{describe_event(index, hardware[-1])}, reported by NVML while gpudoctor watched"
               + (f" ({len(hardware)} such events)" if len(hardware) > 1 else "") + ".",
               why="Data in GPU memory was lost or could not be protected: a job on this GPU may have "
                   "computed wrong results or crashed.",
               fix="Drain the node and reset the GPU (`nvidia-smi -r` with no process on it) so the bad "
                   "memory is retired or remapped; replace the board if it repeats.", device=index)


def run(ctx: ProbeContext) -> ProbeResult:
    from gpudoctor.backends.events import open_event_watcher

    gpu = ctx.gpu
    na = gpu.status()
    if na is not None:
        return ProbeResult.skip("events", f"no NVML ({na.reason}): no GPU to attach events to",
                                code="nvml_unavailable")
    count = gpu.device_count()
    if not isinstance(count, int) or count == 0:
        return ProbeResult.skip("events", "no GPU to check", code="no_gpu")
    # A long-running front end (the TUI, the exporter) hands over the watcher it runs: its NVML
    # stream holds what happened while it watched. Otherwise this probe registers its own.
    watcher = ctx.events
    own = watcher is None
    if own:
        watcher = open_event_watcher(gpu)
        start = getattr(watcher, "register", None)
        if start is not None:
            start()  # registers NVML events (to learn what each GPU supports) and reads the kernel log
    try:
        # --device is torch's index; the events are NVML's (CUDA_VISIBLE_DEVICES=3 --device 0 is GPU 3)
        matched = ctx.nvml_index(ctx.device) if ctx.device is not None else None
        if ctx.device is not None and (matched is None or matched >= count):
            return ProbeResult.skip("events", f"torch device {ctx.device} has no NVML device to match",
                                    code="device_not_matched")
        indices = range(count) if ctx.device is None else [matched]
        r = ProbeResult("events")
        for index in indices:
            _judge_gpu(r, index, watcher.snapshot(index))
    finally:
        if own:
            watcher.stop()
    readable = getattr(watcher, "kernel_log_readable", None)
    r.details["kernel_log_readable"] = readable
    if not own:
        r.details["nvml_stream"] = "watched by this process"
    if readable is False:
        r.find(Status.SKIP, "kernel_log_unreadable",
               f"Xids from before now are unknown: {watcher.kernel_log_reason or 'the kernel log is not readable'}.",
               why="The driver writes Xid errors to the kernel log; without it, only NVML events seen while "
                   "gpudoctor runs (exporter, watch, TUI) are counted.",
               fix="Run as root (or with CAP_SYSLOG), or read `sudo dmesg | grep -i xid` yourself.")
    recorded = [m for m in r.measurements if m.name == "events_supported" and m.note == "NotRecorded"]
    if readable is None and len(recorded) == len(list(indices)):
        return ProbeResult.skip("events", "the recording holds no event data (made before gpudoctor recorded "
                                          "events)", code="events_not_recorded")
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


PROBE = Probe(
    name="events",
    title="Xid errors since boot (kernel log) and whether each GPU reports critical events",
    run=run,
    level="quick",
    uses_torch=False,
    timeout_s=20,
    order=35,
    description=__doc__.splitlines()[0],
)
