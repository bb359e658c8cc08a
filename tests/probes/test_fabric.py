"""The NVLink fabric registration on NVSwitch boards (nvmlDeviceGetGpuFabricInfoV): read through
the NVML gate, judged in the health probe, and joined with CUDA's error 802 in the devices and
environment probes, so the quick report, the exporter and the TUI header (which all take the
quick report's verdict) name the fabric manager as the cause.

No GPU here: the readings come from the fake pynvml (tests/support/nvml_fake.py) and, end to end, from
benchmarks/fake_nvml (the real nvidia-ml-py over a fake libnvidia-ml, ctypes structures and all).
Not yet measured on a GPU with NVSwitch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.core import exitcodes, findings
from gpudoctor.backends import NvmlBackend, NvmlGate
from gpudoctor.backends.cuda_driver import CudaStart, cause_of_error_text, cuda_start_findings
from gpudoctor.backends.na import NA, is_na
from gpudoctor.backends.nvml import FABRIC_KEYS
from gpudoctor.backends.replay import ReplayBackend
from gpudoctor.core.model import ProbeResult, Status
from gpudoctor.probes import ProbeContext
from support.nvml_fake import FakePynvml, fabric, nvml_error
from support.prom_support import assert_exporter_report_fails
from support.tui_support import assert_tui_header_fails

ROOT = Path(__file__).resolve().parents[2]
FAKE_NVML = ROOT / "benchmarks" / "fake_nvml"
# A healthy health mask: every field at its FALSE value (2), configuration "none" (1 << 8).
HEALTHY = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8


def _backend(**device0: object) -> NvmlBackend:
    nvml = FakePynvml(2, readings={"nvmlDeviceGetName": "NVIDIA H100 80GB HBM3"})
    nvml.devices[0].update(device0)
    return NvmlBackend(NvmlGate(nvml))


# --------------------------------------------------------------------------- the reading
def test_the_fabric_is_read_with_the_v3_structure_through_the_gate():
    gpu = _backend(nvmlDeviceGetGpuFabricInfoV=fabric(3, clique=32766, cluster=bytes(range(1, 17)),
                                                      health_mask=HEALTHY, health_summary=1))
    found = gpu.fabric(0)
    assert found == {"fabric_state": 3, "fabric_status": "Success", "fabric_clique_id": 32766,
                     "fabric_cluster_uuid": "01020304-0506-0708-090a-0b0c0d0e0f10",
                     "fabric_health_mask": HEALTHY, "fabric_health_summary": 1}
    static = gpu.static(0)
    assert {k: static[k] for k in FABRIC_KEYS} == found  # part of the device's static facts


def test_an_older_driver_falls_back_to_v2_then_to_the_first_call():
    v2_only = [0]

    def versioned(info):
        v2_only[0] += 1
        if "healthSummary" in info.FIELDS:
            raise nvml_error("ArgumentVersionMismatch")()
        return fabric(2)(info)

    found = _backend(nvmlDeviceGetGpuFabricInfoV=versioned).fabric(0)
    assert found["fabric_state"] == 2 and found["fabric_health_mask"] == 0 and v2_only[0] == 2
    assert is_na(found["fabric_health_summary"])  # the v2 structure has none
    old = _backend(nvmlDeviceGetGpuFabricInfoV=nvml_error("FunctionNotFound"),
                   nvmlDeviceGetGpuFabricInfo=fabric(1)).fabric(0)
    assert old["fabric_state"] == 1 and is_na(old["fabric_health_mask"])


def test_a_pcie_board_answers_not_supported_and_gets_no_finding():
    gpu = _backend()  # the fake answers NotSupported for what a device lacks
    assert gpu.fabric(0) == {k: NA("NotSupported") for k in FABRIC_KEYS}
    assert findings.fabric_findings(gpu.static(0)) == []
    r = ProbeResult("health")
    from gpudoctor.probes import health

    health.check_device(r, 0, gpu.static(0), gpu.sample(0))
    assert not [f for f in r.findings if f.code.startswith("fabric")]
    assert "fabric_state" not in {m.name for m in r.measurements}


def test_a_lost_gpu_is_na_not_an_exception():
    nvml = FakePynvml(1)
    nvml.lost = {0}
    assert NvmlBackend(NvmlGate(nvml)).fabric(0)["fabric_state"] == NA("GpuIsLost")


# --------------------------------------------------------------------------- the judgement
@pytest.mark.parametrize("state, code, words", [
    (1, "fabric_not_ready", "has not started"),
    (2, "fabric_not_ready", "in progress"),
])
def test_an_unregistered_gpu_fails_with_the_fabric_manager_fix(state, code, words):
    [f] = findings.fabric_findings({"fabric_state": state, "fabric_status": "Success"}, label="GPU 0", device=0)
    assert (f.status, f.code, f.device) == (Status.FAIL, code, 0)
    assert words in f.summary and "nvidia-fabricmanager" in f.fix and "version must match" in f.fix
    assert "802" in f.why


def test_a_registration_that_completed_with_an_error_fails():
    [f] = findings.fabric_findings({"fabric_state": 3, "fabric_status": "Unknown"}, label="GPU 3")
    assert (f.status, f.code) == (Status.FAIL, "fabric_failed") and "(Unknown)" in f.summary


def test_a_healthy_registration_is_no_finding_and_degraded_health_warns():
    assert findings.fabric_findings({"fabric_state": 3, "fabric_status": "Success",
                                     "fabric_health_mask": HEALTHY, "fabric_health_summary": 1}) == []
    degraded = HEALTHY & ~0x3 | 1  # DEGRADED_BW_TRUE
    [f] = findings.fabric_findings({"fabric_state": 3, "fabric_status": "Success", "fabric_health_mask": degraded},
                                   label="GPU 1")
    assert (f.status, f.code) == (Status.WARN, "fabric_degraded") and "degraded bandwidth" in f.summary
    assert findings.fabric_findings({"fabric_state": 0}) == []  # not supported
    assert findings.fabric_findings({"fabric_state": NA("NotSupported")}) == []


def test_the_health_mask_is_decoded_field_by_field():
    assert findings.fabric_health_problems(HEALTHY, 1) == []
    assert findings.fabric_health_problems(0, 0) == []  # every field "not supported"
    assert findings.fabric_health_problems(1 << 2 | 1 << 4 | 1 << 6) == [
        "route recovery in progress", "an unhealthy route", "access timeout recovery in progress"]
    assert findings.fabric_health_problems(5 << 8) == ["an incorrect configuration (insufficient NVLinks)"]
    assert findings.fabric_health_problems(2 << 14, 3) == ["the global fabric manager disconnected",
                                                           "limited capacity (health summary)"]
    assert findings.fabric_health_problems(NA("NotInStructure"), NA("NotInStructure")) == []


def test_the_health_probe_judges_the_fabric_and_measures_its_state():
    gpu = _backend(nvmlDeviceGetGpuFabricInfoV=fabric(1))
    r = ProbeResult("health")
    from gpudoctor.probes import health

    health.check_device(r, 0, gpu.static(0), gpu.sample(0))
    r.settle()
    assert r.status == Status.FAIL
    assert [f.code for f in r.findings if f.status == Status.FAIL] == ["fabric_not_ready"]
    assert {m.name: m.value for m in r.measurements}["fabric_state"] == "not started"


# --------------------------------------------------------------------------- one verdict with CUDA's 802
def test_cuinit_802_names_the_unfinished_fabric_as_its_cause():
    fabric_words = findings.fabric_not_completed([{"index": 0, "fabric_state": 1}, {"index": 1, "fabric_state": 3,
                                                                                    "fabric_status": "Success"}])
    assert fabric_words == "NVML shows the NVLink fabric registration unfinished (GPU 0: not started)"
    [f] = cuda_start_findings(CudaStart(loaded=True, code=802, name="CUDA_ERROR_SYSTEM_NOT_READY"), 2, fabric_words)
    assert f.code == "cuda_cannot_start" and "GPU 0: not started" in f.summary and "fabric manager" in f.summary
    # without NVML's word (an A100 board answers NotSupported) the cause stays the general one
    [plain] = cuda_start_findings(CudaStart(loaded=True, code=802, name="CUDA_ERROR_SYSTEM_NOT_READY"), 2)
    assert "NVML shows" not in plain.summary and "fabric manager is not running" in plain.summary
    # the fabric's words are only for 802
    [other] = cuda_start_findings(CudaStart(loaded=True, code=803, name="X"), 2, fabric_words)
    assert "NVML shows" not in other.summary
    assert findings.fabric_not_completed([{"index": 0, "fabric_state": 3, "fabric_status": "Success"}]) == ""
    cause, _fix = cause_of_error_text("Error 802: system not yet initialized", fabric_words)
    assert "GPU 0: not started" in cause


def _devices(gpu: NvmlBackend, start: CudaStart) -> ProbeResult:
    from gpudoctor.probes import devices

    return devices.run(ProbeContext(gpu, level="quick", _cuda_start=start))


def test_the_devices_probe_joins_802_with_the_fabric_state(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    start = CudaStart(loaded=True, code=802, name="CUDA_ERROR_SYSTEM_NOT_READY")
    r = _devices(_backend(nvmlDeviceGetGpuFabricInfoV=fabric(2)), start)
    [f] = [f for f in r.findings if f.code == "cuda_cannot_start"]
    assert f.status == Status.FAIL and "GPU 0: in progress" in f.summary
    r = _devices(_backend(), start)  # no fabric on these boards: the general cause
    [f] = [f for f in r.findings if f.code == "cuda_cannot_start"]
    assert "NVML shows" not in f.summary


def test_torchs_802_text_in_the_environment_probe_names_the_fabric_too():
    from gpudoctor.probes import environment

    facts = {"importable": True, "version": "2.5.1+cu124", "cuda_build": "12.4", "hip_build": None,
             "cuda_available": False, "device_count": 0, "arch_list": [], "devices": [], "cuda_warnings": [],
             "cuda_init_error": "CUDA unknown error? Error 802: system not yet initialized",
             "cudnn_available": False, "torchvision": {"installed": False}}
    ctx = ProbeContext(_backend(nvmlDeviceGetGpuFabricInfoV=fabric(1)), _torch_facts=facts,
                       _host_facts={"python": "3.12"}, _cuda_start=NA("NotRecorded"), _extensions=NA("NotPosted"))
    r = environment.run(ctx)
    [f] = [f for f in r.findings if f.code == "cuda_init_failed"]
    assert "GPU 0: not started" in f.summary and "nvidia-fabricmanager" in f.fix


# --------------------------------------------------------------------------- replay
def test_a_recording_keeps_the_fabric_and_a_replay_judges_it_the_same(tmp_path):
    from gpudoctor.backends.recording import load_recording
    from gpudoctor.probes import health

    live = _backend(nvmlDeviceGetGpuFabricInfoV=fabric(3, status=999, health_mask=HEALTHY))
    base = json.loads((ROOT / "tests" / "data" / "handmade_two_gpu_training_standin.json").read_text())
    base["nvml"]["static"][0].update(live.fabric(0))
    path = tmp_path / "fabric.json"
    path.write_text(json.dumps(base))
    replay = ReplayBackend(load_recording(path))  # the schema takes the fabric's fields
    r = ProbeResult("health")
    health.check_device(r, 0, replay.static(0), replay.sample(0))
    assert "fabric_failed" in {f.code for f in r.findings}


# --------------------------------------------------------------------------- end to end
def _report(fabric_state: str, cuda_init: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_", "PYTEST"))}
    env.update(PYTHONPATH=str(FAKE_NVML), FAKE_NVML_FABRIC=fabric_state, FAKE_CUDA_INIT=cuda_init)
    return subprocess.run([sys.executable, "-m", "gpudoctor", "report", "--quick", "--json"], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=240)


def test_quick_report_on_an_hgx_board_without_the_fabric_manager():
    """The real nvidia-ml-py wrapper and ctypes structure, over the fake libnvidia-ml: fabric not
    started and cuInit 802 give one verdict, the 802 naming the fabric as its cause."""
    proc = _report("not_started", "802")
    assert proc.returncode == exitcodes.FAIL, proc.stderr[-2000:]
    document = json.loads(proc.stdout)
    by_probe = {r["probe"]: r for r in document["results"]}
    [start] = [f for f in by_probe["devices"]["findings"] if f["code"] == "cuda_cannot_start"]
    assert "GPU 0: not started" in start["summary"]
    assert {f["code"]: f["status"] for f in by_probe["health"]["findings"]}.get("fabric_not_ready") == "fail"


def test_quick_report_on_a_registered_hgx_board_passes():
    proc = _report("completed", "0")
    assert proc.returncode == exitcodes.OK, proc.stdout[-2000:]
    health = next(r for r in json.loads(proc.stdout)["results"] if r["probe"] == "health")
    assert not [f for f in health["findings"] if f["code"].startswith("fabric")]


def _fabric_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_", "PYTEST"))}
    env.update(PYTHONPATH=str(FAKE_NVML), FAKE_NVML_FABRIC="not_started", FAKE_CUDA_INIT="802")
    return env


def test_the_exporter_publishes_the_fabric_verdict():
    assert_exporter_report_fails(_fabric_env(), ROOT)


@pytest.mark.timeout(120)
def test_the_tui_header_names_the_fabric():
    assert_tui_header_fails(_fabric_env(), cols=200)
