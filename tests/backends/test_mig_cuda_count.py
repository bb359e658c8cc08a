"""One process, one MIG device, told without torch (issue #34): the CUDA start check's child counts
devices (cuDeviceGetCount) at every level, and that count against the MIG devices NVML shows visible to
this process gives the torch path's finding code, `mig_one_device_per_process`, in `report --quick`,
the exporter's quick report and the TUI's Doctor. The fake NVML's H100 in MIG mode has two 3g.40gb
slices; the CUDA start check answers as the conftest's stand-in (one device) unless a test sets it.
Not yet measured on a GPU with real MIG slices."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpudoctor.core import exitcodes, findings
from gpudoctor.backends import NA, NvmlBackend, NvmlGate, is_na
from gpudoctor.backends import cuda_driver
from gpudoctor.backends.cuda_driver import CudaStart, CudaTimeout
from gpudoctor.backends.visibility import visible_mig_count
from gpudoctor.cli import main
from support.nvml_fake import FakePynvml, h100_mig
from support.tui_support import ROOT, run_async

pytestmark = pytest.mark.timeout(120)

FIRST = "MIG-00000001-5c1e-5b0e-9a39-012345678900"
SECOND = "MIG-00000002-5c1e-5b0e-9a39-012345678900"
CODE = "mig_one_device_per_process"


def _devices_findings(document: dict) -> dict[str, dict]:
    devices = next(r for r in document["results"] if r["probe"] == "devices")
    return {f["code"]: f for f in devices["findings"]}


def _quick_json(monkeypatch, capsys, readings=None) -> dict:
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(readings=h100_mig() if readings is None else readings))
    assert main(["report", "--quick", "--json"]) in (exitcodes.OK, exitcodes.WARN)
    return json.loads(capsys.readouterr().out)


@pytest.fixture(autouse=True)
def _no_cuda_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_nvml_counts_the_mig_devices_cuda_visible_devices_leaves_this_process():
    backend = NvmlBackend(NvmlGate(FakePynvml(readings=h100_mig())))
    on = {0: 1}
    assert visible_mig_count(backend, [0], on, {}) == 2  # unset: every MIG device
    assert visible_mig_count(backend, [0], on, {"CUDA_VISIBLE_DEVICES": "0"}) == 2  # the GPU: its devices
    assert visible_mig_count(backend, [0], on, {"CUDA_VISIBLE_DEVICES": f"{FIRST},{SECOND}"}) == 2
    assert visible_mig_count(backend, [0], on, {"CUDA_VISIBLE_DEVICES": f"{FIRST},MIG-00000002"}) == 2  # a prefix
    assert visible_mig_count(backend, [0], on, {"CUDA_VISIBLE_DEVICES": FIRST}) == 1
    assert visible_mig_count(backend, [0], on, {"CUDA_VISIBLE_DEVICES": f"{FIRST},{FIRST}"}) == 1  # a repeat
    assert visible_mig_count(backend, [0], on, {"CUDA_VISIBLE_DEVICES": f"{FIRST},bogus,{SECOND}"}) == 1  # CUDA stops
    backend.close()
    plain = NvmlBackend(NvmlGate(FakePynvml()))
    assert visible_mig_count(plain, [0], {0: 0}, {}) == NA("NoMigGpu")  # nothing read without a GPU in MIG mode
    plain.close()


def test_quick_json_says_two_mig_devices_give_cuda_one(monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{FIRST},{SECOND}")
    found = _devices_findings(_quick_json(monkeypatch, capsys))
    assert found[CODE]["status"] == "warn"
    summary, why, fix = findings.words(f"{CODE}:cuda_count", cuda_count=1, mig_devices=2, mig_gpus=1)
    assert (found[CODE]["summary"], found[CODE]["why"], found[CODE]["fix"]) == (summary, why, fix)
    assert "CUDA counts 1 device(s) where NVML shows 2 MIG devices" in summary
    # the why and fix are the torch path's, from the one table
    assert (why, fix) == findings.words(CODE, torch_count=2, mig_gpus=1)[1:]
    assert "device_count_mismatch" not in found and "cuda_visible_devices_truncated" not in found


def test_the_same_with_cuda_visible_devices_unset(monkeypatch, capsys):
    assert CODE in _devices_findings(_quick_json(monkeypatch, capsys))


def test_one_mig_device_visible_is_no_finding(monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", FIRST)
    document = _quick_json(monkeypatch, capsys)
    assert CODE not in _devices_findings(document)
    devices = next(r for r in document["results"] if r["probe"] == "devices")
    assert {m["name"]: m["value"] for m in devices["measurements"]}["mig_devices_visible"] == 1


def test_gpus_out_of_mig_mode_are_no_finding(monkeypatch, capsys):
    document = _quick_json(monkeypatch, capsys, readings={})
    assert CODE not in _devices_findings(document)
    devices = next(r for r in document["results"] if r["probe"] == "devices")
    assert "mig_devices_visible" not in {m["name"] for m in devices["measurements"]}


def test_cuda_counting_both_mig_devices_is_no_finding(monkeypatch, capsys):
    """Newer drivers have been seen to enumerate more than one MIG device: the count says so."""
    monkeypatch.setattr(cuda_driver, "cuda_start", lambda timeout_s=5.0: CudaStart(loaded=True, code=0, device_count=2))
    assert CODE not in _devices_findings(_quick_json(monkeypatch, capsys))


@pytest.mark.parametrize("answer", [CudaTimeout(5.0), NA("ChildFailed"), NA("BadAnswer"),
                                    CudaStart(loaded=True, code=999, name="CUDA_ERROR_UNKNOWN"),
                                    CudaStart(loaded=False, error="libcuda.so.1: cannot open shared object file")],
                         ids=["hung", "crashed", "unreadable", "cuinit-failed", "no-libcuda"])
def test_no_mig_claim_without_a_count_from_cuda(monkeypatch, capsys, answer):
    monkeypatch.setattr(cuda_driver, "cuda_start", lambda timeout_s=5.0: answer)
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(readings=h100_mig()))
    main(["report", "--quick", "--json"])
    found = _devices_findings(json.loads(capsys.readouterr().out))
    assert CODE not in found
    assert found.keys() & {"cuda_start_hung", "cuda_start_crashed", "cuda_cannot_start"} or is_na(answer)


def test_the_full_report_says_it_once(monkeypatch, tmp_path):
    """With torch's count the torch path says it; the CUDA count does not add a second one."""
    from support.realworld import run_devices

    inputs = {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "mig_mode": 1}],
              "mig_devices": {"0": [{"uuid": FIRST}, {"uuid": SECOND}]},
              "cuda_start": {"loaded": True, "code": 0, "device_count": 1},
              "torch": {"version": "2.14.0", "cuda_build": "13.0", "cuda_available": True, "device_count": 2}}
    result = run_devices(inputs, monkeypatch, tmp_path)
    [said] = [f for f in result.findings if f.code == CODE]
    assert said.summary.startswith("torch counts 2 device(s)")


def test_the_exporters_quick_report_says_it(monkeypatch):
    from gpudoctor.exporter import GpudoctorCollector, GpuSampler, ReportStatus, build_registry, quick_report_producer
    from prometheus_client import generate_latest

    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(readings=h100_mig()))
    reports = ReportStatus(produce=quick_report_producer(None))
    reports.refresh()
    assert reports.up == 1 and CODE in _devices_findings(reports.report)
    sampler = GpuSampler(NvmlBackend(NvmlGate(FakePynvml(readings=h100_mig()))), interval=1.0)
    body = generate_latest(build_registry(GpudoctorCollector(sampler, reports, source="nvml"))).decode()
    assert 'gpudoctor_probe_status{probe="devices",status="warn"} 1.0' in body


@run_async
async def test_the_tui_header_and_doctor_say_it(monkeypatch):
    from gpudoctor.report import runner
    from gpudoctor.tui.app import GpudoctorApp
    from support.tui_support import fixed_host, screen_text, take_samples, wait_for

    # the app's sampler and the quick doctor's own backend each on a fake of their own (the fake's
    # init and shutdown are not counted as NVML's are: one's shutdown would leave the other uninitialised)
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(readings=h100_mig()))
    app = GpudoctorApp(lambda: NvmlBackend(NvmlGate(FakePynvml(readings=h100_mig()))), interval=3600.0, host_sampler=fixed_host,
                       doctor_level="quick", probe_source=lambda: runner.select_probes(["devices"], "quick"),
                       startup_doctor=True,
                       workload_check=lambda: "workload module not available (test: not wired)")
    async with app.run_test(size=(200, 60)) as pilot:
        await take_samples(pilot, app, 1)
        # the header: the start-up quick doctor's verdict names it (the worst finding, in report order)
        await wait_for(pilot, lambda: app.headline is not None, timeout=60)
        assert app.headline[0] == "warn" and app.headline[1].startswith("CUDA counts 1 device(s)"), app.headline
        await pilot.press("d")
        await wait_for(pilot, lambda: app.doctor.finished)
        await pilot.pause()
        devices = app.doctor.results["devices"]
        assert CODE in {f.code for f in devices.findings}
        assert "CUDA counts 1 device(s) where NVML shows 2 MIG" in " ".join(screen_text(app).split())
        await pilot.press("q")


def test_quick_report_end_to_end_through_the_real_child():
    """`report --quick` in a child process against benchmarks/fake_nvml: its ctypes NVML holds one H100
    with two MIG devices and its fake libcuda counts one device, asked by the real CUDA start child."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_", "PYTEST", "CUDA_VISIBLE"))}
    env.update(PYTHONPATH=str(ROOT / "benchmarks" / "fake_nvml"), FAKE_NVML_MIG="1")
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "report", "--quick", "--json"], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=240)
    assert proc.returncode in (exitcodes.OK, exitcodes.WARN), proc.stderr[-2000:]
    found = _devices_findings(json.loads(proc.stdout))
    assert found[CODE]["summary"].startswith("CUDA counts 1 device(s) where NVML shows 2 MIG devices"), found


@pytest.mark.parametrize("level", ["standard", "--full"])
def test_standard_and_full_reports_end_to_end_say_it(level):
    """The default and the full report, in a child process against benchmarks/fake_nvml (one H100 with
    two MIG devices, a libcuda counting one): the devices probe says one MIG device per process, and
    never that a GPU is hidden (device_count_mismatch). torch here has no CUDA, so its own count says
    nothing; the CUDA start check's count is what is judged, as in `--quick`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_", "PYTEST", "CUDA_VISIBLE"))}
    env.update(PYTHONPATH=str(ROOT / "benchmarks" / "fake_nvml"), FAKE_NVML_MIG="1")
    args = [] if level == "standard" else [level]
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "report", "--json", *args, "--probe", "devices"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=240)
    found = _devices_findings(json.loads(proc.stdout))
    assert found[CODE]["summary"].startswith("CUDA counts 1 device(s) where NVML shows 2 MIG devices"), found
    assert found[CODE]["status"] == "warn" and "device_count_mismatch" not in found
