"""The words of a finding, once per code, and the judgements that more than one front end makes.

A finding (:class:`gpudoctor.core.model.Finding`) is built here from its code: :data:`WORDING` holds,
for each code, its status and its summary, why and fix as templates (``str.format`` fields
filled from the readings). The health probe, fleet (from Prometheus series), the compute probe,
the TUI and the exporter take their text from this table, so rewording a finding is one edit in
this file. The codes only the probes make are worded in probes/_wording.py, registered in
:data:`_TABLES` (the one index of wording tables): :func:`wording` finds a code in whichever
table holds it, and :func:`finding`, :func:`words`, :func:`skipped` and :func:`errored` build from it.

The judgements are pure functions over readings: the same numbers whether NVML read them on
this machine or Prometheus holds them for a node (:func:`clock_event_findings`,
:func:`clocks_held_down`, :func:`ecc_finding`, :func:`row_remap_findings`,
:func:`retired_pages_findings`). Clock-event ("throttle") reasons are named by NVML's codes
(``hw_slowdown``...; the bits are in gpudoctor.backends.nvml), and worded in
:data:`CLOCK_EVENTS`.

Standard library and gpudoctor.core.model only: every layer may use it.
"""

from __future__ import annotations

import importlib
from typing import Any, Iterable, Mapping

from gpudoctor.core._record import record
from gpudoctor.core._text import plain_text
from gpudoctor.core.model import Finding, ProbeResult, Status


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
    #: A few words for a log line or a panel's header (the work verdict's headline), or a fault's line (watch's
    #: FAULT line, the TUI's panel: :data:`DEVICE_FAULTS`); "" for most codes.
    short: str = ""
    #: One word for a compact cell (the work verdict in the TUI's compact Overview); "" for most codes.
    tag: str = ""
    #: What the live views say of a machine where NVML cannot be used for this code's reason (watch, record, the
    #: TUI's panel: :data:`NO_GPU_CODES`), one sentence without its final period; "" for most codes.
    no_gpu: str = ""


@record(frozen=True)
class ReasonWords:
    """A reason in words: ``words`` in full, ``short`` where room is short. A clock-event reason
    (:data:`CLOCK_EVENTS`: in full in the TUI, ``watch`` and the health probe, short where several are
    listed on one line, in fleet); why a reading is not available (:data:`NA_REASONS`: in full in
    ``watch -v`` and the TUI's wide cells, short in its narrow value cells)."""

    words: str
    short: str


def sentence(words: str) -> str:
    """A table's words begun as a sentence of their own (an Xid's action, which the catalogue holds
    mid-sentence, said as a finding's own sentence): the first letter made capital. With
    :func:`clause`, the one place a table's words change case; tests/core/test_wording_tables.py
    holds every other module to saying them as they are."""
    return words[:1].upper() + words[1:]


def clause(words: str) -> str:
    """A table's words joined after a colon or into another sentence (a fix after a fleet row's
    summary): the first letter made small."""
    return words[:1].lower() + words[1:]


#: NVML's clock-event reasons by code (nvml.h nvmlClocksEventReason*; bits in backends/nvml.py).
CLOCK_EVENTS: dict[str, ReasonWords] = {
    "gpu_idle": ReasonWords("GPU idle: nothing is running, clocks are lowered to save power", "idle"),
    "applications_clocks": ReasonWords("application clocks setting caps the clocks", "application clocks"),
    "sw_power_cap": ReasonWords("software power cap: the board is at its power limit", "power cap"),
    "hw_slowdown": ReasonWords("hardware slowdown: clocks halved (high temperature, power brake or bad power "
                               "supply)", "hardware slowdown"),
    "sync_boost": ReasonWords("sync boost: clocks matched to another GPU in the group", "sync boost"),
    "sw_thermal_slowdown": ReasonWords("software thermal slowdown: the GPU is too hot", "thermal slowdown (software)"),
    "hw_thermal_slowdown": ReasonWords("hardware thermal slowdown: the GPU is far too hot",
                                       "thermal slowdown (hardware)"),
    "hw_power_brake": ReasonWords("hardware power brake: external power brake asserted", "power brake"),
    "display_clock": ReasonWords("display clock setting", "display clock"),
}
#: Why a reading is not available, by the NVML error (or gpudoctor's own reason) its NA carries: ``n/a (GPU lost)``,
#: ``n/a (lost)`` in a narrow cell (sampling/presentation.py's short_na, tiny_na); any other reason is shown by name.
NA_REASONS: dict[str, ReasonWords] = {
    "NotSupported": ReasonWords("not supported", "not sup."), "NoPermission": ReasonWords("no permission", "no perm."),
    "GpuIsLost": ReasonWords("GPU lost", "lost"), "NotRecorded": ReasonWords("not recorded", "not rec."),
    "FunctionNotFound": ReasonWords("old driver", "old drv."),
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
#: Where input_bound's loop would rather be busy ({where}): on the GPU, or in the model on the CPU.
INPUT_BOUND_WHERE_GPU = "the GPU"
INPUT_BOUND_WHERE_CPU = "the model"
#: A host sync on a line of the framework's ({what}: SYNC_PATTERNS' words).
FRAMEWORK_SYNC = "{what} inside framework code"
#: host_sync_bound's {others}: the other lines that sync every step ({sites}: "file:line (what)"; ...).
SYNC_ALSO_EVERY_STEP = " Also every step: {sites}."
#: The training summary's notes: what it could not measure, and why.
NOTE_NO_STEPS = "no steps were recorded: wrap the body of the training loop in `with monitor.step():` to measure it"
NOTE_OUTSIDE_WRAP = "steps ran outside monitor.wrap(loader): data wait was not measured"
NOTE_SOME_OUTSIDE_WRAP = "{outside} of {steps} steps ran outside monitor.wrap(loader): data wait was not measured for them"
NOTE_NO_DEVICE_TIME = "{count} step(s) had no device time yet"
NOTE_GPU_OUTSIDE_STEPS = ("{outside} of {samples} GPU samples fell outside the measured steps (warm-up, validation, "
                          "checkpoints, epoch boundaries) and are left out of utilisation, power and clocks")
#: training_all_clear's {also} on a GPU: what else the loop is not waiting on.
ALL_CLEAR_ALSO_ON_GPU = ", host syncs or memory"
CPU_LOADER_NOTE = (" On a CPU-only run the loader's workers and the model share the same cores, so give the workers "
                   "a few cores and leave the rest to the model.")

#: What made a host sync in the training loop, by the pattern the hooks or `why` saw: (what, what to do).
SYNC_PATTERNS: dict[str, tuple[str, str]] = {
    "item": ("a `.item()` on a CUDA tensor",
             "Keep running totals on the GPU (`running_loss += loss.detach()`) and call `.item()` "
             "only every N steps or once per epoch."),
    "tolist": ("a `.tolist()` on a CUDA tensor",
               "Collect results on the GPU and copy them to the host once per N steps or per epoch."),
    "cpu": ("a `.cpu()`/`.numpy()` copy to the host",
            "Keep metrics on the GPU and copy them to the host every N steps, or copy with "
            "`.to('cpu', non_blocking=True)` into pinned memory and read them a step later."),
    "synchronize": ("an explicit `torch.cuda.synchronize()`",
                    "Remove it from the loop; to time steps use CUDA events (gpudoctor already does)."),
    "print": ("printing or formatting a CUDA tensor",
              "Format tensors only every N steps; formatting copies the value to the host."),
    "nonzero": ("an operation whose output size depends on the data (nonzero, masked_select, "
                "unique, any/all in a condition)",
                "Use fixed-size forms (`torch.where`, masks multiplied in) or move the check "
                "out of the per-step path."),
    "blocking_copy": ("a blocking host-to-device copy (`.to(device)` or `.cuda()` without non_blocking)",
                      "Use `DataLoader(..., pin_memory=True)` and `.to(device, non_blocking=True)`, "
                      "so the copy overlaps with compute instead of waiting for the GPU to drain."),
    "python_condition": ("a Python `if`/`while`/`assert` on a CUDA tensor's value",
                         "Decide on the GPU (`torch.where`) or check every N steps."),
    "other": ("an operation that waits for the GPU",
              "Move it out of the per-step path or run it every N steps."),
}
#: What to do when the line that syncs is the framework's, not the user's.
FRAMEWORK_SYNC_FIX = (
    "This line is the framework's, not yours: it runs because of how the training is configured. "
    "Under Lightning the usual causes are logging a tensor every step (`self.log(..., on_step=True)`, "
    "`prog_bar=True`, `sync_dist=True`), which Lightning turns into a host number: log every N steps "
    "(`Trainer(log_every_n_steps=N)`, `on_step=False`) and keep `sync_dist` for epoch-level values. "
    "Under DistributedDataParallel, `find_unused_parameters=True` and uneven inputs add host work each "
    "step. If the line names none of these, run one step under `torch.cuda.set_sync_debug_mode('warn')` "
    "to see the full stack.")

#: CUresult codes cuInit answers with on real machines (CUDA Driver API, "Error Handling": the CUresult
#: enum), each with its usual cause and fix (gpudoctor.backends.cuda_driver; any other code gets the
#: generic fix of cuda_init_failed).
CUDA_START_CAUSES: dict[int, tuple[str, str]] = {
    34: ("a stub libcuda (the CUDA toolkit's lib64/stubs, for linking only) was loaded instead of the driver's",
         "Remove the CUDA toolkit's `stubs` directory from LD_LIBRARY_PATH (and from /etc/ld.so.conf.d), "
         "then check with `ldconfig -p | grep libcuda`."),
    46: ("every GPU is busy or unavailable to new processes (compute mode Exclusive_Process held by another "
         "process, or Prohibited)",
         "Check `nvidia-smi -q -d COMPUTE` and the processes on the GPUs; an administrator can set "
         "`nvidia-smi -c DEFAULT`."),
    100: ("CUDA finds no usable device although NVML lists GPUs: the device files (/dev/nvidia*) are missing or "
          "not allowed for this process, as in a container started without its GPUs",
          "Start the container with the GPUs (`docker run --gpus all`, or the Kubernetes GPU resource) and check "
          "that /dev/nvidia0 and /dev/nvidiactl exist and are readable here."),
    802: ("the system is not yet initialized: on an NVSwitch board (HGX/DGX) the NVIDIA fabric manager is not "
          "running, or has not finished setting up the fabric",
          "Start the fabric manager (`sudo systemctl enable --now nvidia-fabricmanager`; its version must match "
          "the driver's) and check `nvidia-smi -q | grep -A2 Fabric`."),
    803: ("the user-space CUDA driver (libcuda) and the loaded kernel module are different versions, as after "
          "a driver upgrade without a reboot, or a CUDA forward-compatibility package that does not fit this "
          "driver",
          "Reboot (or reload the nvidia kernel modules) after a driver upgrade; check that `cat "
          "/proc/driver/nvidia/version` and `nvidia-smi` report the same version."),
    804: ("CUDA forward compatibility (the cuda-compat package) is not supported on this GPU (it needs a "
          "data-centre GPU)",
          "Remove the forward-compatibility libraries from the library path, or upgrade the driver itself."),
    999: ("cuInit answered CUDA_ERROR_UNKNOWN: often the nvidia-uvm kernel module is not loaded, or the GPU "
          "was left in a bad state (after a suspend/resume or a driver fault)",
          "Load the module (`sudo modprobe nvidia-uvm`; `nvidia-smi` alone does not load it), check `dmesg` "
          "for Xid errors, and reboot the node if it persists."),
}

CUDA_START_GENERIC_FIX = ("Check `dmesg` for NVIDIA errors, reboot after a driver upgrade, and in a container start it "
                          "with the GPUs (`docker run --gpus all`).")

#: What a driver-vs-build finding adds when torch started CUDA all the same.
STARTED_ANYWAY = "CUDA started anyway: forward compatibility or a newer driver than NVML reports."
#: Why a CUDA driver that cannot start matters (every cuda_cannot_start way says it).
CUDA_NOT_STARTING = ("NVML (nvidia-smi) answers, but every CUDA program, torch included, fails to start: "
                     "torch.cuda.is_available() is False and code that asks for 'cuda' raises.")
#: The cause of CUDA error 802 when NVML shows the NVLink fabric registration unfinished.
FABRIC_CAUSE = "the fabric manager has not set the GPUs up: {fabric}"
#: Where driver_not_answering was met by a check the runner abandoned, and that check's summary.
ABANDONED = " (the {probe} check was abandoned)"
ABANDONED_SUMMARY = "abandoned: the NVIDIA driver is not answering"
#: What probe_error:timed_out adds when the runner stopped the probe's process.
PROBE_PROCESS_STOPPED = " (the probe process was stopped)"
#: The baseline comparison's parts of sentences (report/baseline.py), by name: baseline_regression's GPU
#: (``on_gpu``) and the link's figures (``link_maximum``), baseline_model_differs' models and why models that
#: differ stop the comparison without --force, a comparison with nothing in common, and the result's summary
#: (the failing reports, then what was compared).
BASELINE_PHRASES: dict[str, str] = {
    "on_gpu": " on GPU {device}",
    "link_maximum": " (link maximum)",
    "models": "{mine} here, {theirs} in the baseline",
    "models_differ": ("different GPU models ({models}); comparing them says nothing about this node "
                      "(use --force to compare anyway)"),
    "nothing_in_common": ("nothing to compare: {name} and the baseline share no measured figure (run both with "
                          "`gpudoctor report --full`)"),
    "candidate_failed": "{name} failed (status fail)",
    "base_failed": "the baseline {names} failed (status fail)",
    "compared": "{judged} figure(s) compared with {reports} baseline report(s): {worse}",
    "worse": "{count} worse than tolerated",
    "none_worse": "none worse than tolerated",
}
#: Fleet's parts of sentences (gpudoctor/fleet), by name: how old a GPU's last readings are (gpu_not_exported,
#: target_down, the findings of a GPU no longer exported), an Xid's time, count and window, nvml_down and
#: gpu_not_answering without a reason, and a row with no finding.
FLEET_PHRASES: dict[str, str] = {
    "last_seen": " (last seen {age} ago)",
    "last_reading": " (last reading {age} ago)",
    "last_known": "last known",
    "ago": " ({age} ago)",
    "in_the_last": " in the last {age}",
    "xid_ago": ", {age} ago",
    "xid_count": " ({count} time(s){window})",
    "xid_last": "last {window}",
    "xid_within": " (within the {window})",
    "no_reason": "no reason given",
    "no_reading": "no reading",
    "all_clear": "no problem seen",
}


def baseline_phrase(phrase: str, /, **fields: object) -> str:
    """One of :data:`BASELINE_PHRASES`, its fields filled (any field name, ``name`` included)."""
    return BASELINE_PHRASES[phrase].format(**fields)


def fleet_phrase(phrase: str, /, **fields: object) -> str:
    """One of :data:`FLEET_PHRASES`, its fields filled (any field name, ``name`` included)."""
    return FLEET_PHRASES[phrase].format(**fields)


#: Why a figure of baseline_regression matters (its {why}), by the figures it is said of (report/baseline.py's
#: TOLERANCES).
BASELINE_WHY: dict[str, str] = {
    "copies": "host/device copies feed every batch; a slower link or a downgraded slot shows here",
    "d2d": "device memory bandwidth bounds most kernels",
    "matmul": "matmul throughput is what training buys; clocks held down or a bad GPU show here",
    "cpu_matmul": "the host CPU's matmul rate: the input pipeline and every CPU-side step run on it",
    "context": "a larger CUDA context leaves less memory for the job (driver or CUDA build change)",
    "samples": "the reference MNIST loop's throughput: input pipeline, host and GPU together",
    "energy": "energy per sample: the same work costing more power",
    "idle_power": "idle power well above the good node's hints at a stuck process or clocks held high",
    "temperature": "a hotter idle GPU than its peers points at cooling (fans, airflow, a blocked inlet)",
    "link_gen": "the link's maximum generation: a lower one means a slot, riser or BIOS setting differs",
    "link_width": "the link's maximum width: fewer lanes halve host/device bandwidth",
    "allreduce": "collective bandwidth between GPUs (NVLink/PCIe/network)",
}
#: A GPU whose every reading answers one NVML error (watch's FAULT line, the TUI's panel), by that error: the
#: code whose entry words it, in its ``short`` (the report's finding of the same fault: one entry words both)
#: or, for a code only the live views say, its summary; any other error is ``device_fault``'s, with its name.
DEVICE_FAULTS: dict[str, str] = {
    "GpuIsLost": "gpu_lost", "Timeout": "driver_not_answering", "Uninitialized": "device_fault:nvml_unloaded",
    "DriverNotLoaded": "nvidia_driver_unavailable:driver_not_loaded",
    "LibraryNotFound": "nvidia_driver_unavailable:no_library", "ResetRequired": "device_fault:reset_required"}
#: A machine where NVML cannot be used, by the reason NVML gives: the code whose entry words it, in the
#: report (the environment probe's finding: summary and fix) and in the live views (:data:`NO_GPU_CODES`); any
#: other reason is ``nvidia_driver_unavailable``'s, with its name.
NVML_UNUSABLE: dict[str, str] = {
    "LibraryNotFound": "nvidia_driver_unavailable:no_library",
    "DriverNotLoaded": "nvidia_driver_unavailable:driver_not_loaded",
    "NoPermission": "nvidia_driver_unavailable:no_permission",
    "PythonBindingMissing": "nvidia_driver_unavailable:no_binding",
    "InsufficientSize": "nvidia_driver_unavailable:insufficient_size",
}
#: A machine with no GPU to read, by NVML's reason, as the live views say it (watch, record, the TUI's panel,
#: ``--once``: the code's ``no_gpu``, or, for a code only they say, its summary): NVML unusable
#: (:data:`NVML_UNUSABLE`), or NVML working and finding no GPU (NoDevices: ``nvml_no_gpu``, a code only they
#: say); any other reason is ``nvidia_driver_unavailable``'s, with its name.
NO_GPU_CODES: dict[str, str] = {**NVML_UNUSABLE, "NoDevices": "nvml_no_gpu"}
#: NVML's critical events other than an Xid (watch's EVENT line, the TUI's events), by their kind
#: (gpudoctor.backends.events); an Xid is worded by core/xid.py's catalogue.
GPU_EVENTS: dict[str, str] = {
    "ecc_double_bit": "double-bit (uncorrectable) ECC error",
    "ecc_single_bit_storm": "many single-bit ECC errors within a minute",
    "memory_retirement": "a page or row of GPU memory was retired",
    "memory_retirement_failure": "retiring faulty GPU memory failed",
}
#: The report's verdict, one sentence per overall status (the text report, the TUI's Doctor screen).
REPORT_VERDICT: dict[str, str] = {
    "pass": "Healthy: no problem found by the checks that ran.",
    "skip": "Nothing could be checked.",
    "warn": "Usable, with warnings: read the findings above.",
    "fail": "Not usable as is: fix the failures above.",
    "error": "Incomplete: a check could not finish (see the errors above).",
}

#: Parts that several entries of WORDING share.
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

_MIG_ONE_WHY = (
    "NVIDIA's MIG user guide: with CUDA 11/R450 and CUDA 12/R525 a CUDA process enumerates a single MIG device, "
    "however many exist or are given to the container; torch's count comes from NVML, so using the second "
    "device then fails ('device >= 0 && device < num_gpus INTERNAL ASSERT FAILED', invalid device ordinal). "
    "Newer drivers have been seen to enumerate MIG devices of different GPUs together.")
_MIG_ONE_FIX = ("If cuda:1 fails, run one process per MIG device, each started with CUDA_VISIBLE_DEVICES=MIG-<uuid> "
                "(`nvidia-smi -L` lists them).")

_DRIVER_TOO_OLD = "The driver ({driver}) supports CUDA up to {driver_cuda}, but torch {torch} is built for CUDA {cuda_build}."
_STACK_DIFFERS = "A different software stack can explain (and is itself) a difference from the good node."
_RUNS_TORCH = "This check runs PyTorch on the GPU."
_P2P_UNKNOWN = ("ACS on the PCIe bridges and the IOMMU decide whether peer-to-peer copies between the GPUs work; "
                "unknown is not a pass.")

#: What helps small kernels: the work verdict's fix (busy_small_kernels), and the training hooks' launch_bound's.
_SMALL_KERNELS_HELP = "larger batches, bf16/TF32 autocast or CUDA graphs"
_BUSY_WHY = ("NVML's utilisation is the share of time any kernel ran, so a loop of tiny kernels reads 100 %; "
             "GPM's SM activity (Hopper and later) shows how much of the GPU worked.")

_NO_DRIVER = "No usable NVIDIA driver: "
_NO_DRIVER_WHY = "Without the driver no CUDA program can use a GPU; torch falls back to the CPU."
_NVML_NOT_USABLE = "NVML is not usable ({reason})"
_NVIDIA_SMI_SAYS = "Run `nvidia-smi` to see the driver's own error."


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
        "cooling) if it repeats.",
        short="GPU lost: it fell off the bus. Check `dmesg` for Xid 79, then reset the GPU (nvidia-smi -r) or reboot."),
    "driver_not_answering": Wording(
        Status.FAIL, "The NVIDIA driver is not answering: an NVML call made no answer in {seconds} s{where}",
        "A failing GPU (fallen off the bus, Xid 79), a driver in recovery or a stuck nvidia-persistenced holds every "
        "caller of the driver: nvidia-smi and CUDA programs on this node hang too, so nothing else could be checked.",
        "Check the kernel log (`sudo dmesg | grep -i -e xid -e nvrm`) and whether `nvidia-smi` answers; a GPU that "
        "stays blocked needs a GPU reset with no process on it, or a reboot.",
        short="The driver did not answer in time."),
    # -- a GPU whose every reading fails where no report finding names the cause (watch, the TUI: DEVICE_FAULTS)
    "device_fault": Wording(Status.FAIL, "The driver answers {reason} for every reading of this GPU."),
    "device_fault:nvml_unloaded": Wording(
        Status.FAIL, "NVML is gone: the driver was unloaded or restarted under this session. Restart gpudoctor once "
        "the driver is back."),
    "device_fault:reset_required": Wording(Status.FAIL, "The GPU needs a reset (nvidia-smi -r) or a reboot."),
    # -- NVML unusable on this machine, by its reason (NVML_UNUSABLE): the environment probe's finding; ``no_gpu``
    # for watch, record and the TUI's panel; ``short`` for the FAULT line when every reading answers it (DEVICE_FAULTS)
    "nvidia_driver_unavailable": Wording(
        Status.FAIL, _NO_DRIVER + "NVML is unavailable ({reason}).{pci}", _NO_DRIVER_WHY, _NVIDIA_SMI_SAYS,
        no_gpu=_NVML_NOT_USABLE),
    "nvidia_driver_unavailable:no_library": Wording(
        Status.FAIL, _NO_DRIVER + "the NVIDIA driver is not installed (libnvidia-ml.so was not found).{pci}",
        _NO_DRIVER_WHY, "Install the NVIDIA driver for this GPU (e.g. `sudo apt install nvidia-driver-580` or NVIDIA's "
        ".run installer), then reboot; check with `nvidia-smi`.",
        short="NVML library not found (libnvidia-ml.so): no NVIDIA driver on this machine, or it is not visible in "
        "this container.", no_gpu="No NVIDIA driver found (libnvidia-ml.so is missing)"),
    "nvidia_driver_unavailable:driver_not_loaded": Wording(
        Status.FAIL, _NO_DRIVER + "the NVIDIA kernel module is not loaded.{pci}", _NO_DRIVER_WHY,
        "Load it (`sudo modprobe nvidia`) or reboot; `dmesg | grep -i nvrm` shows why it failed (Secure Boot "
        "blocking an unsigned module is common).",
        short="NVML is gone: the NVIDIA kernel driver is not loaded. Load it (modprobe nvidia) or reboot.",
        no_gpu="The NVIDIA kernel driver is not loaded"),
    "nvidia_driver_unavailable:no_permission": Wording(
        Status.FAIL, _NO_DRIVER + "this user may not open the NVIDIA device files.{pci}", _NO_DRIVER_WHY,
        "Check permissions of /dev/nvidia* (add the user to the group that owns them) or, in a container, start it "
        "with the NVIDIA runtime (`--gpus all`).", no_gpu="No permission to talk to the NVIDIA driver"),
    "nvidia_driver_unavailable:no_binding": Wording(
        Status.FAIL, _NO_DRIVER + "the NVML Python binding (nvidia-ml-py) is not installed.{pci}", _NO_DRIVER_WHY,
        "pip install nvidia-ml-py", no_gpu="The NVML Python binding (nvidia-ml-py) is not installed"),
    "nvidia_driver_unavailable:insufficient_size": Wording(
        Status.FAIL, _NO_DRIVER + "NVML could not start.{pci}", _NO_DRIVER_WHY, _NVIDIA_SMI_SAYS,
        no_gpu=_NVML_NOT_USABLE),
    # NVML started and lists no GPU: only the live views say it (its summary), the devices probe words its own
    "nvml_no_gpu": Wording(Status.SKIP, "NVML works but reports no NVIDIA GPU"),
    "nvml_no_gpu:unstated": Wording(Status.SKIP, "NVML reports no NVIDIA GPU"),
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
    "compute_exclusive_busy": Wording(
        Status.FAIL, "{label} is in compute mode Exclusive_Process and process {pids} already holds it",
        "Only one process at a time may hold a CUDA context on it: every other program that starts CUDA on this "
        "GPU fails with CUDA_ERROR_DEVICES_UNAVAILABLE (46, 'all CUDA-capable devices are busy or unavailable'), "
        "although the CUDA driver itself starts.",
        "Use another GPU (CUDA_VISIBLE_DEVICES), wait for process {pids} to end, or, if several processes should "
        "share it, have an administrator set `nvidia-smi -i {index} -c DEFAULT`. DataLoader workers or a second "
        "script that touch CUDA count as other processes."),
    "mig_one_device_per_process": Wording(
        Status.WARN, "torch counts {torch_count} device(s) on {mig_gpus} GPUs in MIG mode, where a CUDA process may "
        "enumerate one MIG device only", _MIG_ONE_WHY, _MIG_ONE_FIX),
    # the same fact without torch: the CUDA start check's cuDeviceGetCount against NVML's MIG devices
    "mig_one_device_per_process:cuda_count": Wording(
        Status.WARN, "CUDA counts {cuda_count} device(s) where NVML shows {mig_devices} MIG devices visible to this "
        "process (on {mig_gpus} GPU(s) in MIG mode): a CUDA process may enumerate one MIG device only",
        _MIG_ONE_WHY, _MIG_ONE_FIX),
    # -- the stack below NVML: driver and libraries, containers, the PCI bus ------------------------
    "driver_library_mismatch:upgraded": Wording(
        Status.FAIL, "NVML cannot start: the driver's libraries are version {library} but the loaded kernel "
        "module is still {module} (NVML: Driver/library version mismatch)",
        "The driver packages were upgraded (an unattended upgrade, or a package that pulled in another "
        "driver) while the old kernel module stayed loaded: nvidia-smi, NVML and every CUDA program fail until the "
        "module of version {library} is loaded. Reinstalling the driver changes nothing.",
        "Reboot (if the module is still {module} after the reboot, the kernel module package of {library} is "
        "missing: install the one your driver packages name, e.g. the DKMS or the -open variant). Without a reboot: "
        "stop what holds the GPU (GPU jobs, nvidia-persistenced, the display manager; "
        "`sudo lsof /dev/nvidia*` lists them), unload the modules (`lsmod | grep nvidia`; `sudo rmmod nvidia_uvm "
        "nvidia_drm nvidia_modeset nvidia`) and run `sudo nvidia-smi` to load version {library}. So that it does "
        "not recur, hold the driver packages (`sudo apt-mark hold` on the nvidia driver packages, or `dnf "
        "versionlock`) and upgrade them only with a reboot planned."),
    "driver_library_mismatch:module_differs": Wording(
        Status.FAIL, "NVML cannot start: the loaded kernel module is version {module} but the driver's libraries "
        "are {library} (NVML: Driver/library version mismatch)",
        "The kernel module was built or installed from another driver release than the user-space libraries "
        "(a module from another source tree or package, or libraries left over from an older driver): the two "
        "must be the same release, to the last digit.",
        "Make them one release: install the user-space driver of version {module} (the same release as the "
        "module: its .run with --no-kernel-modules, or its packages), or the module of version {library}, then "
        "reboot; check that `cat /proc/driver/nvidia/version` and `ls -l {library_path}` name the same version."),
    "driver_library_mismatch:container": Wording(
        Status.FAIL, "NVML cannot start in this {engine} container: its libnvidia-ml is version {library} but the "
        "host's kernel module is {module} (NVML: Driver/library version mismatch)",
        "A container uses the host's kernel module with the libraries the NVIDIA runtime mounted from the host "
        "when it started, or with libraries baked into the image: after the host's driver changed, or with an "
        "image that carries a driver of its own, the two differ.",
        "Restart the container (the runtime then mounts the host's current libraries); if the image carries its "
        "own libnvidia-ml or libcuda (a driver installed in the image), remove them from the image. If "
        "`nvidia-smi` fails on the host too, reboot the host."),
    "driver_library_mismatch:unknown": Wording(
        Status.FAIL, "NVML cannot start: the driver's libraries and the loaded kernel module are different "
        "versions (NVML: Driver/library version mismatch; module {module}, library {library})",
        "After a driver upgrade without a reboot the old module stays loaded; nvidia-smi, NVML and every CUDA "
        "program fail until the module matching the libraries is loaded. Reinstalling the driver changes nothing.",
        "Compare `cat /proc/driver/nvidia/version` with the version in `ls -l $(ldconfig -p | grep -m1 "
        "libnvidia-ml.so.1 | sed 's/.*=> //')`; reboot, or unload the nvidia modules when nothing holds them "
        "(`lsmod | grep nvidia`, `sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia`), and hold the driver "
        "packages so an unattended upgrade does not repeat it."),
    "container_gpu_access_lost": Wording(
        Status.FAIL, "NVML fails with Unknown Error inside this {engine} container{rules}",
        "The container had its GPUs, then lost them: with the systemd cgroup driver, a `systemctl daemon-reload` "
        "on the host (run by hand or by a package upgrade) rewrites the container's device cgroup without the "
        "NVIDIA devices, so opening /dev/nvidia* is refused. Nothing inside the container can bring them back.",
        "Restart (recreate) the container or delete the pod; it gets its GPUs again. To stop it recurring, on the "
        "host create the /dev/char links the runtime needs (`sudo nvidia-ctk system create-dev-char-symlinks "
        "--create-all`, with the udev rule NVIDIA's container toolkit documents), or run Docker with the cgroupfs "
        "driver (`\"exec-opts\": [\"native.cgroupdriver=cgroupfs\"]` in /etc/docker/daemon.json); with the "
        "toolkit's CDI mode the devices are declared to the runtime and survive a reload."),
    "container_without_gpus": Wording(
        Status.FAIL, "This {engine} container was started without GPUs: {missing}",
        "The NVIDIA container runtime gives a container its GPUs when it starts (the /dev/nvidia* devices and the "
        "host's driver libraries); this one got none, so no CUDA program in it can use a GPU. A driver "
        "installed inside the container cannot help: the host's driver serves it.",
        "Start it with its GPUs: `docker run --gpus all ...` (the NVIDIA Container Toolkit on the host), in "
        "Compose a `deploy.resources.reservations.devices` entry with `driver: nvidia`, in Kubernetes a "
        "`resources.limits: nvidia.com/gpu: 1` in the pod spec (and `runtimeClassName: nvidia` where the "
        "cluster has one)."),
    "container_libraries_missing": Wording(
        Status.FAIL, "This {engine} container has the GPU devices ({nodes}) but not the driver's libraries "
        "(no libnvidia-ml.so.1{variables})",
        "Its devices were given to it without the host's driver libraries. CDI injection (`--device "
        "nvidia.com/gpu=all`, podman, containerd, the device plugin in CDI mode) adds the devices and mounts "
        "the libraries the CDI spec lists, without any NVIDIA_* variable; a spec written before the driver's "
        "install or upgrade, or by hand, lists none or the old ones. Passing /dev/nvidia* by hand "
        "(`--device /dev/nvidia0`) adds no libraries either. A driver installed inside the container does "
        "not help: the host's driver serves it.",
        "Regenerate the CDI spec on the host after each driver install or upgrade (`sudo nvidia-ctk cdi "
        "generate --output=/etc/cdi/nvidia.yaml`; `nvidia-ctk cdi list` shows the devices it names) and "
        "restart the container with `--device nvidia.com/gpu=all`; or start it with the NVIDIA runtime "
        "(`docker run --gpus all`, `--runtime=nvidia`; in Kubernetes `runtimeClassName: nvidia` and an "
        "`nvidia.com/gpu` limit), which mounts the libraries itself."),
    "container_runtime_not_used": Wording(
        Status.FAIL, "This {engine} container asks for GPUs (NVIDIA_VISIBLE_DEVICES={visible}) but the NVIDIA "
        "runtime did not give it any: {missing}",
        "The image's NVIDIA_VISIBLE_DEVICES is read only by the NVIDIA container runtime; the container was "
        "started by another runtime (plain runc), so no device or driver library was added. A driver installed "
        "inside the container cannot help.",
        "Start it with the NVIDIA runtime: `docker run --gpus all` (or `--runtime=nvidia`), after `sudo "
        "nvidia-ctk runtime configure --runtime=docker` and a restart of Docker on the host; in Kubernetes set "
        "`runtimeClassName: nvidia` (or make nvidia the node's default runtime) and request `nvidia.com/gpu` in "
        "the pod's resource limits."),
    "container_without_utility": Wording(
        Status.FAIL, "This {engine} container has the GPU devices ({nodes}) but no libnvidia-ml: the driver's "
        "utility capability was not given (NVIDIA_DRIVER_CAPABILITIES={capabilities})",
        "The NVIDIA runtime mounts only the driver libraries of the capabilities asked for: without `utility` "
        "there is no NVML (nvidia-smi, monitoring), without `compute` no libcuda.",
        "Start the container with NVIDIA_DRIVER_CAPABILITIES=compute,utility (`docker run -e "
        "NVIDIA_DRIVER_CAPABILITIES=compute,utility --gpus all`, or the pod spec's env)."),
    # -- CUDA cannot start where NVML answers: libcuda.so.1 cannot be loaded (backends/cuda_driver.py) --------
    "cuda_cannot_start:no_libcuda": Wording(
        Status.FAIL, "NVML sees {visible} GPU(s) but the CUDA driver library ({library}) cannot be loaded: {error}",
        "{why}",
        "In a container, give it the driver's compute capability (NVIDIA_DRIVER_CAPABILITIES=compute,utility, or "
        "`docker run --gpus all`); on a host, reinstall the driver's user-space libraries (libcuda.so.1 comes "
        "with the driver, not with the toolkit)."),
    "cuda_cannot_start:container_without_compute": Wording(
        Status.FAIL, "NVML sees {visible} GPU(s) but the CUDA driver library ({library}) cannot be loaded: {error}. "
        "This {engine} container was given the driver's libraries for NVML (utility) but not for CUDA: "
        "NVIDIA_DRIVER_CAPABILITIES={capabilities}, without `compute`",
        "{why}",
        "Start the container with NVIDIA_DRIVER_CAPABILITIES=compute,utility (`docker run --gpus all -e "
        "NVIDIA_DRIVER_CAPABILITIES=compute,utility`, the `environment:` of a Compose service, or the env of the "
        "pod spec's container); the NVIDIA runtime then mounts libcuda from the host. Installing a driver inside "
        "the container does not help."),
    "cuda_cannot_start:container_default_capabilities": Wording(
        Status.FAIL, "NVML sees {visible} GPU(s) but the CUDA driver library ({library}) cannot be loaded: {error}. "
        "This {engine} container was given the driver's libraries for NVML (utility) but not for CUDA: "
        "NVIDIA_DRIVER_CAPABILITIES is unset or empty, so the runtime's default applied, and not every "
        "runtime's default has `compute`",
        "{why} The NVIDIA container toolkit documents utility,compute as its default; older toolkits and "
        "enroot's hook give `utility` alone (nvidia/cuda images set compute,utility themselves, a plain base "
        "image does not). Where compute was given and libcuda still is not here, a CDI spec written without "
        "libcuda or a failed mount is the cause.",
        "Start the container with NVIDIA_DRIVER_CAPABILITIES=compute,utility set explicitly (`docker run --gpus all "
        "-e NVIDIA_DRIVER_CAPABILITIES=compute,utility`, the `environment:` of a Compose service, or the env of the "
        "pod spec's container). If libcuda is still missing, regenerate the host's CDI spec (`sudo nvidia-ctk cdi "
        "generate --output=/etc/cdi/nvidia.yaml`). Installing a driver inside the container does not help."),
    "cuda_cannot_start:libcuda_not_mounted": Wording(
        Status.FAIL, "NVML sees {visible} GPU(s) but the CUDA driver library ({library}) cannot be loaded: {error}. "
        "This {engine} container asks for the driver's compute capability (NVIDIA_DRIVER_CAPABILITIES={capabilities}), "
        "yet libcuda was not mounted into it",
        "{why} The runtime that gave the container its GPUs mounted libnvidia-ml but not libcuda: a CDI spec "
        "written without libcuda (or for another driver version), a hook that failed, or a mount that broke.",
        "Regenerate the CDI spec on the host after the driver's install (`sudo nvidia-ctk cdi generate "
        "--output=/etc/cdi/nvidia.yaml`) and restart the container, or start it with the NVIDIA runtime "
        "(`docker run --gpus all`); check `nvidia-ctk cdi list` and the runtime's log for a failed mount. "
        "Installing a driver inside the container does not help."),
    "no_nvidia_gpu": Wording(
        Status.FAIL, "This machine has no NVIDIA GPU: none of the {count} devices on its PCI bus is NVIDIA's "
        "(vendor 0x10de)",
        "No driver can make a GPU appear: torch trains on the CPU here, and code that asks for 'cuda' fails.",
        "Run on a machine that has an NVIDIA GPU (on a cloud, a GPU instance type; in a VM, a GPU passed through "
        "to it). Nothing on this machine needs installing for that."),
    # -- the health probe: is the GPU really working (gpudoctor.backends.busy's verdict; the warning
    # busy_small_kernels, which fleet gives too, is below with fleet's) --------------------------
    "busy_verdict": Wording(Status.PASS, "{label}: {words}", _BUSY_WHY),
    # -- the health probe: the NVLink fabric (NVSwitch boards) --------------------------------
    "fabric_not_ready:not_started": Wording(
        Status.FAIL, "{label}: its NVLink fabric registration has not started (NVML fabric state: Not Started)",
        _FABRIC_WHY, _FABRIC_FIX),
    "fabric_not_ready:in_progress": Wording(
        Status.FAIL, "{label}: its NVLink fabric registration is still in progress (NVML fabric state: In Progress)",
        _FABRIC_WHY, "Wait a minute and check again; if it stays In Progress, " + clause(_FABRIC_FIX)),
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
        "Try " + _SMALL_KERNELS_HELP + "; fuse small operations with torch.compile."),
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
    "target_unreadable": Wording(
        Status.ERROR, "Prometheus holds series from this target that fleet cannot read: {names}",
        "Its GPUs are not judged: an exporter fleet does not know, or names it does not know yet "
        "(a newer exporter release), would otherwise leave the node out unseen.",
        "Run gpudoctor's exporter or dcgm-exporter there, or report the names so fleet learns them "
        "(docs/fleet.md lists the names it reads)."),
    "target_no_gpu": Wording(
        Status.ERROR, "the exporter on this target answers but exports no GPU: {names}",
        "Its node-wide series are judged (NVML, the last report), but no GPU of it can be: NVML is down "
        "there or sees no GPU, so the node would otherwise be left out unseen.",
        "Run `gpudoctor report` on the node."),
    "held_idle": Wording(
        Status.WARN, "held by {holder} but idle for {idle_for} ({gpu_hours} GPU-hours{energy})",
        "The GPU is allocated to this job or pod, so nobody else can use it, and it did no work "
        "({measure} below 1% for the whole time).",
        "Ask the owner of {holder} whether it still needs the GPU; end or shrink the job or pod if not."),
    "xid": Wording(Status.WARN, "Xid {xid}{when}: {words}; {action}"),
    "busy_small_kernels": Wording(Status.WARN, "{label}: {words}", _BUSY_WHY),
    # -- Xids judged as a sequence (the exporter's gauge history, gpudoctor.core.xid.judge_sequence) -----
    "xid_hidden": Wording(
        Status.FAIL, "Xid {xid} ({words}) came before the Xid {last} the gauge shows now{window}",
        "The last-Xid gauge keeps only the newest code: the harmless Xid {last} that follows a job's end hides "
        "the critical one before it.", "{action}"),
    "xid_follow_up_alone": Wording(
        Status.WARN, "Xid {xid}{when}: {words}; the Xid before it is not in the exporter's series",
        "Xid {xid} follows another error (the driver cleaning up a killed job's channels); the one it followed "
        "may have been critical, and DCGM does not export every Xid (NVIDIA/DCGM#235: Xid 62).",
        "Read the node's kernel log (`sudo dmesg | grep -i xid`) or run `gpudoctor report` there: it reads the "
        "whole sequence."),
    "xid_gauge_stale": Wording(
        Status.PASS, "Xid {xid} ({words}) unchanged for the whole look-back window ({window}): the gauge may be stale",
        "dcgm-exporter's last-Xid gauge keeps its value until the exporter restarts (NVIDIA/dcgm-exporter#500), "
        "so a GPU that recovered from an application's fault keeps showing it; no new Xid came in the window.",
        "Nothing to do for the GPU; restart dcgm-exporter to clear the gauge, or export DCGM_EXP_XID_ERRORS_COUNT "
        "(a count per Xid over a time window) instead."),
    "xid_gauge_stale:critical": Wording(
        Status.FAIL, "Xid {xid} ({words}) unchanged for the whole look-back window ({window}); {action}",
        "The gauge keeps the last Xid until dcgm-exporter restarts, so it cannot say whether the GPU was reset "
        "since; a critical Xid stays a failure until someone checks.",
        "If the GPU was reset or the node rebooted since, restart dcgm-exporter to clear the gauge; otherwise "
        "{action}."),
    # -- peer-to-peer paths between GPUs (probes/p2p.py; gpudoctor.backends.pcie_paths) ---------------
    "p2p_acs_redirect": Wording(
        Status.FAIL, "{label}: ACS on the PCIe bridge(s) between them ({bridges}) sends their peer-to-peer "
                     "traffic to the CPU's root complex ({flags})",
        "NVML reports peer-to-peer between them as {p2p}, so CUDA and NCCL copy directly over PCIe; with ACS "
        "request or completion redirect on, every such copy goes up to the root complex instead: slow at best, "
        "and through an IOMMU often dropped, so NCCL hangs at its first all-reduce or returns wrong sums (NCCL's "
        "troubleshooting guide: PCI Access Control Services).",
        "On bare metal, turn ACS off in the BIOS (PCIe or chipset settings: 'ACS', 'ACS Control'), or as root "
        "until the next boot clear each listed bridge's control register: `sudo setpci -s <bridge> "
        "ECAP_ACS+0x6.w=0000` ({bridges}). In a virtual machine with passed-through GPUs ACS isolates them: keep "
        "it and set NCCL_P2P_DISABLE=1 (NCCL then goes through host memory: slower intra-node collectives, but "
        "they finish). Then check with `gpudoctor report --full` (peer copies) or nccl-tests' all_reduce_perf."),
    "p2p_iommu_translates": Wording(
        Status.WARN, "{label}: the IOMMU translates their peer-to-peer traffic over PCIe (IOMMU group type "
                     "{types}; kernel command line: {cmdline})",
        "In translation mode (DMA, DMA-FQ) the IOMMU looks up every peer-to-peer request between the GPUs; on many "
        "platforms those requests are blocked or misrouted, and NCCL hangs at its first collective or its "
        "all-reduces come back wrong (NCCL's troubleshooting guide: IOMMU).",
        "Put the IOMMU in pass-through: add `iommu=pt` to the kernel command line (Intel: `intel_iommu=on "
        "iommu=pt`; AMD: `iommu=pt`) in GRUB_CMDLINE_LINUX of /etc/default/grub, run `sudo update-grub` (or "
        "grub2-mkconfig) and reboot; or turn VT-d / AMD-Vi off in the BIOS where nothing on the node needs it (no "
        "VMs, no VFIO). Without a reboot: NCCL_P2P_DISABLE=1 (slower intra-node collectives)."),
    "p2p_not_supported": Wording(
        Status.PASS, "{label}: NVML reports no peer-to-peer between them ({reason}); CUDA and NCCL copy through "
                     "host memory",
        "Correct, but slower than a direct copy; nothing on the host path between them can break a peer copy."),
    "p2p_unreadable": Wording(
        Status.SKIP, "{label}: {what} not checked: {reason}",
        _P2P_UNKNOWN,
        "{fix}"),
    "p2p_unreadable:iommu": Wording(
        Status.SKIP, "{label}: the IOMMU's mode not checked: {reason}",
        _P2P_UNKNOWN,
        "Run `gpudoctor report` on the host, or check `cat /proc/cmdline` and /sys/kernel/iommu_groups/*/type there."),
    "p2p_copy_corrupt": Wording(
        Status.FAIL, "{label}: a peer-to-peer copy of {size} delivered wrong bytes ({wrong} of {total} differ)",
        "Data copied directly between the GPUs arrived changed: NCCL's all-reduces between them return wrong "
        "values or hang.",
        "Look for ACS redirect and the IOMMU above (`sudo lspci -vvv | grep ACSCtl`, `cat /proc/cmdline`): turn ACS "
        "off on the bridges, set `iommu=pt`; until then run jobs with NCCL_P2P_DISABLE=1."),
    "p2p_copy_hung": Wording(
        Status.FAIL, "{label}: a peer-to-peer copy did not finish within {seconds:.0f} s",
        "A direct copy between the GPUs never completed: NCCL's collectives between them will hang the same way.",
        "Look for ACS redirect and the IOMMU above (`sudo lspci -vvv | grep ACSCtl`, `cat /proc/cmdline`): turn ACS "
        "off on the bridges, set `iommu=pt`; until then run jobs with NCCL_P2P_DISABLE=1. The GPUs may need a "
        "reset (`nvidia-smi -r`) after the stuck copy."),
    "p2p_copy_slow": Wording(
        Status.WARN, "{label}: peer-to-peer copies reach {gbs:.1f} GB/s, {pct:.0f} % of {link} ({ceiling:.1f} GB/s)",
        "The bytes arrive intact but slowly; peer traffic sent through the root complex (ACS redirect, or GPUs on "
        "different root ports or sockets) runs at a fraction of the link.",
        "Compare with `nvidia-smi topo -m`; check ACS on the bridges (`sudo lspci -vvv | grep ACSCtl`) and the "
        "slot each GPU sits in; place the ranks that talk most on GPUs under one PCIe switch or NVLink."),
    "p2p_copy_ok": Wording(Status.PASS, "{label}: peer-to-peer copies reach {gbs:.1f} GB/s over {link}, every byte intact"),
    # -- the driver against torch's CUDA build (backends/cuda_compat.py) -----------------------------
    "driver_too_old": Wording(
        Status.FAIL, _DRIVER_TOO_OLD,
        "CUDA cannot start: torch.cuda.is_available() returns False with 'The NVIDIA driver on your system is too "
        "old'.",
        "Upgrade the NVIDIA driver to >= {need}, or install a torch built for CUDA {major}.x (e.g. `pip install torch "
        "--index-url https://download.pytorch.org/whl/{index}`)."),
    "driver_too_old:before_11": Wording(
        Status.FAIL, _DRIVER_TOO_OLD,
        "Before CUDA 11 a build needs a driver of its own minor release (there is no minor-version compatibility): "
        "torch.cuda.is_available() returns False.",
        "Upgrade the NVIDIA driver to >= {need}, or install a torch built for CUDA {driver_cuda}."),
    "driver_older_than_build": Wording(
        Status.WARN, "The driver supports CUDA {driver_cuda}; torch is built for CUDA {cuda_build} (same major version, "
        "newer minor).",
        "CUDA minor-version compatibility lets this run, but kernels shipped only as newer PTX cannot be "
        "JIT-compiled by this driver and fail with 'unsupported toolchain'.",
        "Upgrade the driver when convenient, or use a torch built for the driver's CUDA version."),
    "driver_too_old:started_anyway": Wording(
        Status.WARN, "{summary} " + STARTED_ANYWAY,
        "The driver NVML reports cannot run this build, yet torch started CUDA: the CUDA library in use is newer "
        "than that driver (a cuda-compat forward-compatibility package, which NVIDIA supports on data-center GPUs), "
        "or NVML belongs to another driver install than the one CUDA loaded.",
        "Nothing blocks training now. Keep the forward-compatibility package with the image (without it this build "
        "fails with 'driver too old'); if there is none, compare `nvidia-smi` with `cat /proc/driver/nvidia/version` "
        "and remove the stale driver install. {fix}"),
    "driver_older_than_build:started_anyway": Wording(Status.PASS, "{summary} " + STARTED_ANYWAY, "{why}", "{fix}"),
    # -- the CUDA driver's own start (backends/cuda_driver.py) ---------------------------------------
    "cuda_start_hung": Wording(
        Status.WARN, "The CUDA driver's start (cuInit) was not answered in {limit:g} s.",
        "A CUDA program here may hang at its first CUDA call.",
        "Enable persistence mode (`nvidia-smi -pm 1`) if start-up is only slow; check `dmesg` for Xid errors if it "
        "hangs."),
    "cuda_start_crashed": Wording(
        Status.WARN, "The CUDA driver's start-up (cuInit, in a child process) crashed.",
        "A CUDA program here may crash at its first CUDA call.", "{fix}"),
    "cuda_cannot_start:error": Wording(
        Status.FAIL, "NVML sees {visible} GPU(s) but the CUDA driver cannot start: cuInit failed with {name} "
        "({number}).", CUDA_NOT_STARTING, "{fix}"),
    "cuda_cannot_start:error_cause": Wording(
        Status.FAIL, "NVML sees {visible} GPU(s) but the CUDA driver cannot start: cuInit failed with {name} "
        "({number}): {cause}.", CUDA_NOT_STARTING, "{fix}"),
    "cuda_cannot_start:none_counted": Wording(
        Status.FAIL, "NVML sees {visible} GPU(s) but the CUDA driver counts none: {cause}.", CUDA_NOT_STARTING,
        "{fix}"),
    # -- a report against a baseline (report/baseline.py) ------------------------------------------------
    "baseline_model_differs": Wording(
        Status.WARN, "Compared across GPU models, as asked: {models}.",
        "Figures of different models differ by design; only large gaps mean anything.",
        "Record a baseline on a known-good node of this model."),
    "baseline_outliers_ignored": Wording(
        Status.PASS, "The baseline directory holds {count} figure(s) far from its median (the median ignores them): "
        "{outliers}{more}",
        "One slow node in the baseline set must not lower the bar for the others.",
        "Check or remove those reports from the baseline directory."),
    "report_failed:baseline": Wording(
        Status.FAIL, "{name} is a failing report: its node is not usable as is, whatever its figures.",
        "A comparison judges figures; the report's own failures (a lost GPU, a driver too old...) are not figures "
        "and would pass unseen.",
        "Fix the failures that {name} names first, then compare again."),
    "baseline_report_failed": Wording(
        Status.FAIL, "The baseline is not known-good: {names} has status fail.",
        "A baseline is the bar a node must meet; one from a failing node lowers or bends it.",
        "Use reports of nodes whose own `gpudoctor report --full` passed as the baseline."),
    "baseline_driver_differs": Wording(
        Status.WARN, "NVIDIA driver differs from the baseline: {mine} here, {theirs} there.", _STACK_DIFFERS,
        "Install the baseline's NVIDIA driver, or record a new baseline with this one."),
    "baseline_torch_differs": Wording(
        Status.WARN, "torch differs from the baseline: {mine} here, {theirs} there.", _STACK_DIFFERS,
        "Install the baseline's torch, or record a new baseline with this one."),
    "baseline_torch_cuda_differs": Wording(
        Status.WARN, "torch's CUDA build differs from the baseline: {mine} here, {theirs} there.", _STACK_DIFFERS,
        "Install the baseline's torch's CUDA build, or record a new baseline with this one."),
    "baseline_regression": Wording(
        Status.WARN, "{what}{where}: {value}, {amount} {direction} the baseline's {base} (tolerated: {warn:g}{unit}, "
        "fail beyond {fail:g}{unit}).",
        "{why}.", "Run `gpudoctor report --full --probe {probe} -v` on both nodes and compare their details."),
    # -- the runner: a check that could not complete, or had no torch to run (report/runner.py, core/model.py)
    "probe_error": Wording(
        Status.ERROR, "{summary}", "This check could not complete, so its part of the stack is unverified.",
        "Re-run with --probe {probe} -v; if it repeats, attach the JSON report to a bug report."),
    # the summaries of probe_error's ways; its why and fix are probe_error's
    "probe_error:crashed": Wording(Status.ERROR, "probe crashed: {error}"),
    "probe_error:not_loaded": Wording(Status.ERROR, "cannot load probe: {error}"),
    "probe_error:not_json": Wording(Status.ERROR, "probe result is not JSON-safe: {error}"),
    "probe_error:timed_out": Wording(Status.ERROR, "timed out after {limit}"),
    "probe_error:child_failed": Wording(Status.ERROR, "probe process failed"),
    "probe_error:child_exited": Wording(Status.ERROR, "probe process {exit}"),
    "probe_error:child_exited_starting": Wording(Status.ERROR, "probe process {exit} while starting"),
    "probe_error:child_not_started": Wording(Status.ERROR, "probe process could not start: {error}"),
    "probe_error:child_start_timed_out": Wording(Status.ERROR, "probe process did not start within {limit}"),
    # a baseline that could not be read or compared (report --baseline)
    "probe_error:not_compared": Wording(Status.ERROR, "not compared with the baseline: {error}"),
    "torch_not_installed:interpreter": Wording(
        Status.SKIP, "torch is not installed in the interpreter {python}", _RUNS_TORCH, "{hint}"),
    "torch_not_installed:environment": Wording(
        Status.SKIP, "torch is not installed in this environment ({python})", _RUNS_TORCH, "{hint}"),
    # -- the quick check's verdict (report --quick, the TUI's header, the exporter) -------------
    # -- the training summary's all-clear (gpudoctor.hooks.summary.render_text)
    "training_all_clear": Wording(Status.PASS, "No problem found: the loop is not waiting on data{also}."),
    "quick_all_clear": Wording(Status.PASS, "no problem found by the quick check"),
    "quick_result": Wording(Status.WARN, "{summary}"),
    "quick_nothing_checked": Wording(Status.ERROR, "nothing could be checked"),
    # -- the work verdict: is the GPU really busy (gpudoctor.backends.busy; the TUI, watch, the exporter,
    # fleet, why, the hooks). Its codes (idle, waiting...) are keyed ``work:<code>``, ``work:<code>:<way>``;
    # ``short`` is its headline (watch's line, the TUI's panel when the sentence does not fit) ------
    "work:no_reading": Wording(Status.SKIP, "no utilisation reading: nothing to judge", short="no reading", tag="n/a"),
    "work:warming": Wording(Status.SKIP, "not enough to judge yet: SM activity needs two GPM samples (next reading)",
                            short="not enough to judge yet", tag="warming"),
    "work:idle": Wording(Status.PASS, "idle: kernels ran {util:.0f}% of the time, SM activity {sm:.0f}%", short="idle", tag="idle"),
    "work:idle:by_utilisation": Wording(Status.PASS, "idle: kernels ran {util:.0f}% of the time", short="idle"),
    "work:tensor_bound": Wording(
        Status.PASS, "tensor cores {tensor:.0f}% active (SM activity {sm:.0f}%): the GPU is the bottleneck, doing the "
        "right kind of work", short="tensor cores {tensor:.0f}% active: GPU-bound", tag="tensor"),
    "work:memory_bound": Wording(
        Status.WARN, "memory-bound: DRAM bandwidth {dram:.0f}% used, SM activity {sm:.0f}%", "",
        "fuse elementwise work (torch.compile), use bf16 to halve the bytes moved, or larger batches for more math "
        "per byte", short="memory-bound: DRAM {dram:.0f}%, SM {sm:.0f}%", tag="mem-bound"),
    "work:busy_small_kernels": Wording(
        Status.WARN, "{util_text}, but only {sm:.0f}% of SM cycles active and {tensor_text}: small kernels or fp32 math",
        "", "try " + _SMALL_KERNELS_HELP,
        short="busy {util:.0f}% but SM only {sm:.0f}%: small kernels", tag="small-kernels"),
    "work:sm_bound": Wording(Status.PASS, "SMs {sm:.0f}% active, tensor cores {tensor:.0f}% active: the GPU is the "
                             "bottleneck", short="SMs {sm:.0f}% active: GPU-bound", tag="sm-bound"),
    "work:sm_bound:no_tensor": Wording(
        Status.PASS, "SMs {sm:.0f}% active with no tensor work: the GPU is the bottleneck on CUDA cores", "",
        "bf16 or TF32 autocast moves matrix math onto the tensor cores", short="SMs {sm:.0f}% active, no tensor work"),
    "work:waiting": Wording(
        Status.WARN, "kernels ran only {util:.0f}% of the time (SM activity {sm:.0f}%): the GPU waits on the host", "",
        "feed it faster: DataLoader workers, pinned memory, fewer host syncs (.item())",
        short="kernels ran {util:.0f}%: GPU waits on the host", tag="waiting"),
    "work:partly_busy": Wording(
        Status.PASS, "{util_text}, SM activity {sm:.0f}% with {tensor_text}: part of the GPU works", "",
        "larger batches or bf16 autocast give the SMs more to do", short="SM {sm:.0f}% active: partly working", tag="partly"),
    "work:no_gpm": Wording(
        Status.SKIP, "kernels ran {util:.0f}% of the time; how much of the GPU worked cannot be told (SM activity: "
        "{reason}){power}", short="kernels ran {util:.0f}% of the time; SM activity {reason}", tag="no-gpm"),
    "work:no_gpm:no_util": Wording(
        Status.SKIP, "no reading of how often kernels ran; how much of the GPU worked cannot be told (SM activity: "
        "{reason}){power}", short="no reading of how often kernels ran; SM activity {reason}"),
}
#: Phrases the work verdict's words are built from (``{util_text}``, ``{tensor_text}``, ``{power}``).
WORK_PHRASES = {
    "util": "busy {util:.0f}% of the time", "util_unknown": "utilisation unknown",
    "tensor": "tensor cores {tensor:.0f}% active", "no_tensor": "no tensor work",
    "power": "; weaker evidence: power {power:.0f}/{limit:.0f} W ({share:.0%} of the limit)",
    "power_low": ", low for a busy GPU: perhaps small kernels",
    "not_recorded": "not recorded",
}
#: What the driver finding adds when the PCI bus cannot be read (a VM or a sandbox).
PCI_UNREADABLE = (" Whether this machine has an NVIDIA GPU at all cannot be told here: its PCI bus "
                  "(/sys/bus/pci/devices) cannot be read.")
PCI_UNREADABLE_FIX = ("First check that this machine has an NVIDIA GPU (`lspci -nn | grep -i 10de`; on a cloud, a "
                      "GPU instance type). If it has one: ")
#: What the driver finding names when the PCI bus shows NVIDIA devices.
PCI_NVIDIA_SEEN = " The PCI bus shows {count} NVIDIA device(s) ({where}), so the GPU is there."


#: Every wording table, by module name, each a module-level ``WORDING`` (code -> :class:`Wording`):
#: this module's first, then one per package that words its own codes. Registering a package's table
#: is one line here. Tables are imported when a code is first looked up (by name, so this module
#: imports nothing above the foundation layer); a code lives in exactly one table, so their order
#: changes no answer, only what is imported: the probes' table comes before gpudoctor.why's, so that
#: `report --quick` (every code of its probes is there) never imports gpudoctor.why (nor the
#: workload package, last).
_TABLES: tuple[str, ...] = (
    __name__,
    "gpudoctor.probes._wording",  # the probes' codes
    "gpudoctor.why.wording",
    "gpudoctor.workload.wording",  # the sweep's advice (ADVICE)
)


def tables() -> dict[str, Mapping[str, Wording]]:
    """Every registered wording table, by module name."""
    return {name: importlib.import_module(name).WORDING for name in _TABLES}


def wording(code: str) -> Wording:
    """The words of ``code`` (or ``code:way``), from whichever registered table holds it."""
    if code in WORDING:
        return WORDING[code]
    for name in _TABLES[1:]:
        table = importlib.import_module(name).WORDING
        if code in table:
            return table[code]
    raise KeyError(f"finding code {code!r} has no words in any table of gpudoctor.core.findings._TABLES")


def finding(code: str, *, label: str | None = None, device: int | None = None, status: Status | None = None,
            evidence: dict[str, Any] | None = None, **fields: object) -> Finding:
    """The finding ``code`` in :data:`WORDING`'s words, its templates filled from ``fields``.

    With ``label`` (``"GPU 0 (NVIDIA H100)"``) the summary is a sentence about that GPU
    (``"GPU 0 (NVIDIA H100) failed to remap a memory row."``); without, the phrase after the label
    (``"failed to remap a memory row"``: a fleet row names its GPU)."""
    summary, why, fix = words(code, label=label, **fields)
    return Finding(status or wording(code).status, code.partition(":")[0], summary, why, fix, device,
                   dict(evidence or {}))


def words(code: str, *, label: str | None = None, **fields: object) -> tuple[str, str, str]:
    """(summary, why, fix) of the finding ``code``, its templates filled (see :func:`finding`)."""
    worded = wording(code)
    if label is None:
        summary = worded.summary.format(label="", **fields).lstrip(": ")
    else:
        summary = worded.summary.format(label=label, **fields) + "."
    return summary, worded.why.format(**fields), worded.fix.format(**fields)


def errored(probe: str, way: str, *, duration_s: float = 0.0, **fields: Any) -> ProbeResult:
    """A probe's ``error`` result, its summary in the words of ``probe_error:<way>``."""
    return ProbeResult.error(probe, words(f"probe_error:{way}", **fields)[0], duration_s)


def skipped(probe: str, code: str, **fields: Any) -> ProbeResult:
    """A probe's ``skip`` result: the finding ``code`` in its table's words, its summary the result's."""
    summary, why, fix = words(code, **fields)
    return ProbeResult.skip(probe, summary, code=code.partition(":")[0], why=why, fix=fix)


def one_line(f: Finding) -> str:
    """A finding on one line (a fleet row's reason): its summary, then what to do."""
    if not f.fix:
        return f.summary
    return f"{f.summary}: {clause(f.fix).rstrip('.')}"


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


__all__ = ["CLOCK_EVENTS", "CLOCKS_FREE", "NA_REASONS", "ReasonWords", "HELD_DOWN", "HW_PROTECTION", "IDLE_BETWEEN_KERNELS",
           "WORDING", "Wording", "clause", "clock_event_findings", "clocks_held_down", "ecc_finding", "fabric_findings",
           "fabric_health_problems", "fabric_not_completed", "finding", "one_line",
           "errored", "retired_pages_findings", "row_remap_findings", "sentence", "skipped", "tables", "wording", "words"]
