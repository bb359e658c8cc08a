"""torch's device index against NVML's in the fallbacks (issue "GPU paths a review found wrong",
item 5): `--device 0` with CUDA_VISIBLE_DEVICES=3 is NVML's GPU 3 for the health and events probes
(the events probe judged GPU 0's Xids); the devices probe's match by PCI bus id, where torch ran,
is what the probes after it use; without torch, mixed GPU models without
CUDA_DEVICE_ORDER=PCI_BUS_ID get a caveat; the distributed worker matches by PCI bus id."""

from __future__ import annotations

from types import SimpleNamespace

from gpudoctor.backends import NvmlBackend, NvmlGate
from gpudoctor.backends.events import DeviceEvents, GpuEvent
from gpudoctor.core.model import ProbeResult, Status
from gpudoctor.probes import ProbeContext
from gpudoctor.report.runner import _torch_to_nvml
from support.nvml_fake import FakePynvml

BUS = ["00000000:1B:00.0", "00000000:3D:00.0", "00000000:9A:00.0", "00000000:CA:00.0"]


def _four_gpus(names: list[str] | None = None) -> NvmlBackend:
    fake = FakePynvml(count=4)
    for index, device in enumerate(fake.devices):
        device["nvmlDeviceGetPciInfo"] = SimpleNamespace(busId=BUS[index].encode())
        device["nvmlDeviceGetUUID"] = f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd"
        device["nvmlDeviceGetName"] = (names or ["NVIDIA H100 80GB HBM3"] * 4)[index]
    return NvmlBackend(NvmlGate(fake))


class _Watcher:
    """An event watcher whose NVML GPU 3 reported an Xid 79 and the others nothing."""

    kernel_log_readable = True
    kernel_log_reason = ""

    def snapshot(self, index: int) -> DeviceEvents:
        return DeviceEvents(counts={"xid": 1}, recent=[GpuEvent(1.0, "xid", 79)]) if index == 3 else DeviceEvents()


def test_events_and_health_judge_the_gpu_cuda_visible_devices_names(monkeypatch):
    from gpudoctor.probes import events, health

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    ctx = ProbeContext(_four_gpus(), device=0, level="quick", events=_Watcher())
    judged = events.run(ctx)
    assert judged.status == Status.FAIL and {f.device for f in judged.findings} == {3}, judged.findings
    checked = health.run(ctx)
    assert {m.device for m in checked.measurements} == {3}
    assert checked.details["nvml_to_torch"] == {"3": 0}


def test_the_devices_probes_bus_id_match_is_what_later_probes_use(monkeypatch):
    """torch ran: it matched its device 0 to NVML 2 by PCI bus id (FASTEST_FIRST reordered the
    GPUs); the CUDA_VISIBLE_DEVICES order alone would have said NVML 0."""
    from gpudoctor.probes import events

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    devices = ProbeResult("devices", details={"torch_to_nvml": {"0": 2, "1": 0, "x": 1, "2": True}})
    ctx = ProbeContext(_four_gpus(), device=0, level="standard", events=_Watcher())
    ctx.torch_to_nvml = _torch_to_nvml(devices)
    assert ctx.torch_to_nvml == {0: 2, 1: 0}  # keys that are not indices, values that are not ints: dropped
    assert ctx.nvml_index(0) == 2 and ctx.nvml_index(3) == 3  # unmatched: CUDA_VISIBLE_DEVICES order
    judged = events.run(ctx)
    assert judged.status == Status.PASS and {m.device for m in judged.measurements} == {2}


def test_mixed_gpus_without_pci_bus_order_get_a_caveat_in_quick(monkeypatch):
    from gpudoctor.probes import devices

    mixed = ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L4"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    result = devices.run(ProbeContext(_four_gpus(mixed), level="quick"))
    caveat = next(f for f in result.findings if f.code == "index_order_uncertain")
    assert caveat.status == Status.PASS and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in caveat.fix
    assert result.details["torch_to_nvml_by"] == "cuda_visible_devices_order"
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    ordered = devices.run(ProbeContext(_four_gpus(mixed), level="quick"))
    assert "index_order_uncertain" not in {f.code for f in ordered.findings}
    monkeypatch.delenv("CUDA_DEVICE_ORDER")
    same = devices.run(ProbeContext(_four_gpus(), level="quick"))  # one model: the order is certain
    assert "index_order_uncertain" not in {f.code for f in same.findings}


def test_the_distributed_worker_matches_torchs_devices_by_bus_id(monkeypatch):
    """torch sees two GPUs, NVML's 3 and 1 (in that order): NVLink is asked of those, not of 0 and 1."""
    from gpudoctor import backends
    from gpudoctor.probes import _distributed_worker as worker

    gpu = _four_gpus()
    asked: list[int] = []
    monkeypatch.setattr(gpu, "nvlink", lambda index: asked.append(index) or [])
    monkeypatch.setattr(gpu, "close", lambda: None)
    monkeypatch.setattr(backends, "NvmlBackend", lambda: gpu)
    monkeypatch.setattr(worker, "dataparallel_smoke", lambda torch, count: {"devices": count})
    monkeypatch.setattr(worker, "dataparallel_blocker", lambda gpu, indices, ranks: None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    order = [3, 1]

    def props(index: int) -> SimpleNamespace:
        bus = int(BUS[order[index]].split(":")[1], 16)
        return SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132,
                               total_memory=80 << 30, pci_domain_id=0, pci_bus_id=bus, pci_device_id=0,
                               uuid=None)

    cuda = SimpleNamespace(is_available=lambda: True, device_count=lambda: 2, get_device_name=lambda i: "H100",
                           can_device_access_peer=lambda i, j: True, get_device_properties=props)
    info = worker.node_checks(SimpleNamespace(cuda=cuda))
    assert asked == [3, 1], info
    assert info["nvml_bus_ids"] == ["0000:ca:00.0", "0000:3d:00.0"]
