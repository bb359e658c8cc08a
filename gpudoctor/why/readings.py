"""What the operating system and NVML say about the sampled processes during the window.

:class:`Readings` is polled while py-spy samples: CPU time of every process in the tree (and
of each of its threads), the host's idle CPUs, and through the NVML backend the GPUs the
processes hold, their per-process memory and utilisation, and the devices' utilisation. A
process that ends keeps its last reading. Without NVML every GPU figure is NA with the reason.
"""

from __future__ import annotations

import os
import re
import time
from typing import TYPE_CHECKING, Any

import psutil

from gpudoctor.core._num import is_number
from gpudoctor.backends.na import NA, is_na
from gpudoctor.why import flightrec

if TYPE_CHECKING:
    from gpudoctor.backends.base import GpuBackend

MAX_PROCESSES = 256
MAX_SETTING_CHARS = 300
# The environment variables read from each process besides RANK: the flight recorder's settings.
JOB_SETTINGS = flightrec.SETTINGS
MAX_MAPS_BYTES = 8 << 20  # /proc/PID/maps read per poll at most (a torch process maps ~1,000 files)

# A GPU's own device file (/dev/nvidia0, ...) or a MIG instance's capability (/dev/nvidia-caps/...);
# /dev/nvidiactl and /dev/nvidia-uvm are opened by any process that loads the driver's library.
_GPU_DEVICE_FILE = re.compile(r"^/dev/nvidia(?:[0-9]+|-caps(?:/.*)?)$")


def gpu_evidence(pid: int, proc_root: str = "/proc") -> dict[str, Any]:
    """What the operating system says about ``pid``'s GPU use, in any PID namespace that can see
    it: the GPU device files it holds open and whether libcuda.so is mapped. ``readable`` is False
    when /proc would not tell (another user's process without ptrace rights)."""
    found: dict[str, Any] = {"readable": True, "device_files": [], "libcuda": False}
    try:
        for fd in os.listdir(f"{proc_root}/{pid}/fd"):
            try:
                target = os.readlink(f"{proc_root}/{pid}/fd/{fd}")
            except OSError:
                continue
            if _GPU_DEVICE_FILE.match(target) and target not in found["device_files"]:
                found["device_files"].append(target)
        with open(f"{proc_root}/{pid}/maps", "rb") as maps:
            found["libcuda"] = b"/libcuda.so" in maps.read(MAX_MAPS_BYTES)
    except OSError:
        found["readable"] = False
    found["device_files"].sort()
    return found


def _cpu_seconds(proc: psutil.Process) -> float | None:
    try:
        t = proc.cpu_times()
        return float(t.user + t.system)
    except (psutil.Error, OSError):
        return None


def _threads(proc: psutil.Process) -> dict[int, float]:
    try:
        return {int(t.id): float(t.user_time + t.system_time) for t in proc.threads()}
    except (psutil.Error, OSError):
        return {}


def _thread_waits(pid: int) -> dict[int, float]:
    """Each thread of ``pid`` -> seconds it has spent runnable, waiting for a CPU others held
    (/proc schedstat; empty where the kernel does not say)."""
    from gpudoctor.system._cpuwait import process_waits

    return {tid: waited for (_, tid), waited in process_waits(pid, below=False).items()}


def _wanted(cpu_pct: dict[int, float], waits0: dict[int, float], waits1: dict[int, float],
            wall: float) -> dict[int, float]:
    """Each thread's CPU use plus the time it waited for a CPU, as a share of the window (100 = all
    of it): what it would have used on an idle machine. A thread computing on a machine whose CPUs
    other work holds used 19% of a CPU and wanted 100%: it is not waiting outside Python."""
    return {tid: round(used + 100.0 * max(0.0, waits1[tid] - waits0.get(tid, waits1[tid])) / wall, 1)
            for tid, used in cpu_pct.items() if tid in waits1}


OTHERS_SHOWN = 5           # the other processes named, busiest first
MAX_OTHER_PROCESSES = 4096  # processes read for the busy-host figure


def usable_cpus(pid: int, proc_root: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> float | None:
    """The CPUs ``pid`` may run on: its affinity, capped by its cgroup's CPU quota (cgroup v2
    ``cpu.max``, or v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``) along its cgroup path."""
    try:
        cpus: float = float(len(os.sched_getaffinity(pid)))
    except (OSError, AttributeError):
        cpus = float(psutil.cpu_count() or 1)
    try:
        with open(f"{proc_root}/{pid}/cgroup", encoding="ascii", errors="replace") as handle:
            rows = handle.read(64 << 10).splitlines()
    except OSError:
        return cpus
    for row in rows:
        _, controllers, path = (row.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2
            folders = [os.path.join(cgroup_root, path.lstrip("/"))]
            name = "cpu.max"
        elif "cpu" in controllers.split(","):
            folders = [os.path.join(cgroup_root, "cpu,cpuacct", path.lstrip("/")),
                       os.path.join(cgroup_root, "cpu", path.lstrip("/"))]
            name = ""
        else:
            continue
        for folder in folders:
            while folder.startswith(cgroup_root) and len(folder) > len(cgroup_root):
                quota = _quota(folder, name)
                if quota is not None:
                    cpus = min(cpus, quota)
                folder = os.path.dirname(folder)
    return round(cpus, 2)


def _quota(folder: str, name: str) -> float | None:
    try:
        if name:
            with open(os.path.join(folder, name), encoding="ascii") as handle:
                limit, _, period = handle.read(100).strip().partition(" ")
            return None if limit == "max" else int(limit) / int(period or 100000)
        with open(os.path.join(folder, "cpu.cfs_quota_us"), encoding="ascii") as handle:
            limit_us = int(handle.read(100).strip())
        with open(os.path.join(folder, "cpu.cfs_period_us"), encoding="ascii") as handle:
            period_us = int(handle.read(100).strip())
        return None if limit_us <= 0 or period_us <= 0 else limit_us / period_us
    except (OSError, ValueError, ZeroDivisionError):
        return None


def _others_cpu(skip: set[int]) -> dict[int, tuple[str, float]]:
    """CPU seconds so far of every process not in ``skip``: pid -> (name, seconds)."""
    out: dict[int, tuple[str, float]] = {}
    for count, proc in enumerate(psutil.process_iter(["name", "cpu_times"])):
        if count >= MAX_OTHER_PROCESSES:
            break
        if proc.pid in skip:
            continue
        times = proc.info.get("cpu_times")
        if times is not None:
            out[proc.pid] = (str(proc.info.get("name") or "?")[:60], float(times.user + times.system))
    return out


def _own_tree() -> set[int]:
    """gpudoctor itself and its children (py-spy): not 'other processes' taking the job's CPU."""
    try:
        me = psutil.Process()
        return {me.pid} | {c.pid for c in me.children(recursive=True)}
    except psutil.Error:
        return {os.getpid()}


def _host_idle_seconds() -> tuple[float, float, float]:
    """(idle, total, steal) CPU seconds of the host so far; steal: time a hypervisor gave to others."""
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    return idle, sum(t), getattr(t, "steal", 0.0)


class Readings:
    """Polled during sampling; :meth:`result` gives the figures for the window."""

    def __init__(self, pid: int, gpu_backend: GpuBackend | None = None) -> None:
        self.pid = pid
        self.root = psutil.Process(pid)
        self.t0 = time.monotonic()
        self.t_last = self.t0
        self.first: dict[int, tuple[float, float | None, dict[int, float]]] = {}
        self.last: dict[int, tuple[float, float | None, dict[int, float]]] = {}
        self.names: dict[int, dict[str, Any]] = {}
        # pid -> thread -> seconds spent runnable and waiting for a CPU, at the first and last reading
        self.waits_first: dict[int, dict[int, float]] = {}
        self.waits_last: dict[int, dict[int, float]] = {}
        self.host0 = _host_idle_seconds()
        self.host1 = self.host0
        self.gpu_backend = gpu_backend
        self.gpu_reason: str | None = None
        self.gpu_procs: dict[int, dict[int, dict[str, Any]]] = {}   # device -> pid -> entry
        self.gpu_util: dict[int, list[float]] = {}
        self.gpm: dict[int, dict[str, list[float]]] = {}  # device -> GPM reading -> values (Hopper+)
        self.gpm_note: dict[int, str] = {}                 # device -> why there is no GPM reading
        self._gpm_at: dict[int, float] = {}
        self.gpu_evidence: dict[int, dict[str, Any]] = {}   # pid -> /proc's evidence over the window
        self.process_list_reason: str | None = None
        self.usable_cpus = usable_cpus(pid)
        self.others0 = _others_cpu(self._skip())
        self.t_others0 = time.monotonic()
        self.poll()

    def _skip(self) -> set[int]:
        return {p.pid for p in self._tree()} | set(self.last) | _own_tree()

    def _tree(self) -> list[psutil.Process]:
        try:
            return ([self.root] + self.root.children(recursive=True))[:MAX_PROCESSES]
        except (psutil.Error, OSError):
            return [self.root]

    def poll(self) -> None:
        now = time.monotonic()
        for proc in self._tree():
            cpu = _cpu_seconds(proc)
            if cpu is None:
                continue
            reading = (now, cpu, _threads(proc))
            self.first.setdefault(proc.pid, reading)
            self.last[proc.pid] = reading
            waits = _thread_waits(proc.pid)
            self.waits_first.setdefault(proc.pid, waits)
            self.waits_last[proc.pid] = waits
            if proc.pid not in self.names:
                self.names[proc.pid] = _describe(proc)
            else:  # its age as of this reading: the hang verdict caps the wait by it at the window's end
                info = self.names[proc.pid]
                if info.get("create_time") is not None:
                    info["age_s"] = round(time.time() - info["create_time"], 1)
            self._note_evidence(proc.pid)
        self.t_last = now
        self.host1 = _host_idle_seconds()
        self._poll_gpu()

    def _note_evidence(self, pid: int) -> None:
        seen = gpu_evidence(pid)
        kept = self.gpu_evidence.get(pid)
        if kept is None:
            self.gpu_evidence[pid] = seen
            return
        kept["readable"] = kept["readable"] and seen["readable"]
        kept["device_files"] = sorted(set(kept["device_files"]) | set(seen["device_files"]))
        kept["libcuda"] = kept["libcuda"] or seen["libcuda"]

    def _poll_gpu(self) -> None:
        backend = self.gpu_backend
        if backend is None or self.gpu_reason is not None:
            return
        status = backend.status()
        if is_na(status):
            self.gpu_reason = f"NVML not available ({status.reason})"
            return
        count = backend.device_count()
        if is_na(count):
            self.gpu_reason = f"NVML could not count the GPUs ({count.reason})"
            return
        ours = set(self.last)
        for index in range(int(count)):
            procs = backend.processes(index)
            if is_na(procs):  # NoPermission in MIG mode without root, an old driver in a container
                self.process_list_reason = f"NVML's process list of GPU {index}: {procs.reason}"
                continue
            held = {p["pid"]: p for p in procs if p.get("pid") in ours}
            if not held:
                continue
            self.gpu_procs.setdefault(index, {}).update(held)
            util = backend.utilization(index) if hasattr(backend, "utilization") else backend.sample(index)
            value = util.get("gpu_util_pct")
            if value is not None and not is_na(value):
                self.gpu_util.setdefault(index, []).append(float(value))
            self._read_gpm(backend, index)

    def _read_gpm(self, backend: GpuBackend, index: int) -> None:
        """SM and tensor activity of a GPU the job holds, once a second (the first read only arms
        GPM's pair of samples); where there is none, the reason."""
        now = time.monotonic()
        if now - self._gpm_at.get(index, -1e9) < 1.0:
            return
        self._gpm_at[index] = now
        try:
            found = backend.gpm(index)
        except Exception:  # a backend that cannot read GPM: the verdict says it was not read
            self.gpm_note[index] = "not read"
            return
        for key in ("sm_active_pct", "tensor_active_pct"):
            value = found.get(key)
            if is_number(value):
                self.gpm.setdefault(index, {}).setdefault(key, []).append(float(value))
            elif is_na(value) and value.reason != "Warming":
                self.gpm_note[index] = value.reason

    def result(self) -> dict[str, Any]:
        """Per process: CPU % over the window (100 = one core) and per thread; the host's idle
        CPUs; the GPUs held (NA with the reason when NVML cannot be read)."""
        processes = {}
        for pid, (t1, cpu1, threads1) in self.last.items():
            t0, cpu0, threads0 = self.first[pid]
            wall = max(t1 - t0, 1e-6)
            entry = dict(self.names.get(pid, {}))
            entry["cpu_pct"] = round(100.0 * ((cpu1 or 0.0) - (cpu0 or 0.0)) / wall, 1) if t1 > t0 else None
            entry["threads_cpu_pct"] = {tid: round(100.0 * (c - threads0.get(tid, c)) / wall, 1)
                                        for tid, c in threads1.items()} if t1 > t0 else {}
            entry["threads_wanted_pct"] = _wanted(entry["threads_cpu_pct"], self.waits_first.get(pid, {}),
                                                  self.waits_last.get(pid, {}), wall)
            if pid in self.gpu_evidence:
                entry["gpu_evidence"] = self.gpu_evidence[pid]
            processes[pid] = entry
        idle0, total0, steal0 = self.host0
        idle1, total1, steal1 = self.host1
        cpus = psutil.cpu_count() or 1
        idle_share = (idle1 - idle0) / (total1 - total0) if total1 > total0 else None
        host: dict[str, Any] = {"cpus": cpus,
                                "idle_cpus": round(idle_share * cpus, 1) if idle_share is not None else None,
                                "wall_s": round(self.t_last - self.t0, 2), "usable_cpus": self.usable_cpus}
        if total1 > total0:
            host["steal_cpus"] = round((steal1 - steal0) / (total1 - total0) * cpus, 2)
        try:
            host["load_1m"] = round(os.getloadavg()[0], 2)
        except OSError:
            pass
        host.update(self._others())
        return {"processes": processes, "host": host, "gpu": self._gpu_result()}

    def _others(self) -> dict[str, Any]:
        """The other processes taking CPU over the window (not the job's tree, not gpudoctor and its
        py-spy), busiest first, and their total."""
        wall = time.monotonic() - self.t_others0
        if wall <= 0.2:
            return {}
        skip = self._skip()
        now = _others_cpu(skip)
        used: list[dict[str, Any]] = []  # the result's "others": pid, name, cpu_pct
        for pid, (name, seconds) in now.items():
            before = self.others0.get(pid)
            if before is None or pid in skip:
                continue
            pct = 100.0 * (seconds - before[1]) / wall
            if pct >= 1.0:
                used.append({"pid": pid, "name": name, "cpu_pct": round(pct, 1)})
        used.sort(key=lambda e: -e["cpu_pct"])
        return {"others_cpu_pct": round(sum(e["cpu_pct"] for e in used), 1), "others": used[:OTHERS_SHOWN],
                "others_count": len(used)}

    def _gpu_result(self) -> dict[str, Any]:
        if self.gpu_backend is None:
            return {"available": False, "reason": "no GPU backend was given", "devices": []}
        if self.gpu_reason is not None:
            return {"available": False, "reason": self.gpu_reason, "devices": []}
        devices = []
        for index, held in sorted(self.gpu_procs.items()):
            utils = self.gpu_util.get(index, [])
            static = self.gpu_backend.static(index)
            name = static.get("name")
            gpm = self.gpm.get(index, {})
            devices.append({"index": index, "name": None if is_na(name) else str(name)[:100],
                            "util_mean_pct": round(sum(utils) / len(utils), 1) if utils else None,
                            "util_samples": len(utils),
                            "sm_active_mean_pct": _mean(gpm.get("sm_active_pct")),
                            "tensor_active_mean_pct": _mean(gpm.get("tensor_active_pct")),
                            "gpm_note": self.gpm_note.get(index) if not gpm else None,
                            "processes": [{"pid": pid, "gpu_memory_bytes": e.get("gpu_memory_bytes"),
                                           "sm_util_pct": _plain(e.get("sm_util_pct"))}
                                          for pid, e in sorted(held.items())]})
        reason = None if devices else ("NVML lists none of these processes on any GPU (CPU only, another PID "
                                       "namespace, or a list NVML would not give)")
        out: dict[str, Any] = {"available": True, "reason": reason, "devices": devices}
        if self.process_list_reason is not None:
            out["process_list_reason"] = self.process_list_reason
        return out


def _plain(value: object) -> object:
    return None if is_na(value) else value


def _describe(proc: psutil.Process) -> dict[str, Any]:
    try:
        cmd = proc.cmdline()
        ppid = proc.ppid()
    except (psutil.Error, OSError):
        cmd, ppid = [], None
    try:
        environ = proc.environ()
    except (psutil.Error, OSError):
        environ = {}
    rank = environ.get("RANK", "")  # set by torchrun for each rank
    try:
        uid: int | None = int(proc.uids().real)
        started: float | None = float(proc.create_time())
    except (psutil.Error, OSError):
        uid, started = None, None
    # only the settings the hang verdict reads (the flight recorder's), bounded: never the whole environment
    env = {key: str(environ[key])[:MAX_SETTING_CHARS] for key in JOB_SETTINGS if key in environ}
    return {"ppid": ppid, "cmdline": " ".join(cmd)[:500], "rank": int(rank) if rank.isascii() and rank.isdigit() and len(rank) < 9 else None,
            "env": env, "uid": uid, "create_time": started,
            "age_s": round(time.time() - started, 1) if started is not None else None}


def process_exists(pid: int) -> bool:
    return psutil.pid_exists(pid) and pid > 0


__all__ = ["Readings", "process_exists", "usable_cpus", "NA"]


def _mean(values: list[float] | None) -> float | None:
    return round(sum(values) / len(values), 1) if values else None

