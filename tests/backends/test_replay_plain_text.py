"""Text inside a recording is data: an NA reason (NVML's status, a reading's) that holds
terminal escape sequences, C1 controls or bidi overrides reaches no terminal raw. The replay
backend's loader makes it plain, and `watch --replay`, the exporter's log line and the TUI
show it as visible marks."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.backends import ReplayBackend, is_na, load_recording
from support.tui_support import NO_NVML, NOT_SUPPORTED, fixed_host, run_async, screen_text, take_samples

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
# OSC retitle (BEL- and ST-terminated), CSI clear and colour, a C1 CSI, a bidi override
HOSTILE = "Lib\x1b]0;pwned\x07\x1b]2;t\x1b\\\x1b[2J\x1b[31m\x9b1m\u202eDEVIRP\u2066x\u2069"
# what may never reach a terminal: C0 controls but the newline, DEL, C1, bidi controls
FORBIDDEN = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _write(tmp_path: Path, source: Path, change) -> Path:
    data = copy.deepcopy(json.loads(source.read_text(encoding="utf-8")))
    data["meta"]["scenario"] = "hand-made hostile copy: escape sequences in NA reasons"
    change(data)
    path = tmp_path / f"handmade_hostile_{source.stem}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def no_nvml_recording(tmp_path: Path) -> Path:
    """NVML's own status is NA with a hostile reason (every front end's "no GPU" line)."""
    def change(data):
        for key in ("status", "driver_version", "cuda_driver_version", "nvml_version", "device_count"):
            if isinstance(data["nvml"].get(key), dict):
                data["nvml"][key] = {"__na__": HOSTILE}
    return _write(tmp_path, NO_NVML, change)


def readings_recording(tmp_path: Path) -> Path:
    """A working GPU whose unsupported readings' reasons are hostile (value cells, watch lines)."""
    def change(data):
        for sample in data["nvml"]["samples"]:
            for device in sample["devices"]:
                for key, value in device.items():
                    if isinstance(value, dict) and "__na__" in value:
                        device[key] = {"__na__": HOSTILE}
    return _write(tmp_path, NOT_SUPPORTED, change)


def _strings(value):
    if isinstance(value, str):
        yield value
    elif is_na(value):
        yield value.reason
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _clean(text: str) -> bool:
    return not FORBIDDEN.search(text)


@pytest.mark.parametrize("make", [no_nvml_recording, readings_recording])
def test_the_loader_hands_out_only_plain_strings(tmp_path, make):
    recording = load_recording(make(tmp_path))
    bad = [s for s in _strings(recording) if not _clean(s)]
    assert not bad, bad[:3]
    backend = ReplayBackend(recording)
    status = backend.status()
    reasons = [status.reason] if is_na(status) else \
        [v.reason for v in backend.sample(0).values() if is_na(v)]
    assert reasons and all(_clean(r) and "␛]0;pwned␇" in r for r in reasons), reasons


def _run(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpudoctor", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_watch_replay_of_no_nvml_prints_the_reason_plain(tmp_path):
    run = _run("watch", "--replay", str(no_nvml_recording(tmp_path)), "--count", "1")
    out = run.stdout + run.stderr
    assert "nothing to watch" in out and "␛]0;pwned␇" in out, out
    assert _clean(out), repr(out)


def test_exporter_log_line_prints_the_reason_plain(tmp_path):
    run = _run("exporter", "--replay", str(no_nvml_recording(tmp_path)), "--port", "0", "--no-report",
               "--exit-after", "2")
    assert "NVML unavailable" in run.stderr and "␛]0;pwned␇" in run.stderr, run.stderr
    assert _clean(run.stdout + run.stderr), repr(run.stderr)


@run_async
async def test_tui_shows_the_no_gpu_reason_plain(tmp_path):
    from gpudoctor.tui.app import GpudoctorApp

    path = no_nvml_recording(tmp_path)
    app = GpudoctorApp(lambda: ReplayBackend.from_file(path), replay=str(path), interval=3600.0,
                       host_sampler=fixed_host, workload_check=lambda: "n/a")
    async with app.run_test(size=(160, 50)) as pilot:
        await take_samples(pilot, app, 2)
        await pilot.pause()
        text = screen_text(app)
        await pilot.press("q")
    assert "No GPU" in text and "␛]0;pwned␇" in text, text
    assert _clean(text), repr(text)
