"""Host facts through psutil and the standard library."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Mapping

from .na import NA


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _platform_text() -> str:
    """``platform.platform()``'s text without its cost: on Linux it runs ``uname -p`` in a
    subprocess and scans the Python binary for the libc version (milliseconds of every
    ``report --quick``). glibc names itself through confstr; elsewhere ask platform."""
    system, _, release, _, machine = _uname()
    if system == "Linux":
        try:
            libc = os.confstr("CS_GNU_LIBC_VERSION") or ""  # "glibc 2.36"
        except (ValueError, OSError, AttributeError):
            libc = ""
        name, _, version = libc.partition(" ")
        if name and version:
            return f"{system}-{release}-{machine}-with-{name}{version}"
    import platform

    return platform.platform()


def _uname() -> tuple[str, str, str, str, str]:
    """(system, node, release, version, machine) as platform.uname() and socket.gethostname() give
    them, from os.uname where there is one (importing platform and socket costs `report --quick`
    two milliseconds)."""
    if hasattr(os, "uname"):
        u = os.uname()
        return u.sysname, u.nodename, u.release, u.version, u.machine
    import platform

    p = platform.uname()
    return p.system, p.node, p.release, p.version, p.machine


def _implementation() -> str:
    """platform.python_implementation() without importing platform."""
    known = {"cpython": "CPython", "pypy": "PyPy", "ironpython": "IronPython", "jython": "Jython"}
    name = sys.implementation.name
    if name in known:
        return known[name]
    import platform

    return platform.python_implementation()


def _linux_cores_and_memory() -> tuple[int, int, int] | None:
    """(physical cores, RAM total, RAM available) read from /sys and /proc as psutil reads
    them on Linux (core_cpus_list sets, MemTotal, MemAvailable), without importing psutil
    (a tenth of `report --quick`'s run time). None where any of it is missing."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        memory: dict[bytes, int] = {}
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                key, _, rest = line.partition(b":")
                if key in (b"MemTotal", b"MemAvailable"):
                    memory[key] = int(rest.split()[0]) * 1024
        root = "/sys/devices/system/cpu"
        cores: set[bytes] = set()
        for name in os.listdir(root):
            if not (name.startswith("cpu") and name[3:].isdigit()):
                continue
            for leaf in ("core_cpus_list", "thread_siblings_list"):
                try:
                    with open(os.path.join(root, name, "topology", leaf), "rb") as fh:
                        cores.add(fh.read().strip())
                    break
                except OSError:
                    continue
    except (OSError, ValueError, IndexError):
        return None
    if not cores or b"MemTotal" not in memory or b"MemAvailable" not in memory:
        return None
    return len(cores), memory[b"MemTotal"], memory[b"MemAvailable"]


def host_facts() -> dict[str, Any]:
    """Static-ish facts about the host: OS, Python, CPU, RAM."""
    system, node, release, _, machine = _uname()
    facts: dict[str, Any] = {
        "hostname": node,
        "os": f"{system} {release}",
        "platform": _platform_text(),
        "machine": machine,
        "python": sys.version.split()[0],
        "python_implementation": _implementation(),
        "cpu_model": _cpu_model(),
        "cpu_logical": os.cpu_count(),
    }
    try:
        linux = _linux_cores_and_memory()
        if linux is not None:
            facts["cpu_physical"], facts["ram_total_bytes"], facts["ram_available_bytes"] = linux
        else:
            import psutil

            facts["cpu_physical"] = psutil.cpu_count(logical=False)
            vm = psutil.virtual_memory()
            facts["ram_total_bytes"] = int(vm.total)
            facts["ram_available_bytes"] = int(vm.available)
    except Exception as exc:  # psutil missing or unsupported platform: one field each, not the report
        facts["cpu_physical"] = NA(type(exc).__name__)
        facts["ram_total_bytes"] = NA(type(exc).__name__)
        facts["ram_available_bytes"] = NA(type(exc).__name__)
    try:
        facts["load_avg_1m"] = os.getloadavg()[0]
    except (OSError, AttributeError):
        facts["load_avg_1m"] = NA("NotSupported")
    return facts


def host_sample() -> dict[str, Any]:
    """Readings that change: CPU and RAM use.

    Taken once a second by the monitors, so each counter file is read once: the CPU total is
    the mean of the cores (each core counts the same elapsed time, so this is what the
    all-CPU line gives), and on Linux RAM comes from the two lines of /proc/meminfo it needs
    (what psutil reports as total and available there)."""
    import psutil

    per_core = psutil.cpu_percent(interval=None, percpu=True)
    memory = _meminfo_total_available()
    if memory is None:
        vm = psutil.virtual_memory()
        memory = int(vm.total), int(vm.available)
    total, available = memory
    return {
        "cpu_pct": round(sum(per_core) / len(per_core), 1) if per_core else psutil.cpu_percent(interval=None),
        "cpu_per_core_pct": per_core,
        "ram_used_bytes": total - available,
        "ram_total_bytes": total,
    }


def _meminfo_total_available(path: str = "/proc/meminfo") -> tuple[int, int] | None:
    """MemTotal and MemAvailable in bytes from /proc/meminfo, or None (another system, or a
    kernel before 3.14 without MemAvailable: psutil estimates it then)."""
    total = available = None
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(b"MemTotal:"):
                    total = int(line.split()[1]) * 1024
                elif line.startswith(b"MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                if total is not None and available is not None:
                    return total, available
    except (OSError, ValueError, IndexError):
        return None
    return None


def environment_variables() -> dict[str, str | None]:
    """The variables that change what CUDA and torch see."""
    names = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTORCH_CUDA_ALLOC_CONF",
             "PYTORCH_ALLOC_CONF", "CUDA_LAUNCH_BLOCKING", "NCCL_DEBUG", "LD_LIBRARY_PATH")
    return {name: os.environ.get(name) for name in names}


# --------------------------------------------------------------------------- over time
def default_host_sampler() -> Callable[[], Any]:
    """psutil host readings; the first cpu_percent() call only primes the counter."""
    try:
        import psutil  # noqa: F401
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
                    "started": proc.create_time(),
                    "uid": proc.uids().real if hasattr(proc, "uids") else None,
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


# --------------------------------------------------------------------------- process actions
#: The signals the TUI sends to a process (nvitop's T, K, I).
SIGNALS = ("SIGTERM", "SIGKILL", "SIGINT")


def why_not_signal(pid: int, started: float | None = None) -> str | None:
    """Why this user may not signal ``pid`` (None: it may): another user's process (unless this
    user is root), a process that is gone, or a new process under a reused pid (its start time is
    not ``started``). psutil reads the process's real user id, as kill(2) checks it."""
    try:
        import psutil
    except ImportError:
        return "psutil is not installed: cannot tell whose process it is"
    if pid <= 1:
        return f"pid {pid} is not a process to signal"
    try:
        proc = psutil.Process(pid)
        uid = proc.uids().real
        created = proc.create_time()
    except psutil.NoSuchProcess:
        return f"pid {pid} has exited"
    except (psutil.AccessDenied, AttributeError) as exc:
        return f"cannot read pid {pid}'s owner ({type(exc).__name__})"
    if started is not None and abs(created - started) > 1.0:
        return f"pid {pid} is now another process (started at another time)"
    me = os.geteuid() if hasattr(os, "geteuid") else None
    if me != 0 and uid != os.getuid():
        return f"pid {pid} belongs to another user; only its owner or root may signal it"
    return None


def send_signal(pid: int, name: str, started: float | None = None) -> tuple[bool, str]:
    """Send signal ``name`` (one of :data:`SIGNALS`) to ``pid`` where :func:`why_not_signal` allows
    it: (sent, what happened in one line)."""
    import signal

    if name not in SIGNALS:
        return False, f"{name} is not a signal gpudoctor sends"
    refused = why_not_signal(pid, started)
    if refused:
        return False, refused
    try:
        os.kill(pid, getattr(signal, name))
    except ProcessLookupError:
        return False, f"pid {pid} has exited"
    except PermissionError:
        return False, f"no permission to signal pid {pid}"
    except OSError as exc:
        return False, f"could not signal pid {pid}: {exc.strerror or type(exc).__name__}"
    return True, f"sent {name} to pid {pid}"


def process_ancestors(pid: int, limit: int = 32) -> list[tuple[int, str]]:
    """(pid, name) of ``pid``'s parents, the nearest first, up to (not including) pid 1: the process
    tree view. Empty where psutil is missing or the process is gone."""
    try:
        import psutil
    except ImportError:
        return []
    found: list[tuple[int, str]] = []
    try:
        proc = psutil.Process(pid).parent()
        while proc is not None and proc.pid > 1 and len(found) < limit:
            found.append((proc.pid, proc.name()))
            proc = proc.parent()
    except (psutil.Error, OSError):
        pass
    return found
