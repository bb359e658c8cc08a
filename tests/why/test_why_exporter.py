"""The exporter's per-process training metrics, from the summaries TrainingMonitor publishes:
scraped in-process and from a running exporter beside a real monitored training loop."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from gpudoctor.system import _published
from gpudoctor.backends import ReplayBackend
from gpudoctor.exporter import GpudoctorCollector, GpuSampler, build_registry
from gpudoctor.why.metrics import metric_names

from support._why_targets import MONITORED_LOOP
from support.prom_support import one_value as _value, parse_samples as _samples

ROOT = Path(__file__).resolve().parents[2]
GPU_LOST = ROOT / "tests" / "data" / "exporter_gpu_lost_handmade.json"


def test_published_summaries_are_scraped_with_pid_and_command_labels():
    directory = _published.runtime_dir(create=True)
    pid = os.getpid()
    _published.write({"format": _published.FORMAT, "format_version": 1, "pid": pid, "t": time.time(),
                      "command": "python train.py \x1b[31m--lr 0.1", "rank": 0, "verdict": "input_bound",
                      "step_time_p50_s": 0.125, "data_wait_share": 0.61, "samples_per_s": 512.0,
                      "host_syncs_per_step": None, "steps": 40}, directory)
    try:
        registry = build_registry(GpudoctorCollector(GpuSampler(ReplayBackend.from_file(GPU_LOST), interval=1.0),
                                                     None, source="replay:test"))
        samples = _samples(generate_latest(registry).decode())
    finally:
        _published.remove(pid, directory)
    labels = {"pid": str(pid), "command": "python train.py ␛[31m--lr 0.1", "rank": "0"}
    assert _value(samples, "gpudoctor_training_step_time_p50_seconds", **labels) == 0.125
    assert _value(samples, "gpudoctor_training_data_wait_share", **labels) == 0.61
    assert _value(samples, "gpudoctor_training_samples_per_second", **labels) == 512.0
    assert _value(samples, "gpudoctor_training_diagnosis_info", code="input_bound", **labels) == 1.0
    assert _value(samples, "gpudoctor_training_processes") == 1.0
    assert not [k for k in samples if k[0] == "gpudoctor_training_host_syncs_per_step"]  # not measured: absent


def test_docs_name_every_training_metric():
    doc = (ROOT / "docs" / "fleet.md").read_text(encoding="utf-8") + (ROOT / "docs" / "why.md").read_text(
        encoding="utf-8")
    for name in metric_names():
        assert f"`{name}`" in doc, name




def test_a_running_exporter_serves_a_monitored_loops_metrics(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(MONITORED_LOOP, encoding="utf-8")
    stop_file = tmp_path / "stop"
    trainer = subprocess.Popen([sys.executable, str(script), str(stop_file)],
                               env=dict(os.environ, GPUDOCTOR_PUBLISH="1"))
    exporter = subprocess.Popen([sys.executable, "-m", "gpudoctor", "exporter", "--port", "0", "--replay",
                                 str(GPU_LOST), "--report-interval", "0", "--exit-after", "300"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", exporter.stderr.readline())
        assert match
        deadline = time.monotonic() + 120
        body = ""
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{match.group(1)}/metrics", timeout=10) as response:
                body = response.read().decode()
            if f'pid="{trainer.pid}"' in body:
                break
            time.sleep(0.5)
        samples = _samples(body)
        share = _value(samples, "gpudoctor_training_data_wait_share", pid=str(trainer.pid))
        assert 0.99 < share <= 1.0  # 4000 s of data wait per batch by the loop's clock
        assert _value(samples, "gpudoctor_training_samples_per_second", pid=str(trainer.pid)) > 0
        assert _value(samples, "gpudoctor_training_diagnosis_info", pid=str(trainer.pid), code="input_bound") == 1
    finally:
        stop_file.write_text("")
        trainer.wait(timeout=120)
        exporter.terminate()
        exporter.wait(timeout=30)


def test_hostile_files_among_the_summaries_cost_only_themselves(tmp_path, monkeypatch):
    """'².json' (a digit, but no PID), JSON nested 100,000 deep and a FIFO named as a PID's summary
    made every scrape an HTTP 500 (or would hang it); now they are skipped and the good one is served."""
    import threading

    directory = tmp_path / "published"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv(_published.ENV_DIR, str(directory))
    pid = os.getpid()
    (directory / "².json").write_text("{}")
    (directory / "1.json").write_text("[" * 100_000 + "]" * 100_000)  # PID 1 is alive
    os.mkfifo(directory / f"{os.getppid()}.json")  # alive too; a FIFO with no writer
    _published.write({"format": _published.FORMAT, "format_version": 1, "pid": pid, "t": time.time(),
                      "command": "python train.py", "rank": 0, "verdict": "input_bound", "steps": 3}, str(directory))
    box: list[str] = []
    registry = build_registry(GpudoctorCollector(GpuSampler(ReplayBackend.from_file(GPU_LOST), interval=1.0),
                                                 None, source="replay:test"))
    scrape = threading.Thread(target=lambda: box.append(generate_latest(registry).decode()), daemon=True)
    scrape.start()
    scrape.join(20)
    assert box, "the scrape did not finish (a FIFO among the summaries blocked it)"
    samples = _samples(box[0])
    assert _value(samples, "gpudoctor_training_processes") == 1.0
    assert _value(samples, "gpudoctor_training_diagnosis_info", code="input_bound", pid=str(pid),
                  command="python train.py", rank="0") == 1.0
