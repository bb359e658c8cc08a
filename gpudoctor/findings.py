"""The words of a finding, once per code, and the judgements that more than one front end makes.

A finding (:class:`gpudoctor.model.Finding`) is built here from its code: :data:`WORDING` holds,
for each code, its status and its summary, why and fix as templates (``str.format`` fields
filled from the readings). The health probe, fleet (from Prometheus series), the compute probe,
the TUI and the exporter take their text from this table, so rewording a finding is one edit in
this file.

The judgements are pure functions over readings: the same numbers whether NVML read them on
this machine or Prometheus holds them for a node (:func:`clock_event_findings`,
:func:`clocks_held_down`, :func:`ecc_finding`, :func:`row_remap_findings`,
:func:`retired_pages_findings`). Clock-event ("throttle") reasons are named by NVML's codes
(``hw_slowdown``...; the bits are in gpudoctor.backends.nvml), and worded in
:data:`CLOCK_EVENTS`.

Standard library and gpudoctor.model only: every layer may use it.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from gpudoctor._record import record
from gpudoctor._text import plain_text
from gpudoctor.model import Finding, Status


@record(frozen=True)
class Wording:
    """One finding code's status and words, as templates. A ``summary`` that speaks of one GPU
    starts with ``{label}`` (``"{label} failed to remap a memory row"``) and has no final period:
    :func:`finding` fills the label in and ends the sentence, or, without a label (a fleet row
    names its GPU), leaves the rest of the phrase."""

    status: Status
    summary: str
    why: str = ""
    fix: str = ""


@record(frozen=True)
class ClockEvent:
    """A clock-event reason in words: ``words`` in full (the TUI, ``watch``, the health
    probe), ``short`` where several are listed on one line (fleet)."""

    words: str
    short: str


#: NVML's clock-event reasons by code (nvml.h nvmlClocksEventReason*; bits in backends/nvml.py).
CLOCK_EVENTS: dict[str, ClockEvent] = {
    "gpu_idle": ClockEvent("GPU idle: nothing is running, clocks are lowered to save power", "idle"),
    "applications_clocks": ClockEvent("application clocks setting caps the clocks", "application clocks"),
    "sw_power_cap": ClockEvent("software power cap: the board is at its power limit", "power cap"),
    "hw_slowdown": ClockEvent("hardware slowdown: clocks halved (high temperature, power brake or bad power "
                              "supply)", "hardware slowdown"),
    "sync_boost": ClockEvent("sync boost: clocks matched to another GPU in the group", "sync boost"),
    "sw_thermal_slowdown": ClockEvent("software thermal slowdown: the GPU is too hot", "thermal slowdown (software)"),
    "hw_thermal_slowdown": ClockEvent("hardware thermal slowdown: the GPU is far too hot",
                                      "thermal slowdown (hardware)"),
    "hw_power_brake": ClockEvent("hardware power brake: external power brake asserted", "power brake"),
    "display_clock": ClockEvent("display clock setting", "display clock"),
}
#: The hardware protecting itself: clocks drop sharply while it lasts.
HW_PROTECTION = frozenset({"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake"})
#: Clocks held down by heat or by the hardware. Not the power cap: a fully loaded board's normal state.
HELD_DOWN = HW_PROTECTION | {"sw_thermal_slowdown"}
#: The TUI's clocks line when no reason is active, and for NVML's idle reason beside a busy reading.
CLOCKS_FREE = "no throttling: clocks are not held back"
IDLE_BETWEEN_KERNELS = "idle between kernels: clocks lowered at this instant"
#: What nothing_read's fix adds when some reading was denied for lack of permission.
AS_ROOT = ", and run as root (`sudo gpudoctor report`)"
#: Parts of the training loop's findings: what NVML saw of the GPU, and a CPU-only run's loader advice.
KERNEL_RUNNING = " NVML saw a kernel running {util:.0f}% of the training time."
#: What a fragmentation finding saw: allocation retries, and memory held in split blocks.
FRAGMENTED_RETRIES = "the allocator had to free its cache and retry {retries} time(s) because no free block was large enough"
FRAGMENTED_SPLIT = "{inactive} of the {reserved} it holds sits in split blocks too small to reuse"
CPU_LOADER_NOTE = (" On a CPU-only run the loader's workers and the model share the same cores, so give the workers "
                   "a few cores and leave the rest to the model.")

_HW_WHY = "The hardware is protecting itself; clocks drop sharply and stay low while it lasts."
_HW_FIX = ("Check cooling and power delivery (PSU, cables); `nvidia-smi -q -d PERFORMANCE` shows the reason live; "
           "repeated HW slowdown warrants a hardware check.")
_OOM_AHEAD = "A larger batch or a longer input will run out of memory."
_MEMORY_FIX = ("Lower the batch size (accumulate gradients to keep the effective size), train in mixed precision, "
               "or use activation checkpointing (`torch.utils.checkpoint`). `torch.cuda.empty_cache()` does not "
               "give your process more memory.")
_RESET_FIX = "Reset the GPU (`nvidia-smi -r` when idle) or reboot the node."

_FABRIC_WHY = ("On an NVSwitch board (HGX/DGX) CUDA cannot start on a GPU until the NVIDIA fabric manager has "
               "registered it with the NVLink fabric: torch.cuda.is_available() is False and CUDA programs fail "
               "with error 802 'system not yet initialized'.")
_FABRIC_FIX = ("Start the fabric manager: `sudo systemctl enable --now nvidia-fabricmanager`; its version must "
               "match the driver's exactly (compare `nv-fabricmanager --version` with `nvidia-smi`), and its log "
               "(/var/log/fabricmanager.log) says why it stopped; then check that `nvidia-smi -q` shows the "
               "Fabric State as Completed.")

#: The words of each finding code. A code worded in more than one way (a straggler by its data wait or
#: by its steps) has an entry per way, keyed ``code:way``.
WORDING: dict[str, Wording] = {
    # -- clock events (health probe, compute probe, fleet) -------------------------------------
    "throttle_hw_slowdown": Wording(Status.FAIL, "{label}: {words}", _HW_WHY, _HW_FIX),
    "throttle_hw_thermal_slowdown": Wording(Status.FAIL, "{label}: {words}", _HW_WHY, _HW_FIX),
    "throttle_hw_power_brake": Wording(Status.FAIL, "{label}: {words}", _HW_WHY, _HW_FIX),
    "throttle_sw_thermal_slowdown": Wording(
        Status.WARN, "{label}: {words}", "The driver lowers clocks to keep the temperature in range: slower training.",
        "Improve cooling or airflow."),
    "throttle_sw_power_cap": Wording(
        Status.PASS, "{label}: {words}", "Normal for a fully loaded GPU: it runs as fast as its power budget allows.",
        "Nothing to do unless the power limit was lowered on purpose."),
    "clocks_held_down": Wording(
        Status.WARN, "clocks held down{window}: {reasons}",
        "Heat or the hardware lowers the clocks: the GPU runs slower than it can."),
    "throttled_under_load": Wording(
        Status.WARN, "{label} was throttling {when} the matmul test: {reasons}",
        "Thermal or hardware slowdown lowers the clocks under load, so long runs are slower than short ones.",
        "Check cooling and airflow (nvidia-smi -q -d PERFORMANCE,TEMPERATURE)."),
    # -- device memory (health probe, fleet) ---------------------------------------------------
    "ecc_uncorrected_volatile": Wording(
        Status.FAIL, "{label} had {count} uncorrectable ECC error(s) since the driver loaded",
        "Uncorrectable errors corrupt data or kill the process that hit them (Xid 48/94/95).",
        "Drain the node, reset the GPU (retires/remaps the bad memory), and run a memory test; replace the GPU "
        "if errors come back."),
    "ecc_uncorrected_aggregate": Wording(
        Status.WARN, "{label} has had {count} uncorrectable ECC error(s) over its lifetime (none since driver load)",
        "Past uncorrectable errors point at weak memory cells; retirement/remapping should have isolated them.",
        "Check retired pages / remapped rows below; watch for new volatile errors."),
    "ecc_corrected": Wording(
        Status.PASS, "{label} corrected {count} single-bit ECC error(s) since the driver loaded",
        "Corrected errors are harmless on their own; a fast-growing count precedes page retirement.",
        "Nothing now; alert if the count keeps rising."),
    "row_remap_failure": Wording(
        Status.FAIL, "{label} failed to remap a memory row",
        "The GPU has no spare rows left for a bad one: memory errors will not be isolated.",
        "Replace the GPU (RMA)."),
    "row_remap_pending": Wording(
        Status.WARN, "{label} has a memory row remap pending", "The remap takes effect only after a GPU reset.", _RESET_FIX),
    "retired_pages_pending": Wording(
        Status.WARN, "{label} has memory pages waiting to be retired",
        "Retirement takes effect only after the GPU is reset; until then the bad page can be used.", _RESET_FIX),
    "retired_pages_limit": Wording(
        Status.FAIL, "{label} has {count} retired pages (>= {limit})",
        "NVIDIA's guidance treats this many retirements as a board to return (RMA).", "Replace the GPU."),
    # -- the health probe: what NVML says of one GPU -----------------------------------------
    "gpu_lost": Wording(
        Status.FAIL, "{label} has fallen off the bus (NVML: GpuIsLost)",
        "The driver lost contact with the GPU (Xid 79); every CUDA call on it fails.",
        "Check `dmesg` for Xid errors; the node needs a GPU reset or reboot, and a hardware check (power, seating, "
        "cooling) if it repeats."),
    "driver_not_answering": Wording(
        Status.FAIL, "The NVIDIA driver is not answering: an NVML call made no answer in {seconds} s{where}",
        "A failing GPU (fallen off the bus, Xid 79), a driver in recovery or a stuck nvidia-persistenced holds every "
        "caller of the driver: nvidia-smi and CUDA programs on this node hang too, so nothing else could be checked.",
        "Check the kernel log (`sudo dmesg | grep -i -e xid -e nvrm`) and whether `nvidia-smi` answers; a GPU that "
        "stays blocked needs a GPU reset with no process on it, or a reboot."),
    "gpu_unreachable": Wording(
        Status.FAIL, "GPU {dev} does not answer: NVML returns Unknown Error for its name, UUID and PCI bus id",
        "The driver lists the GPU but cannot read even its identity: CUDA programs on it fail or hang, as with a "
        "GPU that has fallen off the bus.",
        "Check `nvidia-smi` and `dmesg` for Xid 79 or PCIe errors; reset the GPU or reboot, and if it repeats "
        "reseat the card and check its power cables and slot."),
    "nothing_read": Wording(
        Status.WARN, "{label}: nothing could be read: {reasons}",
        "Every health reading (temperature, power, clocks, ECC, PCIe) came back unavailable, so none of them was "
        "checked; every NVIDIA GPU reports at least its temperature and utilisation.",
        "Compare with `nvidia-smi -q`; check the driver (`dmesg`), and in a VM or container that the GPU is passed "
        "through whole{as_root}."),
    "implausible_reading": Wording(
        Status.WARN, "{label}: the driver returned an impossible value ({shown}); shown as n/a",
        "No GPU can have such a reading: it is a driver or sensor fault, so what it should tell (temperature, "
        "errors, clocks) is unknown.",
        "Compare with `nvidia-smi -q`; if it shows the same, update or reinstall the driver, and report the board "
        "if it persists."),
    "readings_need_permission": Wording(
        Status.SKIP, "{label}: not readable without permission (NVML: NoPermission): {names}",
        "The driver lets only privileged users read these, so they were not checked.",
        "Run as root (`sudo gpudoctor report`), or read them with `sudo nvidia-smi -q`; in a container, they need "
        "a privileged container or an administrator."),
    "temperature_critical": Wording(
        Status.FAIL, "{label} is at {temp:.0f} C, within {margin} C of its shutdown threshold ({shutdown:.0f} C)",
        "At the shutdown threshold the GPU turns itself off and the job dies.",
        "Stop the load and check the cooling now (fans, airflow, blocked inlets, datacenter cooling)."),
    "temperature_slowdown": Wording(
        Status.WARN, "{label} is at {temp:.0f} C, at or above its slowdown threshold ({slowdown:.0f} C)",
        "Above the slowdown threshold the GPU lowers its clocks: training runs slower.",
        "Improve cooling or airflow; check that fans run and inlets are clear."),
    "power_limit_lowered": Wording(
        Status.WARN, "{label} power limit is {limit:.0f} W, below its default {default:.0f} W",
        "A lowered power limit caps clocks under load: less throughput than the GPU can give.",
        "If unintended, an administrator can restore it (`nvidia-smi -pl` with the default value)."),
    "pcie_gen_idle_downshift": Wording(
        Status.PASS, "{label} PCIe link at gen {gen:.0f} of {gen_max:.0f} while idle",
        "An idle GPU lowers its link speed to save power and raises it under load: not a fault.",
        "Nothing to do; re-check under load if transfers seem slow."),
    "pcie_gen_degraded": Wording(
        Status.WARN, "{label} PCIe link at gen {gen:.0f} of {gen_max:.0f} while busy",
        "A busy GPU should run its link at full speed; a lower generation halves host<->device bandwidth per "
        "step down.",
        "Check BIOS PCIe settings, risers and slot; reseat the card."),
    "pcie_width_degraded": Wording(
        Status.WARN, "{label} PCIe link is x{width:.0f} of x{width_max:.0f}",
        "Fewer lanes divide host<->device bandwidth; data loading and .to(device) copies get slower.",
        "Reseat the GPU, check the slot's wiring (some x16 slots are x8 electrically) and risers."),
    "persistence_off": Wording(
        Status.PASS, "{label} persistence mode is off",
        "Without it the driver may unload between jobs, so each job's first CUDA call pays seconds of "
        "re-initialisation.",
        "On Linux servers run the nvidia-persistenced daemon (administrator)."),
    "compute_prohibited": Wording(
        Status.FAIL, "{label} is in compute mode Prohibited",
        "No process can create a CUDA context on it: torch fails on first use.",
        "An administrator sets it back with `nvidia-smi -c DEFAULT`."),
    "compute_exclusive": Wording(
        Status.PASS, "{label} is in compute mode Exclusive_Process",
        "Only one process at a time may use it: a second job or a DataLoader worker touching CUDA fails with "
        "'all CUDA-capable devices are busy or unavailable'.",
        "Expected on shared clusters; otherwise `nvidia-smi -c DEFAULT` (administrator)."),
    # -- the health probe: the NVLink fabric (NVSwitch boards) --------------------------------
    "fabric_not_ready:not_started": Wording(
        Status.FAIL, "{label}: its NVLink fabric registration has not started (NVML fabric state: Not Started)",
        _FABRIC_WHY, _FABRIC_FIX),
    "fabric_not_ready:in_progress": Wording(
        Status.FAIL, "{label}: its NVLink fabric registration is still in progress (NVML fabric state: In Progress)",
        _FABRIC_WHY, "Wait a minute and check again; if it stays In Progress, " + _FABRIC_FIX[:1].lower()
        + _FABRIC_FIX[1:]),
    "fabric_failed": Wording(
        Status.FAIL, "{label}: its NVLink fabric registration completed with an error ({result})",
        "The fabric manager finished but could not set this GPU up: CUDA programs fail to start on it, or "
        "cannot reach the other GPUs over NVLink.",
        "Read the fabric manager's log (/var/log/fabricmanager.log, `journalctl -u nvidia-fabricmanager`), check "
        "that its version matches the driver's, then restart it (`sudo systemctl restart nvidia-fabricmanager`) "
        "or reboot the node; if the error stays, have the NVSwitch baseboard checked."),
    "fabric_degraded": Wording(
        Status.WARN, "{label}: its NVLink fabric reports {problems}",
        "The GPU is registered, but NVLink traffic between GPUs may be slower than it should be or fail "
        "(collectives such as NCCL all-reduce slow down or hang).",
        "Check `nvidia-smi -q` (Fabric section) and `nvidia-smi nvlink -s`; if it persists, drain the node and "
        "have its NVLink links or NVSwitch trays checked."),
    # -- the training loop (gpudoctor.hooks: TrainingMonitor's summary) -----------------------
    "input_bound": Wording(
        Status.WARN, "The loop waited for the next batch {share} of its time ({wait} per step, median, against "
                     "{step} of step): the input pipeline does not keep {where} fed.{busy}", "",
        "Load in parallel: `DataLoader(num_workers=N, persistent_workers=True, prefetch_factor=2-4)`; on CUDA add "
        "`pin_memory=True` and `.to(device, non_blocking=True)`. Move per-sample work (decoding, augmentation) out "
        "of Python or onto the GPU, and keep a small dataset resident in device memory.{cpu_note}"),
    "host_sync_bound": Wording(
        Status.WARN, "The host waits for the GPU {per_step:.1f} times per step. The main one is {what} at "
                     "{where}{code_text}, {site_per_step:.1f} times per step: each one empties the GPU's queue, so "
                     "the GPU idles while Python prepares the next step.{busy}{others}", "", "{advice}"),
    "gpu_underutilised": Wording(
        Status.WARN, "The GPU is underused: NVML saw a kernel running {util:.0f}% of the training time (mean of "
                     "{samples} samples taken during the steps).", "",
        "If a cause is listed above, fix it first. Otherwise the steps are too small for this GPU: raise the batch "
        "size (and the learning rate with it), use mixed precision (`torch.autocast`), or fuse small kernels with "
        "`torch.compile`."),
    "launch_bound": Wording(
        Status.WARN, "Launch-bound: {words} (median of {samples} GPM readings during the steps).", "",
        "{verdict_fix}; fuse small operations with torch.compile."),
    "memory_near_limit:allocator": Wording(
        Status.WARN, "Memory is near the limit: PyTorch's allocator held up to {peak} of the GPU's {total} "
                     "({share}). " + _OOM_AHEAD, "", _MEMORY_FIX),
    "memory_near_limit:device": Wording(
        Status.WARN, "Memory is near the limit: the GPU's memory was {share} full ({used} of {total}, all "
                     "processes). " + _OOM_AHEAD, "", _MEMORY_FIX),
    "fragmentation": Wording(
        Status.WARN, "GPU memory is fragmented: {seen}. Each retry stalls the step.", "",
        "Set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` before starting Python, keep tensor shapes steady "
        "between steps (pad variable-length batches to a few sizes), and do not call `torch.cuda.empty_cache()` in "
        "the loop (it frees memory for other processes, not speed for yours)."),
    "straggler:data": Wording(
        Status.WARN, "Rank {rank} is a straggler: it waits for data {wait} per step (median), the median rank "
                     "{median}. Under DistributedDataParallel the other ranks wait for it at every gradient "
                     "all-reduce (their steps look longer for it).", "",
        "Give that rank's DataLoader more workers, check its disk or network path, and make sure every rank reads "
        "shards of the same size."),
    "straggler:steps": Wording(
        Status.WARN, "Rank {rank} is a straggler: its steps take {step} (median), the median rank {median}.", "",
        "Check that rank's GPU (clocks, temperature, other processes on it) and that its batches are the same size "
        "as the other ranks'."),
    # -- fleet: what Prometheus says of a node -------------------------------------------------
    "gpu_not_answering": Wording(
        Status.FAIL, "GPU not answering NVML ({reason})", "",
        "Check `nvidia-smi` and the kernel log on the node; a lost GPU needs a reset or a reboot."),
    "gpu_not_exported": Wording(
        Status.WARN, "GPU no longer exported{since}", "",
        "It fell off the bus, was reset or removed, or the exporter lost it; check `nvidia-smi` and the kernel "
        "log on the node."),
    "sampler_stuck": Wording(Status.ERROR, "the exporter's sampler is stuck inside an NVML call (readings are old)"),
    "nvml_down": Wording(Status.FAIL, "NVML is down on the node ({reasons})"),
    "readings_old": Wording(Status.ERROR, "readings {age} old"),
    "report_failed": Wording(Status.FAIL, "the node's last report failed", "",
                             "Run `gpudoctor report` there."),
    "report_warned": Wording(Status.WARN, "the node's last report: {verdict}"),
    "report_old": Wording(Status.WARN, "the node's last report is {age} old"),
    "target_down": Wording(Status.ERROR, "target not answering Prometheus{since}", "",
                           "Is the exporter running on the node?"),
    "target_down_unseen": Wording(
        Status.ERROR, "target not answering Prometheus, and no GPU of it seen in the look-back window"),
    "xid": Wording(Status.WARN, "Xid {xid}{when}: {words}; {action}"),
    "busy_small_kernels": Wording(Status.WARN, "{words}"),
}


def finding(code: str, *, label: str | None = None, device: int | None = None, status: Status | None = None,
            evidence: dict[str, Any] | None = None, **fields: object) -> Finding:
    """The finding ``code`` in :data:`WORDING`'s words, its templates filled from ``fields``.

    With ``label`` (``"GPU 0 (NVIDIA H100)"``) the summary is a sentence about that GPU
    (``"GPU 0 (NVIDIA H100) failed to remap a memory row."``); without, the phrase after the label
    (``"failed to remap a memory row"``: a fleet row names its GPU)."""
    summary, why, fix = words(code, label=label, **fields)
    return Finding(status or WORDING[code].status, code.partition(":")[0], summary, why, fix, device,
                   dict(evidence or {}))


def words(code: str, *, label: str | None = None, **fields: object) -> tuple[str, str, str]:
    """(summary, why, fix) of the finding ``code``, its templates filled (see :func:`finding`)."""
    wording = WORDING[code]
    if label is None:
        summary = wording.summary.format(label="", **fields).lstrip(": ")
    else:
        summary = wording.summary.format(label=label, **fields) + "."
    return summary, wording.why.format(**fields), wording.fix.format(**fields)


def one_line(f: Finding) -> str:
    """A finding on one line (a fleet row's reason): its summary, then what to do."""
    if not f.fix:
        return f.summary
    return f"{f.summary}: {f.fix[:1].lower()}{f.fix[1:].rstrip('.')}"


# -- judgements --------------------------------------------------------------------------------

def clock_event_findings(reasons: Iterable[str], *, label: str | None = None,
                         device: int | None = None) -> list[Finding]:
    """One finding per clock-event reason that matters, in the order given: the hardware
    protecting itself fails, a software thermal slowdown warns, the power cap passes (a loaded
    board's normal state). Idle, sync boost and the clock settings say nothing."""
    return [finding(f"throttle_{code}", label=label, device=device, words=CLOCK_EVENTS[code].words)
            for code in reasons if f"throttle_{code}" in WORDING]


def clocks_held_down(reasons: Iterable[str], counts: Mapping[str, int] | None = None,
                     window: str = "") -> Finding | None:
    """Clocks held down by heat or by the hardware, as one warning naming every active reason
    (the power cap too, when it is also active); None for the power cap alone. With ``counts``
    (events per reason seen in a window, ``window`` saying which: " in the last 5 min"), each
    reason is named with its count."""
    active = {code for code in reasons if code in CLOCK_EVENTS}
    if not active & HELD_DOWN:
        return None
    named = sorted((CLOCK_EVENTS[code].short, code) for code in active if code in HELD_DOWN | {"sw_power_cap"})
    words = [short if counts is None else f"{short} ({counts.get(code, 0)} time(s))" for short, code in named]
    return finding("clocks_held_down", window=window, reasons=", ".join(words),
                   evidence={"reasons": sorted(active), **({"counts": dict(counts)} if counts else {})})


def _whole(value: int | float) -> str:
    """A count as written: an int whole (``:.0f`` would round it through a float past 2**53)."""
    return str(value) if isinstance(value, int) else f"{value:.0f}"


def ecc_finding(volatile_uncorrected: float | None, aggregate_uncorrected: float | None = None,
                volatile_corrected: float | None = None, *, label: str | None = None,
                device: int | None = None) -> Finding | None:
    """ECC errors: uncorrectable ones since the driver loaded fail; past ones warn; corrected ones
    are said (a pass)."""
    if volatile_uncorrected:
        return finding("ecc_uncorrected_volatile", label=label, device=device, count=_whole(volatile_uncorrected))
    if aggregate_uncorrected:
        return finding("ecc_uncorrected_aggregate", label=label, device=device, count=_whole(aggregate_uncorrected))
    if volatile_corrected:
        return finding("ecc_corrected", label=label, device=device, count=_whole(volatile_corrected))
    return None


def row_remap_findings(failure: bool, pending: bool, *, label: str | None = None,
                       device: int | None = None) -> list[Finding]:
    """Row remapping (Ampere on): a failure means replacing the GPU; a pending remap waits for a reset."""
    if failure:
        return [finding("row_remap_failure", label=label, device=device)]
    if pending:
        return [finding("row_remap_pending", label=label, device=device)]
    return []


def retired_pages_findings(pending: bool, total: float | None = None, limit: int | None = None, *,
                           label: str | None = None, device: int | None = None) -> list[Finding]:
    """Page retirement (before Ampere): pages waiting for a reset, and a count at the RMA limit."""
    found = []
    if pending:
        found.append(finding("retired_pages_pending", label=label, device=device))
    if total is not None and limit is not None and total >= limit:
        found.append(finding("retired_pages_limit", label=label, device=device, count=_whole(total), limit=limit))
    return found


# -- the NVLink fabric (NVSwitch boards) ----------------------------------------------------------
#: NVML_GPU_FABRIC_STATE_* (nvml.h).
FABRIC_NOT_SUPPORTED, FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS, FABRIC_COMPLETED = 0, 1, 2, 3
FABRIC_STATE_WORDS = {FABRIC_NOT_SUPPORTED: "not supported", FABRIC_NOT_STARTED: "not started",
                      FABRIC_IN_PROGRESS: "in progress", FABRIC_COMPLETED: "completed"}
# The fabric health mask (nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*): each field is (shift, width); a
# field's value 0 is "not supported" on this GPU. The value listed with a field is the unhealthy one.
_FABRIC_HEALTH_FIELDS = (
    (0, 0x3, 1, "degraded bandwidth"),                      # DEGRADED_BW_TRUE
    (2, 0x3, 1, "route recovery in progress"),              # ROUTE_RECOVERY_TRUE
    (4, 0x3, 1, "an unhealthy route"),                      # ROUTE_UNHEALTHY_TRUE
    (6, 0x3, 1, "access timeout recovery in progress"),     # ACCESS_TIMEOUT_RECOVERY_TRUE
    (14, 0x3, 2, "the global fabric manager disconnected"),  # GFM_STATE_DISCONNECTED
)
# INCORRECT_CONFIGURATION (shift 8, width 0xf): 0 not supported, 1 none, the others a wrong set-up.
_FABRIC_CONFIGURATION = {2: "incorrect system GUID", 3: "incorrect chassis serial number", 4: "no partition",
                         5: "insufficient NVLinks", 6: "incompatible GPU firmware", 7: "invalid location",
                         8: "invalid GPU state"}
#: NVML_GPU_FABRIC_HEALTH_SUMMARY_* values that are not healthy.
_FABRIC_SUMMARY = {2: "an unhealthy fabric (health summary)", 3: "limited capacity (health summary)"}


def fabric_health_problems(mask: object, summary: object = None) -> list[str]:
    """What the fabric health mask and summary say is wrong, in words (empty: nothing, or not known)."""
    problems: list[str] = []
    if isinstance(mask, int) and not isinstance(mask, bool):
        for shift, width, bad, words in _FABRIC_HEALTH_FIELDS:
            if (mask >> shift) & width == bad:
                problems.append(words)
        configuration = (mask >> 8) & 0xF
        if configuration in _FABRIC_CONFIGURATION:
            problems.append(f"an incorrect configuration ({_FABRIC_CONFIGURATION[configuration]})")
    if isinstance(summary, int) and summary in _FABRIC_SUMMARY:
        problems.append(_FABRIC_SUMMARY[summary])
    return problems


def _fabric_state(static: Mapping[str, Any]) -> int | None:
    state = static.get("fabric_state")
    return state if isinstance(state, int) and not isinstance(state, bool) else None


def fabric_findings(static: Mapping[str, Any], *, label: str | None = None,
                    device: int | None = None) -> list[Finding]:
    """The GPU's NVLink fabric registration (static facts of NvmlBackend.fabric): not started or in
    progress fails (CUDA cannot start), completed with an error fails, unhealthy bits warn. No
    fabric (a PCIe board, a GPU before Hopper: NotSupported, state 0) is no finding."""
    state = _fabric_state(static)
    evidence = {k: static.get(k) for k in ("fabric_state", "fabric_status", "fabric_health_mask",
                                          "fabric_health_summary") if isinstance(static.get(k), (int, str))}
    if state == FABRIC_NOT_STARTED:
        return [finding("fabric_not_ready:not_started", label=label, device=device, evidence=evidence)]
    if state == FABRIC_IN_PROGRESS:
        return [finding("fabric_not_ready:in_progress", label=label, device=device, evidence=evidence)]
    if state != FABRIC_COMPLETED:
        return []
    status = static.get("fabric_status")
    if isinstance(status, str) and status != "Success":
        return [finding("fabric_failed", label=label, device=device, result=plain_text(status, limit=80), evidence=evidence)]
    problems = fabric_health_problems(static.get("fabric_health_mask"), static.get("fabric_health_summary"))
    if problems:
        return [finding("fabric_degraded", label=label, device=device, problems=", ".join(problems),
                        evidence=evidence)]
    return []


def fabric_not_completed(statics: Iterable[Mapping[str, Any]]) -> str:
    """Words naming the GPUs (by NVML index) whose fabric registration NVML shows not completed
    (not started, in progress, or completed with an error), for a CUDA start that failed with 802;
    empty when NVML shows none (no fabric, or every GPU registered)."""
    named: list[str] = []
    for static in statics:
        state = _fabric_state(static)
        status = static.get("fabric_status")
        index = static.get("index")
        gpu = f"GPU {index}" if isinstance(index, int) else "a GPU"
        if state in (FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS):
            named.append(f"{gpu}: {FABRIC_STATE_WORDS[state]}")
        elif state == FABRIC_COMPLETED and isinstance(status, str) and status != "Success":
            named.append(f"{gpu}: completed with {plain_text(status, limit=80)}")
    if not named:
        return ""
    return "NVML shows the NVLink fabric registration unfinished (" + "; ".join(named) + ")"


__all__ = ["CLOCK_EVENTS", "CLOCKS_FREE", "ClockEvent", "HELD_DOWN", "HW_PROTECTION", "IDLE_BETWEEN_KERNELS",
           "WORDING", "Wording", "clock_event_findings", "clocks_held_down", "ecc_finding", "fabric_findings",
           "fabric_health_problems", "fabric_not_completed", "finding", "one_line",
           "retired_pages_findings", "row_remap_findings", "words"]
