"""The GPU stack below NVML, read from files: the loaded kernel module's version, the user-space
driver libraries' versions as the dynamic loader resolves them, whether this process runs in a
container (and what the NVIDIA container runtime gave it), and whether the PCI bus holds an NVIDIA
device at all.

NVML fails with one code where these layers disagree (LibRmVersionMismatch, Unknown, LibraryNotFound);
the files say which layer is at fault. Every reader takes ``root``, the file system's top (``/`` on a
live machine; a folder laid out as the kernel and the distribution lay theirs in the tests and the
real-case corpus), and ``env`` where the environment counts. Nothing here raises: what cannot be
read is an ``NA`` with the reason.

- The kernel module: ``/proc/driver/nvidia/version`` ("NVRM version: NVIDIA UNIX x86_64 Kernel Module
  550.90.07 ..." or "... Open Kernel Module for x86_64  550.54.14 ..."), else
  ``/sys/module/nvidia/version``.
- The libraries: ``libnvidia-ml.so.1`` and ``libcuda.so.1`` are symlinks to the real names that carry
  the version (``libnvidia-ml.so.550.107.02``); they are looked up in the loader's order
  (LD_LIBRARY_PATH, the directories of /etc/ld.so.conf and its includes, then the default ones).
- A container: ``/.dockerenv`` (Docker), ``/run/.containerenv`` (Podman), the ``container`` variable
  (systemd-nspawn, LXC, Podman), Kubernetes' KUBERNETES_SERVICE_HOST, and the cgroup paths of PID 1
  (docker, kubepods, containerd, libpod, lxc).
- The PCI bus: ``/sys/bus/pci/devices/*/vendor``; NVIDIA's vendor id is 0x10de.
"""

from __future__ import annotations

import glob
import os
import re
import struct
from typing import Mapping

from gpudoctor.core._record import field, record

from gpudoctor.core._text import plain_text

from .na import NA

NVIDIA_VENDOR = "0x10de"
NVML_LIBRARY = "libnvidia-ml.so.1"
CUDA_LIBRARY = "libcuda.so.1"
# Where the loader looks when /etc/ld.so.conf names nothing else (Debian/Ubuntu multiarch, Red Hat's
# lib64, nvidia-docker 1.0's mount points, WSL's driver folder).
DEFAULT_LIB_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu",
                    "usr/lib/aarch64-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib", "usr/local/nvidia/lib",
                    "usr/local/nvidia/lib64", "usr/lib/wsl/lib")
_MAX_READ = 64 * 1024
_MAX_LINKS = 16
_MODULE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)*)")
_VERSION = re.compile(r"^(\d+\.\d+(?:\.\d+)*)$")
# cgroup path words that name a container engine (PID 1's /proc/1/cgroup lines)
_CGROUP_ENGINES = (("kubepods", "kubernetes"), ("docker", "docker"), ("libpod", "podman"),
                   ("cri-containerd", "containerd"), ("containerd", "containerd"), ("lxc", "lxc"))


def _path(root: str, *parts: str) -> str:
    return os.path.join(root, *(p.lstrip("/") for p in parts))


def _read(path: str) -> str | NA:
    try:
        with open(path, "rb") as fh:
            return fh.read(_MAX_READ).decode("utf-8", "replace")
    except FileNotFoundError:
        return NA("NotFound")
    except PermissionError:
        return NA("NoPermission")
    except OSError:
        return NA("Unreadable")


def version_key(version: str) -> tuple[int, ...]:
    """'550.107.02' -> (550, 107, 2), for ordering two driver versions."""
    return tuple(int(p) for p in version.split(".") if p.isdigit())


# --------------------------------------------------------------------------- the kernel module
def module_version(root: str = "/") -> str | NA:
    """The loaded NVIDIA kernel module's version, or NA: "ModuleNotLoaded" (neither file exists),
    "NoPermission", "Unparsed"."""
    text = _read(_path(root, "proc/driver/nvidia/version"))
    if isinstance(text, str):
        found = _MODULE.search(text)
        return found.group(1) if found else NA("Unparsed")
    fallback = _read(_path(root, "sys/module/nvidia/version"))
    if isinstance(fallback, str):
        line = fallback.strip()
        return line if _VERSION.match(line) else NA("Unparsed")
    return NA("ModuleNotLoaded") if text.reason == "NotFound" else text


# --------------------------------------------------------------------------- the libraries
def _conf_dirs(root: str, conf: str, depth: int = 0) -> list[str]:
    """The directories an ld.so.conf file names, with its ``include`` lines followed."""
    text = _read(_path(root, conf))
    if not isinstance(text, str) or depth > 4:
        return []
    out: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include"):
            pattern = line.split(None, 1)[1] if " " in line else ""
            base = os.path.dirname(conf) if not pattern.startswith("/") else ""
            for match in sorted(glob.glob(_path(root, base, pattern))):
                out.extend(_conf_dirs(root, os.path.relpath(match, root), depth + 1))
        else:
            out.append(line)
    return out


def library_dirs(root: str = "/", env: Mapping[str, str] | None = None) -> list[str]:
    """The directories the dynamic loader searches, in its order (relative to ``root``)."""
    env = os.environ if env is None else env
    dirs = [d for d in (env.get("LD_LIBRARY_PATH") or "").split(":") if d]
    dirs += _conf_dirs(root, "etc/ld.so.conf") + list(DEFAULT_LIB_DIRS)
    seen: list[str] = []
    for d in dirs:
        d = "/" + d.strip("/")
        if d not in seen:
            seen.append(d)
    return seen


def _resolve(root: str, path: str) -> str | None:
    """Follow ``path``'s symlinks inside ``root``; the final file's path (inside root), or None."""
    for _ in range(_MAX_LINKS):
        full = _path(root, path)
        if not os.path.islink(full):
            return path if os.path.exists(full) else None
        try:
            target = os.readlink(full)
        except OSError:
            return None
        path = target if target.startswith("/") else os.path.join(os.path.dirname(path), target)
        path = os.path.normpath(path)
    return None


@record(frozen=True)
class Library:
    """One user-space driver library as the loader finds it: ``path`` (the name asked for, in the
    first directory that has it), ``real`` (where its symlinks end), ``version`` (from the real
    name: libnvidia-ml.so.550.107.02 -> 550.107.02), or NA when none of these can be told."""

    name: str
    path: str | NA
    real: str | NA
    version: str | NA


#: This interpreter's ELF class (e_ident[EI_CLASS]: 1 = 32-bit, 2 = 64-bit): the loader skips a
#: library of the other class and searches on.
ELF_CLASS = 2 if struct.calcsize("P") == 8 else 1


def _other_elf_class(root: str, path: str) -> bool:
    """Whether the file at ``path`` (inside root) is an ELF object of the other class than this
    interpreter's (libnvidia-compute-XXX:i386's libraries in /usr/lib/i386-linux-gnu, whose
    ld.so.conf.d file sorts before x86_64's). A file that cannot be read or is not ELF: False."""
    try:
        with open(_path(root, path), "rb") as f:
            ident = f.read(5)
    except OSError:
        return False
    return len(ident) == 5 and ident[:4] == b"\x7fELF" and ident[4] in (1, 2) and ident[4] != ELF_CLASS


def find_library(name: str, root: str = "/", env: Mapping[str, str] | None = None) -> Library:
    """Where the loader finds ``name`` (libnvidia-ml.so.1, libcuda.so.1) and the version its real
    name carries; as the loader does, a library of the other ELF class (32-bit beside 64-bit) is
    passed over."""
    for d in library_dirs(root, env):
        candidate = os.path.join(d, name)
        if not os.path.lexists(_path(root, candidate)):
            continue
        real = _resolve(root, candidate)
        if real is not None and _other_elf_class(root, real):
            continue
        if real is None:
            return Library(name, plain_text(candidate, limit=300), NA("BrokenLink"), NA("BrokenLink"))
        stem = name.split(".so")[0] + ".so."
        base = os.path.basename(real)
        version = base[len(stem):] if base.startswith(stem) else ""
        return Library(name, plain_text(candidate, limit=300), plain_text(real, limit=300),
                       version if _VERSION.match(version) else NA("NoVersionInName"))
    return Library(name, NA("NotFound"), NA("NotFound"), NA("NotFound"))


# --------------------------------------------------------------------------- a container
@record(frozen=True)
class Container:
    """Whether this process runs in a container, and what the NVIDIA container runtime gave it.

    ``kind``: "docker", "podman", "kubernetes", "containerd", "lxc", another engine's name, or None
    (no sign of a container); ``evidence``: what said so. ``visible_devices`` and ``capabilities``:
    NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES (None: unset). ``device_nodes``: the
    /dev/nvidia* names present. ``device_rules``: the device cgroup's rules for the NVIDIA major
    (195) where cgroup v1's devices.list can be read, else NA (cgroup v2 keeps them in eBPF)."""

    kind: str | None
    evidence: tuple[str, ...] = ()
    visible_devices: str | None = None
    capabilities: str | None = None
    device_nodes: tuple[str, ...] = ()
    device_rules: tuple[str, ...] | NA = field(default_factory=lambda: NA("NotReadable"))

    @property
    def inside(self) -> bool:
        return self.kind is not None

    def capability_list(self) -> set[str] | None:
        """The capabilities asked for; None where the toolkit's default applies (utility, compute): the
        NVIDIA container toolkit documents an empty or unset NVIDIA_DRIVER_CAPABILITIES as the default."""
        if self.capabilities is None or not self.capabilities.strip(" ,\t\n"):
            return None
        return {c.strip().lower() for c in self.capabilities.split(",") if c.strip()}

    def may_use_compute(self) -> bool | None:
        """Whether NVIDIA_DRIVER_CAPABILITIES lets CUDA in (None: unset or empty, the default applies)."""
        caps = self.capability_list()
        return None if caps is None else bool(caps & {"compute", "all"})


def _cgroup_engine(root: str) -> tuple[str | None, str]:
    for pid in ("1", "self"):
        text = _read(_path(root, "proc", pid, "cgroup"))
        if not isinstance(text, str):
            continue
        for line in text.splitlines():
            path = line.split(":", 2)[-1]
            for word, engine in _CGROUP_ENGINES:
                if word in path:
                    return engine, f"/proc/{pid}/cgroup: {plain_text(line.strip(), limit=120)}"
    return None, ""


def _device_rules(root: str) -> tuple[str, ...] | NA:
    text = _read(_path(root, "sys/fs/cgroup/devices/devices.list"))
    if not isinstance(text, str):
        return NA("NotReadable")
    return tuple(plain_text(line.strip(), limit=40) for line in text.splitlines()[:1000]
                 if line.strip().startswith(("a ", "c 195:", "c *:")))[:16]


def container(root: str = "/", env: Mapping[str, str] | None = None) -> Container:
    """This process's container, as the files and the environment show it (see :class:`Container`)."""
    env = os.environ if env is None else env
    evidence: list[str] = []
    kind: str | None = None
    for marker, name in ((".dockerenv", "docker"), ("run/.containerenv", "podman")):
        if os.path.exists(_path(root, marker)):
            kind = kind or name
            evidence.append(f"/{marker} exists")
    if env.get("KUBERNETES_SERVICE_HOST"):
        kind = "kubernetes"
        evidence.append("KUBERNETES_SERVICE_HOST is set")
    declared = plain_text((env.get("container") or "").strip(), limit=20)
    if declared:
        kind = kind or declared
        evidence.append(f"container={declared}")
    found, line = _cgroup_engine(root)
    if found is not None:
        kind = kind or found
        evidence.append(line)
    nodes = tuple(sorted(plain_text(os.path.basename(p), limit=40) for p in glob.glob(_path(root, "dev", "nvidia*"))))
    return Container(kind, tuple(evidence), _variable(env, "NVIDIA_VISIBLE_DEVICES"),
                     _variable(env, "NVIDIA_DRIVER_CAPABILITIES"), nodes[:64], _device_rules(root))


def _variable(env: Mapping[str, str], name: str) -> str | None:
    """An environment variable as plain bounded text (it ends up in findings), or None when unset."""
    value = env.get(name)
    return None if value is None else plain_text(value, limit=200)


# --------------------------------------------------------------------------- the PCI bus
def nvidia_pci_devices(root: str = "/") -> list[str] | NA:
    """The PCI addresses whose vendor is NVIDIA's (0x10de), or NA("PciBusUnreadable") where the bus
    cannot be read (no /sys/bus/pci/devices, or no device in it, as in some VMs and sandboxes)."""
    vendors = sorted(glob.glob(_path(root, "sys/bus/pci/devices", "*", "vendor")))
    if not vendors:
        return NA("PciBusUnreadable")
    found, read = [], 0
    for path in vendors:
        text = _read(path)
        if isinstance(text, str):
            read += 1
            if text.strip().lower() == NVIDIA_VENDOR:
                found.append(os.path.basename(os.path.dirname(path)))
    return found if read else NA("PciBusUnreadable")


# --------------------------------------------------------------------------- all of it
@record(frozen=True)
class Stack:
    """The stack's facts in one record: what the probes judge NVML's failures by."""

    module: str | NA
    nvml_library: Library
    cuda_library: Library
    container: Container
    nvidia_pci: list[str] | NA
    pci_device_count: int | NA = field(default_factory=lambda: NA("PciBusUnreadable"))


def read_stack(root: str = "/", env: Mapping[str, str] | None = None) -> Stack:
    """Every reader above, once."""
    env = os.environ if env is None else env
    pci = nvidia_pci_devices(root)
    count = len(glob.glob(_path(root, "sys/bus/pci/devices", "*", "vendor")))
    return Stack(module_version(root), find_library(NVML_LIBRARY, root, env), find_library(CUDA_LIBRARY, root, env),
                 container(root, env), pci, count if isinstance(pci, list) else pci)


#: The variable that points the readers at another root (a host's / mounted into a monitoring
#: container, as node-exporter's --path.rootfs; the tests' laid-out folders).
ROOT_VARIABLE = "GPUDOCTOR_ROOTFS"


def live_root(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return env.get(ROOT_VARIABLE) or "/"


__all__ = ["CUDA_LIBRARY", "Container", "Library", "NVIDIA_VENDOR", "NVML_LIBRARY", "ROOT_VARIABLE", "Stack",
           "container", "find_library", "library_dirs", "live_root", "module_version", "nvidia_pci_devices",
           "read_stack", "version_key"]
