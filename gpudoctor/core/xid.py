"""Xid errors: what the common ones mean, what to do, and reading them from the kernel log.

An Xid is an error report the NVIDIA driver writes to the kernel log (``NVRM: Xid (PCI:...): 79,
...``) and, for the critical ones, sends to NVML event sets (``nvmlEventTypeXidCriticalError``).

Source of the table: NVIDIA's "Xid Errors" documentation and its Xid catalog for Ampere and
newer GPUs (CATALOG_URL; the catalog's "Resolution Bucket (Immediate Action)" column is each
entry's ``bucket``: RESTART_APP, RESET_GPU, IGNORE...; the "Xid 154 linkage" column ties an Xid
to the recovery action that Xid 154 then reports, e.g. "Node Reboot Required"), and NVIDIA's
dynamic page retirement and row remapping documentation for 48, 63, 64, 92, 94, 95. Every Xid the
catalog lists (1 to 172) has an entry: the common ones below in words of our own, the others
from the catalog's description and bucket (:data:`CATALOG`). The catalog's rows as published are
in tests/data/nvidia_xid_catalog/rows.json; tests/core/test_xid_catalog.py holds this table to them.
The words and the advice below are ours, written for people who run training jobs: the action
says what to do on the node, in the order a cluster operator would try it.

Severity: ``critical`` means the GPU (or the node) should be drained until it is reset or
checked; ``warn`` means an application (often the user's own code) hit a fault, or a
recoverable event happened; ``info`` means bookkeeping that follows another error.
"""

from __future__ import annotations


from typing import Iterable

from gpudoctor.core._record import record
# The kernel log's reader (gpudoctor.core.kernel_log), reachable here as before.
from gpudoctor.core.kernel_log import (  # noqa: F401
    _GPU_NAMED, _XID_LINE, FALLEN_OFF_BUS_XID, FOLLOW_UP_XIDS, KMSG_READ_LIMIT, KernelLog, LoggedXid, _boot_time,
    parse_kmsg, read_kernel_log, with_named_causes,
)


#: NVIDIA's Xid catalog (Ampere and newer GPUs).
CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


@record(frozen=True)
class XidInfo:
    code: int
    words: str
    severity: str  # critical, warn, info
    action: str
    bucket: str = ""  # the catalog's immediate resolution bucket ("" where it gives none)


_RESTART_APP = "restart the job; if it repeats with other programs, run `gpudoctor report --full` on the node"
_RESET = "drain the node, reset the GPU (nvidia-smi -r) or reboot, then run `gpudoctor report --full`"

XID_TABLE: dict[int, XidInfo] = {info.code: info for info in (
    XidInfo(8, "GPU stopped processing: a channel timed out while idle-waiting (the catalogue's first action is "
               "restarting the application)", "warn", _RESTART_APP, "RESTART_APP"),
    XidInfo(13, "graphics engine exception: a kernel faulted (often an out-of-range index or illegal "
                "memory access in the application)", "warn",
            "rerun the job with CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer to find the kernel; " + _RESTART_APP, "RESTART_APP"),
    XidInfo(31, "GPU memory page fault: a kernel touched an address it does not own (usually an "
                "application bug)", "warn",
            "check the job for illegal memory access (compute-sanitizer); " + _RESTART_APP, "RESTART_APP"),
    XidInfo(43, "GPU stopped processing a channel after a fault in the application; the GPU itself is "
                "healthy", "warn", "restart the job; no GPU reset is needed", "IGNORE"),
    XidInfo(45, "preemptive clean-up: the driver ended a channel (a process was killed, or another Xid "
                "came first)", "info", "look for the Xid logged just before this one; nothing to do on its own", "WORKFLOW_XID_45"),
    XidInfo(48, "double-bit (uncorrectable) ECC error in GPU memory", "critical",
            "drain the node and reset the GPU; if it repeats, the GPU needs replacing", "WORKFLOW_XID_48"),
    XidInfo(61, "internal micro-controller breakpoint (PMU); the catalog lists it as unused on Ampere and "
                "newer GPUs", "critical", _RESET + "; report to NVIDIA support if it repeats", "CONTACT_SUPPORT"),
    XidInfo(62, "internal micro-controller halted (PMU)", "critical",
            _RESET + "; report to NVIDIA support if it repeats", "RESET_GPU"),
    XidInfo(63, "ECC page retirement or row remapping recorded: faulty memory will be taken out of use "
                "at the next GPU reset", "warn", "reset the GPU when the running jobs end", "IGNORE"),
    XidInfo(64, "ECC page retirement or row remapping failed to record", "critical",
            "drain the node and reset the GPU; if it repeats, the GPU needs replacing", "RESET_GPU"),
    XidInfo(68, "video decoder (NVDEC) exception", "warn", _RESTART_APP, "RESTART_APP"),
    XidInfo(69, "graphics engine class error", "warn", _RESTART_APP, "RESTART_APP"),
    XidInfo(74, "NVLink error: a link between GPUs reported a fault", "critical",
            "drain the node and reset the GPUs; if it repeats, check the NVLink bridge or baseboard "
            "(`nvidia-smi nvlink -s`)", "WORKFLOW_NVLINK_ERR"),
    XidInfo(79, "GPU has fallen off the bus: it stopped answering on PCIe", "critical",
            "drain the node and reboot it; if it repeats, check the slot, riser, power and cooling", "RESTART_BM"),
    XidInfo(92, "high single-bit ECC error rate", "warn",
            "watch the corrected-error count; reset the GPU when convenient and replace it if the rate stays high", "IGNORE"),
    XidInfo(94, "contained ECC error: the process that used the faulty memory was stopped, others run on",
            "warn", "restart the stopped job; reset the GPU when the running jobs end to remap the row", "RESTART_APP"),
    XidInfo(95, "uncontained ECC error: every process on the GPU is affected", "critical",
            "drain the node and reset the GPU now; if it repeats, the GPU needs replacing", "RESET_GPU"),
    XidInfo(109, "context switch timeout: the GPU could not switch away from a channel in time (it often "
                 "follows an application fault, but the GPU is left needing a reset)", "critical",
            _RESET + "; look for an Xid 13/31/43 from the same process just before it", "RESET_GPU"),
    XidInfo(119, "GSP firmware did not answer in time (GSP RPC timeout)", "critical",
            _RESET + "; update the driver if it repeats", "RESET_GPU"),
    XidInfo(120, "GSP firmware error", "critical", _RESET + "; update the driver if it repeats", "RESET_GPU"),
    XidInfo(149, "NVLink network (NETIR) error on the GPU's links; the message says Fatal or Nonfatal", "critical",
            "drain the node and reset the GPU (or reboot it); if it repeats, have the NVLink fabric (switch trays, "
            "cables) checked", "WORKFLOW_NVLINK5_ERR"),
    XidInfo(154, "the driver changed the GPU's recovery action: the message names what is needed now "
                 "(GPU reset, node reboot, or drain)", "critical",
            "do what the message names: drain the node, then reset the GPU or reboot; run `gpudoctor report --full`", "XID_154"),
)}


# Xids the catalogue puts down to the application first (a faulting kernel, a channel the driver
# stopped after such a fault; not 109, whose bucket is RESET_GPU). One of them on its own is the job's business; the same one again and
# again on one GPU while its neighbours, running the same kind of work, stay clean points at the
# GPU (NVIDIA's catalogue for Xid 31: repeated MMU faults on the same GPU, by PCI id, call for a
# DCGM diagnostic; repeated faults spread over different GPUs call for checking the application).
APPLICATION_XIDS = frozenset({8, 13, 31, 43, 68, 69})
MMU_FAULT_XID = 31


# -- the rest of NVIDIA's catalog ----------------------------------------------------------------
# What each immediate resolution bucket of the catalog asks for, as a severity and an action.
_BUCKET_ACTIONS: dict[str, tuple[str, str]] = {
    "RESTART_APP": ("warn", _RESTART_APP),
    "RESET_GPU": ("critical", _RESET),
    "RESTART_BM": ("critical", "drain the node and reboot it (power-cycle if the GPU does not come back)"),
    "IGNORE": ("info", "nothing to do on its own (the catalog's action: none); look at the Xids logged beside it"),
    "CONTACT_SUPPORT": ("warn", "report it to NVIDIA support or the system vendor, with `nvidia-bug-report.sh`'s "
                                "output"),
    "WORKFLOW_XID_48": ("critical", "drain the node and reset the GPU; if it repeats, the GPU needs replacing"),
    "WORKFLOW_XID_45": ("info", "look for the Xid logged just before this one; nothing to do on its own"),
    "WORKFLOW_NVLINK_ERR": ("critical", "drain the node and reset the GPUs; if it repeats, have the NVLink links "
                                        "checked (`nvidia-smi nvlink -s`)"),
    # NVLink 5 (Blackwell) errors: the catalog decodes each by its subcode, and the message says
    # "Fatal" (reset the GPU) or "Nonfatal" (most need nothing); 149, whose every subcode is a
    # link-fatal RESET_GPU, is worded in XID_TABLE.
    "WORKFLOW_NVLINK5_ERR": ("warn", "if the message says Fatal, drain the node and reset the GPU; a Nonfatal one "
                                     "needs nothing unless it repeats, then have the NVLink fabric (switch trays, "
                                     "cables) checked"),
    "UPDATE_SWFW": ("warn", "update the driver and the vGPU software/firmware to matching versions"),
    "CHECK_MECHANICALS": ("critical", "power the node down and connect the GPU board's auxiliary power cables"),
    "RESTART_VM": ("warn", "restart the virtual machine (confidential computing key rotation failed)"),
    "CHECK_UVM": ("warn", "check the nvidia-uvm module and the application's unified (CPU-GPU) memory use; "
                          "report to NVIDIA support if it repeats"),
    "XID_154": ("critical", "do what the message names: drain the node, then reset the GPU or reboot"),
}

# The catalog's rows that gpudoctor's table above does not word itself: Xid -> (the catalog's
# description, its immediate resolution bucket). Rows it lists as unused (on Ampere and newer) are
# in _UNUSED; the rows that give no bucket (162-172, the newest) carry their action in _NO_BUCKET.
CATALOG: dict[int, tuple[str, str]] = {
    11: ("invalid or corrupted push buffer stream", "RESTART_APP"),
    14: ("fake or injected error from user space", "IGNORE"),
    25: ("invalid or illegal push buffer stream", "RESTART_APP"),
    32: ("invalid or corrupted push buffer stream (DMA controller fault, often PCIe quality)", "RESTART_APP"),
    37: ("driver firmware error", "IGNORE"),
    38: ("driver firmware error (watchdog timeout)", "IGNORE"),
    39: ("copy engine exception (CE0)", "RESTART_APP"),
    40: ("copy engine exception (CE1)", "RESTART_APP"),
    41: ("copy engine exception (CE2)", "RESTART_APP"),
    44: ("graphics engine fault during a context switch", "IGNORE"),
    46: ("GPU stopped processing (GPU timeout)", "RESET_GPU"),
    54: ("auxiliary power is not connected to the GPU board", "CHECK_MECHANICALS"),
    60: ("video processor exception (SEC2)", "RESTART_APP"),
    66: ("illegal register access by the driver", "IGNORE"),
    67: ("illegal access by the driver", "IGNORE"),
    70: ("copy engine error (CE3)", "RESTART_APP"),
    71: ("copy engine error (CE4)", "RESTART_APP"),
    72: ("copy engine error (CE5)", "RESTART_APP"),
    75: ("copy engine error (CE6)", "RESTART_APP"),
    76: ("copy engine error (CE7)", "RESTART_APP"),
    77: ("copy engine error (CE8)", "RESTART_APP"),
    78: ("vGPU start error", "UPDATE_SWFW"),
    80: ("corrupted data sent to the GPU (push buffer CRC mismatch)", "RESTART_APP"),
    82: ("JPEG decoder error (NVJPG0)", "RESTART_APP"),
    83: ("video decoder error (NVDEC1)", "RESTART_APP"),
    84: ("video decoder error (NVDEC2)", "RESTART_APP"),
    85: ("copy engine error (CE9)", "RESTART_APP"),
    86: ("optical flow accelerator exception (OFA)", "RESTART_APP"),
    88: ("video decoder error (NVDEC3)", "RESTART_APP"),
    89: ("video decoder error (NVDEC4)", "RESTART_APP"),
    93: ("InfoROM wear limit reached (non-fatal; set with nvflash)", "IGNORE"),
    96: ("video decoder error (NVDEC5)", "RESTART_APP"),
    97: ("video decoder error (NVDEC6)", "RESTART_APP"),
    98: ("video decoder error (NVDEC7)", "RESTART_APP"),
    **{code: (f"JPEG decoder error (NVJPG{code - 98})", "RESTART_APP") for code in range(99, 106)},
    106: ("SMBPBI test message", "IGNORE"),
    107: ("SMBPBI test message (silent)", "IGNORE"),
    108: ("NVLink remote translation error (listed as unused)", "IGNORE"),
    110: ("security fault error (uncommon without a hardware failure)", "RESET_GPU"),
    121: ("corrected errors on the C2C link to a Grace CPU", "IGNORE"),
    **{code: (f"copy engine error (CE{code - 116})", "RESTART_APP") for code in range(126, 136)},
    136: ("NVLink link training failed", "RESET_GPU"),
    137: ("NVLink privilege error: an illegal peer-to-peer access over NVLink (usually the application)", "IGNORE"),
    139: ("optical flow accelerator error (OFA1)", "RESTART_APP"),
    140: ("uncorrectable ECC error that escaped page offlining or row remapping", "RESET_GPU"),
    141: ("CUDA fast path error", "IGNORE"),
    142: ("video encoder error (NVENC3)", "CONTACT_SUPPORT"),
    143: ("GPU initialization error", "RESET_GPU"),
    144: ("NVLink SAW error", "WORKFLOW_NVLINK5_ERR"),
    145: ("NVLink RLW error", "WORKFLOW_NVLINK5_ERR"),
    146: ("NVLink TLW error", "WORKFLOW_NVLINK5_ERR"),
    147: ("NVLink TREX error", "WORKFLOW_NVLINK5_ERR"),
    148: ("NVLink NVLPW control error", "WORKFLOW_NVLINK5_ERR"),
    150: ("NVLink MSE error", "WORKFLOW_NVLINK5_ERR"),
    151: ("key rotation error (confidential computing)", "RESTART_VM"),
    152: ("DLA SMMU error", "IGNORE"),
    153: ("DLA timeout error", "IGNORE"),
    155: ("NVLink software-defined error (a link taken down on purpose, sleep included)", "RESET_GPU"),
    156: ("resource retirement event", "RESET_GPU"),
    157: ("resource retirement failure: no spare resources left for repairs", "IGNORE"),
    158: ("GPU fatal timeout", "RESET_GPU"),
    159: ("CHI non-data error (on a C2C-linked GPU)", "CHECK_UVM"),
    160: ("channel retirement event", "IGNORE"),
    161: ("channel retirement failure", "IGNORE"),
}
_UNUSED = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 26, 27, 28, 29, 30,
                     33, 34, 35, 36, 42, 47, 49, 50, 51, 52, 53, 55, 56, 57, 58, 59, 65, 73, 81, 87, 90, 91,
                     111, 112, 113, 114, 115, 116, 117, 118, 122, 123, 124, 125, 138})
# The newest rows give no resolution bucket; their action, in our words, from the catalog's notes.
_NO_BUCKET: dict[int, XidInfo] = {info.code: info for info in (
    XidInfo(162, "power smoothing circuitry re-engaged", "info", "nothing to do"),
    XidInfo(163, "power smoothing circuitry disengaged", "warn",
            "no GPU reset needed; to have power smoothing again, resolve the thermal events (after a timeout, "
            "reload the driver or reset the GPU)"),
    XidInfo(164, "power smoothing circuitry near the end of its lifetime", "warn",
            "watch the node's power swings; plan to replace the GPU if power smoothing is needed"),
    XidInfo(165, "power smoothing circuitry lifetime exhausted: power swings will occur", "warn",
            "replace the GPU if power smoothing is needed; check that the data centre can absorb the power swings"),
    XidInfo(166, "confidential-computing traffic before the NVLink was set up for encryption", "warn",
            "only in confidential computing mode: " + _RESET),
    XidInfo(167, "PCIe fatal timeout", "critical", _RESET),
    XidInfo(168, "errors found in the write-protected region: reduced GPU memory capacity", "warn",
            "enable ECC (so rows can be remapped) or reboot to retry"),
    XidInfo(169, "internal micro-controller halt (SEC2)", "critical", _RESET),
    XidInfo(170, "interrupt seen in confidential computing mode", "warn",
            "only in confidential computing mode: " + _RESET),
    XidInfo(171, "uncorrectable DRAM error (details beside an Xid 48)", "critical",
            "drain the node and reset the GPU; if it repeats, the GPU needs replacing"),
    XidInfo(172, "uncorrectable SRAM error (details beside an Xid 48)", "critical",
            "drain the node and reset the GPU; if it repeats, the GPU needs replacing"),
)}


#: The meaning and action of an Xid the catalog does not describe: (meaning, action template).
_NOT_IN_CATALOG = {
    "unused": ("listed as unused in NVIDIA's Xid catalog (a GPU older than Ampere may still log it)",
               "{action}; older GPUs: see {url}"),
    "unknown": ("unknown: not in NVIDIA's Xid catalog as gpudoctor knows it",
                "look it up in NVIDIA's Xid catalog ({url}); a newer driver may define it"),
}


def explain(code: int) -> XidInfo:
    """The table's entry; else one made from NVIDIA's catalog (its description and its resolution
    bucket's action); else "unknown", pointing to the catalog."""
    known = XID_TABLE.get(code) or _NO_BUCKET.get(code)
    if known is not None:
        return known
    if code in CATALOG:
        words, bucket = CATALOG[code]
        severity, action = _BUCKET_ACTIONS[bucket]
        return XidInfo(code, words, severity, action, bucket)
    if code in _UNUSED:
        words, action = _NOT_IN_CATALOG["unused"]
        return XidInfo(code, words, "warn", action.format(action=_BUCKET_ACTIONS["CONTACT_SUPPORT"][1],
                                                          url=CATALOG_URL), "CONTACT_SUPPORT")
    words, action = _NOT_IN_CATALOG["unknown"]
    return XidInfo(code, words, "warn", action.format(url=CATALOG_URL))


# --------------------------------------------------------------------------- sequences
# The follow-up Xids and the cause a follow-up line names live with the log reader
# (gpudoctor.core.kernel_log: FOLLOW_UP_XIDS, with_named_causes), reachable here as before.
_RANK = {"info": 0, "warn": 1, "critical": 2}


@record(frozen=True)
class XidSequence:
    """One GPU's Xids in the order they came, judged as a whole (:func:`judge_sequence`).

    ``codes``: the codes in order (a repeat of the same code right after itself counted once);
    ``worst``: the most severe (the latest among equals; None: no Xid); ``last``: the newest;
    ``hidden``: the critical codes that a later, less severe code followed (a last-value gauge
    shows the later one only); ``follow_up_alone``: every code is a follow-up (45): what it followed
    is not in the sequence."""

    codes: tuple[int, ...]
    worst: int | None
    last: int | None
    hidden: tuple[int, ...]
    follow_up_alone: bool


def judge_sequence(codes: Iterable[int]) -> XidSequence:
    ordered: list[int] = []
    for code in codes:
        if code > 0 and (not ordered or ordered[-1] != code):
            ordered.append(code)
    if not ordered:
        return XidSequence((), None, None, (), False)
    rank = [_RANK.get(explain(c).severity, 1) for c in ordered]
    worst = max(range(len(ordered)), key=lambda i: (rank[i], i))
    hidden = tuple(dict.fromkeys(c for i, c in enumerate(ordered)
                                 if rank[i] == 2 and any(r < 2 for r in rank[i + 1:])))
    return XidSequence(tuple(ordered), ordered[worst], ordered[-1], hidden,
                       all(c in FOLLOW_UP_XIDS for c in ordered))


def gauge_steps(samples: Iterable[tuple[float, float]]) -> list[tuple[float, int]]:
    """The values a last-Xid gauge (dcgm-exporter's DCGM_FI_DEV_XID_ERRORS) took, oldest first, each
    with the time it was first seen: ``[(time, code)]``. A 0 (no Xid yet, or the exporter restarted)
    ends a step without being one. The same Xid twice in a row cannot be told apart from once: the
    gauge does not change."""
    steps: list[tuple[float, int]] = []
    previous: int | None = None
    for when, value in sorted(samples):
        code = int(value) if value == value and 0 <= value < 1e6 else 0
        if code != previous and code > 0:
            steps.append((when, code))
        previous = code
    return steps
