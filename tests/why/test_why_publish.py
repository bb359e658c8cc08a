"""TrainingMonitor publishes its live summary for `gpudoctor why`, the TUI and the exporter: one
atomic file per PID in a per-user directory, removed at exit, off with one switch."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpudoctor.system import _published

from support._why_targets import MONITORED_LOOP

pytest.importorskip("torch")



def _start(tmp_path, env_extra):
    script = tmp_path / "train.py"
    script.write_text(MONITORED_LOOP, encoding="utf-8")
    stop_file = tmp_path / "stop"
    env = dict(os.environ, **{_published.ENV_SWITCH: "1", **env_extra})
    proc = subprocess.Popen([sys.executable, str(script), str(stop_file)], stdout=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout.readline().strip() == "ready"
    return proc, stop_file


def _wait_for(predicate, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    return predicate()


def test_a_monitored_loop_publishes_its_live_summary_and_removes_it_at_exit(tmp_path, monkeypatch):
    directory = tmp_path / "rt"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv(_published.ENV_DIR, str(directory))
    proc, stop_file = _start(tmp_path, {_published.ENV_DIR: str(directory)})
    try:
        record = _wait_for(lambda: _published.read_all().get(proc.pid))
        assert record is not None
        assert record["format"] == "gpudoctor-live" and record["command"].endswith("train.py " + str(stop_file))
        assert record["verdict"] == "input_bound" and record["data_wait_share"] > 0.99
        assert record["steps"] > 5 and record["samples_per_s"] == pytest.approx(record["steps_per_s"] * 4)
        assert record["step_time_p50_s"] > 0.01
        assert not (directory / f"{proc.pid}.json").stat().st_mode & 0o022
        assert not [n for n in os.listdir(directory) if n.endswith(".tmp")]
    finally:
        stop_file.write_text("")
        proc.wait(timeout=120)
    assert not (directory / f"{proc.pid}.json").exists()


def test_one_switch_turns_publishing_off(tmp_path):
    directory = tmp_path / "rt"
    directory.mkdir(mode=0o700)
    proc, stop_file = _start(tmp_path, {_published.ENV_DIR: str(directory), _published.ENV_SWITCH: "0"})
    try:
        time.sleep(2.0)  # four publishing intervals
        assert os.listdir(directory) == []
    finally:
        stop_file.write_text("")
        proc.wait(timeout=120)
    assert _published.publishing_enabled(True) and not _published.publishing_enabled(False)


def test_a_directory_others_can_write_is_refused_and_dead_processes_are_skipped(tmp_path, monkeypatch):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    monkeypatch.setenv(_published.ENV_DIR, str(open_dir))
    assert _published.runtime_dir(create=True) is None
    safe = tmp_path / "safe"
    safe.mkdir(mode=0o700)
    monkeypatch.setenv(_published.ENV_DIR, str(safe))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = {"format": _published.FORMAT, "pid": dead.pid, "t": time.time()}
    _published.write(record, str(safe))
    _published.write(dict(record, pid=os.getpid()), str(safe))
    (safe / "junk.json").write_text("not json")
    (safe / "12.json").write_text("{" * 10)
    found = _published.read_all()
    assert list(found) == [os.getpid()]
    assert not (safe / f"{dead.pid}.json").exists()


def test_the_default_directory_is_private(tmp_path, monkeypatch):
    monkeypatch.delenv(_published.ENV_DIR, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    tmp_path.chmod(0o700)
    path = _published.runtime_dir(create=True)
    assert path == str(tmp_path / "gpudoctor") and oct(os.stat(path).st_mode & 0o777) == "0o700"


def test_the_published_file_is_private_whatever_the_umask(tmp_path):
    directory = tmp_path / "rt"
    directory.mkdir(mode=0o700)
    old = os.umask(0o022)
    try:
        _published.write({"pid": os.getpid(), "format": "gpudoctor-live"}, str(directory))
    finally:
        os.umask(old)
    assert (directory / f"{os.getpid()}.json").stat().st_mode & 0o777 == 0o600
