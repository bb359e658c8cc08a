"""SM activity and the "is it really busy?" verdict in every front end, without a GPU: through the
hand-made GPM recording (tests/data/handmade_h100_gpm_small_kernels.json), the fake NVML (live
reads, recorded and replayed) and fake Prometheus answers (fleet)."""

from __future__ import annotations

import json

import pytest

from gpudoctor.core import exitcodes
from gpudoctor.backends import NA, NvmlBackend, NvmlGate, ReplayBackend
from gpudoctor.cli import main
from support.nvml_fake import FakePynvml, hopper
from support.tui_support import DATA, STANDIN

GPM = DATA / "handmade_h100_gpm_small_kernels.json"

pytestmark = pytest.mark.timeout(120)


def test_watch_lines_and_json_carry_sm_activity_and_the_verdict(capsys):
    assert main(["watch", "-n", "2", "-i", "0.25", "--replay", str(GPM)]) == exitcodes.OK
    first, _, second, idle = capsys.readouterr().out.splitlines()
    assert "smact" not in first  # the first GPM read is warming: nothing to show in the short line
    assert second.split()[2:6] == ["util", "100%", "smact", "10%"] and len(second) <= 100
    assert " smact 0% " in idle
    assert main(["watch", "-n", "2", "-i", "0.25", "-v", "--replay", str(GPM)]) == exitcodes.OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("| sm act n/a (Warming) | verdict not enough to judge yet")
    assert "| sm act 10% occ 5% | tensor 0% | dram 4% | verdict busy 100% but SM only 10%: small kernels" in lines[2]
    assert main(["watch", "-n", "2", "-i", "0.25", "--json", "--replay", str(GPM)]) == exitcodes.OK
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert records[0]["sm_active_pct"] is None and records[0]["na"]["sm_active_pct"] == "Warming"
    assert records[0]["verdict"]["code"] == "warming"
    busy = records[2]
    assert busy["sm_active_pct"] == 10.0 and busy["tensor_active_pct"] == 0.0 and busy["fp32_active_pct"] == 3.0
    assert busy["gpm_pcie_rx_mibps"] == 830.1 and busy["na"]["nvlink_rx_mibps"] == "NotSupported"
    assert busy["verdict"]["code"] == "busy_small_kernels" and busy["verdict"]["evidence"] == "gpm"
    assert busy["verdict"]["fix"] == "try larger batches, bf16/TF32 autocast or CUDA graphs"
    assert records[3]["verdict"]["code"] == "idle"


def test_old_recordings_answer_not_recorded_and_the_verdict_says_what_cannot_be_told(capsys):
    assert main(["watch", "-n", "1", "--json", "--replay", str(STANDIN)]) == exitcodes.OK
    busy = json.loads(capsys.readouterr().out.splitlines()[0])
    assert busy["sm_active_pct"] is None and busy["na"]["sm_active_pct"] == "NotRecorded"
    assert busy["verdict"]["code"] == "no_gpm" and busy["verdict"]["evidence"] == "power"
    assert "cannot be told (SM activity: not recorded)" in busy["verdict"]["words"]
    assert "weaker evidence: power" in busy["verdict"]["words"]


def test_the_exporter_writes_the_gpm_gauges_with_their_dcgm_fields():
    from prometheus_client import generate_latest

    from gpudoctor.exporter import GpudoctorCollector, GpuSampler, build_registry

    sampler = GpuSampler(ReplayBackend.from_file(GPM), 1.0)
    sampler.sample_once()
    sampler.sample_once()
    text = generate_latest(build_registry(GpudoctorCollector(sampler))).decode()
    lines = text.splitlines()
    help_line = next(line for line in lines if line.startswith("# HELP gpudoctor_gpu_sm_active_ratio "))
    assert "DCGM_FI_PROF_SM_ACTIVE" in help_line
    for name, field in (("gpudoctor_gpu_tensor_active_ratio", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
                        ("gpudoctor_gpu_sm_occupancy_ratio", "DCGM_FI_PROF_SM_OCCUPANCY"),
                        ("gpudoctor_gpu_dram_active_ratio", "DCGM_FI_PROF_DRAM_ACTIVE"),
                        ("gpudoctor_gpu_fp32_pipe_active_ratio", "DCGM_FI_PROF_PIPE_FP32_ACTIVE")):
        assert any(line.startswith(f"# HELP {name} ") and field in line for line in lines), name
    sm = [line for line in lines if line.startswith("gpudoctor_gpu_sm_active_ratio{")]
    assert len(sm) == 2 and sm[0].endswith(" 0.1") and sm[1].endswith(" 0.0")
    rx = next(line for line in lines if line.startswith("gpudoctor_gpu_prof_pcie_rx_bytes_per_second{"))
    assert float(rx.rsplit(" ", 1)[1]) == pytest.approx(830.1 * 2**20)  # MiB/s as bytes/s
    assert not any(line.startswith("gpudoctor_gpu_nvlink_rx_bytes_per_second{") for line in lines)  # NA: no gauge


def test_the_tui_panel_shows_sm_activity_beside_utilisation_and_the_verdict():
    from gpudoctor.sampling.sampler import Sampler
    from gpudoctor.tui.widgets import GpuPanel

    core = Sampler(ReplayBackend.from_file(GPM), None, with_processes=False, reads="full")
    for _ in range(3):
        snap = core.read()
    assert core.history.series(0, "sm_active_pct") == [None, 10.0, 11.0]
    panel = GpuPanel(0)
    panel.graph_rows = 12
    panel.show(snap.devices[0], core.history)
    lines = [getattr(line, "plain", str(line)) for line in panel.lines(118)]
    assert lines[0].startswith("util   100% · SM 11%")
    work = next(line for line in lines if line.startswith("work "))
    assert "busy 100% of the time, but only 11% of SM cycles active and no tensor work" in work
    assert any(line.strip().startswith("SM act") for line in lines)  # the tall graph keeps SM activity
    narrow = [getattr(line, "plain", str(line)) for line in panel.lines(60)]
    assert next(line for line in narrow if line.startswith("work ")).startswith("work   busy 100% but SM only 11%")


def test_a_live_recording_carries_the_gpm_readings_through_replay(tmp_path):
    from support.recorded import record_file

    nvml = FakePynvml(readings=hopper(sm=12.0, tensor=0.0))
    backend = NvmlBackend(NvmlGate(nvml))
    path = tmp_path / "h100.json"
    data, _ = record_file(backend, path, seconds=0.35, interval=0.15)
    assert len(nvml.gpm_buffers) == 2  # one pair for the one device, allocated once
    backend.close()
    replay = ReplayBackend.from_file(path)
    readings = [replay.sample(0) for _ in range(len(data["nvml"]["samples"]))]
    assert readings[0]["sm_active_pct"] == NA("Warming")
    assert readings[-1]["sm_active_pct"] == 12.0 and readings[-1]["nvlink_tx_mibps"] == NA("NotSupported")
    assert not nvml.gpm_buffers  # closed: every buffer freed


def test_fleet_ranks_busy_but_not_working_gpus_with_the_verdict_words():
    from support.fleet_doubles import FakeProm, gpu, make, vec, view_of

    extra = [(dict(gpu("a:9402", 1), __name__="gpudoctor_gpu_sm_active_ratio"), 0.08),
             (dict(gpu("a:9402", 1), __name__="gpudoctor_gpu_tensor_active_ratio"), 0.0),
             (dict(gpu("a:9402", 0), __name__="gpudoctor_gpu_sm_active_ratio"), 0.91),
             (dict(gpu("a:9402", 0), __name__="gpudoctor_gpu_tensor_active_ratio"), 0.72)]
    view = view_of(make([("a:9402", 2)], extra=extra))
    first, second = view.rows
    assert (first.gpu, first.status, second.gpu, second.status) == ("1", "warn", "0", "pass")
    assert first.sm_active == pytest.approx(0.08) and second.tensor_active == pytest.approx(0.72)
    assert "only 8% of SM cycles active and no tensor work: small kernels" in first.reason
    assert "CUDA graphs" in first.reason

    labels = {"instance": "n1:9400", "job": "dcgm", "gpu": "0", "UUID": "GPU-x", "modelName": "NVIDIA H100 PCIe"}
    dcgm = FakeProm([
        ("up", vec(({"instance": "n1:9400", "job": "dcgm"}, 1))),
        ("{__name__=~", vec((dict(labels, __name__="DCGM_FI_DEV_GPU_UTIL"), 100),
                            (dict(labels, __name__="DCGM_FI_PROF_SM_ACTIVE"), 0.05),
                            (dict(labels, __name__="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), 0.0))),
        ("last_over_time({__name__=~\"DCGM_FI_DEV_GPU_TEMP", vec((labels, 50))),
    ])
    row = view_of(dcgm).rows[0]
    assert row.source == "dcgm-exporter" and row.sm_active == pytest.approx(0.05) and row.status == "warn"
    assert "busy 100% of the time, but only 5% of SM cycles active" in row.reason


def _watch_json_on_the_ctypes_fake(extra_env: dict[str, str], count: int = 3) -> list[dict]:
    """``gpudoctor watch --json`` in a child whose pynvml runs unchanged against
    benchmarks/fake_nvml's ctypes library (an H100 PCIe): the real binding's GPM structs and calls."""
    import os
    import subprocess
    import sys

    from support.tui_support import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT / "benchmarks" / "fake_nvml"), **extra_env}
    out = subprocess.run([sys.executable, "-m", "gpudoctor", "watch", "--json", "-n", str(count), "-i", "0.6"],
                         env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_the_ctypes_fake_nvml_answers_gpm_through_the_real_binding():
    busy = _watch_json_on_the_ctypes_fake({"FAKE_NVML_BUSY": "1"})
    assert busy[0]["na"]["sm_active_pct"] == "Warming" and busy[0]["verdict"]["code"] == "warming"
    last = busy[-1]
    assert isinstance(last["sm_active_pct"], float) and 0 <= last["sm_active_pct"] <= 100
    assert last["na"]["nvlink_rx_mibps"] == "NotSupported"  # per metric: no NVLink bridge on the board
    assert last["verdict"]["evidence"] == "gpm"
    idle = _watch_json_on_the_ctypes_fake({}, count=3)[-1]
    assert idle["sm_active_pct"] == 0.0 and idle["verdict"]["code"] == "idle"
    old = _watch_json_on_the_ctypes_fake({"FAKE_NVML_GPM": "0"}, count=1)[0]
    assert old["na"]["sm_active_pct"] == "needs Hopper or later" and old["verdict"]["code"] == "idle"
    mig = _watch_json_on_the_ctypes_fake({"FAKE_NVML_MIG": "1"}, count=1)[0]
    assert mig["na"]["tensor_active_pct"] == "MIG mode: GPM is read per GPU instance"


def test_the_exporter_publishes_the_busy_verdict_per_gpu(monkeypatch):
    """Beside the GPM gauges, one info series per GPU names the verdict (busy but small kernels here),
    so a dashboard or alert can use gpudoctor's judgement, not only raw counters."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from gpudoctor.backends import NvmlBackend, NvmlGate
    from gpudoctor.backends import nvml as nvml_backend
    from gpudoctor.exporter import GpudoctorCollector, GpuSampler, build_registry
    from support.nvml_fake import FakePynvml, hopper, util

    monkeypatch.setattr(nvml_backend, "GPM_MIN_INTERVAL_S", 0.0)  # NVML's 100 ms between GPM samples
    fake = FakePynvml(readings=dict(hopper(sm=8.0, tensor=0.0), nvmlDeviceGetUtilizationRates=util(99)))
    sampler = GpuSampler(NvmlBackend(NvmlGate(fake)), interval=1.0)
    registry = build_registry(GpudoctorCollector(sampler, None, source="nvml"))
    sampler.sample_once()  # GPM warming
    sampler.sample_once()
    text = generate_latest(registry).decode()
    verdicts = [s for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "gpudoctor_gpu_work_verdict_info"]
    assert [(s.labels["gpu"], s.labels["verdict"], s.value) for s in verdicts] == [("0", "busy_small_kernels", 1.0)]
