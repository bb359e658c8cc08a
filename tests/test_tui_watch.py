"""`gpudoctor watch`: lines and JSON lines per GPU per interval, and its exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpudoctor import exitcodes
from gpudoctor.cli import main
from tui_support import GPU_LOST, NO_NVML, NOT_SUPPORTED, STANDIN

pytestmark = pytest.mark.timeout(120)


def test_lines_per_gpu_per_interval(capsys):
    assert main(["watch", "-n", "3", "-i", "0.25", "--replay", str(STANDIN)]) == exitcodes.OK
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6
    assert [line.split()[1] for line in lines] == ["gpu0", "gpu1"] * 3
    assert "util" in lines[0] and "/40.0 GiB" in lines[0] and "throttle" in lines[0]
    assert "throttle gpu_idle" in lines[1]


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
