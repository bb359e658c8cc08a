"""environment, devices and health probes on replayed scenarios and on this machine for real."""

from __future__ import annotations

import pytest

from gpudoctor.report import runner
from gpudoctor.core.model import ProbeResult, Status
from support.probes_under_test import codes, run_probe


# ---------------------------------------------------------------- environment rules
def test_kernel_image_rules():
    from gpudoctor.probes.environment import kernel_image_available as ok

    cu13 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert ok(cu13, "9.0") and ok(cu13, "8.9")        # sm_86 binary runs on 8.9
    assert ok(cu13, "7.0") is False                    # V100 on a CUDA 13 build
    assert ok(["sm_80", "compute_80"], "9.0")          # PTX JITs forward
    assert ok(["sm_90a"], "9.0") and ok(["sm_90a"], "10.0") is False
    assert ok([], "9.0") is None


def test_torchvision_pairs():
    from gpudoctor.probes.environment import expected_torchvision, torch_for_torchvision

    assert expected_torchvision("2.13.0+cpu") == "0.28"
    assert expected_torchvision("2.14.1") == "0.29"
    assert torch_for_torchvision("0.29.2+cu132") == "2.14"
    assert expected_torchvision("1.13.1") == "0.14"  # torch 1.x pairs are known (pytorch/vision table)


# ---------------------------------------------------------------- replayed scenarios
def test_driver_too_old_and_no_kernel_image(data_dir):
    result = run_probe("environment", data_dir / "handmade_driver_too_old.json")
    assert result.status == Status.FAIL
    assert {"driver_too_old", "no_kernel_image"} <= codes(result)
    too_old = next(f for f in result.findings if f.code == "driver_too_old")
    assert "580.65.06" in too_old.fix and "12.4" in too_old.summary and "13.2" in too_old.summary


def test_torchvision_mismatch_is_named_with_its_fix(data_dir):
    result = run_probe("environment", data_dir / "handmade_torchvision_mismatch.json")
    finding = next(f for f in result.findings if f.code == "torchvision_mismatch")
    assert finding.status == Status.FAIL
    assert "torchvision::nms does not exist" in finding.summary
    assert "torch==2.13.0" in finding.fix and "torchvision==0.28" in finding.fix
    assert "torch_cpu_only_build" in codes(result) and "nvidia_driver_unavailable" in codes(result)


def test_newer_minor_cuda_build_is_a_pass_once_cuda_started(data_dir):
    # the recording's torch started CUDA on the H100 (13.2 build, 13.0 driver): minor-version
    # compatibility ran it, so the finding passes and says so (it warned before CUDA's start was read)
    result = run_probe("environment", data_dir / "handmade_gpu_lost.json")
    assert codes(result) == {"driver_older_than_build"} and result.status == Status.PASS
    assert "CUDA started anyway" in result.findings[0].summary


def test_gpu_lost_mid_report(data_dir):
    devices = run_probe("devices", data_dir / "handmade_gpu_lost.json")
    health = run_probe("health", data_dir / "handmade_gpu_lost.json")
    assert devices.status == Status.PASS  # static facts were read before the loss
    assert health.status == Status.FAIL and codes(health) == {"gpu_lost"}


def _devices_with_torch(data_dir, monkeypatch, **facts) -> ProbeResult:
    """The devices probe on the two-GPU recording, with torch facts as given (torch importable)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    spec = runner.RunSpec(level="standard", replay=str(data_dir / "handmade_two_gpu_training_standin.json"))
    ctx = runner.build_context(spec)
    ctx._torch_facts = {"importable": True, "devices": [], **facts}
    return runner.call_probe(runner.all_probes()["devices"], ctx)


def test_devices_fails_when_torch_sees_no_gpu_because_the_driver_is_too_old(data_dir):
    result = run_probe("devices", data_dir / "handmade_driver_too_old.json")
    assert result.status == Status.FAIL and codes(result) == {"torch_sees_no_gpu"}
    finding = result.findings[0]
    assert finding.summary.startswith("NVML sees 1 GPU(s) but torch sees none: the driver (550.54.15)")
    assert "CUDA 13.2" in finding.summary and "580.65.06" in finding.fix


def test_devices_fails_when_torch_is_a_cpu_only_build(data_dir, monkeypatch):
    result = _devices_with_torch(data_dir, monkeypatch, version="2.15.0+cpu", cuda_build=None,
                                 cuda_available=False, device_count=0)
    assert result.status == Status.FAIL and codes(result) == {"torch_sees_no_gpu"}
    finding = result.findings[0]
    assert "NVML sees 2 GPU(s) but torch sees none: torch 2.15.0+cpu is a CPU-only build" in finding.summary
    assert "Install a CUDA build" in finding.fix


def test_devices_names_torchs_cuda_error_when_torch_sees_no_gpu(data_dir, monkeypatch):
    error = "RuntimeError: No CUDA GPUs are available"
    result = _devices_with_torch(data_dir, monkeypatch, version="2.15.0+cu128", cuda_build="12.8",
                                 cuda_available=False, device_count=0, cuda_init_error=error)
    finding = next(f for f in result.findings if f.code == "torch_sees_no_gpu")
    assert finding.status == Status.FAIL and f"torch cannot start CUDA ({error})" in finding.summary
    assert "CUDA_VISIBLE_DEVICES" in finding.fix


def test_devices_passes_when_torch_and_nvml_agree(data_dir, monkeypatch):
    result = _devices_with_torch(data_dir, monkeypatch, version="2.15.0+cu128", cuda_build="12.8",
                                 cuda_available=True, device_count=2)
    assert result.status == Status.PASS and "torch_sees_no_gpu" not in codes(result)
    assert {m.name: m.value for m in result.measurements}["torch_device_count"] == 2


def test_notsupported_fields_are_normal(data_dir):
    health = run_probe("health", data_dir / "handmade_consumer_notsupported.json")
    assert health.status == Status.PASS
    fan = [m for m in health.measurements if m.name == "fan_speed"][0]
    ecc = [m for m in health.measurements if m.name == "ecc_volatile_uncorrected"][0]
    assert fan.value == 30 and ecc.value is None and ecc.note == "NotSupported"
    # idle link downshift is reported as normal, not as a problem
    assert "pcie_gen_idle_downshift" in codes(health)


def test_hardware_faults(data_dir):
    health = run_probe("health", data_dir / "handmade_hardware_faults.json")
    found = {f.code: f.status for f in health.findings}
    assert found["temperature_critical"] == Status.FAIL
    assert found["throttle_hw_slowdown"] == Status.FAIL
    assert found["throttle_sw_power_cap"] == Status.PASS
    assert found["ecc_uncorrected_volatile"] == Status.FAIL
    assert found["row_remap_pending"] == Status.WARN
    assert found["pcie_width_degraded"] == Status.WARN
    assert "pcie_gen_degraded" not in found  # gen 5 of 5 under load


# ---------------------------------------------------------------- health rules, one at a time
def _health(static, sample):
    from gpudoctor.probes.health import check_device

    r = ProbeResult("health")
    check_device(r, 0, static, sample)
    return {f.code: f.status for f in r.findings}


BASE_STATIC = {"name": "GPU", "temperature_slowdown_c": 87, "temperature_shutdown_c": 92, "pcie_gen_max": 4,
               "pcie_width_max": 16, "power_limit_w": 300.0, "power_default_limit_w": 300.0, "ecc_mode": 1}
BASE_SAMPLE = {"gpu_util_pct": 90, "temperature_c": 60, "throttle_reasons": 0, "pcie_gen_current": 4,
               "pcie_width_current": 16, "power_w": 200.0, "persistence_mode": 1, "compute_mode": 0}


@pytest.mark.parametrize("static_over, sample_over, code, status", [
    ({}, {"temperature_c": 87}, "temperature_slowdown", Status.WARN),
    ({}, {"pcie_gen_current": 2}, "pcie_gen_degraded", Status.WARN),
    ({}, {"pcie_gen_current": 1, "gpu_util_pct": 0, "throttle_reasons": 1}, "pcie_gen_idle_downshift", Status.PASS),
    ({}, {"throttle_reasons": 0x20}, "throttle_sw_thermal_slowdown", Status.WARN),
    ({}, {"throttle_reasons": 0x80}, "throttle_hw_power_brake", Status.FAIL),
    ({}, {"ecc_aggregate_uncorrected": 3}, "ecc_uncorrected_aggregate", Status.WARN),
    ({}, {"ecc_volatile_corrected": 5}, "ecc_corrected", Status.PASS),
    ({}, {"retired_pages_sbe": 40, "retired_pages_dbe": 25}, "retired_pages_limit", Status.FAIL),
    ({}, {"retired_pages_sbe": 1, "retired_pages_dbe": 0, "retired_pages_pending": 1}, "retired_pages_pending", Status.WARN),
    ({}, {"remapped_rows_uncorrectable": 0, "remapped_rows_failure": True}, "row_remap_failure", Status.FAIL),
    ({}, {"compute_mode": 2}, "compute_prohibited", Status.FAIL),
    ({}, {"persistence_mode": 0}, "persistence_off", Status.PASS),
    ({"power_limit_w": 200.0}, {"power_limit_w": 200.0}, "power_limit_lowered", Status.WARN),
])
def test_health_rule(static_over, sample_over, code, status):
    found = _health({**BASE_STATIC, **static_over}, {**BASE_SAMPLE, **sample_over})
    assert found.get(code) == status, found


def test_healthy_busy_gpu_has_no_findings():
    assert _health(BASE_STATIC, BASE_SAMPLE) == {}


# ---------------------------------------------------------------- this machine, for real
def test_live_report_on_this_machine_is_complete_and_valid():
    report = runner.run_probes(runner.select_probes(level="standard"), runner.RunSpec())
    assert [r.probe for r in report.results][:3] == ["environment", "devices", "health"]
    assert all(r.status != Status.ERROR for r in report.results), [r.summary for r in report.results]
    env = report.result("environment")
    torch_version = next(m.value for m in env.measurements if m.name == "torch")
    import torch

    assert torch_version == torch.__version__
    if not torch.cuda.is_available():
        assert report.result("devices").status == Status.FAIL
        assert "no_cuda_device" in codes(report.result("devices"))
    report.to_dict()


def test_clock_event_bits_by_name_are_nvml_h_values():
    from gpudoctor.probes._clock_events import GPU_IDLE, HEAT_OR_HW, HW_PROTECTION, SW_POWER_CAP, SW_THERMAL_SLOWDOWN

    # nvml.h: GpuIdle 0x1, SwPowerCap 0x4, HwSlowdown 0x8, SwThermalSlowdown 0x20,
    # HwThermalSlowdown 0x40, HwPowerBrakeSlowdown 0x80
    assert (GPU_IDLE, SW_POWER_CAP, SW_THERMAL_SLOWDOWN) == (0x1, 0x4, 0x20)
    assert HW_PROTECTION == 0x8 | 0x40 | 0x80 and HEAT_OR_HW == 0x8 | 0x20 | 0x40 | 0x80


@pytest.mark.parametrize("reason", ["NoDevices", "LibraryNotFound", "DriverNotLoaded", "NoPermission",
                                    "PythonBindingMissing", "InsufficientSize", "SomethingNew"])
def test_nvml_unusable_is_a_failed_driver_for_every_reason(data_dir, tmp_path, reason):
    """NVML could not start: the environment probe fails with nvidia_driver_unavailable whatever the
    reason, NoDevices included (its nvml_no_gpu words are the live views' own, a skip)."""
    import json

    data = json.loads((data_dir / "handmade_no_nvml.json").read_text(encoding="utf-8"))
    data["nvml"]["status"] = {"__na__": reason}
    recording = tmp_path / f"no_nvml_{reason}.json"
    recording.write_text(json.dumps(data), encoding="utf-8")
    result = run_probe("environment", recording)
    [found] = [f for f in result.findings if f.code == "nvidia_driver_unavailable"]
    assert found.status == Status.FAIL and result.status == Status.FAIL, (found, result.status)
    assert found.fix
