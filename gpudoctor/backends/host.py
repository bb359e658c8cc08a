"""Host facts through psutil and the standard library."""

from __future__ import annotations

import os
import platform
import socket
import sys
from typing import Any

from .na import NA


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _platform_text() -> str:
    """``platform.platform()``'s text without its cost: on Linux it runs ``uname -p`` in a
    subprocess and scans the Python binary for the libc version (milliseconds of every
    ``report --quick``). glibc names itself through confstr; elsewhere ask platform."""
    system = platform.system()
    if system == "Linux":
        try:
            libc = os.confstr("CS_GNU_LIBC_VERSION") or ""  # "glibc 2.36"
        except (ValueError, OSError, AttributeError):
            libc = ""
        name, _, version = libc.partition(" ")
        if name and version:
            return f"{system}-{platform.release()}-{platform.machine()}-with-{name}{version}"
    return platform.platform()


def host_facts() -> dict[str, Any]:
    """Static-ish facts about the host: OS, Python, CPU, RAM."""
    facts: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}",
        "platform": _platform_text(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "cpu_model": _cpu_model(),
        "cpu_logical": os.cpu_count(),
    }
    try:
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
    """Readings that change: CPU and RAM use."""
    import psutil

    vm = psutil.virtual_memory()
    return {
        "cpu_pct": psutil.cpu_percent(interval=None),
        "cpu_per_core_pct": psutil.cpu_percent(interval=None, percpu=True),
        "ram_used_bytes": int(vm.total - vm.available),
        "ram_total_bytes": int(vm.total),
    }


def environment_variables() -> dict[str, str | None]:
    """The variables that change what CUDA and torch see."""
    names = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTORCH_CUDA_ALLOC_CONF",
             "PYTORCH_ALLOC_CONF", "CUDA_LAUNCH_BLOCKING", "NCCL_DEBUG", "LD_LIBRARY_PATH")
    return {name: os.environ.get(name) for name in names}
