"""``gpudoctor --once`` (the compact view once, plain text, as wide as the terminal), the short
``watch`` line's order of giving way (SM activity stays), and ``watch --replay``'s time stamps
(the recorded time, not the time of replaying)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STANDIN = ROOT / "tests" / "data" / "handmade_two_gpu_training_standin.json"
GiB = 2**30


def _gpudoctor(*args: str, columns: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, env=env,
                          timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("columns", [60, 100, 200])
def test_once_prints_the_compact_view_plain_and_within_the_width(columns):
    done = _gpudoctor("--once", "--replay", str(STANDIN), columns=columns)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "\x1b" not in done.stdout  # not a terminal: no escape sequence
    assert all(len(line) <= columns for line in lines), lines
    assert lines[0].startswith("gpudoctor") and "Doctor: " in lines[0] and "replay" in lines[0]
    assert "2026-11-21T05:30:00Z" in lines[0] or columns < 80  # the recorded time, where it fits
    assert re.search(r"(^| )0 (A100-SXM4-40GB )?util 88%", done.stdout, re.M)
    assert re.search(r"(^| )1 (A100-SXM4-40GB )?util 0%", done.stdout, re.M)
    assert all(pid in done.stdout for pid in ("424242", "424300", "515151"))


def test_once_on_a_fake_eight_gpu_node_holds_every_gpu_at_80_columns():
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "fake_node.py"), "--once"], capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if re.match(r" ?\d util", line)]
    assert len(rows) == 8 and all(len(line) <= 80 for line in done.stdout.splitlines())
    assert all("smact" in row for row in rows[:4])  # read again once GPM's second sample was due


def test_watch_replay_stamps_lines_with_the_recorded_time():
    done = _gpudoctor("watch", "--replay", str(STANDIN), "-n", "2", columns=200)
    assert done.returncode == 0, done.stderr
    stamps = [line.split()[0] for line in done.stdout.splitlines()]
    assert stamps[:2] == ["2026-11-21T05:30:00Z"] * 2 and stamps[2] == "2026-11-21T05:30:01Z", stamps


def test_the_short_watch_line_keeps_sm_activity_before_the_clock():
    from gpudoctor.presentation import WATCH_WIDTH, watch_line_short
    from gpudoctor.sampling import DeviceSnapshot

    sample = {"gpu_util_pct": 100, "sm_active_pct": 9.0, "memory_used_bytes": int(39.5 * GiB),
              "memory_total_bytes": 40 * GiB, "temperature_c": 84, "power_w": 399.0, "power_limit_w": 400.0,
              "clock_sm_mhz": 1410, "throttle_reasons": 0x4 | 0x8 | 0x20 | 0x40 | 0x80}
    dev = DeviceSnapshot(index=0, static={"name": "NVIDIA A100-SXM4-40GB"}, sample=sample, processes=[])
    line = watch_line_short("2026-11-21T05:30:00Z gpu0", dev)
    assert len(line) <= WATCH_WIDTH
    assert " smact 9% " in line, line
    assert "util 100%" in line and "mem 39.5/40.0 GiB" in line
    # the reasons shortened before anything goes; the clock goes before SM activity
    long_dev = DeviceSnapshot(index=10, static={"name": "x"}, sample={**sample, "throttle_reasons": 0x1FF},
                              processes=[])
    line = watch_line_short("2026-11-21T05:30:00Z gpu10", long_dev)
    assert len(line) <= WATCH_WIDTH and " smact 9% " in line, line
