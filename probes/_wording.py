"""The words of the probes' own finding codes, once per code.

Registered in gpudoctor.findings' index (``_TABLES``), so :func:`gpudoctor.findings.finding` builds
these codes as it builds its own: ``findings.finding("mig_enabled", device=0, gpu=0, name="H100")``.
Each entry is a :class:`gpudoctor.findings.Wording`: the code's status and its summary, why and fix
as ``str.format`` templates filled from the probe's figures. A code worded in more than one way has
an entry per way, keyed ``code:way`` (the finding's code is the part before the colon). Codes
several front ends show (health, fleet, the TUI) are worded in gpudoctor/findings.py instead; a key
lives in one table only (tests/test_wording_tables.py).

Standard library and gpudoctor's foundation only: the table is data.
"""

from __future__ import annotations

from gpudoctor.findings import Wording
from gpudoctor.model import Status

_XID_DMESG = "Check `dmesg` for Xid errors; the node needs a GPU reset or reboot, and a hardware check if it repeats."

WORDING: dict[str, Wording] = {
    # -- devices -------------------------------------------------------------------------------
    "index_order_uncertain": Wording(
        Status.PASS, "torch's device numbers are not certain without torch: {caveat}.",
        "The torch -> nvidia-smi map here follows CUDA_VISIBLE_DEVICES' order; with mixed GPUs CUDA may number "
        "them otherwise, so a finding about 'device 0' may name another card.",
        "export CUDA_DEVICE_ORDER=PCI_BUS_ID (then cuda:N is nvidia-smi's GPU N), or run the full report, which "
        "matches devices by PCI bus id."),
    "device_properties_failed": Wording(
        Status.FAIL, "torch cannot read device {index}: {error}", "CUDA cannot use this device.",
        "Check `nvidia-smi` and `dmesg` for this GPU."),
    "no_cuda_device": Wording(
        Status.FAIL, "No NVIDIA GPU is visible ({why_none}).",
        "PyTorch code written as torch.device('cuda' if torch.cuda.is_available() else 'cpu') will silently "
        "train on the CPU; code that says 'cuda' fails.",
        "Check `nvidia-smi`. In a container pass the GPUs (`docker run --gpus all`); on a VM attach the GPU; on a "
        "laptop make sure the NVIDIA GPU is not disabled."),
    "no_cuda_device:named": Wording(
        Status.FAIL, "No NVIDIA GPU is visible ({why_none}).",
        "PyTorch code written as torch.device('cuda' if torch.cuda.is_available() else 'cpu') will silently "
        "train on the CPU; code that says 'cuda' fails.",
        "{named}: see the environment probe's finding."),
    "cuda_visible_devices_hides_all": Wording(
        Status.FAIL, "CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU ({count} present).",
        "CUDA stops reading the list at the first entry that is not a valid device, so torch sees none.",
        "Use indices 0..{last} or GPU UUIDs from `nvidia-smi -L`, or unset CUDA_VISIBLE_DEVICES."),
    "cuda_visible_devices_truncated": Wording(
        Status.WARN, "CUDA_VISIBLE_DEVICES={cvd!r} names {named} devices but only the first {valid} are valid.",
        "CUDA ignores everything after the first invalid or repeated entry.",
        "Fix the list: valid indices are 0..{last}."),
    "torch_sees_no_gpu": Wording(
        Status.FAIL, "NVML sees {visible} GPU(s) but torch sees none: {reason}.",
        "torch.cuda.is_available() is False, so code that falls back to the CPU trains there silently and code "
        "that asks for 'cuda' fails.",
        "{fix}"),
    "device_count_mismatch:changed": Wording(
        Status.WARN, "torch uses {torch_count} device(s) but CUDA_VISIBLE_DEVICES={changed_to!r} now allows "
        "{visible}: the variable was changed after CUDA read it.",
        "CUDA reads CUDA_VISIBLE_DEVICES once, when it initialises (the first torch.cuda call); setting "
        "os.environ afterwards changes nothing for this process, so it keeps the GPUs it started with.",
        "Set CUDA_VISIBLE_DEVICES before the process starts (`CUDA_VISIBLE_DEVICES=1 python train.py`) or at the "
        "top of the script before any torch.cuda call; to pick a device later use torch.cuda.set_device(N) or "
        "torch.device('cuda:N')."),
    "device_count_mismatch": Wording(
        Status.WARN, "torch sees {torch_count} device(s); NVML with CUDA_VISIBLE_DEVICES says {visible}.",
        "Some GPU is hidden from CUDA or failed to initialise (MIG, a lost GPU, a driver error).",
        "Compare `nvidia-smi -L` with torch.cuda.device_count(); check `dmesg` for Xid errors."),
    "index_order_differs": Wording(
        Status.PASS, "torch's device numbers differ from nvidia-smi's (see the torch->NVML map).",
        "CUDA orders devices fastest first by default; nvidia-smi orders them by PCI bus.",
        "export CUDA_DEVICE_ORDER=PCI_BUS_ID to make cuda:N match nvidia-smi's GPU N."),
    "mig_enabled": Wording(
        Status.WARN, "GPU {gpu} ({name}) is in MIG mode: CUDA sees its MIG instances, not the whole GPU.",
        "A process gets one MIG slice (its SMs and memory), so throughput and memory figures are the slice's, and "
        "NVML utilisation is not reported per instance.",
        "Select a slice with CUDA_VISIBLE_DEVICES=MIG-<uuid> (nvidia-smi -L), or ask the administrator to disable "
        "MIG for whole-GPU training."),
    "device_unreadable": Wording(
        Status.WARN, "GPU {gpu}: nothing could be read about it: {reasons}.",
        "NVML counts the device but answers nothing about it (name, UUID, PCI bus, memory), so it cannot be "
        "identified or matched to torch's devices; every NVIDIA GPU reports these.",
        "Compare with `nvidia-smi -q`; check the driver (`dmesg`), and in a VM or container that the GPU is passed "
        "through whole{as_root}."),
    "gpu_lost:devices": Wording(
        Status.FAIL, "GPU {gpu} has fallen off the bus (NVML: GpuIsLost).",
        "The driver lost contact with the GPU (Xid 79): every CUDA call on it fails.", _XID_DMESG),
}
