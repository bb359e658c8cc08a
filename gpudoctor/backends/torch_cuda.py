"""torch and torch.cuda helpers, with a lazy torch import.

Nothing here imports torch at module import time: ``gpudoctor report --quick`` and the
TUI process must never load torch (nor create a CUDA context). Functions that need torch
import it when called; they run in the runner's child process.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from types import ModuleType
from typing import Any, Callable

from gpudoctor.core.errors import message_line as _first_line

from .na import NA


def import_torch() -> Any:
    """Import torch, or return NA with the one-line reason."""
    try:
        return importlib.import_module("torch")
    except Exception as exc:  # ImportError, OSError from a broken CUDA library, ...
        return NA(f"{type(exc).__name__}: {_first_line(exc)}")




def _safe(fn: Callable[..., object], *args: object, **kwargs: object) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        return NA(f"{type(exc).__name__}: {_first_line(exc)}")


def _cudnn_version_text(version: int | None) -> str | None:
    if not version:
        return None
    # cuDNN >= 9 encodes major*10000 + minor*100 + patch; 8.x used major*1000 + minor*100 + patch.
    if version >= 10000:
        return f"{version // 10000}.{(version % 10000) // 100}.{version % 100}"
    return f"{version // 1000}.{(version % 1000) // 100}.{version % 100}"


def _version_tuple_text(value: object) -> str | None:
    """(8, 7, 0) -> '8.7.0'; an int in cuDNN's own encoding -> its text; anything else -> None."""
    if isinstance(value, (tuple, list)) and value and all(isinstance(x, int) for x in value):
        return ".".join(str(x) for x in value[:3])
    if isinstance(value, int) and not isinstance(value, bool):
        return _cudnn_version_text(value)
    return None


# /proc/self/maps is a few hundred KiB in a torch process; read no more than this.
MAX_MAPS_BYTES = 4 * 1024 * 1024


def loaded_library_path(prefix: str, maps_file: str = "/proc/self/maps") -> str | None:
    """The path of a shared library named ``prefix``* that this process has mapped, ``prefix.so``*
    first (Linux; None elsewhere or when none is loaded)."""
    try:
        with open(maps_file, "rb") as fh:
            raw = fh.read(MAX_MAPS_BYTES)
    except OSError:
        return None
    found: list[str] = []
    for line in raw.decode("utf-8", "replace").splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6:
            path = parts[5].strip()
            if path.startswith("/") and path.rsplit("/", 1)[-1].startswith(prefix) and path not in found:
                found.append(path[:512])
    # the main library (libcudnn.so.9) before its parts (libcudnn_graph.so.9, ...)
    main = [p for p in found if p.rsplit("/", 1)[-1].startswith(prefix + ".so")]
    return next(iter(main or found), None)


def cudnn_facts(torch: ModuleType, maps_file: str = "/proc/self/maps") -> dict[str, Any]:
    """cuDNN as the loaded torch sees it: whether it is built in, the version torch was compiled
    against, the version of the library actually loaded, and that library's path.

    ``torch.backends.cudnn.version()`` raises when the two are incompatible (a foreign libcudnn found
    first on LD_LIBRARY_PATH), so both are also asked from ``torch._C._cudnn`` directly
    (``getCompileVersion``/``getRuntimeVersion``, tuples; older torch: ``torch._C._cudnn_version()``
    for the compiled one). Never raises: a missing function leaves its fact None.
    """
    out: dict[str, Any] = {"cudnn_available": _safe(torch.backends.cudnn.is_available),
                           "cudnn_version": None, "cudnn_compiled_version": None,
                           "cudnn_runtime_version": None, "cudnn_library": None}
    if out["cudnn_available"] is not True:
        return out
    version = _safe(torch.backends.cudnn.version)
    out["cudnn_version"] = _cudnn_version_text(version) if isinstance(version, int) else version
    binding = getattr(getattr(torch, "_C", None), "_cudnn", None)
    compiled = None
    if binding is not None and hasattr(binding, "getCompileVersion"):
        compiled = _safe(binding.getCompileVersion)
    elif hasattr(getattr(torch, "_C", None), "_cudnn_version"):
        compiled = _safe(torch._C._cudnn_version)
    runtime = _safe(binding.getRuntimeVersion) if binding is not None and hasattr(binding, "getRuntimeVersion") else None
    out["cudnn_compiled_version"] = _version_tuple_text(compiled)
    out["cudnn_runtime_version"] = _version_tuple_text(runtime)
    out["cudnn_library"] = _safe(loaded_library_path, "libcudnn", maps_file)
    if not isinstance(out["cudnn_library"], str):
        out["cudnn_library"] = None
    return out


def torchvision_facts() -> dict[str, Any]:
    """torchvision version and whether its compiled ops (nms) load and run."""
    facts: dict[str, Any] = {"installed": False, "version": None, "ops_ok": False, "error": None}
    try:
        import torchvision  # noqa: F401  (the import registers torchvision::nms & co.)
    except ModuleNotFoundError:
        facts["error"] = "torchvision is not installed"
        return facts
    except Exception as exc:
        facts["installed"] = True
        facts["error"] = f"{type(exc).__name__}: {_first_line(exc)}"
        try:  # the import failed, but the package metadata still names the version
            from importlib.metadata import version

            facts["version"] = version("torchvision")
        except Exception:
            pass
        return facts
    facts["installed"] = True
    facts["version"] = getattr(torchvision, "__version__", None)
    try:
        import torch
        from torchvision.ops import nms

        boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0]])
        keep = nms(boxes, torch.tensor([0.9, 0.8]), 0.5)
        facts["ops_ok"] = keep.tolist() == [0]
        if not facts["ops_ok"]:
            facts["error"] = f"torchvision.ops.nms returned {keep.tolist()}, expected [0]"
    except Exception as exc:
        facts["error"] = f"{type(exc).__name__}: {_first_line(exc)}"
    return facts


def device_properties(torch: ModuleType, index: int) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(index)
    domain = getattr(props, "pci_domain_id", None)
    bus = getattr(props, "pci_bus_id", None)
    device = getattr(props, "pci_device_id", None)
    bus_id = None
    if bus is not None and device is not None:
        bus_id = f"{int(domain or 0):04x}:{int(bus):02x}:{int(device):02x}.0"
    uuid = getattr(props, "uuid", None)
    return {
        "index": index,
        "name": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": int(props.multi_processor_count),
        "total_memory_bytes": int(props.total_memory),
        "l2_cache_bytes": int(getattr(props, "L2_cache_size", 0)) or None,
        "uuid": ("GPU-" + str(uuid)) if uuid is not None and not str(uuid).startswith(("GPU-", "MIG-")) else (str(uuid) if uuid is not None else None),
        "pci_bus_id": bus_id,
        "is_integrated": bool(getattr(props, "is_integrated", False)),
    }


def torch_facts(with_devices: bool = True) -> dict[str, Any]:
    """What the torch that is actually loaded says about itself and CUDA.

    Asks the loaded library (``torch.backends.cudnn.version()``) rather than guessing
    from ldconfig. Never raises: each failing field becomes an NA or an error string.
    """
    torch = import_torch()
    if isinstance(torch, NA):
        return {"importable": False, "import_error": torch.reason}
    facts: dict[str, Any] = {
        "importable": True,
        "version": str(torch.__version__),  # a TorchVersion (str subclass) otherwise
        "cuda_build": getattr(torch.version, "cuda", None),
        "hip_build": getattr(torch.version, "hip", None),
        "git_version": getattr(torch.version, "git_version", None),
        "debug_build": bool(getattr(torch.version, "debug", False)),
        "python": sys.version.split()[0],
    }
    facts["arch_list"] = _safe(torch.cuda.get_arch_list)
    facts.update(cudnn_facts(torch))
    nccl = None
    if getattr(torch.cuda, "nccl", None) is not None and facts["cuda_build"]:
        nccl = _safe(torch.cuda.nccl.version)
        if isinstance(nccl, tuple):
            nccl = ".".join(str(x) for x in nccl)
        elif isinstance(nccl, int):
            nccl = f"{nccl // 10000 if nccl >= 10000 else nccl // 1000}.{(nccl // 100) % 100 if nccl >= 10000 else (nccl % 1000) // 100}.{nccl % 100}"
    facts["nccl_version"] = nccl
    facts["distributed_available"] = _safe(lambda: torch.distributed.is_available())
    mps = getattr(getattr(torch, "backends", None), "mps", None)
    facts["mps_available"] = _safe(mps.is_available) if mps is not None else False
    xpu = getattr(torch, "xpu", None)
    facts["xpu_available"] = _safe(xpu.is_available) if xpu is not None else False

    # what CUDA reads once, when it starts (here, on the first torch.cuda call below)
    facts["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        facts["cuda_available"] = _safe(torch.cuda.is_available)
        facts["device_count"] = _safe(torch.cuda.device_count)
    # record=True keeps Warning instances (warn() wraps a str), typeshed also allows a str
    facts["cuda_warnings"] = [_first_line(w.message) for w in caught  # type: ignore[arg-type]
                               if "cuda" in str(w.message).lower()]
    facts["cuda_init_error"] = None
    if facts["cuda_available"] is not True and facts["cuda_build"]:
        # is_available() hides the reason; init() raises it ("driver too old", "no device"...).
        try:
            torch.cuda.init()
        except Exception as exc:
            facts["cuda_init_error"] = f"{type(exc).__name__}: {_first_line(exc)}"
    devices: list[dict[str, Any]] = []
    if with_devices and facts["cuda_available"] is True and isinstance(facts["device_count"], int):
        for index in range(facts["device_count"]):
            props = _safe(device_properties, torch, index)
            devices.append(props if isinstance(props, dict) else {"index": index, "error": props.reason})
    facts["devices"] = devices
    facts["torchvision"] = torchvision_facts()
    return facts
