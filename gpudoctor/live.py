"""Live readings for the front ends that stream samples (the TUI and ``gpudoctor watch``).

This module turns a GPU backend (live NVML or a replayed recording) plus host readings
into :class:`Snapshot` objects, keeps short histories for sparklines, and formats
values for people (text) and for logs (JSON lines). It imports neither textual, nor
torch, nor pynvml: the backend does the hardware work, and a snapshot is plain data.

A reading the driver cannot give stays an :class:`~gpudoctor.backends.na.NA` value all
the way to the screen, where it is shown as ``n/a`` with its reason. A device whose
every reading is NA with one reason (``GpuIsLost``, ``Uninitialized``...) is a
*device fault*: the panel says what happened and the other devices carry on.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Any, Callable, Deque, Mapping

from gpudoctor.backends.na import NA, is_na

#: History kept per metric for sparklines (samples; at 1 s that is two minutes).
HISTORY_LENGTH = 120

#: Seconds between full reads of one GPU by :class:`LiveSampler` on live NVML. A full
#: ``sample()`` includes the two PCIe throughput counters, which NVML measures over a 20 ms
#: window each (>= 40 ms per GPU), plus ECC, retirement and mode queries; in between, the
#: cheap ``fast_sample()`` readings are fresh and the slow ones are those of the last full read.
SLOW_READ_INTERVAL_S = 1.0

#: Fields of a device sample that are not readings.
_NOT_READINGS = {"t"}

# What a device-wide NA reason means, in words, and what to do about it.
FAULT_WORDS: dict[str, str] = {
    "GpuIsLost": "GPU lost: it fell off the bus. Check `dmesg` for Xid 79, then reset the GPU "
                 "(nvidia-smi -r) or reboot.",
    "Uninitialized": "NVML is gone: the driver was unloaded or restarted under this session. "
                     "Restart gpudoctor once the driver is back.",
    "DriverNotLoaded": "NVML is gone: the NVIDIA kernel driver is not loaded. "
                       "Load it (modprobe nvidia) or reboot.",
    "LibraryNotFound": "NVML library not found (libnvidia-ml.so): no NVIDIA driver on this machine, "
                       "or it is not visible in this container.",
    "ResetRequired": "The GPU needs a reset (nvidia-smi -r) or a reboot.",
    "Timeout": "The driver did not answer in time.",
}

# NVML gate reasons that mean "there is no NVML at all" (as opposed to one device failing).
NO_NVML_REASONS = {"LibraryNotFound", "DriverNotLoaded", "PythonBindingMissing", "NoPermission",
                   "Uninitialized", "Unknown"}


def fault_words(reason: str) -> str:
    return FAULT_WORDS.get(reason, f"The driver answers {reason} for every reading of this GPU.")


def no_gpu_words(reason: str) -> str:
    """One sentence for a machine where NVML is unusable."""
    base = {
        "LibraryNotFound": "No NVIDIA driver found (libnvidia-ml.so is missing)",
        "DriverNotLoaded": "The NVIDIA kernel driver is not loaded",
        "PythonBindingMissing": "The NVML Python binding (nvidia-ml-py) is not installed",
        "NoPermission": "No permission to talk to the NVIDIA driver",
        "NoDevices": "NVML works but reports no NVIDIA GPU",
    }.get(reason, f"NVML is not usable ({reason})")
    return base


# --------------------------------------------------------------------------- data
@dataclass
class DeviceSnapshot:
    """One device at one moment: its static facts, its sample and its processes."""

    index: int
    static: dict[str, Any]
    sample: dict[str, Any]
    processes: Any  # list of dicts, or NA

    @property
    def name(self) -> str:
        name = self.static.get("name")
        return name if isinstance(name, str) else f"GPU {self.index}"

    @property
    def fault(self) -> NA | None:
        """NA when every reading of the device failed with the same reason."""
        return device_fault(self.sample)

    def get(self, key: str) -> Any:
        """A reading, or NA("NotRecorded") when the backend did not give it at all."""
        if key in self.sample:
            return self.sample[key]
        fault = self.fault
        if fault is not None:
            return fault
        if key in self.static:
            return self.static[key]
        return NA("NotRecorded")

    @property
    def memory_total(self) -> Any:
        total = self.sample.get("memory_total_bytes")
        if total is None or is_na(total):
            static_total = self.static.get("memory_total_bytes")
            if isinstance(static_total, (int, float)) and self.fault is None:
                return static_total
        return total if total is not None else NA("NotRecorded")


@dataclass
class Snapshot:
    """Everything read in one interval."""

    time: float
    nvml_status: NA | None
    devices: list[DeviceSnapshot]
    host: Any  # dict of host readings, or NA
    driver_version: Any = None
    source: str = "live"
    read_s: float = 0.0

    @property
    def has_gpu(self) -> bool:
        return self.nvml_status is None and bool(self.devices)


def device_fault(sample: Mapping[str, Any]) -> NA | None:
    readings = [v for k, v in sample.items() if k not in _NOT_READINGS]
    if not readings or not all(is_na(v) for v in readings):
        return None
    reasons = {v.reason for v in readings}
    if len(reasons) == 1:
        return readings[0]
    return NA("/".join(sorted(reasons)))


# --------------------------------------------------------------------------- host
def default_host_sampler() -> Callable[[], Any]:
    """psutil host readings; the first cpu_percent() call only primes the counter."""
    try:
        import psutil  # noqa: F401
        from gpudoctor.backends.host import host_sample
    except Exception as exc:  # psutil missing: host panels say so
        reason = NA(type(exc).__name__)
        return lambda: reason
    try:
        host_sample()
    except Exception:
        pass

    def sample() -> Any:
        try:
            return host_sample()
        except Exception as exc:
            return NA(type(exc).__name__)

    return sample


# --------------------------------------------------------------------------- sampler
class LiveSampler:
    """Reads a backend (and the host) once per call to :meth:`read`.

    Static facts are read on the first call. Any exception from the backend (they are
    not supposed to raise, but a damaged recording can) becomes an NA for that device,
    never an exception to the front end.
    """

    def __init__(self, gpu: Any, host_sampler: Callable[[], Any] | None = None,
                 with_processes: bool = True, *, slow_every_s: float = SLOW_READ_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.gpu = gpu
        self.host_sampler = host_sampler
        self.with_processes = with_processes
        self.slow_every_s = slow_every_s
        self._clock = clock
        self._full: dict[int, tuple[float, dict[str, Any]]] = {}  # index -> (when, last full sample)
        self._static: list[dict[str, Any]] | None = None
        self._status: NA | None = None
        self._driver: Any = None

    @property
    def source(self) -> str:
        if getattr(self.gpu, "kind", "") == "replay":
            src = getattr(self.gpu, "source", "") or "recording"
            return f"replay: {src.rsplit('/', 1)[-1]}"
        return "live"

    def _start(self) -> None:
        try:
            self._status = self.gpu.status()
        except Exception as exc:
            self._status = NA(f"{type(exc).__name__}")
        count = 0
        if self._status is None:
            try:
                raw = self.gpu.device_count()
            except Exception as exc:
                raw = NA(type(exc).__name__)
            if is_na(raw):
                self._status = raw
            else:
                count = int(raw)
            try:
                self._driver = self.gpu.driver_version()
            except Exception as exc:
                self._driver = NA(type(exc).__name__)
        static: list[dict[str, Any]] = []
        for i in range(count):
            try:
                static.append(dict(self.gpu.static(i)))
            except Exception as exc:
                static.append({"index": i, "name": NA(type(exc).__name__)})
        self._static = static

    def read(self) -> Snapshot:
        started = time.monotonic()
        if self._static is None:
            self._start()
        assert self._static is not None
        devices: list[DeviceSnapshot] = []
        for i, static in enumerate(self._static):
            try:
                sample = self._sample(i)
            except Exception as exc:
                sample = {"gpu_util_pct": NA(type(exc).__name__)}
            procs: Any = NA("NotRead")
            if self.with_processes:
                try:
                    procs = self.gpu.processes(i)
                except Exception as exc:
                    procs = NA(type(exc).__name__)
            devices.append(DeviceSnapshot(i, static, sample, procs))
        host = self.host_sampler() if self.host_sampler is not None else NA("NotRead")
        return Snapshot(time=time.time(), nvml_status=self._status, devices=devices, host=host,
                        driver_version=self._driver, source=self.source,
                        read_s=time.monotonic() - started)

    def _sample(self, index: int) -> dict[str, Any]:
        """A full sample at most every ``slow_every_s`` per GPU; cheap readings in between.

        Recordings cost nothing to read, and backends without ``fast_sample`` have no cheap
        path: those are read in full every time.
        """
        fast = getattr(self.gpu, "fast_sample", None)
        if fast is None or getattr(self.gpu, "kind", "") == "replay" or self.slow_every_s <= 0:
            return dict(self.gpu.sample(index))
        now = self._clock()
        cached = self._full.get(index)
        # 10 % slack: at a 1 s refresh a read that comes a few ms early is still a full one.
        if cached is None or now - cached[0] >= 0.9 * self.slow_every_s:
            sample = dict(self.gpu.sample(index))
            self._full[index] = (now, sample)
            return sample
        quick = dict(fast(index))
        if device_fault(quick) is not None:
            # The device stopped answering: show the fault, not last second's slow readings,
            # and read it in full next time.
            self._full.pop(index, None)
            return quick
        return {**cached[1], **quick}

    def close(self) -> None:
        try:
            self.gpu.close()
        except Exception:
            pass


# --------------------------------------------------------------------------- history
#: Metrics kept per device: name -> function(DeviceSnapshot) -> float | None.
def _pct(dev: DeviceSnapshot, key: str) -> float | None:
    value = dev.sample.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _mem_pct(dev: DeviceSnapshot) -> float | None:
    used, total = dev.sample.get("memory_used_bytes"), dev.memory_total
    if isinstance(used, (int, float)) and isinstance(total, (int, float)) and total > 0:
        return 100.0 * used / total
    return None


DEVICE_METRICS: dict[str, Callable[[DeviceSnapshot], float | None]] = {
    "util": lambda d: _pct(d, "gpu_util_pct"),
    "mem": _mem_pct,
    "temp": lambda d: _pct(d, "temperature_c"),
    "power": lambda d: _pct(d, "power_w"),
    "sm_clock": lambda d: _pct(d, "clock_sm_mhz"),
    "mem_clock": lambda d: _pct(d, "clock_mem_mhz"),
    "pcie_rx": lambda d: _pct(d, "pcie_rx_kbps"),
    "pcie_tx": lambda d: _pct(d, "pcie_tx_kbps"),
    "fan": lambda d: _pct(d, "fan_pct"),
}


class History:
    """Recent values per (device, metric) and for the host; None marks a gap."""

    def __init__(self, length: int = HISTORY_LENGTH) -> None:
        self.length = length
        self.devices: dict[int, dict[str, Deque[float | None]]] = {}
        self.host: dict[str, Deque[float | None]] = {
            "cpu": collections.deque(maxlen=length), "ram": collections.deque(maxlen=length)}

    def add(self, snap: Snapshot) -> None:
        for dev in snap.devices:
            series = self.devices.setdefault(
                dev.index, {k: collections.deque(maxlen=self.length) for k in DEVICE_METRICS})
            for key, fn in DEVICE_METRICS.items():
                series[key].append(fn(dev))
        host = snap.host
        if isinstance(host, dict):
            self.host["cpu"].append(host.get("cpu_pct"))
            used, total = host.get("ram_used_bytes"), host.get("ram_total_bytes")
            self.host["ram"].append(100.0 * used / total if used is not None and total else None)
        else:
            self.host["cpu"].append(None)
            self.host["ram"].append(None)

    def series(self, index: int, metric: str) -> list[float | None]:
        return list(self.devices.get(index, {}).get(metric, ()))


# --------------------------------------------------------------------------- formatting
# The formatting of readings lives in gpudoctor.presentation (shared by the report, the TUI
# and watch); these names stay importable from here for existing callers.
from gpudoctor.presentation import (  # noqa: E402,F401
    SPARK_CHARS, WATCH_FIELDS, fmt_bytes, fmt_memory, fmt_num, fmt_power, fmt_rate_kbps, short_na,
    sparkline, throttle_text, watch_line, watch_record,
)


# --------------------------------------------------------------------------- processes
@dataclass
class ProcessRow:
    pid: int
    gpu: int
    gpu_memory_bytes: int | None
    sm_util_pct: int | None
    kind: str
    user: str = ""
    cpu_pct: float | None = None
    host_memory_bytes: int | None = None
    command: str = ""

    def matches(self, text: str) -> bool:
        if not text:
            return True
        needle = text.lower()
        return any(needle in str(v).lower() for v in (self.pid, self.user, self.command, self.kind,
                                                       f"gpu{self.gpu}"))


PROCESS_SORT_KEYS: dict[str, Callable[[ProcessRow], Any]] = {
    "gpu memory": lambda r: -(r.gpu_memory_bytes or 0),
    "sm util": lambda r: -(r.sm_util_pct or 0),
    "cpu": lambda r: -(r.cpu_pct or 0.0),
    "host memory": lambda r: -(r.host_memory_bytes or 0),
    "pid": lambda r: r.pid,
    "gpu": lambda r: (r.gpu, r.pid),
    "user": lambda r: (r.user, r.pid),
    "command": lambda r: (r.command, r.pid),
}


class PsutilProcessInfo:
    """user, CPU %, resident memory and command line of live pids (psutil).

    psutil.Process objects are kept between calls: CPU % is the use since the previous
    call for that pid, so the first reading of a new pid is 0.
    """

    def __init__(self) -> None:
        self._procs: dict[int, Any] = {}

    def __call__(self, pid: int, recorded: Mapping[str, Any]) -> dict[str, Any]:
        try:
            import psutil
        except ImportError:
            return {"user": "?", "command": "(psutil missing)"}
        proc = self._procs.get(pid)
        try:
            if proc is None:
                proc = psutil.Process(pid)
                self._procs[pid] = proc
            with proc.oneshot():
                cmd = proc.cmdline()
                return {
                    "user": proc.username(),
                    "cpu_pct": proc.cpu_percent(interval=None),
                    "host_memory_bytes": int(proc.memory_info().rss),
                    "command": " ".join(cmd) if cmd else proc.name(),
                }
        except psutil.NoSuchProcess:
            self._procs.pop(pid, None)
            # A pid NVML lists but this process cannot see: another container or PID namespace.
            return {"user": "?", "command": "(not visible from here: other container?)"}
        except psutil.AccessDenied:
            return {"user": "?", "command": "(access denied)"}
        except Exception as exc:
            return {"user": "?", "command": f"({type(exc).__name__})"}

    def forget_except(self, pids: set[int]) -> None:
        for pid in list(self._procs):
            if pid not in pids:
                del self._procs[pid]


def recorded_process_info(pid: int, recorded: Mapping[str, Any]) -> dict[str, Any]:
    """For replays: the recorded pids are not this machine's; use only what was recorded."""
    return {
        "user": recorded.get("user") or "",
        "cpu_pct": recorded.get("cpu_pct"),
        "host_memory_bytes": recorded.get("host_memory_bytes"),
        "command": recorded.get("command") or "(not recorded)",
    }


def process_rows(snap: Snapshot, info: Callable[[int, Mapping[str, Any]], dict[str, Any]]) -> tuple[list[ProcessRow], list[str]]:
    """All GPU processes of a snapshot, and a note per device whose list could not be read."""
    rows: list[ProcessRow] = []
    notes: list[str] = []
    for dev in snap.devices:
        procs = dev.processes
        if is_na(procs):
            notes.append(f"GPU {dev.index}: process list {short_na(procs)}")
            continue
        for p in procs or []:
            try:
                pid = int(p["pid"])
            except (KeyError, TypeError, ValueError):
                continue
            extra = info(pid, p)
            mem = p.get("gpu_memory_bytes")
            sm = p.get("sm_util_pct")
            rows.append(ProcessRow(
                pid=pid, gpu=dev.index,
                gpu_memory_bytes=mem if isinstance(mem, int) else None,
                sm_util_pct=sm if isinstance(sm, int) else None,
                kind=str(p.get("type", "")),
                user=str(extra.get("user") or ""),
                cpu_pct=extra.get("cpu_pct"),
                host_memory_bytes=extra.get("host_memory_bytes"),
                command=str(extra.get("command") or ""),
            ))
    return rows, notes


__all__ = [
    "DeviceSnapshot", "Snapshot", "LiveSampler", "History", "sparkline", "watch_line", "watch_record",
    "ProcessRow", "process_rows", "PROCESS_SORT_KEYS", "PsutilProcessInfo", "recorded_process_info",
    "default_host_sampler", "device_fault", "fault_words", "no_gpu_words", "throttle_text",
]
