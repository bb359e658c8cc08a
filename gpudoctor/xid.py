"""Xid errors: what the common ones mean, what to do, and reading them from the kernel log.

An Xid is an error report the NVIDIA driver writes to the kernel log (``NVRM: Xid (PCI:...): 79,
...``) and, for the critical ones, sends to NVML event sets (``nvmlEventTypeXidCriticalError``).

Source of the table: NVIDIA's "Xid Errors" documentation and its Xid catalog for Ampere and
newer GPUs (docs.nvidia.com/deploy/xid-errors/, the catalog's "Resolution Bucket" columns; Xid 8:
"GPU stopped processing", RESTART_APP; the "Xid 154 linkage" column ties an Xid to the recovery
action that Xid 154 then reports, e.g. "Node Reboot Required"), and
NVIDIA's dynamic page retirement and row remapping documentation for 48, 63, 64, 92, 94, 95.
The words and the advice below are ours, written for people who run training jobs: the action
says what to do on the node, in the order a cluster operator would try it.

Severity: ``critical`` means the GPU (or the node) should be drained until it is reset or
checked; ``warn`` means an application (often the user's own code) hit a fault, or a
recoverable event happened; ``info`` means bookkeeping that follows another error.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class XidInfo:
    code: int
    words: str
    severity: str  # critical, warn, info
    action: str


_RESTART_APP = "restart the job; if it repeats with other programs, run `gpudoctor report --full` on the node"
_RESET = "drain the node, reset the GPU (nvidia-smi -r) or reboot, then run `gpudoctor report --full`"

XID_TABLE: dict[int, XidInfo] = {info.code: info for info in (
    XidInfo(8, "GPU stopped processing: a channel timed out while idle-waiting (the catalogue's first action is "
               "restarting the application)", "warn", _RESTART_APP),
    XidInfo(13, "graphics engine exception: a kernel faulted (often an out-of-range index or illegal "
                "memory access in the application)", "warn",
            "rerun the job with CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer to find the kernel; " + _RESTART_APP),
    XidInfo(31, "GPU memory page fault: a kernel touched an address it does not own (usually an "
                "application bug)", "warn",
            "check the job for illegal memory access (compute-sanitizer); " + _RESTART_APP),
    XidInfo(43, "GPU stopped processing a channel after a fault in the application; the GPU itself is "
                "healthy", "warn", "restart the job; no GPU reset is needed"),
    XidInfo(45, "preemptive clean-up: the driver ended a channel (a process was killed, or another Xid "
                "came first)", "info", "look for the Xid logged just before this one; nothing to do on its own"),
    XidInfo(48, "double-bit (uncorrectable) ECC error in GPU memory", "critical",
            "drain the node and reset the GPU; if it repeats, the GPU needs replacing"),
    XidInfo(61, "internal micro-controller breakpoint (PMU)", "critical",
            _RESET + "; report to NVIDIA support if it repeats"),
    XidInfo(62, "internal micro-controller halted (PMU)", "critical",
            _RESET + "; report to NVIDIA support if it repeats"),
    XidInfo(63, "ECC page retirement or row remapping recorded: faulty memory will be taken out of use "
                "at the next GPU reset", "warn", "reset the GPU when the running jobs end"),
    XidInfo(64, "ECC page retirement or row remapping failed to record", "critical",
            "drain the node and reset the GPU; if it repeats, the GPU needs replacing"),
    XidInfo(68, "video decoder (NVDEC) exception", "warn", _RESTART_APP),
    XidInfo(69, "graphics engine class error", "warn", _RESTART_APP),
    XidInfo(74, "NVLink error: a link between GPUs reported a fault", "critical",
            "drain the node and reset the GPUs; if it repeats, check the NVLink bridge or baseboard "
            "(`nvidia-smi nvlink -s`)"),
    XidInfo(79, "GPU has fallen off the bus: it stopped answering on PCIe", "critical",
            "drain the node and reboot it; if it repeats, check the slot, riser, power and cooling"),
    XidInfo(92, "high single-bit ECC error rate", "warn",
            "watch the corrected-error count; reset the GPU when convenient and replace it if the rate stays high"),
    XidInfo(94, "contained ECC error: the process that used the faulty memory was stopped, others run on",
            "warn", "restart the stopped job; reset the GPU when the running jobs end to remap the row"),
    XidInfo(95, "uncontained ECC error: every process on the GPU is affected", "critical",
            "drain the node and reset the GPU now; if it repeats, the GPU needs replacing"),
    XidInfo(109, "context switch timeout: the GPU could not switch away from a channel in time (often a "
                 "kernel that runs or hangs too long, after an application fault)", "warn",
            "look for an Xid 13/31/43 from the same process just before it; " + _RESTART_APP),
    XidInfo(119, "GSP firmware did not answer in time (GSP RPC timeout)", "critical",
            _RESET + "; update the driver if it repeats"),
    XidInfo(120, "GSP firmware error", "critical", _RESET + "; update the driver if it repeats"),
    XidInfo(149, "NVLink network (NETIR) error on the GPU's links; the message says Fatal or Nonfatal", "critical",
            "drain the node and reboot it; if it repeats, have the NVLink fabric (switch trays, cables) checked"),
    XidInfo(154, "the driver changed the GPU's recovery action: the message names what is needed now "
                 "(GPU reset, node reboot, or drain)", "critical",
            "do what the message names: drain the node, then reset the GPU or reboot; run `gpudoctor report --full`"),
)}


# Xids the catalogue puts down to the application first (a faulting kernel, a channel the driver
# stopped after such a fault). One of them on its own is the job's business; the same one again and
# again on one GPU while its neighbours, running the same kind of work, stay clean points at the
# GPU (NVIDIA's catalogue for Xid 31: repeated MMU faults on the same GPU, by PCI id, call for a
# DCGM diagnostic; repeated faults spread over different GPUs call for checking the application).
APPLICATION_XIDS = frozenset({8, 13, 31, 43, 68, 69, 109})
MMU_FAULT_XID = 31


def explain(code: int) -> XidInfo:
    """The table's entry, or a plain "not in gpudoctor's table" entry pointing to NVIDIA's catalog."""
    known = XID_TABLE.get(code)
    if known is not None:
        return known
    return XidInfo(code, "not in gpudoctor's table of common Xids", "warn",
                   "look it up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/)")


# --------------------------------------------------------------------------- kernel log
# NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
# Older drivers print the bus id without the "PCI:" prefix: NVRM: Xid (0000:03:00): 31, ...
_XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-9])?\): ([0-9]{1,9})(?![0-9])")
# Newer drivers (570 and later) also report a GPU lost from PCIe without an Xid prefix, over three
# lines (one kmsg record with escaped newlines, or three dmesg lines):
#   NVRM: The NVIDIA GPU 0000:b3:00.0
#   NVRM: (PCI ID: 10de:26b5) installed in this system has
#   NVRM: fallen off the bus and is not responding to commands.
# It means what Xid 79 means, so it is read as one (NVIDIA/NVSentinel#155).
_GPU_NAMED = re.compile(r"NVRM: The NVIDIA GPU ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-9])?")
_FALLEN_OFF = "fallen off the bus"
FALLEN_OFF_BUS_XID = 79
_FALLEN_OFF_WITHIN_LINES = 3  # the "fallen off" line follows the GPU's line within this many lines
KMSG_READ_LIMIT = 4 * 1024 * 1024  # never read more than this much of the log


@dataclass(frozen=True)
class LoggedXid:
    pci_bus_id: str  # normalised 0000:3b:00.0
    code: int
    uptime_s: float | None  # seconds since boot, from the kmsg record
    time: float | None  # Unix time, from boot time + uptime when both are known
    text: str  # the log line, bounded, control characters removed


@dataclass
class KernelLog:
    xids: list[LoggedXid]
    readable: bool
    reason: str  # why the log could not be read ("" when it could)


def parse_kmsg(lines: Iterable[str], boot_time: float | None = None) -> list[LoggedXid]:
    """Xid records from ``/dev/kmsg``-style lines (``prio,seq,usec,flags;message``) or plain dmesg.

    The driver's Xid-less "fallen off the bus" message counts as Xid 79 on the GPU it names."""
    found = []
    named: tuple[str, float | None, int] | None = None  # (bus id, uptime, line number) of "The NVIDIA GPU ..."
    for number, raw in enumerate(lines):
        line = raw.rstrip("\n")
        usec = None
        head, sep, message = line.partition(";")
        if sep and head.count(",") >= 2:
            try:
                usec = int(head.split(",")[2])
            except ValueError:
                usec = None
        else:
            message = line
        uptime = usec / 1e6 if usec is not None else None
        m = _XID_LINE.search(message)
        if m:
            code, bus = int(m.group(2)), m.group(1)
        else:
            g = _GPU_NAMED.search(message)
            if g:
                named = (g.group(1), uptime, number)
            if (_FALLEN_OFF not in message or named is None
                    or number - named[2] >= _FALLEN_OFF_WITHIN_LINES):
                continue
            code, bus = FALLEN_OFF_BUS_XID, named[0]
            uptime = named[1] if uptime is None else uptime
            named = None
        when = boot_time + uptime if (boot_time is not None and uptime is not None) else None
        text = re.sub(r"[\x00-\x1f\x7f-\x9f]", "?", message.strip())[:300]
        found.append(LoggedXid(f"{bus.lower()}.0", code, uptime, when, text))
    return found


def read_kernel_log(path: str = "/dev/kmsg", boot_time: float | None = None) -> KernelLog:
    """Every Xid still in the kernel's ring buffer, read without blocking.

    ``/dev/kmsg`` needs root or CAP_SYSLOG when ``kernel.dmesg_restrict`` is 1 (most distributions):
    then the answer says so, and Xids from before gpudoctor started are unknown rather than absent.
    """
    if boot_time is None:
        try:
            import psutil

            boot_time = psutil.boot_time()
        except Exception:  # noqa: BLE001 (psutil missing or unreadable /proc: times stay unknown)
            boot_time = None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        hint = (" (needs root or CAP_SYSLOG while kernel.dmesg_restrict=1)"
                if exc.errno in (1, 13) else "")
        return KernelLog([], False, f"cannot read {path}: {exc.strerror}{hint}")
    lines: list[str] = []
    total = 0
    try:
        if path == "/dev/kmsg":
            os.lseek(fd, 0, os.SEEK_SET)  # SEEK_DATA/SET: from the oldest record still buffered
        while total < KMSG_READ_LIMIT:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break  # end of the buffer
            except OSError as exc:
                if exc.errno == 32:  # EPIPE: a record was overwritten while reading; go on
                    continue
                return KernelLog(parse_kmsg(lines, boot_time), False, f"reading {path} failed: {exc.strerror}")
            if not chunk:
                break
            total += len(chunk)
            lines.extend(chunk.decode("utf-8", "replace").splitlines())
    finally:
        os.close(fd)
    return KernelLog(parse_kmsg(lines, boot_time), True, "")

