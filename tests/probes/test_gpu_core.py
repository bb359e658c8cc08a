"""Real-GPU checks of the foundation (marked `gpu`; they skip cleanly without CUDA)."""

from __future__ import annotations

import json

import pytest

from conftest import cuda_available
from gpudoctor.core import exitcodes

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")]


def test_devices_agree_between_nvml_and_torch(cli, validate_report):
    out = cli("report", "--json", "--probe", "devices", "--probe", "environment")
    data = validate_report(json.loads(out.stdout))
    devices = next(r for r in data["results"] if r["probe"] == "devices")
    assert devices["status"] in ("pass", "warn"), devices["findings"]
    counts = {m["name"]: m["value"] for m in devices["measurements"] if m.get("device") is None}
    assert counts["torch_device_count"] == counts["visible_to_cuda"] >= 1
    # every torch device was matched to an NVML device by PCI bus id
    assert all(v is not None for v in devices["details"]["torch_to_nvml"].values())
    env = next(r for r in data["results"] if r["probe"] == "environment")
    assert not [f for f in env["findings"] if f["code"] in ("driver_too_old", "no_kernel_image", "cuda_init_failed")]


def test_health_reads_real_sensors(cli, validate_report):
    out = cli("report", "--json", "--quick", "--probe", "health")
    data = validate_report(json.loads(out.stdout))
    health = data["results"][0]
    temps = [m for m in health["measurements"] if m["name"] == "temperature"]
    assert temps and all(isinstance(m["value"], (int, float)) and 0 < m["value"] < 120 for m in temps)


def test_device_index_past_the_last_gpu_is_a_usage_error(cli):
    import torch

    n = torch.cuda.device_count()
    out = cli("report", "--device", str(n))
    assert out.returncode == exitcodes.USAGE and "out of range" in out.stderr


def test_record_captures_the_real_device(cli, tmp_path):
    rec = tmp_path / "rec.json"
    assert cli("record", "-o", str(rec), "--seconds", "1").returncode == 0
    data = json.loads(rec.read_text())
    assert data["nvml"]["device_count"] >= 1 and data["meta"]["device_names"][0]
    assert data["torch"]["cuda_available"] is True
