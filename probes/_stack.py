"""The stack below NVML, judged: which layer NVML's failure code points at, from the files
(gpudoctor.backends.stack). Shared by the environment probe (NVML cannot start) and the devices
probe (no GPU visible), so ``report --quick``, the full report, the exporter's report status and the
TUI header give one verdict. The words are gpudoctor.core.findings.WORDING's.

NVML's codes and what the files then tell:
- LibRmVersionMismatch: the loaded module's version (/proc/driver/nvidia/version) against the one in
  libnvidia-ml.so.1's real name; which one is newer says whether the packages were upgraded without a
  reboot or the module came from another release; inside a container, the host's module against the
  mounted libraries.
- Unknown, inside a container: the device cgroup lost the NVIDIA devices (a host `systemctl
  daemon-reload` under the systemd cgroup driver); cgroup v1's devices.list shows it where readable.
- LibraryNotFound / DriverNotLoaded inside a container: the container was started without its GPUs,
  or by another runtime than NVIDIA's, or without the driver's utility capability. First, on a host or
  in a container (sysfs shows the host's bus): whether the PCI bus holds an NVIDIA device at all
  (vendor 0x10de); the environment probe says so where this cannot be told.
"""

from __future__ import annotations

from gpudoctor.core import findings
from gpudoctor.backends.na import NA, is_na
from gpudoctor.backends.stack import Container, Stack, version_key
from gpudoctor.core.model import Finding

from . import _wording

#: NVIDIA_VISIBLE_DEVICES values that give a container no GPU (the container toolkit's "void" and "none").
NO_DEVICES = frozenset({"", "void", "none"})


def _text(value: object) -> str:
    return value.reason if is_na(value) else str(value)


def nvml_failure(reason: str, stack: Stack | NA) -> Finding | None:
    """The finding that names the cause of NVML's failure ``reason`` from the stack's files, or None
    where the files add nothing (the caller's generic words then stand)."""
    if is_na(stack):
        return None
    if reason == "LibRmVersionMismatch":
        return _mismatch(stack)
    box = stack.container
    if box.inside and reason == "Unknown":
        return _access_lost(box)
    if reason not in ("LibraryNotFound", "DriverNotLoaded"):
        return None
    # sysfs is not namespaced: a container sees its host's PCI bus, so "no NVIDIA device" holds there too
    pci = stack.nvidia_pci
    if isinstance(pci, list) and not pci:
        return findings.finding("no_nvidia_gpu", count=_bus_size(stack))
    return _container_without(stack) if box.inside else None


def _bus_size(stack: Stack) -> str:
    return str(stack.pci_device_count) if isinstance(stack.pci_device_count, int) else "readable"


def _mismatch(stack: Stack) -> Finding:
    module = stack.module
    lib = stack.nvml_library
    library = lib.version if not is_na(lib.version) else stack.cuda_library.version
    evidence = {"module": _text(module), "library": _text(library), "library_path": _text(lib.path),
                "library_real": _text(lib.real)}
    if is_na(module) or is_na(library):  # say what could not be read, and why
        module, library = (_wording.STACK_UNREADABLE.format(reason=v.reason) if is_na(v) else v for v in (module, library))
    if is_na(module) or is_na(library):
        code = "driver_library_mismatch:unknown"
    elif stack.container.inside:
        code = "driver_library_mismatch:container"
    elif version_key(library) > version_key(module):
        code = "driver_library_mismatch:upgraded"
    else:
        code = "driver_library_mismatch:module_differs"
    return findings.finding(code, engine=stack.container.kind or "", evidence=evidence, module=_text(module),
                            library=_text(library), library_path=_text(lib.path))


def _access_lost(box: Container) -> Finding:
    rules = box.device_rules
    if isinstance(rules, tuple) and not any(r.startswith("a ") or r.endswith(("rw", "rwm")) for r in rules):
        seen = "; ".join(rules) if rules else _wording.ACCESS_LOST_NO_RULES
        said = _wording.ACCESS_LOST_RULES.format(seen=seen)
    else:
        said = ""
    return findings.finding("container_gpu_access_lost", engine=box.kind or "", rules=said,
                            evidence={"container": ", ".join(box.evidence)})


def _container_without(stack: Stack) -> Finding:
    box = stack.container
    nml = stack.nvml_library
    visible = box.visible_devices
    missing = []
    if not box.device_nodes:
        missing.append(_wording.CONTAINER_LACKS["device_nodes"])
    if is_na(nml.path):
        missing.append(_wording.CONTAINER_LACKS["nvml_library"])
    if visible is None:
        missing.append(_wording.CONTAINER_LACKS["visible_unset"])
    elif visible.strip().lower() in NO_DEVICES:
        missing.append(_wording.CONTAINER_LACKS["visible_none"].format(visible=visible.strip()[:40]))
    evidence = {"container": ", ".join(box.evidence), "device_nodes": ", ".join(box.device_nodes),
                "libnvidia_ml": _text(nml.path)}
    engine = box.kind or ""
    caps = box.capability_list()
    if box.device_nodes and is_na(nml.path) and caps is not None and not caps & {"utility", "all"}:
        return findings.finding("container_without_utility", engine=engine, nodes=", ".join(box.device_nodes[:4]),
                                capabilities=(box.capabilities or "")[:60], evidence=evidence)
    if box.device_nodes and is_na(nml.path):  # devices without libraries: CDI, or nodes passed by hand
        unset = visible is None and box.capabilities is None
        return findings.finding("container_libraries_missing", engine=engine, nodes=", ".join(box.device_nodes[:4]),
                                variables=_wording.NO_NVIDIA_VARIABLES if unset else "",
                                evidence=evidence)
    if visible is not None and visible.strip().lower() not in NO_DEVICES and not box.device_nodes:
        return findings.finding("container_runtime_not_used", engine=engine, visible=visible.strip()[:60],
                                missing=", ".join(missing), evidence=evidence)
    return findings.finding("container_without_gpus", engine=engine,
                            missing=", ".join(missing) or _wording.DRIVER_UNREACHABLE,
                            evidence=evidence)


__all__ = ["NO_DEVICES", "nvml_failure"]
