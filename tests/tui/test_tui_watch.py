"""`gpudoctor watch`: lines and JSON lines per GPU per interval, and its exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpudoctor.core import exitcodes
from gpudoctor.cli import main
from support.tui_support import GPU_LOST, NO_NVML, NOT_SUPPORTED, STANDIN

pytestmark = pytest.mark.timeout(120)


def test_lines_per_gpu_per_interval(capsys):
    assert main(["watch", "-n", "3", "-i", "0.25", "--replay", str(STANDIN)]) == exitcodes.OK
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6
    assert [line.split()[1] for line in lines] == ["gpu0", "gpu1"] * 3
    assert "util" in lines[0] and "/40.0 GiB" in lines[0] and "throttle" in lines[0]
    assert "throttle gpu_idle" in lines[1]


def test_default_lines_fit_100_columns_with_the_essential_readings(capsys):
    assert main(["watch", "-n", "2", "-i", "0.25", "--replay", str(STANDIN)]) == exitcodes.OK
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all(len(line) <= 100 for line in lines), [len(line) for line in lines]
    busy = lines[0].split()
    assert busy[1] == "gpu0" and busy[2:4] == ["util", "88%"]
    assert "mem 31.2/40.0 GiB" in lines[0] and "58°C" in busy and "330/400W" in busy and "1410MHz" in busy
    assert busy[-2:] == ["throttle", "none"] and lines[1].endswith("throttle gpu_idle")
    assert "pcie" not in lines[0] and "memclk" not in lines[0]  # -v has them


def test_verbose_lines_have_every_reading(capsys):
    assert main(["watch", "-n", "1", "-v", "--replay", str(STANDIN)]) == exitcodes.OK
    line = capsys.readouterr().out.splitlines()[0]
    for part in ("util 88%", "mem 31.2/40.0 GiB", "temp 58°C", "power 330/400 W", "sm 1410 MHz", "memclk 1215 MHz",
                 "pcie rx 878.9 MiB/s tx 58.6 MiB/s", "fan n/a (not supported)", "throttle none"):
        assert part in line


def test_a_short_line_keeps_to_100_columns_at_its_widest():
    from gpudoctor.sampling.presentation import WATCH_WIDTH, watch_line_short

    class Dev:  # the largest readings a line can hold: 141 GiB, 1000 W, four throttle reasons
        static = {"power_limit_w": 1000.0}
        memory_total = 141 * 2**30
        sample = {"memory_used_bytes": 140 * 2**30, "power_limit_w": 1000.0, "gpu_util_pct": 100,
                  "temperature_c": 100, "power_w": 1000.0, "clock_sm_mhz": 1980, "throttle_reasons": 0x4 | 0x8 | 0x20 | 0x40}

        def get(self, key):
            return self.sample.get(key)

    line = watch_line_short("2026-11-21T05:21:07Z gpu15", Dev())
    assert len(line) <= WATCH_WIDTH == 100, line
    assert "mem 140/141 GiB" in line and line.endswith(" throttle +4")  # the widest: a count alone
    # an H200 (141 GiB, 700 W) at its power cap: the name fits; with a second reason, the first and a count
    Dev.sample.update(throttle_reasons=0x4, temperature_c=85, power_w=700.0, power_limit_w=700.0)
    line = watch_line_short("2026-11-21T05:21:07Z gpu7", Dev())
    assert len(line) <= 100 and line.endswith(" throttle sw_power_cap"), line
    Dev.sample.update(throttle_reasons=0x4 | 0x20)
    line = watch_line_short("2026-11-21T05:21:07Z gpu7", Dev())
    assert len(line) <= 100 and line.endswith(" throttle sw_power_cap+1"), line
    Dev.memory_total = 80 * 2**30  # an H100 at 700 W, power cap and thermal slowdown
    Dev.sample.update(memory_used_bytes=int(79.1 * 2**30))
    line = watch_line_short("2026-11-21T05:21:07Z gpu7", Dev())
    assert len(line) <= 100 and "mem 79/80 GiB" in line and line.endswith(" throttle sw_power_cap+1"), line


def test_json_lines(capsys):
    assert main(["watch", "-n", "2", "-i", "0.25", "--json", "--replay", str(NOT_SUPPORTED)]) == exitcodes.OK
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == 2 and all(r["gpu"] == 0 and r["fault"] is None for r in records)
    assert records[0]["pcie_rx_kbps"] is None and records[0]["na"]["pcie_rx_kbps"] == "NotSupported"
    assert records[0]["gpu_util_pct"] == 40 and records[0]["memory_total_bytes"] == 8 * 2**30


def test_gpu_lost_mid_watch_keeps_going(capsys):
    assert main(["watch", "-n", "9", "-i", "0.25", "--replay", str(GPU_LOST)]) == exitcodes.OK
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 9
    assert all("FAULT" not in line for line in lines[:6])
    assert all("FAULT GpuIsLost" in line for line in lines[6:])


def test_no_gpu_exit_code_and_json_error(capsys):
    assert main(["watch", "--json", "--replay", str(NO_NVML)]) == exitcodes.NO_GPU == 6
    captured = capsys.readouterr()
    record = json.loads(captured.out)
    assert record["error"] == "no_gpu" and record["reason"] == "LibraryNotFound"
    assert "nothing to watch" in captured.err and "libnvidia-ml.so" in captured.err


def test_live_watch_on_this_machine():
    """Live NVML: no driver here gives exit 6 with a clear message; a GPU machine prints lines."""
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "watch", "-n", "1"], capture_output=True,
                          text=True, timeout=60)
    if proc.returncode == exitcodes.NO_GPU:
        assert "nothing to watch" in proc.stderr and proc.stdout == ""
    else:
        assert proc.returncode == 0 and proc.stdout.split()[1] == "gpu0"


@pytest.mark.parametrize("argv, words", [
    (["watch", "-i", "0.1"], "at least 0.25"),
    (["watch", "-i", "nan"], "at least 0.25"),
    (["watch", "-i", "abc"], "not a number"),
    (["watch", "-n", "0"], "at least 1"),
    (["tui", "--interval", "0.2"], "at least 0.25"),
])
def test_bad_arguments_exit_2(argv, words, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == exitcodes.USAGE
    assert words in capsys.readouterr().err


def test_bad_recording_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["watch", "--replay", str(bad)]) == exitcodes.USAGE
    assert main(["tui", "--replay", str(bad)]) == exitcodes.USAGE
    assert "not a gpudoctor recording" in capsys.readouterr().err


def test_tui_without_a_terminal_says_use_watch():
    proc = subprocess.run([sys.executable, "-m", "gpudoctor"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env={**os.environ, "TERM": "dumb"})
    assert proc.returncode == exitcodes.USAGE and "gpudoctor watch" in proc.stderr
