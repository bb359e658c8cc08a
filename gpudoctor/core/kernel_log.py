"""The kernel log's Xid records: read ``/dev/kmsg`` (or dmesg lines) and find each ``NVRM: Xid``
line, with its GPU's PCI bus id and time. What an Xid means, and what to do, is in
:mod:`gpudoctor.core.xid` (which gives these names too); this module is what the event watcher needs to
read the log, without the Xid catalogue's tables (`report --quick` reads the log on every run and
judges an Xid only when there is one)."""

from __future__ import annotations

import os
import re
from typing import Iterable

from gpudoctor.core._record import record

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


@record(frozen=True)
class LoggedXid:
    pci_bus_id: str  # normalised 0000:3b:00.0
    code: int
    uptime_s: float | None  # seconds since boot, from the kmsg record
    time: float | None  # Unix time, from boot time + uptime when both are known
    text: str  # the log line, bounded, control characters removed


@record
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


def _boot_time() -> float | None:
    """When the machine booted (seconds since the epoch): /proc/stat's btime, as psutil.boot_time()
    reads it on Linux, without importing psutil (a tenth of `report --quick`); psutil elsewhere."""
    try:
        with open("/proc/stat", "rb") as fh:
            for line in fh:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return float(psutil.boot_time())
    except Exception:  # noqa: BLE001 (psutil missing or unreadable /proc: times stay unknown)
        return None


def read_kernel_log(path: str = "/dev/kmsg", boot_time: float | None = None) -> KernelLog:
    """Every Xid still in the kernel's ring buffer, read without blocking.

    ``/dev/kmsg`` needs root or CAP_SYSLOG when ``kernel.dmesg_restrict`` is 1 (most distributions):
    then the answer says so, and Xids from before gpudoctor started are unknown rather than absent.
    """
    if boot_time is None:
        boot_time = _boot_time()
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


# --------------------------------------------------------------------------- follow-ups
# Xids the driver logs after another error, about that error's clean-up: Xid 45 (preemptive
# clean-up: it stopped the channels of a process that was killed or that hit an earlier Xid).
# Alone it says nothing of the GPU; as the last value of a last-Xid gauge it hides the one before.
FOLLOW_UP_XIDS = frozenset({45})
# Newer drivers name the Xid a follow-up came after: "45, pid=..., Ch 00000001 caused by previous Xid
# 149" (590.48.01 in NVIDIA/open-gpu-kernel-modules#1150).
_CAUSED_BY = re.compile(r"caused by previous Xid ([0-9]{1,4})(?![0-9])")


def with_named_causes(found: list[LoggedXid]) -> list[LoggedXid]:
    """The kernel log's Xids, with the Xid a follow-up line names as its cause ("45 ... caused by
    previous Xid 149") put in before it, once per GPU, where the log does not already hold that Xid
    on that GPU earlier (the ring buffer kept only the clean-up lines, or the driver logged the cause
    elsewhere): the follow-up then never hides the critical Xid it came after."""
    out: list[LoggedXid] = []
    seen: dict[str, set[int]] = {}
    for entry in found:
        codes = seen.setdefault(entry.pci_bus_id, set())
        named = _CAUSED_BY.search(entry.text) if entry.code in FOLLOW_UP_XIDS else None
        if named and int(named.group(1)) not in codes and int(named.group(1)) > 0:
            cause = int(named.group(1))
            out.append(LoggedXid(entry.pci_bus_id, cause, entry.uptime_s, entry.time,
                                 f"(named by the Xid {entry.code} that followed it) {entry.text}"[:300]))
            codes.add(cause)
        out.append(entry)
        codes.add(entry.code)
    return out


__all__ = ["FALLEN_OFF_BUS_XID", "FOLLOW_UP_XIDS", "KMSG_READ_LIMIT", "KernelLog", "LoggedXid", "parse_kmsg",
           "read_kernel_log", "with_named_causes"]
