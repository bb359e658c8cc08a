"""devices: which GPUs exist, which ones torch sees, and how torch indices map to NVML's.

torch (CUDA) numbers devices after CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER; NVML and
nvidia-smi number every device by PCI bus. The two agree only by accident, so the map
is built from PCI bus ids (torch's device properties vs NVML's PCI info). At ``--quick``
the map comes from CUDA_VISIBLE_DEVICES alone (no torch).
"""

from __future__ import annotations

import os
from typing import Any

from gpudoctor.backends.na import NA, is_na
from gpudoctor.backends.visibility import match_torch_to_nvml, visible_nvml_indices
from gpudoctor.model import ProbeResult, Status
from gpudoctor.probes import Probe, ProbeContext


def _na_note(value: Any) -> str:
    return value.reason if is_na(value) else ""


def run(ctx: ProbeContext) -> ProbeResult:
    r = ProbeResult("devices")
    gpu = ctx.gpu
    nvml_na = gpu.status()
    count = gpu.device_count() if nvml_na is None else nvml_na
    nvml_static = [gpu.static(i) for i in range(count)] if isinstance(count, int) else []
    r.measure("nvml_device_count", count if isinstance(count, int) else None, note=_na_note(count))

    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = visible_nvml_indices(gpu) if nvml_na is None else nvml_na
    facts = ctx.torch_facts()
    torch_checked = not is_na(facts) and facts.get("importable")
    torch_devices: list[dict[str, Any]] = list(facts.get("devices") or []) if torch_checked else []
    torch_count = facts.get("device_count") if torch_checked else NA("QuickMode" if is_na(facts) else "TorchImportFailed")
    if torch_checked and facts.get("cuda_available") is not True:
        torch_count = 0
    r.measure("torch_device_count", torch_count if isinstance(torch_count, int) else None,
              note=_na_note(torch_count))

    # torch index -> NVML index
    if torch_devices:
        mapping = match_torch_to_nvml(torch_devices, nvml_static)
    elif isinstance(visible, list):
        mapping = {t: n for t, n in enumerate(visible)}
    else:
        mapping = {}
    r.details["torch_to_nvml"] = {str(k): v for k, v in mapping.items()}
    r.details["cuda_visible_devices"] = cvd
    r.details["cuda_device_order"] = os.environ.get("CUDA_DEVICE_ORDER")

    # Nothing visible at all
    if not isinstance(count, int) or count == 0:
        why_none = (f"NVML: {nvml_na.reason}" if nvml_na is not None
                    else "NVML reports 0 devices")
        if torch_checked and facts.get("cuda_init_error"):
            why_none += f"; torch: {facts['cuda_init_error']}"
        r.find(Status.FAIL, "no_cuda_device", f"No NVIDIA GPU is visible ({why_none}).",
               why="PyTorch code written as torch.device('cuda' if torch.cuda.is_available() else 'cpu') "
                   "will silently train on the CPU; code that says 'cuda' fails.",
               fix="Check `nvidia-smi`. In a container pass the GPUs (`docker run --gpus all`); on a VM attach "
                   "the GPU; on a laptop make sure the NVIDIA GPU is not disabled.")
        return r.settle("no GPU visible")

    # Agreement between NVML (after CUDA_VISIBLE_DEVICES) and torch
    if isinstance(visible, list):
        r.measure("visible_to_cuda", len(visible), note=f"CUDA_VISIBLE_DEVICES={cvd!r}" if cvd is not None else "")
        if cvd is not None and len(visible) == 0:
            r.find(Status.FAIL, "cuda_visible_devices_hides_all",
                   f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU ({count} present).",
                   why="CUDA stops reading the list at the first entry that is not a valid device, so torch sees none.",
                   fix=f"Use indices 0..{count - 1} or GPU UUIDs from `nvidia-smi -L`, or unset CUDA_VISIBLE_DEVICES.")
        elif cvd is not None and len(visible) < len([t for t in cvd.split(",") if t.strip()]):
            r.find(Status.WARN, "cuda_visible_devices_truncated",
                   f"CUDA_VISIBLE_DEVICES={cvd!r} names {len([t for t in cvd.split(',') if t.strip()])} devices "
                   f"but only the first {len(visible)} are valid.",
                   why="CUDA ignores everything after the first invalid or repeated entry.",
                   fix=f"Fix the list: valid indices are 0..{count - 1}.")
        if isinstance(torch_count, int) and torch_count != len(visible) and torch_checked and torch_count > 0:
            r.find(Status.WARN, "device_count_mismatch",
                   f"torch sees {torch_count} device(s); NVML with CUDA_VISIBLE_DEVICES says {len(visible)}.",
                   why="Some GPU is hidden from CUDA or failed to initialise (MIG, a lost GPU, a driver error).",
                   fix="Compare `nvidia-smi -L` with torch.cuda.device_count(); check `dmesg` for Xid errors.")

    order = os.environ.get("CUDA_DEVICE_ORDER")
    if torch_devices and any(t != n for t, n in mapping.items() if n is not None) and order != "PCI_BUS_ID":
        r.find(Status.PASS, "index_order_differs",
               "torch's device numbers differ from nvidia-smi's (see the torch->NVML map).",
               why="CUDA orders devices fastest first by default; nvidia-smi orders them by PCI bus.",
               fix="export CUDA_DEVICE_ORDER=PCI_BUS_ID to make cuda:N match nvidia-smi's GPU N.")

    # Per device
    wanted = [ctx.device] if ctx.device is not None else sorted(mapping) if mapping else list(range(count))
    torch_by_index = {d["index"]: d for d in torch_devices}
    names: list[str] = []
    for t_index in wanted:
        n_index = mapping.get(t_index, t_index if not mapping else None)
        s = nvml_static[n_index] if n_index is not None and n_index < len(nvml_static) else {}
        t = torch_by_index.get(t_index, {})
        name = t.get("name") or s.get("name")
        names.append(str(name))
        dev = t_index
        r.measure("name", name if not is_na(name) else None, device=dev, note=_na_note(name))
        r.measure("nvml_index", n_index, device=dev)
        r.measure("uuid", t.get("uuid") or (s.get("uuid") if not is_na(s.get("uuid")) else None), device=dev)
        r.measure("pci_bus_id", t.get("pci_bus_id") or (s.get("pci_bus_id") if isinstance(s.get("pci_bus_id"), str) else None), device=dev)
        cc = t.get("compute_capability") or (s.get("compute_capability") if not is_na(s.get("compute_capability")) else None)
        r.measure("compute_capability", cc, device=dev)
        if t.get("sm_count") is not None:
            r.measure("sm_count", t["sm_count"], device=dev)
        total = t.get("total_memory_bytes") or (s.get("memory_total_bytes") if not is_na(s.get("memory_total_bytes")) else None)
        r.measure("memory_total", total, "B", device=dev)
        if t.get("l2_cache_bytes"):
            r.measure("l2_cache", t["l2_cache_bytes"], "B", device=dev)
        mig = s.get("mig_mode")
        r.measure("mig_mode", None if is_na(mig) or mig is None else ("enabled" if mig else "disabled"),
                  device=dev, note=_na_note(mig))
        if mig == 1:
            r.find(Status.WARN, "mig_enabled",
                   f"GPU {dev} ({name}) is in MIG mode: CUDA sees its MIG instances, not the whole GPU.",
                   why="A process gets one MIG slice (its SMs and memory), so throughput and memory figures are "
                       "the slice's, and NVML utilisation is not reported per instance.",
                   fix="Select a slice with CUDA_VISIBLE_DEVICES=MIG-<uuid> (nvidia-smi -L), or ask the "
                       "administrator to disable MIG for whole-GPU training.", device=dev)
        if is_na(name) and name.reason == "GpuIsLost":
            r.find(Status.FAIL, "gpu_lost", f"GPU {dev} has fallen off the bus (NVML: GpuIsLost).",
                   why="The driver lost contact with the GPU (Xid 79): every CUDA call on it fails.",
                   fix="Check `dmesg` for Xid errors; the node needs a GPU reset or reboot, and a hardware "
                       "check if it repeats.", device=dev)
    if torch_checked:
        for d in torch_devices:
            if d.get("error"):
                r.find(Status.FAIL, "device_properties_failed",
                       f"torch cannot read device {d['index']}: {d['error']}", device=d["index"],
                       why="CUDA cannot use this device.", fix="Check `nvidia-smi` and `dmesg` for this GPU.")

    shown = ", ".join(sorted(set(names))) if names else "none"
    return r.settle(f"{len(wanted)} device(s): {shown}")


PROBE = Probe(
    name="devices",
    title="GPUs seen by NVML and by torch, and how their indices map",
    run=run,
    level="quick",
    uses_torch=True,
    timeout_s=60,
    order=20,
)
