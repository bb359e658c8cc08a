"""One verdict per node: where NVML sees GPUs but CUDA cannot start, `report --quick`, the full
report, the exporter's report status and the TUI header all fail, with the same finding.

The fact is the CUDA driver's own start (cuInit in a child process, no torch:
gpudoctor.backends.cuda_driver); benchmarks/fake_nvml gives the child a fake libcuda whose cuInit
answers FAKE_CUDA_INIT, or none at all with FAKE_CUDA=missing (a container given only the
driver's utility capability: nvidia-smi works, CUDA does not).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.core import exitcodes
from gpudoctor.backends.cuda_driver import CudaStart, cuda_start_findings, parse_answer
from gpudoctor.backends.na import NA, is_na
from gpudoctor.core.model import Status
from support.prom_support import assert_exporter_report_fails
from support.tui_support import assert_tui_header_fails

ROOT = Path(__file__).resolve().parents[2]
FAKE_NVML = ROOT / "benchmarks" / "fake_nvml"


# --------------------------------------------------------------------------- the fact, parsed
def test_the_childs_answer_is_checked_field_by_field():
    started = parse_answer('{"loaded": true, "init_code": 0, "init_name": "", "driver_cuda": 13000, '
                           '"count_code": 0, "device_count": 8}\n')
    assert started == CudaStart(loaded=True, code=0, device_count=8, driver_cuda=13000) and started.started
    missing = parse_answer('{"loaded": false, "error": "libcuda.so.1: cannot open\\u001b]0;x\\u0007"}')
    assert missing.loaded is False and "\x1b" not in missing.error and "\x07" not in missing.error
    failed = parse_answer('{"loaded": true, "init_code": 802, "init_name": "CUDA_ERROR_SYSTEM_NOT_READY"}')
    assert (failed.code, failed.name, failed.started) == (802, "CUDA_ERROR_SYSTEM_NOT_READY", False)
    for raw in ("", "not json", "[1, 2]", '{"loaded": "yes"}', '{"loaded": true}',
                '{"loaded": true, "init_code": 1e400}', '{"loaded": true, "init_code": true}',
                '{"loaded": true, "init_code": 99999999999999999999}'):
        assert is_na(parse_answer(raw)), raw
    huge = parse_answer('{"loaded": true, "init_code": 0, "device_count": 123456789012345}')
    assert huge.device_count is None


# --------------------------------------------------------------------------- the judgement
@pytest.mark.parametrize("code, name, words", [
    (802, "CUDA_ERROR_SYSTEM_NOT_READY", "fabric manager"),
    (803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "Reboot"),
    (34, "CUDA_ERROR_STUB_LIBRARY", "stubs"),
    (999, "CUDA_ERROR_UNKNOWN", "nvidia-uvm"),
    (100, "CUDA_ERROR_NO_DEVICE", "--gpus all"),
    (46, "CUDA_ERROR_DEVICES_UNAVAILABLE", "COMPUTE"),
    (12345, "", "dmesg"),
])
def test_a_failed_cuinit_fails_with_its_cause_and_fix(code, name, words):
    [finding] = cuda_start_findings(CudaStart(loaded=True, code=code, name=name), visible=2)
    assert (finding.status, finding.code) == (Status.FAIL, "cuda_cannot_start")
    assert f"({code})" in finding.summary and "NVML sees 2 GPU(s)" in finding.summary
    assert words in finding.summary + finding.fix


def test_no_libcuda_names_the_containers_compute_capability():
    [finding] = cuda_start_findings(CudaStart(loaded=False, error="libcuda.so.1: cannot open shared object file"),
                                    visible=1)
    assert finding.code == "cuda_cannot_start" and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in finding.fix


def test_a_driver_that_starts_counts_none_fails_and_one_that_counts_some_passes():
    assert [f.code for f in cuda_start_findings(CudaStart(loaded=True, code=0, device_count=0), 1)] == \
        ["cuda_cannot_start"]
    assert cuda_start_findings(CudaStart(loaded=True, code=0, device_count=1), 1) == []


def test_unknown_or_nothing_to_start_is_no_finding_and_a_hang_warns():
    started = CudaStart(loaded=False, error="x")
    assert cuda_start_findings(started, visible=0) == []  # no GPU visible: other findings say so
    assert cuda_start_findings(NA("NotRecorded"), visible=1) == []
    assert cuda_start_findings(NA("NotLinux"), visible=1) == []
    assert cuda_start_findings(None, visible=1) == []
    [hung] = cuda_start_findings(NA("Timeout"), visible=1)
    assert (hung.status, hung.code) == (Status.WARN, "cuda_start_hung")


# --------------------------------------------------------------------------- every front end
def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_CUDA", "PYTEST"))}
    env.update(PYTHONPATH=str(FAKE_NVML), **extra)
    return env


def _gpudoctor(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=240)


def _devices_codes(document: dict) -> set[str]:
    devices = next(r for r in document["results"] if r["probe"] == "devices")
    return {f["code"] for f in devices["findings"] if f["status"] == "fail"}


CASES = [pytest.param({"FAKE_CUDA": "missing"}, id="no-libcuda"),
         pytest.param({"FAKE_CUDA_INIT": "802"}, id="cuinit-802")]


@pytest.mark.parametrize("fault", CASES)
def test_quick_and_full_report_give_the_same_verdict(fault):
    env = _env(**fault)
    quick = _gpudoctor(["report", "--quick", "--json"], env)
    full = _gpudoctor(["report", "--json", "--probe", "environment", "--probe", "devices", "--probe", "health"], env)
    for proc in (quick, full):
        assert proc.returncode == exitcodes.FAIL, proc.stderr
        document = json.loads(proc.stdout)
        assert document["status"] == "fail"
        assert "cuda_cannot_start" in _devices_codes(document)


def test_a_node_whose_cuda_starts_still_passes_quick():
    proc = _gpudoctor(["report", "--quick", "--json"], _env())
    assert proc.returncode == exitcodes.OK, proc.stdout[-2000:]
    assert _devices_codes(json.loads(proc.stdout)) == set()


def test_the_exporter_publishes_the_same_failing_verdict():
    assert_exporter_report_fails(_env(FAKE_CUDA="missing"), ROOT)


@pytest.mark.timeout(120)
def test_the_tui_header_fails_from_the_start():
    assert_tui_header_fails(_env(FAKE_CUDA="missing"))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_distributed_on_the_cpu_while_nvml_sees_gpus_is_no_pass():
    """`gpudoctor distributed` falls back to gloo on the CPU when torch sees no GPU: with NVML seeing
    one, that says nothing about the node's GPUs, and it fails with the devices probe's reason."""
    proc = _gpudoctor(["distributed", "--json", "--timeout", "120"], _env(FAKE_CUDA="missing"))
    assert proc.returncode == exitcodes.FAIL, proc.stderr[-2000:]
    [result] = json.loads(proc.stdout)["results"]
    codes = {f["code"]: f["status"] for f in result["findings"]}
    assert codes.get("gpus_not_checked") == "fail" and codes.get("cuda_cannot_start") == "fail", codes
    assert result["summary"].startswith("the 1 GPU(s) NVML sees were not checked"), result["summary"]


@pytest.mark.real_cuda_driver
def test_the_real_cuinit_child_answers_here():
    """The child runs on this machine's Python: without a driver it says libcuda cannot be loaded
    (a machine with one answers with cuInit's code); never a traceback or a hang."""
    from gpudoctor.backends.cuda_driver import cuda_start

    answer = cuda_start(timeout_s=60)
    assert not is_na(answer), answer
    if not answer.loaded:
        assert "libcuda" in answer.error
    else:
        assert isinstance(answer.code, int)
