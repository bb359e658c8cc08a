"""The sampler's snapshots, faults and history, and the presentation of readings and process rows
(no textual)."""

from __future__ import annotations

import json

import pytest

from gpudoctor.backends import NA, ReplayBackend
from gpudoctor.sampling.presentation import (
    PROCESS_SORT_KEYS, fmt_rate_kbps, process_rows, recorded_process_info, sparkline, throttle_text, watch_line,
    watch_record,
)
from gpudoctor.sampling.sampler import History, device_fault
from gpudoctor.sampling.sampler import Sampler as LiveSampler
from support.tui_support import GPU_LOST, NO_NVML, NOT_SUPPORTED, NVML_GONE, STANDIN, fixed_host


def sampler(path, **kw):
    return LiveSampler(ReplayBackend.from_file(path, loop=False), fixed_host, **kw)


def test_handmade_recordings_say_they_are_handmade():
    for path in (STANDIN, GPU_LOST, NOT_SUPPORTED, NVML_GONE, NO_NVML):
        data = json.loads(path.read_text())
        assert "handmade" in path.name
        assert data["meta"]["hand_made"] is True
        assert data["meta"]["scenario"]
    assert "STAND-IN" in json.loads(STANDIN.read_text())["meta"]["scenario"]


def test_sparkline_uses_a_fixed_scale():
    assert sparkline([0, 50, 100], 3, 0, 100) == "▁▅█"
    # flat 100 % and flat 0 % must not look alike
    assert sparkline([100] * 4, 4, 0, 100) == "████"
    assert sparkline([0] * 4, 4, 0, 100) == "▁▁▁▁"
    # gaps are blanks, short series are right-aligned, long ones show the newest values
    assert sparkline([None, 100], 4, 0, 100) == "   █"
    assert sparkline(list(range(10)) + [100], 2, 0, 100) == "▂█"
    assert sparkline([], 0) == ""


def test_sparkline_blanks_nan_clamps_and_scales_to_the_largest_reading_without_a_limit():
    nan = float("nan")
    assert sparkline([nan, 50.0, nan], 3, 0, 100) == " ▅ "
    assert sparkline([-5.0, 250.0], 2, 0, 100) == "▁█"  # outside the scale: its ends
    # no limit (watts, MHz): the largest reading seen is the top; NaN does not become the top
    assert sparkline([100.0, 200.0, nan], 3) == "▅█ "
    # the same values on another scale draw other characters (each scale has its own table)
    assert sparkline([50.0], 1, 0, 100) == "▅" and sparkline([50.0], 1, 0, 400) == "▂"
    assert sparkline([50.0], 1, 0, 100) == "▅"


def test_device_fault_needs_every_reading_to_fail_alike():
    assert device_fault({"t": 1.0, "a": NA("GpuIsLost"), "b": NA("GpuIsLost")}) == NA("GpuIsLost")
    assert device_fault({"a": NA("NotSupported"), "b": 3}) is None
    assert device_fault({"gpu_util_pct": NA("Uninitialized")}) == NA("Uninitialized")
    assert device_fault({}) is None


def test_standin_two_gpus_readings_and_history():
    s = sampler(STANDIN)
    history = History(length=5)
    for _ in range(7):
        snap = s.read()
        history.add(snap)
    assert snap.has_gpu and len(snap.devices) == 2
    busy, idle = snap.devices
    assert busy.fault is None and busy.name == "NVIDIA A100-SXM4-40GB"
    assert len(history.series(0, "gpu_util_pct")) == 5  # bounded
    assert all(v is not None and v > 70 for v in history.series(0, "gpu_util_pct"))
    assert history.series(1, "gpu_util_pct") == [0.0] * 5
    assert history.series(0, "fan_pct") == [None] * 5  # NotSupported: a gap, not a zero
    assert history.host["ram"][-1] == pytest.approx(37.5)
    assert "GPU idle" in throttle_text(idle.get("throttle_reasons"))


def test_gpu_lost_midsession_becomes_a_device_fault():
    s = sampler(GPU_LOST)
    faults = [s.read().devices[0].fault for _ in range(12)]
    assert faults[:6] == [None] * 6
    assert all(f == NA("GpuIsLost") for f in faults[6:])
    snap = s.read()  # loop=False: stays lost
    line = watch_line(snap, snap.devices[0])
    assert "FAULT GpuIsLost" in line and "Xid 79" in line
    record = watch_record(snap, snap.devices[0])
    assert record["fault"] == "GpuIsLost" and record["gpu_util_pct"] is None
    assert record["na"]["temperature_c"] == "GpuIsLost"
    rows, notes = process_rows(snap, recorded_process_info)
    assert rows == [] and notes == ["GPU 0: process list n/a (GPU lost)"]


def test_notsupported_fields_are_values_with_reasons():
    s = sampler(NOT_SUPPORTED)
    snaps = [s.read() for _ in range(8)]
    first, late = snaps[0].devices[0], snaps[-1].devices[0]
    assert first.fault is None and late.fault is None
    assert fmt_rate_kbps(first.get("pcie_rx_kbps")) == "n/a (not supported)"
    assert late.get("power_w") == NA("NotSupported")
    assert "n/a (not supported)" in watch_line(snaps[-1], late)
    record = watch_record(snaps[-1], late)
    json.dumps(record, allow_nan=False)
    assert record["power_w"] is None and record["na"]["power_w"] == "NotSupported"
    assert record["throttle_reasons"] is None and record["na"]["throttle_reasons"] == "NotSupported"


def test_no_nvml_snapshot():
    snap = sampler(NO_NVML).read()
    assert not snap.has_gpu and snap.nvml_status == NA("LibraryNotFound") and snap.devices == []


def test_a_raising_backend_becomes_na_not_an_exception():
    class Flaky(ReplayBackend):
        calls = 0

        def sample(self, index):
            Flaky.calls += 1
            if Flaky.calls > 2:
                raise RuntimeError("driver exploded")
            return super().sample(index)

    gpu = Flaky.from_file(GPU_LOST)
    s = LiveSampler(gpu, fixed_host)
    assert s.read().devices[0].fault is None
    s.read()
    assert s.read().devices[0].fault == NA("RuntimeError")


def test_process_rows_sort_and_filter():
    snap = sampler(STANDIN).read()
    rows, notes = process_rows(snap, recorded_process_info)
    assert notes == [] and {r.pid for r in rows} == {424242, 424300, 515151}
    by_mem = sorted(rows, key=PROCESS_SORT_KEYS["gpu memory"])
    assert by_mem[0].pid == 424242 and by_mem[0].user == "alice"
    assert [r.pid for r in sorted(rows, key=PROCESS_SORT_KEYS["pid"])] == [424242, 424300, 515151]
    assert [r.pid for r in rows if r.matches("jupyter")] == [424300]
    assert [r.pid for r in rows if r.matches("gpu1")] == [515151]
    assert all(r.matches("") for r in rows)


def test_recorded_processes_without_host_fields_say_not_recorded():
    info = recorded_process_info(1, {"pid": 1, "gpu_memory_bytes": 5})
    assert info["command"] == "(not recorded)" and info["cpu_pct"] is None


def test_live_psutil_process_info_reads_this_process():
    import os

    from gpudoctor.backends.host import PsutilProcessInfo

    info = PsutilProcessInfo()
    me = info(os.getpid(), {})
    assert me["host_memory_bytes"] > 0 and "python" in me["command"].lower() or "pytest" in me["command"]
    gone = info(2**22 + 12345, {})
    assert gone["user"] == "?" and "not visible" in gone["command"]
