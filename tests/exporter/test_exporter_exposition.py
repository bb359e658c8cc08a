"""The exporter's exposition, from hand-made fault recordings (GPU lost, NVML missing),
and the command end to end over loopback HTTP."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpudoctor.backends import ReplayBackend
from gpudoctor.exporter import (GpudoctorCollector, GpuSampler, ReportStatus,
                                all_metric_names, build_registry, ecc_counters, gpu_metrics)
from gpudoctor.core.model import ProbeResult, Report, Status
from support.prom_support import one_value as value, parse_samples

DATA = Path(__file__).parents[1] / "data"
GPU_LOST = DATA / "exporter_gpu_lost_handmade.json"
NVML_MISSING = DATA / "exporter_nvml_missing_handmade.json"
ROOT = Path(__file__).resolve().parents[2]


def scrape(registry) -> dict[tuple[str, tuple], float]:
    """Parse the exposition text the way Prometheus would: {(name, sorted labels): value}."""
    return parse_samples(generate_latest(registry).decode())


def series(samples, name):
    return [dict(ls) for (n, ls), _ in samples.items() if n == name]


def fake_report() -> Report:
    return Report(results=[ProbeResult("environment", Status.PASS), ProbeResult("health", Status.WARN),
                           ProbeResult("devices", Status.SKIP)])


def test_gpu_lost_recording_exposes_values_then_gpu_down():
    sampler = GpuSampler(ReplayBackend.from_file(GPU_LOST), interval=1.0)
    reports = ReportStatus(produce=fake_report)
    reports.refresh()
    registry = build_registry(GpudoctorCollector(sampler, reports, source="replay:test"))

    sampler.sample_once()  # first recorded sample: both GPUs healthy
    first = scrape(registry)
    assert value(first, "gpudoctor_nvml_up") == 1.0
    assert value(first, "gpudoctor_gpu_count") == 2.0
    assert value(first, "gpudoctor_gpu_up", gpu="1") == 1.0
    assert value(first, "gpudoctor_gpu_utilization_ratio", gpu="0") == pytest.approx(0.87)
    assert value(first, "gpudoctor_gpu_memory_used_bytes", gpu="1") == 29 * 2**30
    assert value(first, "gpudoctor_gpu_temperature_celsius", gpu="1") == 66.0
    assert value(first, "gpudoctor_gpu_power_watts", gpu="0") == 312.5
    assert value(first, "gpudoctor_gpu_sm_clock_hertz", gpu="0") == 1410e6
    assert value(first, "gpudoctor_gpu_pcie_rx_bytes_per_second", gpu="0") == 4096 * 1024
    assert value(first, "gpudoctor_gpu_ecc_errors_total", gpu="1", error_type="corrected",
                 counter="volatile") == 3.0
    assert value(first, "gpudoctor_gpu_throttled", gpu="1", reason="sw_power_cap") == 1.0
    assert value(first, "gpudoctor_gpu_throttled", gpu="0", reason="any_harmful") == 0.0
    info = series(first, "gpudoctor_gpu_info")
    assert {i["pci_bus_id"] for i in info} == {"0000:07:00.0", "0000:0f:00.0"}
    assert all(i["driver_version"] == "550.54.15" for i in info)
    # NotSupported (fan on a datacenter board): the series is absent, not a fake 0.
    assert series(first, "gpudoctor_gpu_fan_speed_ratio") == []
    # the report's verdict, per probe, as a state set
    assert value(first, "gpudoctor_probe_status", probe="health", status="warn") == 1.0
    assert value(first, "gpudoctor_probe_status", probe="health", status="pass") == 0.0
    assert value(first, "gpudoctor_report_status", status="warn") == 1.0
    assert value(first, "gpudoctor_report_up") == 1.0

    sampler.sample_once()  # second sample: GPU 1 fell off the bus
    second = scrape(registry)
    assert value(second, "gpudoctor_nvml_up") == 1.0  # NVML itself still answers
    assert value(second, "gpudoctor_gpu_up", gpu="0") == 1.0
    assert value(second, "gpudoctor_gpu_up", gpu="1") == 0.0
    assert value(second, "gpudoctor_gpu_error_info", gpu="1", reason="GpuIsLost") == 1.0
    assert [s["gpu"] for s in series(second, "gpudoctor_gpu_temperature_celsius")] == ["0"]
    assert value(second, "gpudoctor_gpu_throttled", gpu="0", reason="sw_thermal_slowdown") == 1.0
    assert value(second, "gpudoctor_gpu_throttled", gpu="0", reason="any_harmful") == 1.0
    assert value(second, "gpudoctor_gpu_clock_event_reasons", gpu="0") == float(0x4 | 0x20)
    # the exporter's own memory is there for the load test and for users
    assert value(second, "process_resident_memory_bytes") > 0


def test_nvml_missing_is_a_metric_not_a_dead_endpoint():
    sampler = GpuSampler(ReplayBackend.from_file(NVML_MISSING), interval=1.0)
    registry = build_registry(GpudoctorCollector(sampler, None))
    before = scrape(registry)  # nothing sampled yet
    assert value(before, "gpudoctor_nvml_up") == 0.0
    assert value(before, "gpudoctor_nvml_error_info", reason="NotSampledYet") == 1.0
    sampler.sample_once()
    after = scrape(registry)
    assert value(after, "gpudoctor_nvml_up") == 0.0
    assert value(after, "gpudoctor_nvml_error_info", reason="LibraryNotFound") == 1.0
    assert series(after, "gpudoctor_gpu_up") == []


def test_stale_sample_turns_nvml_down():
    sampler = GpuSampler(ReplayBackend.from_file(GPU_LOST), interval=1.0)
    registry = build_registry(GpudoctorCollector(sampler, None))
    sampler.sample_once()
    sampler.snapshot.time -= 60  # as if the sampler had been stuck in the driver for a minute
    samples = scrape(registry)
    assert value(samples, "gpudoctor_nvml_up") == 0.0
    assert value(samples, "gpudoctor_nvml_error_info", reason="SampleStale") == 1.0
    assert value(samples, "gpudoctor_sample_age_seconds") >= 60


def test_report_file_is_read_and_bad_file_sets_report_down(tmp_path):
    from gpudoctor.console.render import report_to_json

    path = tmp_path / "report.json"
    path.write_text(report_to_json(fake_report()))
    reports = ReportStatus(path=str(path))
    reports.refresh()
    sampler = GpuSampler(ReplayBackend.from_file(GPU_LOST), interval=1.0)
    sampler.sample_once()
    registry = build_registry(GpudoctorCollector(sampler, reports))
    samples = scrape(registry)
    assert value(samples, "gpudoctor_report_up") == 1.0
    assert value(samples, "gpudoctor_probe_status", probe="devices", status="skip") == 1.0
    path.write_text("{not json")
    import os
    os.utime(path, (time.time() + 5, time.time() + 5))
    reports.refresh()
    assert value(scrape(registry), "gpudoctor_report_up") == 0.0


def test_docs_name_every_metric_and_its_dcgm_counterpart():
    doc = (ROOT / "docs" / "fleet.md").read_text(encoding="utf-8")
    for name in all_metric_names():
        assert f"`{name}`" in doc, f"{name} is not documented in docs/fleet.md"
    for metric in gpu_metrics():
        if metric.dcgm:
            assert re.search(rf"`{metric.name}`.*{metric.dcgm}", doc), f"{metric.name}: DCGM name missing"
    for _key, dcgm in ecc_counters().values():
        assert dcgm in doc


def _start_exporter(*extra: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "gpudoctor", "exporter", "--port", "0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stderr.readline()  # "gpudoctor exporter: serving http://127.0.0.1:PORT/metrics"
    match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
    if not match:
        proc.kill()
        pytest.fail(f"exporter did not start: {line}{proc.stderr.read()}")
    return proc, int(match.group(1))


def test_exporter_command_serves_on_loopback_and_stops_by_itself():
    proc, port = _start_exporter("--replay", str(GPU_LOST), "--interval", "0.2", "--exit-after", "20",
                                 "--report-interval", "0")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            assert response.status == 200
            body = response.read().decode()
        samples = {}
        for family in text_string_to_metric_families(body):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        assert value(samples, "gpudoctor_exporter_info", source="replay:exporter_gpu_lost_handmade.json") == 1.0
        assert value(samples, "gpudoctor_report_up") in (0.0, 1.0)
        # the replay holds its last sample (GPU 1 lost) once the sampler has passed it
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                if 'gpudoctor_gpu_up{gpu="1"} 0.0' in response.read().decode():
                    break
            time.sleep(0.1)
        else:
            pytest.fail("GPU 1 never showed as down")
        proc.terminate()  # SIGTERM: a clean stop, exit 0
        assert proc.wait(10) == 0
        assert "stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_exporter_bad_replay_file_is_a_usage_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    run = subprocess.run([sys.executable, "-m", "gpudoctor", "exporter", "--port", "0", "--replay", str(bad)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 2
    assert "not a gpudoctor recording" in run.stderr


def test_a_critical_event_fails_the_report_status_before_the_next_report():
    """The last report passed; then the watcher sees an Xid 79: gpudoctor_report_status and the
    events probe's status fail at once (fleet reads them), not at the next report."""
    from gpudoctor.backends.events import DeviceEvents, GpuEvent

    class Watcher:
        count = 2
        kernel_log_readable = None
        kernel_log_reason = ""
        status = None

        def __init__(self) -> None:
            self.states = {0: DeviceEvents(), 1: DeviceEvents()}

        def snapshot(self, index):
            return self.states[index]

    def passing() -> Report:
        return Report(results=[ProbeResult("environment", Status.PASS), ProbeResult("events", Status.PASS)])

    watcher = Watcher()
    sampler = GpuSampler(ReplayBackend.from_file(GPU_LOST), interval=1.0)
    reports = ReportStatus(produce=passing)
    reports.refresh()
    registry = build_registry(GpudoctorCollector(sampler, reports, source="replay:test", events=watcher))
    sampler.sample_once()
    before = scrape(registry)
    assert value(before, "gpudoctor_report_status", status="pass") == 1.0
    watcher.states[1] = DeviceEvents(counts={"xid": 1}, recent=[GpuEvent(time.time(), "xid", 79)])
    after = scrape(registry)
    assert value(after, "gpudoctor_report_status", status="fail") == 1.0
    assert value(after, "gpudoctor_report_status", status="pass") == 0.0
    assert value(after, "gpudoctor_probe_status", probe="events", status="fail") == 1.0
    assert value(after, "gpudoctor_probe_status", probe="environment", status="pass") == 1.0
    # an application Xid is not critical: the status stays as the report said
    watcher.states[1] = DeviceEvents(counts={"xid": 1}, recent=[GpuEvent(time.time(), "xid", 13)])
    assert value(scrape(registry), "gpudoctor_report_status", status="pass") == 1.0
