"""Held but idle: the cgroup reader, gpudoctor's exporter labelling each GPU with its processes'
Slurm job or Kubernetes pod, fleet listing the held GPU that did no work, and the deploy/ rule file.

The cgroup texts follow the layouts Slurm and the kubelet write (cgroup v1 per-controller lines,
cgroup v2's single ``0::`` line; the kubelet's cgroupfs and systemd drivers); the process ids are
those of the hand-made two-GPU stand-in recording (GPU 0 training, GPU 1 idle with one process).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.backends import holders
from gpudoctor.fleet import idle
from support.prom_support import needs_prometheus, query, stop
from test_fleet_dcgm_versions import WINDOW, fleet_json, start_prometheus, wait_for

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "tests" / "data" / "handmade_two_gpu_training_standin.json"
RULES = ROOT / "deploy" / "prometheus" / "gpudoctor-held-idle.rules.yml"
POD = "8f4b2c1e-3d5a-4e6f-9a7b-0c1d2e3f4a5b"
CONTAINER = "4c6a1f0e9b8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b"
SLURM_V1 = ("12:memory:/slurm/uid_1000/job_4242/step_0/task_0\n"
            "11:devices:/slurm/uid_1000/job_4242/step_0\n4:cpuset:/slurm/uid_1000/job_4242/step_0\n")
SLURM_V2 = "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n"
K8S_SYSTEMD = ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
               f"{POD.replace('-', '_')}.slice/cri-containerd-{CONTAINER}.scope\n")
K8S_CGROUPFS = f"11:memory:/kubepods/besteffort/pod{POD}/{CONTAINER}\n"


@pytest.mark.parametrize("text, expected", [
    (SLURM_V1, holders.Holder("slurm", job="4242")),
    (SLURM_V2, holders.Holder("slurm", job="77")),
    (K8S_SYSTEMD, holders.Holder("kubernetes", pod_uid=POD, container_id=CONTAINER)),
    (K8S_CGROUPFS, holders.Holder("kubernetes", pod_uid=POD, container_id=CONTAINER)),
    # read from a container with its own cgroup namespace, another process's path is relative (cgroup_namespaces(7))
    (f"0::/../../kubepods-besteffort-pod{POD.replace('-', '_')}.slice/cri-containerd-{CONTAINER}.scope\n",
     holders.Holder("kubernetes", pod_uid=POD, container_id=CONTAINER)),
    ("0::/user.slice/user-1000.slice/session-3.scope\n", holders.Holder("none")),
    ("0::/system.slice/job_12.service\n", holders.Holder("none")),  # job_ outside a Slurm path is no job
    ("", holders.Holder("none")),
])
def test_cgroup_paths_name_the_slurm_job_or_kubernetes_pod(text, expected):
    assert holders.from_cgroup(text) == expected


def test_the_reader_takes_a_root_and_says_when_it_cannot_tell(tmp_path):
    (tmp_path / "10").mkdir()
    (tmp_path / "10" / "cgroup").write_text(SLURM_V1)
    (tmp_path / "11").mkdir()
    (tmp_path / "11" / "cgroup").mkdir()  # a directory where the file should be: unreadable
    assert holders.of_process(10, str(tmp_path)) == holders.Holder("slurm", job="4242")
    gone = holders.of_process(12, str(tmp_path))
    assert gone.kind == "unknown" and "process 12 ended" in gone.reason
    broken = holders.of_process(11, str(tmp_path))
    assert broken.kind == "unknown" and "cannot read" in broken.reason
    # a process of neither a job nor a pod holds nothing; the same holder twice is one
    (tmp_path / "13").mkdir()
    (tmp_path / "13" / "cgroup").write_text("0::/user.slice\n")
    assert holders.of_processes([10, 13, 10], str(tmp_path)) == [holders.Holder("slurm", job="4242")]


def test_the_rule_file_in_deploy_is_the_generated_one_and_promtool_accepts_it(tmp_path):
    assert RULES.read_text() == idle.rule_file(), "regenerate deploy/prometheus/gpudoctor-held-idle.rules.yml"
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (it comes with the prometheus package)")
    for text in (RULES.read_text(), idle.rule_file(WINDOW)):
        path = tmp_path / "rules.yml"
        path.write_text(text)
        checked = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def _fake_proc(root: Path) -> Path:
    """GPU 0's trainer in Slurm job 4242 (cgroup v1), its notebook gone; GPU 1's evaluation in a pod."""
    for pid, text in ((424242, SLURM_V1), (515151, K8S_SYSTEMD)):
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cgroup").write_text(text)
    return root


@needs_prometheus
def test_gpudoctors_exporter_names_each_gpus_holder_and_fleet_lists_the_idle_one(tmp_path):
    proc_root = _fake_proc(tmp_path / "proc")
    exporter = subprocess.Popen(
        [sys.executable, "-m", "gpudoctor", "exporter", "--host", "127.0.0.1", "--port", "0", "--replay", str(STANDIN),
         "--interval", "0.5", "--report-interval", "0", "--exit-after", "150", "--proc-root", str(proc_root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    prometheus = None
    try:
        line = exporter.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        assert match, f"exporter did not start: {line}"
        prometheus, port = start_prometheus(tmp_path, [int(match.group(1))], idle.rule_file(WINDOW))
        series = wait_for(lambda: query(port, "gpudoctor_gpu_holder_info"), 60, "the holder series scraped")
        by_gpu = {}
        for s in series:
            labels = dict.fromkeys(("kind", "slurm_job", "pod_uid", "container_id", "reason"), "")  # Prometheus
            labels.update(s["metric"])  # drops empty labels
            by_gpu.setdefault(s["metric"]["gpu"], []).append(labels)
        assert {(m["kind"], m["slurm_job"]) for m in by_gpu["0"]} == {("slurm", "4242"), ("unknown", "")}
        assert any("process 424300 ended" in m["reason"] for m in by_gpu["0"])  # the notebook: said, not guessed
        assert [(m["kind"], m["pod_uid"], m["container_id"]) for m in by_gpu["1"]] == [("kubernetes", POD, CONTAINER)]
        code, data = wait_for(lambda: (lambda r: r if r[1].get("held_idle") else None)(fleet_json(port)),
                              90, "fleet listing the held-idle GPU")
        rows = {r["gpu"]: r for r in data["rows"]}
        assert rows["0"]["holder"] == "Slurm job 4242" and rows["0"]["idle_for_s"] is None  # training: not idle
        assert rows["1"]["holder"] == f"Kubernetes pod {POD} (container {CONTAINER[:12]})"
        [entry] = data["held_idle"]
        assert entry["gpu"] == "1" and entry["idle_for_s"] >= 10
        assert entry["energy_kwh"] == pytest.approx(52.5 * entry["idle_for_s"] / 3.6e6, rel=1e-6)
        assert rows["1"]["status"] == "warn" and "but idle for" in rows["1"]["reason"]
        assert "(utilisation below 1% for the whole time)" not in rows["1"]["reason"]  # the why is not the summary
        recorded = wait_for(lambda: query(port, "gpudoctor:gpu_held_idle:info"), 60, "the held-idle recording rule")
        assert [(s["metric"]["gpu"], s["metric"]["pod_uid"]) for s in recorded] == [("1", POD)]
        text = subprocess.run([sys.executable, "-m", "gpudoctor", "fleet", "--prometheus", f"http://127.0.0.1:{port}",
                               "--idle-window", WINDOW, "--lookback", "5m"],
                              capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert f"held but idle for {WINDOW} or more: 1 GPU(s)" in text.stdout, text.stdout
        assert f"GPU 1: Kubernetes pod {POD}" in text.stdout
        json.dumps(data)  # the document stays JSON (no NaN) with the new fields
    finally:
        stop(prometheus)
        stop(exporter)
        if exporter.stderr is not None:
            exporter.stderr.close()
