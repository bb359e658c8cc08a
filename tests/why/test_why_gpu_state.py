"""`why`'s answer to "does this job use a GPU?": yes, no or unknown, from NVML's process list
and from /proc (a GPU's device file open, libcuda.so mapped), which works in any PID namespace.
"No GPU" is said only when /proc could be read and shows neither."""

from __future__ import annotations

import os

from gpudoctor.why import analysis
from gpudoctor.why.readings import Readings, gpu_evidence
from gpudoctor.why.stacks import parse_raw
from gpudoctor.why.text import render_text
from test_why_rules import SITE, LOOP, StandInNvml, src, stack_line


def _proc(tmp_path, pid, links=(), maps=""):
    fd = tmp_path / str(pid) / "fd"
    fd.mkdir(parents=True)
    for n, target in enumerate(links):
        os.symlink(target, fd / str(n))
    (tmp_path / str(pid) / "maps").write_text(maps)


def test_proc_evidence_counts_gpu_device_files_and_libcuda_not_nvidiactl(tmp_path):
    _proc(tmp_path, 7, ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/null"],
          "7f00-7f10 r-xp 0 08:01 5 /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05\n")
    _proc(tmp_path, 8, ["/dev/nvidiactl", "/dev/nvidia-caps/nvidia-cap21"])
    _proc(tmp_path, 9, ["/dev/nvidiactl", "/dev/nvidia-uvm"], "7f00-7f10 r-xp 0 08:01 5 /usr/lib/libc.so.6\n")
    assert gpu_evidence(7, str(tmp_path)) == {"readable": True, "device_files": ["/dev/nvidia0"], "libcuda": True}
    assert gpu_evidence(8, str(tmp_path))["device_files"] == ["/dev/nvidia-caps/nvidia-cap21"]
    assert gpu_evidence(9, str(tmp_path)) == {"readable": True, "device_files": [], "libcuda": False}
    assert gpu_evidence(10, str(tmp_path))["readable"] is False  # gone or not ours to read


STACKS = list(parse_raw(stack_line([LOOP, f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116)"], 100,
                                   pids=(1,)) + "\n"))


def _readings(evidence, **gpu):
    return {"processes": {1: {"cpu_pct": 99.0, "threads_cpu_pct": {1: 99.0}, "gpu_evidence": evidence}},
            "host": {"cpus": 16, "idle_cpus": 12},
            "gpu": {"available": True, "reason": "NVML lists none of these processes on any GPU", "devices": [], **gpu}}


def test_a_job_nvml_does_not_list_but_holding_a_gpu_is_on_the_gpu():
    """Another PID namespace: NVML's list holds host PIDs, /proc shows /dev/nvidia0 open."""
    d = analysis.diagnose(STACKS, _readings({"readable": True, "device_files": ["/dev/nvidia0"], "libcuda": True}),
                          src({}), pid=1)
    assert d["gpu"]["in_use"] == "yes" and "/dev/nvidia0" in d["gpu"]["evidence"]
    assert "no GPU" not in d["verdict"]["message"] and "cannot keep the GPU busy" in d["verdict"]["message"]
    assert "GPU: in use (holds /dev/nvidia0 open)" in render_text(d)


def test_unknown_is_never_called_no_gpu():
    """MIG without root: NVML's list answers NoPermission, and /proc of the job is not ours."""
    d = analysis.diagnose(STACKS, _readings({"readable": False, "device_files": [], "libcuda": False},
                                            process_list_reason="NVML's process list of GPU 0: NoPermission"),
                          src({}), pid=1)
    assert d["gpu"]["in_use"] == "unknown" and "NoPermission" in d["gpu"]["evidence"]
    assert "no GPU" not in d["verdict"]["message"] and "unknown" in d["verdict"]["message"]
    assert "train on a GPU" not in d["verdict"]["fix"].split(";")[0]
    assert "no GPU" not in render_text(d)


def test_no_gpu_is_said_when_proc_shows_none():
    d = analysis.diagnose(STACKS, _readings({"readable": True, "device_files": [], "libcuda": False}), src({}), pid=1)
    assert d["gpu"]["in_use"] == "no" and "no GPU in use" in d["verdict"]["message"]


def test_readings_keep_the_proc_evidence_and_why_the_nvml_list_failed():
    class MigWithoutRoot(StandInNvml):
        def processes(self, index):
            from gpudoctor.backends.na import NA

            return NA("NoPermission")

    result = Readings(os.getpid(), MigWithoutRoot(os.getpid(), 31)).result()
    assert result["gpu"]["process_list_reason"] == "NVML's process list of GPU 1: NoPermission"
    assert result["processes"][os.getpid()]["gpu_evidence"]["readable"] is True
