"""devices: which GPUs exist, which ones torch sees, and how torch indices map to NVML's.

torch (CUDA) numbers devices after CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER; NVML and
nvidia-smi number every device by PCI bus. The two agree only by accident, so the map
is built from PCI bus ids (torch's device properties vs NVML's PCI info). At ``--quick``
the map comes from CUDA_VISIBLE_DEVICES alone (no torch).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypeVar

from gpudoctor.backends.cuda_driver import SYSTEM_NOT_READY, CudaStart, cuda_start_findings
from gpudoctor.backends.na import NA, is_na
from gpudoctor.backends.nvml import DRIVER_NOT_ANSWERING, STUCK_S
from gpudoctor.backends.visibility import (cuda_enumerated, match_torch_to_nvml, order_caveat, visible_mig_count,
                                           visible_mig_devices, visible_nvml_indices)
from gpudoctor.backends.cuda_compat import driver_build_findings
from gpudoctor.core import findings
from gpudoctor.core.findings import fabric_not_completed
from gpudoctor.core.model import ProbeResult, Status

from . import Probe, ProbeContext, _wording

if TYPE_CHECKING:
    from gpudoctor.backends.base import DeviceStatic, GpuBackend, MigDeviceReading
    from gpudoctor.backends.catalogue import MigReading
    from gpudoctor.backends.stack import Stack

T = TypeVar("T")


def _na_note(value: object) -> str:
    return value.reason if is_na(value) else ""


def _known(value: T | NA) -> T | None:
    return None if is_na(value) else value


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
    # torch's facts where it imported (None: --quick, not installed, or its import failed)
    torch_facts = facts if not is_na(facts) and facts.get("importable") else None
    torch_devices: list[dict[str, Any]] = list(torch_facts.get("devices") or []) if torch_facts is not None else []
    torch_count = torch_facts.get("device_count") if torch_facts is not None else (
        facts if is_na(facts) else NA("TorchImportFailed"))
    if torch_facts is not None and torch_facts.get("cuda_available") is not True:
        torch_count = 0
    r.measure("torch_device_count", torch_count if isinstance(torch_count, int) else None,
              note=_na_note(torch_count))

    mapping = _torch_to_nvml(r, gpu, torch_devices, nvml_static, visible)
    r.details["cuda_visible_devices"] = cvd
    r.details["cuda_device_order"] = os.environ.get("CUDA_DEVICE_ORDER")

    if not isinstance(count, int) or count == 0:
        nvml_na = count if is_na(count) else None
        return r.settle(_no_device(r, nvml_na, torch_facts or {}, ctx.stack() if nvml_na is not None else NA("")))
    if isinstance(visible, list):
        _visible_devices(r, ctx, torch_facts, torch_count, cvd, visible, count,
                         {n: st.get("mig_mode") for n, st in enumerate(nvml_static)})
    _index_order(r, torch_devices, mapping)

    wanted = [ctx.device] if ctx.device is not None else sorted(mapping) if mapping else list(range(count))
    names = _describe_devices(r, wanted, mapping, torch_devices, nvml_static, gpu)
    shown = ", ".join(sorted(set(names))) if names else "none"
    return r.settle(f"{len(wanted)} device(s): {shown}")


def _torch_to_nvml(r: ProbeResult, gpu: GpuBackend, torch_devices: list[dict[str, Any]],
                   nvml_static: list[DeviceStatic], visible: list[int] | NA) -> dict[int, int | None]:
    """torch index -> NVML index: by PCI bus id where torch listed its devices, else in
    CUDA_VISIBLE_DEVICES' order (a finding says when that order is uncertain)."""
    caveat = ""
    mapping: dict[int, int | None]
    if torch_devices:
        mapping = match_torch_to_nvml(torch_devices, nvml_static)
        r.details["torch_to_nvml_by"] = "pci_bus_id"
    elif isinstance(visible, list):
        mapping = {t: n for t, n in enumerate(visible)}
        r.details["torch_to_nvml_by"] = "cuda_visible_devices_order"
        caveat = order_caveat(gpu, visible)
    else:
        mapping = {}
    r.details["torch_to_nvml"] = {str(k): v for k, v in mapping.items()}
    if caveat:
        r.findings.append(findings.finding("index_order_uncertain", caveat=caveat))
    return mapping


def _visible_devices(r: ProbeResult, ctx: ProbeContext, torch_facts: dict[str, Any] | None, torch_count: object,
                     cvd: str | None, visible: list[int], count: int, mig_modes: dict[int, Any]) -> None:
    """What CUDA_VISIBLE_DEVICES leaves visible, whether the CUDA driver starts on it, and whether
    torch sees as many devices as CUDA enumerates (one MIG device at most: ``mig_modes``)."""
    # CUDA reads CUDA_VISIBLE_DEVICES once, when it starts: torch using more devices than the variable
    # now allows (or the value torch's process started CUDA with differing) means it was changed after.
    # (a replay's facts were read under the recording machine's variable, not this shell's)
    started_with = torch_facts.get("cuda_visible_devices", cvd) if torch_facts is not None and not ctx.replay else cvd
    changed = bool(torch_facts is not None and isinstance(torch_count, int) and torch_count > 0 and (
        started_with != cvd or (cvd is not None and torch_count > len(visible))))
    _visibility(r, cvd, visible, count, changed)
    if cvd is not None and "MIG-" in cvd:
        _visible_mig(r, ctx.gpu)
    # The CUDA driver's own start, asked at every level (no torch), so --quick, the exporter,
    # the TUI header and the full report judge the same fact the same way.
    start = ctx.cuda_start()
    _cuda_start_time(r, start)
    # error 802 on an NVSwitch board: what NVML says of the fabric registration names the cause
    fabric = (fabric_not_completed(ctx.gpu.static(n) for n in visible)
              if visible and isinstance(start, CudaStart) and start.code == SYSTEM_NOT_READY else "")
    # libcuda missing where NVML answers: a container's driver capabilities say why
    stack = ctx.stack() if isinstance(start, CudaStart) and not start.loaded else None
    box = stack.container if stack is not None and not is_na(stack) else None
    driver_failed = cuda_start_findings(start, len(visible), fabric, box) if visible else []
    r.findings.extend(driver_failed)
    if (torch_facts is not None and isinstance(torch_count, int)
            and not any(f.status == Status.FAIL for f in driver_failed)):
        enumerated = cuda_enumerated(visible, mig_modes)
        if enumerated != len(visible):
            r.measure("cuda_enumerates", enumerated,
                      note="CUDA enumerates one MIG device per process, and then no GPU out of MIG mode")
        # one GPU in MIG mode is one enumerated device too, though torch may count each of its MIG devices
        if any(mig_modes.get(n) == 1 for n in visible) and torch_count > enumerated:
            r.findings.append(findings.finding("mig_one_device_per_process", torch_count=torch_count,
                                               mig_gpus=sum(1 for n in visible if mig_modes.get(n) == 1)))
        else:
            _torch_agreement(r, ctx.gpu, torch_facts, torch_count, enumerated, cvd if changed else None)
    _cuda_mig_count(r, ctx.gpu, start, visible, mig_modes)


def _cuda_mig_count(r: ProbeResult, gpu: GpuBackend, start: CudaStart | NA, visible: list[int],
                    mig_modes: dict[int, Any]) -> None:
    """The CUDA start check's device count (cuDeviceGetCount in its child, at every level) against
    the MIG devices NVML shows visible to this process: fewer is CUDA's one-MIG-device rule, said with
    the torch path's finding code (once: the full report's torch count may have said it already).
    Nothing when the child did not answer, CUDA did not start, or no GPU in MIG mode is visible."""
    if not isinstance(start, CudaStart) or not start.started or start.device_count is None:
        return
    shown = visible_mig_count(gpu, visible, mig_modes)
    if is_na(shown):
        return
    r.measure("mig_devices_visible", shown, note="MIG devices NVML shows for CUDA_VISIBLE_DEVICES")
    if shown > start.device_count and not any(f.code == "mig_one_device_per_process" for f in r.findings):
        r.findings.append(findings.finding("mig_one_device_per_process:cuda_count", cuda_count=start.device_count,
                                           mig_devices=shown, mig_gpus=sum(1 for n in visible if mig_modes.get(n) == 1)))


def _cuda_start_time(r: ProbeResult, start: CudaStart | NA) -> None:
    """How long the CUDA driver's start took (cuInit in the child), and what the check cost from
    starting its child to the answer: what the GPU kit records for cuInit on a real node."""
    if isinstance(start, CudaStart):
        if start.init_s is not None:
            r.measure("cuda_init_s", start.init_s, "s", note="cuInit in a child process")
        if start.elapsed_s is not None:
            r.measure("cuda_start_check_s", start.elapsed_s, "s",
                      note="from starting the child to its answer (cuInit, cuDeviceGetCount)")
    elif start.reason == "Timeout":
        r.measure("cuda_init_s", None, "s", note=_wording.CUDA_INIT_NOT_ANSWERED.format(limit=getattr(start, "limit_s", 0)))


def _describe_devices(r: ProbeResult, wanted: list[int], mapping: dict[int, int | None],
                      torch_devices: list[dict[str, Any]], nvml_static: list[DeviceStatic],
                      gpu: GpuBackend | None = None) -> list[str]:
    """Each wanted device's identity (torch's, else NVML's), and the devices torch could not read;
    returns the devices' names."""
    torch_by_index = {d["index"]: d for d in torch_devices}
    names: list[str] = []
    for t_index in wanted:
        n_index = mapping.get(t_index, t_index if not mapping else None)
        s = nvml_static[n_index] if n_index is not None and n_index < len(nvml_static) else {}
        names.append(_describe_device(r, t_index, n_index, torch_by_index.get(t_index, {}), s, gpu))
    for d in torch_devices:
        if d.get("error"):
            r.findings.append(findings.finding("device_properties_failed", device=d["index"], index=d["index"],
                                               error=d["error"]))
    return names


def _no_device(r: ProbeResult, nvml_na: NA | None, facts: dict[str, Any], stack: Stack | NA) -> str:
    """Nothing visible at all: the finding, and the probe's summary."""
    if nvml_na is not None and nvml_na.reason == DRIVER_NOT_ANSWERING:
        # The driver holds NVML: whether a GPU is there cannot be told, and "no GPU" would mislead.
        r.findings.append(findings.finding("driver_not_answering", seconds=f"{STUCK_S:.0f}", where=""))
        return _wording.DEVICES_DRIVER_NOT_ANSWERING
    why_none = _wording.WHY_NONE_NVML.format(reason=nvml_na.reason) if nvml_na is not None else _wording.WHY_NONE_ZERO
    if facts.get("cuda_init_error"):
        why_none += _wording.WHY_NONE_TORCH.format(error=facts["cuda_init_error"])
    # the cause the stack's files name (no NVIDIA device on the bus, a container without its GPUs...)
    from ._stack import nvml_failure

    named = nvml_failure(nvml_na.reason, stack) if nvml_na is not None else None
    if named is not None:
        r.findings.append(findings.finding("no_cuda_device:named", why_none=why_none, named=named.summary))
    else:
        r.findings.append(findings.finding("no_cuda_device", why_none=why_none))
    return _wording.DEVICES_NONE_VISIBLE


def _visibility(r: ProbeResult, cvd: str | None, visible: list[int], count: int, changed: bool = False) -> None:
    """What CUDA_VISIBLE_DEVICES leaves of the GPUs NVML sees (not judged when torch started CUDA
    under another value: ``changed``)."""
    r.measure("visible_to_cuda", len(visible), note=f"CUDA_VISIBLE_DEVICES={cvd!r}" if cvd is not None else "")
    if cvd is None or changed:
        return
    named = len([t for t in cvd.split(",") if t.strip()])
    if len(visible) == 0:
        r.findings.append(findings.finding("cuda_visible_devices_hides_all", cvd=cvd, count=count, last=count - 1))
    elif len(visible) < named and "MIG-" not in cvd:  # a MIG device ends the list: the MIG count check says so
        r.findings.append(findings.finding("cuda_visible_devices_truncated", cvd=cvd, named=named, valid=len(visible),
                                           last=count - 1))


def _visible_mig(r: ProbeResult, gpu: GpuBackend) -> None:
    """The MIG devices CUDA_VISIBLE_DEVICES=MIG-... selects: each one's UUID, with its GPU, GPU and
    compute instance and profile in the note (or why NVML cannot say which they are)."""
    from gpudoctor.core._text import plain_text

    chosen = visible_mig_devices(gpu)
    if is_na(chosen):
        r.measure("visible_mig_device", None, note=chosen.reason)
        return
    for m in chosen:
        profile = plain_text(m.profile, limit=40) if isinstance(m.profile, str) else "?"
        r.measure("visible_mig_device", plain_text(m.uuid, limit=80) if isinstance(m.uuid, str) else None,
                  note=f"GPU {m.parent}, GPU instance {_known(m.gpu_instance_id)}, compute instance "
                       f"{_known(m.compute_instance_id)}, {profile}")


def _torch_agreement(r: ProbeResult, gpu: GpuBackend, facts: dict[str, Any], torch_count: int, visible: int,
                     changed_to: str | None = None) -> None:
    """torch's device count against NVML's (after CUDA_VISIBLE_DEVICES); ``changed_to``: the variable's
    value now, when it was changed after torch's CUDA read it."""
    if torch_count == 0 and visible > 0:
        way, said = _why_torch_sees_none(gpu, facts)
        r.findings.append(findings.finding(way, visible=visible, **said))
    elif torch_count != visible and torch_count > 0 and changed_to is not None:
        r.findings.append(findings.finding("device_count_mismatch:changed", torch_count=torch_count,
                                           changed_to=changed_to, visible=visible))
    elif torch_count != visible and torch_count > 0:
        r.findings.append(findings.finding("device_count_mismatch", torch_count=torch_count, visible=visible))


def _why_torch_sees_none(gpu: GpuBackend, facts: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(the torch_sees_no_gpu way, its fields) for a torch that sees no GPU where NVML sees some."""
    version, cuda_build = facts.get("version") or "", facts.get("cuda_build")
    if facts.get("hip_build") and not cuda_build:
        return "torch_sees_no_gpu:rocm_build", {"version": version}
    if not cuda_build:
        return "torch_sees_no_gpu:cpu_only_build", {"version": version}
    too_old = [f for f in driver_build_findings(gpu.driver_version(), gpu.cuda_driver_version(), version, cuda_build)
                if f.code == "driver_too_old"]
    if too_old:
        words = too_old[0].summary.rstrip(".")
        return "torch_sees_no_gpu:driver_too_old", {"reason": findings.clause(words), "fix": too_old[0].fix}
    error = facts.get("cuda_init_error") or "; ".join(facts.get("cuda_warnings") or [])
    if error:
        return "torch_sees_no_gpu:cuda_error", {"error": error}
    return "torch_sees_no_gpu", {}


def _index_order(r: ProbeResult, torch_devices: list[dict[str, Any]], mapping: dict[int, Any]) -> None:
    order = os.environ.get("CUDA_DEVICE_ORDER")
    if torch_devices and any(t != n for t, n in mapping.items() if n is not None) and order != "PCI_BUS_ID":
        r.findings.append(findings.finding("index_order_differs"))


def _describe_device(r: ProbeResult, dev: int, n_index: int | None, t: dict[str, Any],
                     s: DeviceStatic, gpu: GpuBackend | None = None) -> str:
    """One device's identity from torch (``t``) or NVML (``s``), its MIG mode and loss; returns its name."""
    name = t.get("name") or s.get("name")
    r.measure("name", name if not is_na(name) else None, device=dev, note=_na_note(name))
    r.measure("nvml_index", n_index, device=dev)
    r.measure("uuid", t.get("uuid") or _known(s.get("uuid")), device=dev)
    r.measure("pci_bus_id", t.get("pci_bus_id") or (s.get("pci_bus_id") if isinstance(s.get("pci_bus_id"), str) else None), device=dev)
    r.measure("compute_capability", t.get("compute_capability") or _known(s.get("compute_capability")), device=dev)
    if t.get("sm_count") is not None:
        r.measure("sm_count", t["sm_count"], device=dev)
    r.measure("memory_total", t.get("total_memory_bytes") or _known(s.get("memory_total_bytes")), "B", device=dev)
    if t.get("l2_cache_bytes"):
        r.measure("l2_cache", t["l2_cache_bytes"], "B", device=dev)
    mig = s.get("mig_mode")
    r.measure("mig_mode", None if is_na(mig) or mig is None else ("enabled" if mig else "disabled"),
              device=dev, note=_na_note(mig))
    if mig == 1:
        r.findings.append(findings.finding("mig_enabled", device=dev, gpu=dev, name=f"{name}"))
        if gpu is not None and n_index is not None:
            _mig_slices(r, gpu, dev, n_index)
    identity = [s.get(k) for k in ("name", "uuid", "pci_bus_id", "compute_capability", "memory_total_bytes")]
    if not t and s and all(is_na(v) for v in identity) and not (is_na(name) and name.reason == "GpuIsLost"):
        reasons = sorted({v.reason for v in identity if is_na(v)})
        r.findings.append(findings.finding("device_unreadable", device=dev, gpu=dev, reasons=", ".join(reasons),
                                           as_root=_wording.AND_AS_ROOT if "NoPermission" in reasons else ""))
        return f"unreadable ({', '.join(reasons)})"
    if is_na(name) and name.reason == "GpuIsLost":
        r.findings.append(findings.finding("gpu_lost:devices", device=dev, gpu=dev))
    return str(name)


def _mig_slices(r: ProbeResult, gpu: GpuBackend, dev: int, n_index: int) -> None:
    """The MIG devices of GPU ``dev`` (NVML index ``n_index``): one group of measurements per slice,
    named ``mig<GPU instance>.<compute instance>_...`` (the UUID, the catalogue's MIG readings with a
    ``report`` name, the process count); utilisation (none in MIG mode) and energy (the
    whole GPU's only) are measured as None with a note saying so (never a share of the GPU's)."""
    from gpudoctor.backends import catalogue
    from gpudoctor.core._text import plain_text

    slices = gpu.mig_devices(n_index)
    keys = [reading.key for reading in catalogue.mig_readings()]
    if (not is_na(slices) and gpu.kind == "nvml"
            and any(is_na(value) and value.reason == "Warming" for m in slices for value in map(m.get, keys))):
        # GPM compares two samples: the first read has none before it (its MIG readings are NA
        # Warming). Read again once GPM's minimum interval between samples has passed.
        import time

        from gpudoctor.backends.nvml import GPM_MIN_INTERVAL_S

        time.sleep(GPM_MIN_INTERVAL_S + 0.01)
        slices = gpu.mig_devices(n_index)
    if is_na(slices):
        r.measure("mig_devices", None, device=dev, note=slices.reason)
        return
    r.measure("mig_devices", len(slices), device=dev)
    listed = []
    for m in slices:
        ids = (f"mig{m.gpu_instance_id}.{m.compute_instance_id}"
               if isinstance(m.gpu_instance_id, int) and isinstance(m.compute_instance_id, int) else f"mig_slot{m.slot}")
        uuid = plain_text(m.uuid, limit=80) if isinstance(m.uuid, str) else None
        profile = plain_text(m.profile, limit=40) if isinstance(m.profile, str) else None
        r.measure(f"{ids}_uuid", uuid, device=dev, note=profile or _na_note(m.uuid))
        placed = catalogue.mig_placed("report")  # the catalogue's MIG readings, the processes among them
        for reading in (x for x in placed if x.report[1] < catalogue.MIG_PROCESSES_PLACE):
            _mig_measure(r, reading, m, ids, dev)
        procs = m.processes
        r.measure(f"{ids}_processes", None if is_na(procs) else len(procs), device=dev,
                  note=(procs.reason + (": in MIG mode NVML asks for privileges to list processes (run as root)" if procs.reason == "NoPermission"
                                        else "")) if is_na(procs) else "")
        for reading in (x for x in placed if x.report[1] > catalogue.MIG_PROCESSES_PLACE):
            _mig_measure(r, reading, m, ids, dev)
        listed.append({"gpu_instance_id": _known(m.gpu_instance_id), "compute_instance_id": _known(m.compute_instance_id),
                       "uuid": uuid, "profile": profile, "slot": m.slot})
    r.details.setdefault("mig_devices", {})[str(dev)] = listed


def _mig_measure(r: ProbeResult, reading: MigReading, m: MigDeviceReading, ids: str, dev: int) -> None:
    """One catalogue MIG reading of a MIG device, as ``<ids>_<its report name>`` in its unit; a reading
    NVML gives for the whole GPU only is None with its ``whole_gpu`` words (never a share of the GPU's)."""
    value = m.get(reading.key)
    note = (f"{reading.whole_gpu} ({value.reason} on a MIG device)"
            if reading.whole_gpu and is_na(value) and value.reason in ("NotSupported", "FunctionNotFound")
            else _na_note(value))
    r.measure(f"{ids}_{reading.report[0]}", _known(value), reading.unit, device=dev, note=note)


PROBE = Probe.define(__name__, run, "GPUs seen by NVML and by torch, and how their indices map",
                     level="quick", uses_torch=True, timeout_s=60, order=20, asks_cuda_start=True)
