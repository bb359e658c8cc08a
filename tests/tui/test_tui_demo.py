"""The shipped demo recording (``gpudoctor --demo``) shows its processes: who runs what on each
GPU, in the compact Overview and in ``--once``, not ``(not recorded)``: ``record`` keeps each
process's command line beside NVML's readings (gpudoctor.sampling.recorder), and the demo was made with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.tui_support import make_test_app, run_async, screen_text, take_samples, wait_for

pytestmark = pytest.mark.timeout(120)


def _demo() -> tuple[Path, list[dict]]:
    from gpudoctor.backends.recording import demo_recording_path

    path = Path(demo_recording_path())
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["meta"]["fake"] is True and "FAKE NODE" in data["meta"]["scenario"]  # labelled as such
    procs = [p for device in data["nvml"]["samples"][0]["processes"] for p in device]
    return path, procs


def test_the_demo_records_a_command_for_every_process():
    path, procs = _demo()
    assert len(procs) >= 6 and all(p.get("command") for p in procs), procs
    assert path.stat().st_size < 400_000  # small enough to ship in the wheel


def test_replaying_the_demo_shows_its_processes_in_the_overview():
    path, procs = _demo()

    @run_async
    async def run() -> str:
        app = make_test_app(path)
        async with app.run_test(size=(200, 60)) as pilot:
            await take_samples(pilot, app, 1)
            await wait_for(pilot, lambda: str(procs[-1]["pid"]) in screen_text(app))
            text = screen_text(app)
            await pilot.press("q")
        return text

    text = run()
    assert "(not recorded)" not in text
    for proc in procs:
        line = next((line for line in text.splitlines() if f" {proc['pid']} " in line), "")
        assert proc["command"][:30] in line, (proc, line)


def test_demo_once_prints_the_commands():
    _path, procs = _demo()
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "--demo", "--once"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "120"}, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert "(not recorded)" not in done.stdout
    assert all(proc["command"][:30] in done.stdout for proc in procs), done.stdout
