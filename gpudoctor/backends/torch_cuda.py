"""torch and torch.cuda helpers, with a lazy torch import.

Nothing here imports torch at module import time: ``gpudoctor report --quick`` and the
TUI process must never load torch (nor create a CUDA context). Functions that need torch
import it when called; they run in the runner's child process.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any

from gpudoctor.errors import message_line as _first_line

from .na import NA


def import_torch() -> Any:
    """Import torch, or return NA with the one-line reason."""
    try:
        return importlib.import_module("torch")
    except Exception as exc:  # ImportError, OSError from a broken CUDA library, ...
        return NA(f"{type(exc).__name__}: {_first_line(exc)}")




def _safe(fn, *args, **kwargs) -> Any:
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


def device_properties(torch: Any, index: int) -> dict[str, Any]:
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
    cudnn_available = _safe(torch.backends.cudnn.is_available)
    facts["cudnn_available"] = cudnn_available
    version = _safe(torch.backends.cudnn.version) if cudnn_available is True else None
    facts["cudnn_version"] = _cudnn_version_text(version) if isinstance(version, int) else version
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

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        facts["cuda_available"] = _safe(torch.cuda.is_available)
        facts["device_count"] = _safe(torch.cuda.device_count)
    facts["cuda_warnings"] = [_first_line(w.message) for w in caught if "cuda" in str(w.message).lower()]
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
