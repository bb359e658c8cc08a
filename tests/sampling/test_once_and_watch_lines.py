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

ROOT = Path(__file__).resolve().parents[2]
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
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "fake_node.py"), "--once"], capture_output=True,
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
    from gpudoctor.sampling.presentation import WATCH_WIDTH, watch_line_short
    from gpudoctor.sampling.sampler import DeviceSnapshot

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


def test_the_readme_exit_codes_are_exitcodes_py_and_name_the_exporters_exception():
    """One source: every code of gpudoctor/core/exitcodes.py has its README row and no other row is
    there; the signal rows say the exporter stops with 0 (its SIGTERM/SIGHUP are its normal stop)."""
    from gpudoctor.core import exitcodes

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (\d+) \| (.*) \|$", readme, re.M))
    assert {int(c) for c in rows} == set(exitcodes.DESCRIPTIONS)
    for code in (exitcodes.HANGUP, exitcodes.TERMINATED):
        assert "exporter" in rows[str(code)] and "exit 0" in rows[str(code)]
        assert "exporter: 0" in exitcodes.DESCRIPTIONS[code]
    assert "0 stopped by SIGTERM" in (ROOT / "gpudoctor" / "commands" / "exporter.py").read_text()


def test_the_workload_screen_without_torch_says_how_to_install_it():
    """The sweep's child fails to import torch: the screen gives the sentence with the install
    command, not `ModuleNotFoundError` or the options dict."""
    from support.tui_support import run_async, run_sweep_on_screen, screen_text, workload_app
    from gpudoctor.tui.workload_runner import NO_TORCH, workload_available

    @run_async
    async def run() -> str:
        app = workload_app("support.tui_workload_double:torchless_sweep")
        async with app.run_test(size=(80, 24)) as pilot:
            await run_sweep_on_screen(pilot, app, until=("not available", "failed"))
            text = screen_text(app)
            await pilot.press("q")
        return text

    text = run()
    joined = " ".join(text.split())
    assert "pip install 'gpudoctor[torch]'" in joined and "ModuleNotFoundError" not in joined, text
    assert "options {" not in joined
    assert "not available" in text.splitlines()[0]
    assert NO_TORCH.startswith("The MNIST sweep trains")
    # and before any child starts, where torch cannot be found (find_spec; nothing imported)
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        assert workload_available() == NO_TORCH


@pytest.mark.parametrize("width", [40, 60, 78, 118])
def test_the_clocks_line_keeps_every_reason_whole(width):
    """Every clock-event reason's words are on the panel whole, wrapped, never cut mid-word."""
    from gpudoctor.backends import throttle_reason_words
    from gpudoctor.sampling.sampler import DeviceSnapshot, History
    from gpudoctor.tui.widgets import GpuPanel

    mask = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
    sample = {"gpu_util_pct": 90, "memory_used_bytes": GiB, "memory_total_bytes": 40 * GiB, "temperature_c": 88,
              "power_w": 300.0, "power_limit_w": 400.0, "clock_sm_mhz": 700, "throttle_reasons": mask}
    panel = GpuPanel(0)
    panel.device = DeviceSnapshot(index=0, static={"name": "NVIDIA A100-SXM4-40GB"}, sample=sample, processes=[])
    panel.history = History()
    lines = [line.plain if hasattr(line, "plain") else "".join(t for t, _ in line) for line in panel.lines(width)]
    assert all(len(line) <= width for line in lines)
    text = " ".join(" ".join(lines).split())
    for words in throttle_reason_words(mask):
        assert " ".join(words.split()) in text, (words, lines)


def test_a_replay_shows_no_live_host_panel_beside_the_recorded_gpus():
    """`gpudoctor --replay FILE` (make_app, no host sampler given): the host panel says the
    recording has no host readings, instead of this machine's CPU and RAM."""
    from support.tui_support import run_async, screen_text, take_samples
    from gpudoctor.tui.app import make_app

    @run_async
    async def run() -> str:
        app = make_app(replay=str(STANDIN), interval=3600.0, startup_doctor=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await take_samples(pilot, app, 1)
            text = screen_text(app)
            await pilot.press("q")
        return text

    text = run()
    assert "host readings are not in the recording" in text
    assert "CPU " not in text and " cores" not in text
