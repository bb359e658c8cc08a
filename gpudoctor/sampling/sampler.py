"""The one sampler of GPUs over time.

:class:`Sampler` reads a GPU backend (live NVML or a replayed recording, through the
:class:`~gpudoctor.backends.base.GpuBackend` seam) and the host, once per :meth:`Sampler.read`
or every ``interval_s`` in a daemon thread (:meth:`Sampler.start`). Every front end and
producer that follows GPUs over time uses it: the TUI and ``watch``, the exporter, the
training hooks, the workload runs and the measuring probes. What it keeps:

* snapshots: :class:`Snapshot` (one interval: every device's static facts, sample and
  processes, the host), the latest in :attr:`Sampler.latest`;
* bounded history: :attr:`Sampler.history` (per device and metric, for sparklines) and
  whatever the ``on_sample`` callback keeps;
* per-GPU fault state: a device whose every reading is NA with one reason (``GpuIsLost``)
  is a fault (:attr:`Sampler.faults`); the other devices carry on;
* NVML re-initialisation with back-off (``recover=True``): when NVML is down in a way a
  fresh start-up can cure (the driver was not loaded yet, reloaded under us, or every GPU
  answers GpuIsLost after a reset), the backend is reset and started again after
  ``retry_first_s``, then at doubling intervals up to ``retry_max_s``;
* cheap and full reads (``reads``): "auto" reads each GPU in full at most every
  ``slow_every_s`` (the PCIe counters cost 20 ms each) and cheaply in between; "full",
  "fast", "utilization" (one NVML call) and "memory" (one NVML call) read only that.

The thread is a daemon and nothing waits for it: a driver call that hangs holds that thread
only. :meth:`Sampler.close` shuts the backend down only once the thread has left it.
No textual, no torch, no pynvml here.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from time import perf_counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Deque, Iterable, Iterator, Mapping

from gpudoctor.core._num import number
from gpudoctor.backends import catalogue
from gpudoctor.backends.base import DeviceStatic, GpuBackend, GpuSample, MigDeviceReading, ProcessReading
from gpudoctor.backends.na import NA, is_na
from gpudoctor.backends.clock_reasons import STUCK_S

#: History kept per metric for sparklines (samples; at 1 s that is two minutes).
HISTORY_LENGTH = 120
# How long watch and record wait for one read before taking the driver as blocked: past the NVML
# gate's STUCK_S, when every other call answers DriverNotAnswering at once.
DRIVER_WAIT_S = STUCK_S + 1.0

#: Seconds between full reads of one GPU (reads="auto") on live NVML. A full ``sample()``
#: includes the two PCIe throughput counters, which NVML measures over a 20 ms window each
#: (>= 40 ms per GPU), plus ECC, retirement and mode queries; in between, the cheap
#: ``fast_sample()`` readings are fresh and the slow ones are those of the last full read.
SLOW_READ_INTERVAL_S = 1.0

# NVML states that a later nvmlInit can cure: the driver was not loaded yet, or was reloaded
# under us (Uninitialized). Every GPU answering GpuIsLost (a GPU reset) is cured the same way.
RECOVERABLE_NVML_REASONS = frozenset({"LibraryNotFound", "DriverNotLoaded", "Uninitialized"})
RETRY_FIRST_S = 5.0
RETRY_MAX_S = 60.0

READS = ("auto", "full", "fast", "utilization", "memory")

#: Fields of a device sample that are not readings.
_NOT_READINGS = {"t"}


# --------------------------------------------------------------------------- data
def _device_answers(sample: Mapping[str, Any]) -> list[Any]:
    """A sample's readings, less those NA("FunctionNotFound") when others remain: a call the binding
    lacks is answered without asking the device, so it tells nothing of the device's state."""
    readings = [v for k, v in sample.items() if k not in _NOT_READINGS]
    return [v for v in readings if not (is_na(v) and v.reason == "FunctionNotFound")] or readings


def device_fault(sample: Mapping[str, Any]) -> NA | None:
    """NA when every reading of a device failed (one reason, or the reasons joined), else None. A
    call the binding lacks (FunctionNotFound: answered without asking the device) says nothing of
    the device, so it is no part of the reason when others give one."""
    readings = _device_answers(sample)
    if not readings or not all(is_na(v) for v in readings):
        return None
    reasons = {v.reason for v in readings}
    if len(reasons) == 1:
        return readings[0]
    return NA("/".join(sorted(reasons)))


@dataclass
class DeviceSnapshot:
    """One device at one moment: its static facts, its sample and its processes."""

    index: int
    static: DeviceStatic
    sample: GpuSample
    processes: list[ProcessReading] | NA
    #: The MIG devices of a GPU in MIG mode (list of MigDeviceReading, or NA with the reason);
    #: None for a GPU not in MIG mode (not asked).
    mig: list[MigDeviceReading] | NA | None = None

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
        readings: Mapping[str, object] = self.sample  # asked by a name known at run time
        if key in readings:
            return readings[key]
        fault = self.fault
        if fault is not None:
            return fault
        facts: Mapping[str, object] = self.static  # asked by a name known at run time
        if key in facts:
            return facts[key]
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
    driver_version: str | NA | None = None  # None: not read (no NVML)
    source: str = "live"
    read_s: float = 0.0
    count: int | None = None          # devices NVML reports (None: NVML could not say)
    reinits: int = 0                  # NVML restarts tried so far
    retry_in_s: float | None = None   # seconds to the next NVML restart, None when none is due
    t_mono: float = field(default_factory=perf_counter)  # time.perf_counter() when the read began

    @property
    def has_gpu(self) -> bool:
        return self.nvml_status is None and bool(self.devices)


#: A reading's ``t`` from this value on is a time since the epoch (2001-09-09), below it an offset.
EPOCH_2001 = 1_000_000_000


def recorded_snapshot(gpu: Any, snap: Snapshot) -> Snapshot:
    """``snap`` stamped with the time its readings were recorded, where ``gpu`` replays a recording:
    a device reading's ``t``, which ``gpudoctor record`` writes as seconds since the epoch, or in
    hand-made recordings as seconds since ``meta.created``; a live snapshot, or a recording without
    those, as it is. ``watch --replay`` and ``--once`` print it, so a replayed log says when things
    happened."""
    from gpudoctor.backends.replay import ReplayBackend

    if not isinstance(gpu, ReplayBackend):
        return snap
    t = next((d.sample.get("t") for d in snap.devices if isinstance(d.sample.get("t"), (int, float))), None)
    if t is not None and math.isfinite(t) and t >= EPOCH_2001:
        return replace(snap, time=float(t))
    created = gpu.meta.get("created")
    try:
        import datetime as dt

        start = dt.datetime.fromisoformat(str(created).replace("Z", "+00:00"))
        if start.tzinfo is None:
            start = start.replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return snap
    if t is None or not math.isfinite(t):
        return snap
    return replace(snap, time=start.timestamp() + float(t))


def bounded_call(fn: Callable[[], Any], wait_s: float | None = None) -> Any:
    """``fn()``, never blocked for good by an NVML call that hangs.

    ``fn`` runs in a daemon thread; if it has not come back within ``wait_s`` (default
    :data:`DRIVER_WAIT_S`), the call stuck inside it has made the NVML gate answer every other
    call with ``DriverNotAnswering`` at once (:meth:`NvmlGate.stuck`), so ``fn`` runs again in
    the caller's thread and returns what a blocked driver gives. The stuck thread is left
    behind: a daemon, it never holds the way out. Ctrl-C and SIGTERM still reach the caller
    while it waits. For the front ends that read in their own main thread (watch, record)."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="gpudoctor-bounded-read", daemon=True).start()
    if not done.wait(DRIVER_WAIT_S if wait_s is None else wait_s):
        return fn()
    if "error" in box:
        raise box["error"]
    return box["value"]


def failed_snapshot(reason: str, source: str = "live") -> Snapshot:
    """What a read that raised (a backend bug) leaves as the latest snapshot."""
    return Snapshot(time=time.time(), nvml_status=NA(reason), devices=[], host=NA("NotRead"), source=source)


def recoverable_trouble(snap: Snapshot) -> str | None:
    """The reason a fresh NVML start-up may help with this snapshot, or None."""
    status = snap.nvml_status
    if is_na(status) and status.reason in RECOVERABLE_NVML_REASONS:
        return status.reason
    if snap.devices and all(all_lost(dev.sample) for dev in snap.devices):
        return "GpuIsLost"
    return None


def all_lost(sample: Mapping[str, Any]) -> bool:
    readings = _device_answers(sample)
    return bool(readings) and all(is_na(v) and v.reason == "GpuIsLost" for v in readings)


# --------------------------------------------------------------------------- history
def _mem_pct(dev: DeviceSnapshot) -> float | None:
    used, total = dev.sample.get("memory_used_bytes"), dev.memory_total
    if isinstance(used, (int, float)) and isinstance(total, (int, float)) and total > 0:
        return 100.0 * used / total
    return None


#: Series kept besides the catalogue's history readings: the share of memory in use, in %.
DERIVED_HISTORY: dict[str, Callable[[DeviceSnapshot], float | None]] = {"memory_used_pct": _mem_pct}

def _reading(key: str) -> Callable[[DeviceSnapshot], float | None]:
    return lambda dev: number(dev.sample.get(key))


@catalogue.per_catalogue
def device_metrics() -> dict[str, Callable[[DeviceSnapshot], float | None]]:
    """The series kept per device: name -> function(DeviceSnapshot) -> float | None: every
    reading the catalogue keeps a history of, under its key, and :data:`DERIVED_HISTORY`."""
    return {**{key: _reading(key) for key in catalogue.history_keys()}, **DERIVED_HISTORY}


class History:
    """Recent values per (device, metric) and for the host; None marks a gap."""

    def __init__(self, length: int = HISTORY_LENGTH) -> None:
        self.length = length
        self.devices: dict[int, dict[str, Deque[float | None]]] = {}
        self.host: dict[str, Deque[float | None]] = {
            "cpu": collections.deque(maxlen=length), "ram": collections.deque(maxlen=length)}

    def add(self, snap: Snapshot) -> None:
        for dev in snap.devices:
            series = self.devices.setdefault(dev.index, {})
            for key, fn in device_metrics().items():
                if key not in series:
                    series[key] = collections.deque(maxlen=self.length)
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
        """The series ``metric`` (a reading's key, or a derived series' name) of device ``index``."""
        return list(self.devices.get(index, {}).get(metric, ()))


# --------------------------------------------------------------------------- the sampler
class Sampler:
    """Reads a GPU backend (and the host) once per :meth:`read`, or every ``interval_s`` in
    a daemon thread between :meth:`start` and :meth:`stop`.

    ``devices``: the NVML indices to read (default every device). ``on_sample(snapshot)`` is
    called after every read, in the reading thread. Any exception from the backend becomes
    an NA for that device (or, outside a device, the snapshot's status), never an exception
    to the caller; with ``stop_on_error`` an exception from ``on_sample`` ends the thread
    (kept in :attr:`error`).
    """

    def __init__(self, gpu: GpuBackend, host_sampler: Callable[[], Any] | None = None,
                 with_processes: bool = True, *, reads: str = "auto",
                 slow_every_s: float = SLOW_READ_INTERVAL_S, devices: Iterable[int] | None = None,
                 interval_s: float = 1.0, history_length: int = HISTORY_LENGTH, recover: bool = False,
                 retry_first_s: float = RETRY_FIRST_S, retry_max_s: float = RETRY_MAX_S,
                 on_sample: Callable[[Snapshot], None] | None = None, stop_on_error: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if reads not in READS:
            raise ValueError(f"reads must be one of {READS}")
        self.gpu = gpu
        self.host_sampler = host_sampler
        self.with_processes = with_processes
        self.reads = reads
        self.slow_every_s = slow_every_s
        self.only = None if devices is None else list(devices)
        self.interval_s = interval_s
        self.history = History(history_length)
        self.recover = recover and gpu.kind == "nvml"  # a recording cannot be restarted
        self.retry_first_s, self.retry_max_s = retry_first_s, retry_max_s
        self.on_sample = on_sample
        self.stop_on_error = stop_on_error
        #: Called before each NVML restart shuts NVML down: whatever else holds NVML state (the
        #: event watcher blocked in nvmlEventSetWait_v2) lets go of it first.
        self.before_restart: list[Callable[[], Any]] = []
        self.latest: Snapshot | None = None
        self.faults: dict[int, NA] = {}  # per GPU: the fault of its last reading, while it lasts
        self.reinits = 0
        self.error: str | None = None
        self.reads_done = 0
        self.started_at: float | None = None  # time.monotonic() of start()
        self._clock = clock
        self._full: dict[int, tuple[float, dict[str, Any]]] = {}  # index -> (when, last full sample)
        self._static: dict[int, DeviceStatic] | None = None
        self._status: NA | None = None
        self._driver: str | NA | None = None
        self._count: int | None = None
        self._retry_delay = retry_first_s
        self._retry_at: float | None = None
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def source(self) -> str:
        if self.gpu.kind == "replay":
            src = self.gpu.source or "recording"
            return f"replay: {src.rsplit('/', 1)[-1]}"
        return "live"

    # -- one read -------------------------------------------------------------------
    def read(self) -> Snapshot:
        """Read every device now (in the caller's thread) and return the snapshot."""
        started, t_mono = time.monotonic(), time.perf_counter()
        now = self._clock()
        retried = self._maybe_restart(now)
        if self._static is None or self.recover:
            self._start()
        devices = [self._device(i) for i in self._indices()]
        host = self.host_sampler() if self.host_sampler is not None else NA("NotRead")
        snap = Snapshot(time=time.time(), nvml_status=self._status, devices=devices, host=host,
                        driver_version=self._driver, source=self.source, count=self._count, t_mono=t_mono)
        self._plan_restart(snap, now, retried)
        snap.reinits = self.reinits
        snap.retry_in_s = None if self._retry_at is None else max(0.0, self._retry_at - now)
        snap.read_s = time.monotonic() - started
        self._keep(snap)
        return snap

    def _keep(self, snap: Snapshot) -> None:
        for dev in snap.devices:
            fault = dev.fault
            if fault is None:
                self.faults.pop(dev.index, None)
            else:
                self.faults[dev.index] = fault
        self.latest = snap  # one reference swap: readers see a whole snapshot or the previous one
        self.history.add(snap)
        self.reads_done += 1
        self._first.set()
        if self.on_sample is not None:
            self.on_sample(snap)

    def _indices(self) -> list[int]:
        assert self._static is not None
        return [i for i in self._static if self.only is None or i in self.only]

    def _start(self) -> None:
        """Status, device count, driver version; static facts of devices not read yet."""
        previous = self._static or {}
        self._status, self._count = self._call(lambda: self.gpu.status()), None
        static: dict[int, DeviceStatic] = {}
        if self._status is None:
            raw = self._call(lambda: self.gpu.device_count())
            if is_na(raw) or not isinstance(raw, int):
                self._status = raw if is_na(raw) else NA("BadDeviceCount")
            else:
                self._count = raw
            self._driver = self._call(lambda: self.gpu.driver_version())
        for i in range(self._count or 0):
            if self.only is not None and i not in self.only:
                continue
            known = previous.get(i)
            if known is None or is_na(known.get("name")):
                # both lambdas run inside _call, before the loop moves on
                known = self._call(lambda: dict(self.gpu.static(i)),  # noqa: B023
                                   lambda na: {"index": i, "name": na})  # noqa: B023
            static[i] = known
        self._static = static

    @staticmethod
    def _call(fn: Callable[[], Any], on_error: Callable[[NA], Any] = lambda na: na) -> Any:
        try:
            return fn()
        except Exception as exc:  # backends are not supposed to raise; a damaged recording can
            return on_error(NA(type(exc).__name__))

    def _device(self, index: int) -> DeviceSnapshot:
        assert self._static is not None
        sample = self._call(lambda: self._sample(index), lambda na: {"gpu_util_pct": na})
        procs: Any = NA("NotRead")
        if self.with_processes:
            procs = self._call(lambda: self.gpu.processes(index))
        mig = None
        # A GPU in MIG mode: its MIG devices, for the front ends that read in full (TUI, watch,
        # exporter, record); the cheap views beside a training loop or a probe do not pay for them.
        if self._static[index].get("mig_mode") == 1 and self.reads in ("auto", "full"):
            mig = self._call(lambda: self.gpu.mig_devices(index))
        return DeviceSnapshot(index, self._static[index], sample, procs, mig)

    def _sample(self, index: int) -> dict[str, Any]:
        """One device's readings as ``reads`` asks (see the module's docstring)."""
        if self.reads == "utilization":
            return dict(self.gpu.utilization(index))
        if self.reads == "memory":
            return {"t": time.time(), **self.gpu.memory(index)}
        if self.reads == "fast":
            return dict(self.gpu.fast_sample(index))
        if self.reads == "full" or self.gpu.kind == "replay" or self.slow_every_s <= 0:
            return dict(self.gpu.sample(index))  # recordings cost nothing to read in full
        now = self._clock()
        cached = self._full.get(index)
        # 10 % slack: at a 1 s refresh a read that comes a few ms early is still a full one.
        if cached is None or now - cached[0] >= 0.9 * self.slow_every_s:
            sample = dict(self.gpu.sample(index))
            self._full[index] = (now, sample)
            return sample
        quick = dict(self.gpu.fast_sample(index))
        if device_fault(quick) is not None:
            # The device stopped answering: show the fault, not last second's slow readings,
            # and read it in full next time.
            self._full.pop(index, None)
            return quick
        return {**cached[1], **quick}

    # -- NVML restarts ----------------------------------------------------------------
    def _maybe_restart(self, now: float) -> bool:
        if not self.recover or self._retry_at is None or now < self._retry_at:
            return False
        for hook in list(self.before_restart):
            try:
                hook()
            except Exception:  # a hook that fails costs its own state, not the restart
                pass
        self.gpu.reset()  # shutdown + drop handles: the next call runs nvmlInit again
        self._static = None
        self._full.clear()
        self.reinits += 1
        return True

    def _plan_restart(self, snap: Snapshot, now: float, retried: bool) -> None:
        trouble = recoverable_trouble(snap) if self.recover else None
        if trouble is None:
            self._retry_at, self._retry_delay = None, self.retry_first_s
        elif self._retry_at is None or retried:
            if retried:  # the new start-up did not cure it: wait longer next time
                self._retry_delay = min(self.retry_max_s, self._retry_delay * 2)
            self._retry_at = now + self._retry_delay

    # -- over time ----------------------------------------------------------------------
    def start(self) -> "Sampler":
        """Read every ``interval_s`` in a daemon thread (the first read at once)."""
        if self._thread is None:
            self.started_at = time.monotonic()
            self._thread = threading.Thread(target=self._loop, name="gpudoctor-sampler", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.read()
            except Exception as exc:  # a bug in on_sample or a backend must not end the sampling
                self.error = f"{type(exc).__name__}: {exc}"
                if self.stop_on_error:
                    return
                self._keep_failure(failed_snapshot(f"SamplerError: {type(exc).__name__}", self.source))
            self._stop.wait(self.interval_s)

    def paced(self, *, count: int | None = None, seconds: float | None = None) -> Iterator[Snapshot]:
        """Read every ``interval_s`` in the caller's thread, yielding each snapshot: the first
        at once, then at a steady cadence; at most ``count`` reads, and none begun later than
        ``seconds`` after the first. For ``watch`` and ``record``, where Ctrl-C
        (KeyboardInterrupt in the caller) must stop the sampling and keep what was read."""
        t0 = next_at = time.monotonic()
        done = 0
        while True:
            begun = time.monotonic()
            yield bounded_call(self.read, max(3 * self.interval_s, DRIVER_WAIT_S))
            done += 1
            if count is not None and done >= count:
                return
            if seconds is not None and begun - t0 + self.interval_s > seconds:
                return
            next_at += self.interval_s
            time.sleep(max(0.0, next_at - time.monotonic()))

    def _keep_failure(self, snap: Snapshot) -> None:
        self.latest = snap
        self._first.set()
        if self.on_sample is not None:
            try:
                self.on_sample(snap)
            except Exception:
                pass

    def wait_first(self, timeout: float | None = None) -> bool:
        """Wait for the first read to come back; False if it has not within ``timeout``."""
        return self._first.wait(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, join_s: float | None = None) -> bool:
        """Stop sampling; True once the thread has ended (False: still inside a backend call)."""
        self._stop.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(self.interval_s + 2 if join_s is None else join_s)
        return not thread.is_alive()

    def close(self, join_s: float | None = None) -> bool:
        """Stop, then close the backend only if no read is still inside it (a hung driver
        call must not see nvmlShutdown pulled from under it). Returns whether it was closed."""
        if not self.stop(join_s):
            return False
        try:
            self.gpu.close()
        except Exception:
            pass
        return True


__all__ = ["Sampler", "Snapshot", "DeviceSnapshot", "History", "device_fault", "recoverable_trouble",
           "failed_snapshot", "all_lost", "DERIVED_HISTORY", "device_metrics", "HISTORY_LENGTH", "SLOW_READ_INTERVAL_S", "READS",
           "RECOVERABLE_NVML_REASONS"]
