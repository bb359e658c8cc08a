"""The hooks' publishing thread lives as long as its monitor (issue 35, item 6): ended with the
summary, with close(), or when the monitor is dropped without either, as docs/hooks.md allows."""

from __future__ import annotations

import gc
import threading
import time

import pytest

pytest.importorskip("torch")

from gpudoctor.hooks import TrainingMonitor  # noqa: E402


def _publishers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "gpudoctor-publish" and t.is_alive()]


def _wait_for_none(bound_s: float = 60.0) -> list[threading.Thread]:
    deadline = time.monotonic() + bound_s  # a generous bound: the condition is what is awaited
    while (left := _publishers()) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    return left


def _run(monitor: TrainingMonitor, steps: int = 3) -> None:
    for _ in range(steps):
        with monitor.step():
            pass


def test_thirty_monitors_dropped_without_close_leave_no_thread(tmp_path, monkeypatch):
    """Before: each monitor left its publishing thread behind (30 runs, 30 threads): the thread
    held the monitor, and an exit hook held the thread's publisher."""
    monkeypatch.setenv("GPUDOCTOR_RUNTIME_DIR", str(tmp_path))
    tmp_path.chmod(0o700)
    assert _wait_for_none() == []
    for _ in range(30):
        monitor = TrainingMonitor(device="cpu", publish=True)
        _run(monitor)
        assert monitor._publisher is not None and monitor._publisher.alive()
        del monitor
    assert _wait_for_none() == []


def test_the_summary_ends_the_thread_and_a_next_step_starts_it(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_RUNTIME_DIR", str(tmp_path))
    tmp_path.chmod(0o700)
    monitor = TrainingMonitor(device="cpu", publish=True)
    _run(monitor)
    assert monitor._publisher.alive()
    monitor.summary()
    assert _wait_for_none() == []
    _run(monitor)
    assert monitor._publisher.alive()
    monitor.close()
    assert _wait_for_none() == []
