"""Critical GPU events: Xid errors, ECC errors and clock changes, from NVML's event set and the
kernel log, counted per GPU with the last few kept with their time.

NVML only reports events that happen while an event set is registered, so a long-lived watcher
(the exporter, ``watch``, the TUI) sees what happens while it runs. Xids from before it started
are read once from the kernel log (``/dev/kmsg``) when that is readable, and the answer says when
it is not. Where the driver or the board does not support an event type, that GPU's ``supported``
is ``NA`` with the reason, never a silent zero.

Threading: :meth:`EventWatcher.start` runs one daemon thread that waits on the event set with a
timeout (NVML's ``nvmlEventSetWait_v2``), so stopping never waits for more than that timeout and
the process can always exit (the thread is a daemon).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Protocol, cast

from gpudoctor.core._record import field, record
from .na import NA, is_na

if TYPE_CHECKING:
    from .base import GpuBackend
    from .nvml import NvmlBackend, NvmlGate, NvmlHandle
    from .replay import ReplayBackend

# nvmlEventType* bits (nvml.h). Storm and DRAM retirement events exist on newer drivers only.
EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID_CRITICAL = 0x8
EVENT_CLOCK = 0x10
EVENT_SINGLE_BIT_ECC_STORM = 0x200
EVENT_DRAM_RETIREMENT = 0x400
EVENT_DRAM_RETIREMENT_FAILURE = 0x800

EVENT_KINDS: dict[int, str] = {
    EVENT_XID_CRITICAL: "xid",
    EVENT_DOUBLE_BIT_ECC: "ecc_double_bit",
    EVENT_SINGLE_BIT_ECC: "ecc_single_bit",
    EVENT_SINGLE_BIT_ECC_STORM: "ecc_single_bit_storm",
    EVENT_CLOCK: "clock_change",
    EVENT_DRAM_RETIREMENT: "memory_retirement",
    EVENT_DRAM_RETIREMENT_FAILURE: "memory_retirement_failure",
}
WATCHED_MASK = sum(EVENT_KINDS)

# Single-bit errors are corrected, but many in a short time foretell uncorrectable ones (NVIDIA's
# dynamic page retirement retires a page after repeated single-bit errors on it). Drivers that
# do not send the storm event get it derived here: this many single-bit events within a minute.
SBE_STORM_PER_MINUTE = 10


@record(frozen=True)
class GpuEvent:
    time: float  # Unix time
    kind: str  # a value of EVENT_KINDS
    code: int | None = None  # the Xid number for kind "xid"; the event data otherwise
    source: str = "nvml"  # nvml, kernel_log or replay

    def to_dict(self) -> dict[str, Any]:
        return {"time": self.time, "kind": self.kind, "code": self.code, "source": self.source}


@record
class DeviceEvents:
    """What one GPU reported: counts per kind since watching began, and the last few events."""

    supported: NA | None = None  # None: watching; NA(reason) when the GPU cannot report events
    counts: dict[str, int] = field(default_factory=dict)
    recent: list[GpuEvent] = field(default_factory=list)
    logged_xids: list[GpuEvent] = field(default_factory=list)  # from the kernel log, before start

    @property
    def xid_count(self) -> int:
        return self.counts.get("xid", 0)

    def last_xid(self) -> GpuEvent | None:
        xids = [e for e in self.recent + self.logged_xids if e.kind == "xid"]
        return max(xids, key=lambda e: e.time) if xids else None

    def to_dict(self) -> dict[str, Any]:
        return {"supported": None if self.supported is None else self.supported.to_json(),
                "counts": dict(self.counts), "recent": [e.to_dict() for e in self.recent],
                "logged_xids": [e.to_dict() for e in self.logged_xids]}


class _Tracker:
    """Counts and keeps the last ``keep`` events of one GPU; derives single-bit ECC storms."""

    def __init__(self, keep: int) -> None:
        self.state = DeviceEvents()
        self._recent: deque[GpuEvent] = deque(maxlen=keep)
        self._sbe_times: deque[float] = deque(maxlen=SBE_STORM_PER_MINUTE)
        self._storm_until = 0.0

    def add(self, event: GpuEvent) -> None:
        counts = self.state.counts
        counts[event.kind] = counts.get(event.kind, 0) + 1
        if event.kind != "clock_change":  # clock changes are frequent; counted, not kept
            self._recent.append(event)
        if event.kind == "ecc_single_bit":
            self._sbe_times.append(event.time)
            full = len(self._sbe_times) == SBE_STORM_PER_MINUTE
            if full and event.time - self._sbe_times[0] <= 60.0 and event.time > self._storm_until:
                self._storm_until = event.time + 60.0  # one storm a minute, however many errors
                self.add(GpuEvent(event.time, "ecc_single_bit_storm", None, "derived"))

    def snapshot(self) -> DeviceEvents:
        return DeviceEvents(self.state.supported, dict(self.state.counts), list(self._recent),
                            list(self.state.logged_xids))


class NvmlEventData(Protocol):
    """The fields read from one ``nvmlEventData_t`` (pynvml's ctypes structure)."""

    device: NvmlHandle
    eventType: int
    eventData: int


class EventWatcher:
    """Watches every GPU's critical events through one NVML event set, in one daemon thread.

    ``gate`` is the backend's :class:`~gpudoctor.backends.nvml.NvmlGate`; ``bus_ids`` maps each
    NVML index to its PCI bus id (``0000:3b:00.0``), used to attach kernel-log Xids to GPUs.
    """

    def __init__(self, gate: NvmlGate, count: int, *, bus_ids: dict[int, str] | None = None, keep: int = 8,
                 wait_ms: int = 500, clock: Callable[[], float] = time.time,
                 kernel_log: Callable[[], Any] | None = None, retry_first_s: float = 1.0,
                 retry_max_s: float = 60.0) -> None:
        self.gate = gate
        self.count = count
        self.bus_ids = bus_ids or {}
        self.wait_ms = wait_ms
        self._clock = clock
        self._kernel_log = kernel_log
        self._trackers = {i: _Tracker(keep) for i in range(count)}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._set: Any = None
        self.status: NA | None = None  # NA(reason) when no GPU could be watched
        self.kernel_log_readable: bool | None = None
        self.kernel_log_reason = ""
        self.retry_first_s, self.retry_max_s = retry_first_s, retry_max_s
        self.reregistrations = 0  # event sets registered again after NVML went away
        self._suspend = threading.Event()   # asked: free the set before NVML is shut down
        self._suspended = threading.Event()  # done: the thread holds no set and is not waiting

    # ------------------------------------------------------------------ set-up
    def register(self) -> None:
        """Create the event set and register each GPU's supported critical events."""
        self._register_set()
        self._read_kernel_log()

    def _register_set(self) -> None:
        self.status = None
        event_set = self.gate.query("nvmlEventSetCreate")
        if is_na(event_set):
            self.status = event_set
            for tracker in self._trackers.values():
                tracker.state.supported = event_set
            return
        self._set = event_set
        watched = 0
        for index, tracker in self._trackers.items():
            handle = self.gate.query("nvmlDeviceGetHandleByIndex", index)
            supported = handle if is_na(handle) else self.gate.query("nvmlDeviceGetSupportedEventTypes", handle)
            if is_na(supported):
                tracker.state.supported = supported
                continue
            mask = int(supported) & WATCHED_MASK
            if not mask:
                tracker.state.supported = NA("NotSupported")
                continue
            done = self.gate.query("nvmlDeviceRegisterEvents", handle, mask, event_set)
            if is_na(done):
                tracker.state.supported = done
            else:
                tracker.state.supported = None
                watched += 1
        if not watched:
            self.status = NA("NotSupported")

    def _read_kernel_log(self) -> None:
        if self._kernel_log is None:
            from gpudoctor.core.kernel_log import read_kernel_log

            log = read_kernel_log()
        else:
            log = self._kernel_log()
        self.kernel_log_readable, self.kernel_log_reason = log.readable, log.reason
        by_bus = {bus.lower(): index for index, bus in self.bus_ids.items() if bus}
        from gpudoctor.core.kernel_log import with_named_causes

        with self._lock:
            for entry in with_named_causes(log.xids):
                index = by_bus.get(entry.pci_bus_id)
                if index is None:
                    continue
                when = entry.time if entry.time is not None else 0.0
                self._trackers[index].state.logged_xids.append(GpuEvent(when, "xid", entry.code, "kernel_log"))

    # ------------------------------------------------------------------ running
    def start(self) -> None:
        self.register()
        if self._set is None or self.status is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="gpudoctor-events", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        delay = self.retry_first_s
        while not self._stop.is_set():
            if self._suspend.is_set():
                self._free_set()
                self._suspend.clear()
                self._suspended.set()
                self._stop.wait(delay)  # the owner re-initialises NVML meanwhile
                continue
            if self._set is None:
                # NVML went away (driver reloaded, the sampler's restart): register again, backing
                # off while it is still gone, so that events after the restart are counted.
                self._register_set()
                if self._set is None or self.status is not None:
                    self._free_set()
                    self._stop.wait(delay)
                    delay = min(self.retry_max_s, delay * 2)
                    continue
                self.reregistrations += 1
                delay = self.retry_first_s
            data = self.gate.query("nvmlEventSetWait_v2", self._set, self.wait_ms)
            if is_na(data):
                if data.reason == "Timeout":
                    continue
                # NVML went away under the wait: say why, drop the dead set, register again later.
                self.status = data
                self._free_set()
                self._stop.wait(delay)
                continue
            self.handle(data)

    def _free_set(self) -> None:
        if self._set is not None:
            self.gate.query("nvmlEventSetFree", self._set)  # after a shutdown this is NA: nothing to free
            self._set = None

    def suspend(self, timeout_s: float | None = None) -> bool:
        """Free the event set before NVML is shut down (the sampler's restart): the thread leaves
        its wait within ``wait_ms`` and registers again once NVML answers. True when it did."""
        if self._thread is None or not self._thread.is_alive():
            return True
        self._suspended.clear()
        self._suspend.set()
        return self._suspended.wait(self.wait_ms / 1000.0 + 1.0 if timeout_s is None else timeout_s)

    def handle(self, data: NvmlEventData) -> None:
        """One ``nvmlEventData_t``: find its GPU and count it."""
        index = self.gate.query("nvmlDeviceGetIndex", data.device)
        if is_na(index) or index not in self._trackers:
            return
        now = self._clock()
        with self._lock:
            for bit, kind in EVENT_KINDS.items():
                if int(data.eventType) & bit:
                    code = int(data.eventData) if kind == "xid" else None
                    self._trackers[index].add(GpuEvent(now, kind, code))

    def snapshot(self, index: int) -> DeviceEvents:
        with self._lock:
            tracker = self._trackers.get(index)
            return tracker.snapshot() if tracker is not None else DeviceEvents(NA("NoSuchGpu"))

    def stop(self, join_s: float | None = None) -> bool:
        """Stop watching; True once the thread ended (it wakes at least every ``wait_ms``)."""
        self._stop.set()
        ended = True
        if self._thread is not None:
            self._thread.join(self.wait_ms / 1000.0 + 1.0 if join_s is None else join_s)
            ended = not self._thread.is_alive()
        if ended:
            self._free_set()
        return ended


class EventSource(Protocol):
    """What the events probe, the exporter and the TUI ask of an event watcher: live NVML's
    :class:`EventWatcher` or a recording's :class:`ReplayEvents`."""

    count: int
    status: NA | None
    kernel_log_readable: bool | None
    kernel_log_reason: str

    def register(self) -> None: ...

    def start(self) -> None: ...

    def suspend(self, timeout_s: float | None = None) -> bool: ...

    def snapshot(self, index: int) -> DeviceEvents: ...

    def stop(self, join_s: float | None = None) -> bool: ...


class ReplayEvents:
    """Events kept in a recording, served with the watcher's interface.

    Recording format: ``nvml.events`` is a list with one list of events per NVML index
    (``{"time", "kind", "code", "source"}``; ``source: "kernel_log"`` for Xids logged before the
    recording began), and ``nvml.kernel_log`` is ``{"readable": bool, "reason": str}``. A recording
    without ``nvml.events`` (made before gpudoctor watched events) answers ``NA("NotRecorded")``.
    """

    def __init__(self, recording: dict[str, Any], keep: int = 8) -> None:
        nvml = recording.get("nvml") or {}
        self.status: NA | None = None
        log = nvml.get("kernel_log") or {}
        self.kernel_log_readable: bool | None = log.get("readable")
        self.kernel_log_reason = str(log.get("reason") or "")
        self._trackers: dict[int, _Tracker] = {}
        per_device = nvml.get("events")
        count = nvml.get("device_count")
        count = count if isinstance(count, int) else len(nvml.get("static") or [])
        for index in range(max(0, count)):
            tracker = self._trackers[index] = _Tracker(keep)
            if not isinstance(per_device, list) or index >= len(per_device):
                tracker.state.supported = NA("NotRecorded")
                continue
            for item in per_device[index]:
                event = GpuEvent(float(item["time"]), str(item["kind"]), item.get("code"), "replay")
                if item.get("source") == "kernel_log":
                    tracker.state.logged_xids.append(GpuEvent(event.time, event.kind, event.code, "kernel_log"))
                else:
                    tracker.add(event)
        self.count = len(self._trackers)

    def register(self) -> None:
        """Nothing to register: the recording holds the events already."""
        return None

    def start(self) -> None:
        return None

    def suspend(self, timeout_s: float | None = None) -> bool:
        return True  # a recording holds no NVML state

    def snapshot(self, index: int) -> DeviceEvents:
        tracker = self._trackers.get(index)
        return tracker.snapshot() if tracker is not None else DeviceEvents(NA("NoSuchGpu"))

    def stop(self, join_s: float | None = None) -> bool:
        return True


# Events that are critical whatever their code: an uncorrectable ECC error, and a page retirement
# (or row remap) the GPU could not record. A critical Xid is one gpudoctor.core.xid marks critical.
CRITICAL_KINDS = ("ecc_double_bit", "memory_retirement_failure")


def critical_events(state: DeviceEvents) -> list[GpuEvent]:
    """The critical events among what one GPU reported (kernel log and NVML's stream), oldest
    first: the one judgement the events probe, the TUI header, watch and the exporter share."""
    found = [e for e in state.logged_xids + state.recent
             if e.kind in CRITICAL_KINDS or (e.kind == "xid" and _critical_xid(e.code))]
    return sorted(found, key=lambda e: e.time)


def _critical_xid(code: int | None) -> bool:
    from gpudoctor.core import xid  # the catalogue's tables, only when there is an Xid to judge

    return xid.explain(int(code or 0)).severity == "critical"


def describe_event(index: int, event: GpuEvent) -> str:
    """'GPU 0: Xid 79 (GPU has fallen off the bus: ...)', one line of our own words."""
    from gpudoctor.core import xid

    if event.kind == "xid":
        return f"GPU {index}: Xid {event.code} ({xid.explain(int(event.code or 0)).words})"
    words = {"ecc_double_bit": "uncorrectable (double-bit) ECC error",
             "memory_retirement_failure": "a memory page retirement or row remap failed"}
    return f"GPU {index}: {words.get(event.kind, event.kind)}"


def open_event_watcher(gpu: GpuBackend, keep: int = 8) -> EventSource:
    """The event watcher for a backend: NVML's event set for live NVML, the recorded events for a
    replay. Not started: call ``start()`` (registration makes NVML calls) and ``stop()``."""
    if gpu.kind == "replay":
        return ReplayEvents(cast("ReplayBackend", gpu).recording, keep=keep)
    nvml = cast("NvmlBackend", gpu)
    count = nvml.device_count()
    if is_na(count):
        watcher = EventWatcher(nvml.gate, 0, keep=keep)
        watcher.status = count
        return watcher
    bus_ids = {}
    for index in range(count):
        bus = nvml.static(index).get("pci_bus_id")
        if isinstance(bus, str):
            bus_ids[index] = bus
    return EventWatcher(nvml.gate, count, bus_ids=bus_ids, keep=keep)
