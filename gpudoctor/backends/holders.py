"""Who holds a GPU: the Slurm job or Kubernetes pod of a process, read from its cgroup.

``/proc/<pid>/cgroup`` names the control groups a process is in, one line per hierarchy
(``hierarchy-ID:controllers:path``; cgroup v2 has the one line ``0::path``). Slurm puts a job's
processes under ``.../slurm/uid_<uid>/job_<id>/...`` (cgroup v1 and v2, with ``step_<n>`` and
``task_<n>`` below; slurmstepd's own scope is ``.../system.slice/slurmstepd.scope/job_<id>/...``
with cgroup v2); the kubelet puts a container's processes under its pod's cgroup,
``/kubepods/<qos>/pod<uid>/<container id>`` (cgroupfs driver) or
``/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid with _>.slice/<runtime>-<container id>.scope``
(systemd driver). Whatever cannot be read (the process ended, no permission, a path of neither
kind) is said, never guessed.

The reader takes the root of the proc file system (``/proc``, or ``/host/proc`` in a container that
mounts the host's), so tests give it a directory of fake processes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable

#: The most of a cgroup file read: a process is in a few dozen hierarchies at most.
CGROUP_MAX_BYTES = 64 * 1024

_SLURM_JOB = re.compile(r"/job_([0-9]{1,12})(?:/|$)")
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?(?:/|$)")
_CONTAINER = re.compile(r"(?:^|/)(?:[a-z-]+-)?([0-9a-f]{64})(?:\.scope)?$")


@dataclass(frozen=True)
class Holder:
    """A process's holder: ``kind`` "slurm" (``job``), "kubernetes" (``pod_uid``, ``container_id``),
    "none" (a process in neither) or "unknown" (``reason`` says why it cannot be told)."""

    kind: str
    job: str = ""
    pod_uid: str = ""
    container_id: str = ""
    reason: str = ""


def from_cgroup(text: str) -> Holder:
    """The holder a ``/proc/<pid>/cgroup`` text names."""
    paths = [line.split(":", 2)[2] for line in text.splitlines() if line.count(":") >= 2]
    for path in paths:
        if "slurm" in path:
            job = _SLURM_JOB.search(path)
            if job:
                return Holder("slurm", job=job.group(1))
    for path in paths:
        if "kubepods" in path:
            pod = _POD_UID.search(path)
            if pod:
                container = _CONTAINER.search(path)
                return Holder("kubernetes", pod_uid=pod.group(1).replace("_", "-"),
                              container_id=container.group(1) if container else "")
    return Holder("none")


def of_process(pid: int, proc_root: str = "/proc") -> Holder:
    """The holder of process ``pid``, read from ``<proc_root>/<pid>/cgroup``."""
    path = os.path.join(proc_root, str(int(pid)), "cgroup")
    try:
        with open(path, "rb") as handle:
            raw = handle.read(CGROUP_MAX_BYTES)
    except FileNotFoundError:
        return Holder("unknown", reason=f"process {pid} ended, or {proc_root} is not the host's /proc")
    except OSError as exc:
        return Holder("unknown", reason=f"cannot read {path}: {exc.strerror or type(exc).__name__}")
    return from_cgroup(raw.decode("utf-8", "replace"))


def of_processes(pids: Iterable[int], proc_root: str = "/proc") -> list[Holder]:
    """The distinct holders of these processes (those in neither a job nor a pod left out), in order."""
    out: list[Holder] = []
    for pid in pids:
        holder = of_process(pid, proc_root)
        if holder.kind != "none" and holder not in out:
            out.append(holder)
    return out
