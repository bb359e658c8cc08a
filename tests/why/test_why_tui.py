"""The Processes screen: the "why" column for processes that publish a training summary, and
the `y` key that runs `gpudoctor why` on the selected process in a worker (Pilot)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpudoctor.system import _published
from support.tui_support import STANDIN, make_test_app, open_processes, run_async, screen_text, wait_for

from support._why_targets import ASLEEP, start, stop


def _publish(pid: int, verdict: str, command: str) -> None:
    directory = _published.runtime_dir(create=True)
    assert directory is not None
    _published.write({"format": _published.FORMAT, "format_version": 1, "pid": pid, "command": command,
                      "t": time.time(), "verdict": verdict, "steps": 10}, directory)


def _rows(table) -> dict[str, list[str]]:
    return {str(table.get_row_at(i)[0]): [str(c) for c in table.get_row_at(i)] for i in range(table.row_count)}


@run_async
async def test_a_publishing_process_shows_its_diagnosis():
    _publish(os.getpid(), "input_bound", "python train.py --epochs 3")
    try:
        app = make_test_app(STANDIN)
        async with app.run_test(size=(140, 24)) as pilot:
            _screen, table = await open_processes(pilot, app)
            rows = _rows(table)
            mine = rows[str(os.getpid())]
            assert mine[2] == "-" and mine[-2] == "input-bound" and mine[-1] == "python train.py --epochs 3"
            assert rows["424242"][-2] == ""  # a GPU process that publishes nothing
            assert "4 of 4" in screen_text(app)
            await pilot.press("q")
    finally:
        _published.remove(os.getpid(), _published.runtime_dir())


@run_async
async def test_the_y_key_runs_why_on_the_selected_process_without_blocking(tmp_path):
    pytest.importorskip("torch")
    from gpudoctor.core.errors import GpudoctorError
    from gpudoctor.why.pyspy import find_py_spy

    try:
        find_py_spy()
    except GpudoctorError:
        pytest.skip("py-spy is not installed: `why` answers at once with its install hint")
    proc = start(tmp_path, "asleep", ASLEEP)
    _publish(proc.pid, "ok", f"python {tmp_path}/asleep.py")
    try:
        app = make_test_app(STANDIN)
        app.why_seconds = 2.0
        async with app.run_test(size=(140, 30)) as pilot:
            screen, table = await open_processes(pilot, app)
            row = list(_rows(table)).index(str(proc.pid))
            table.move_cursor(row=row, animate=False)
            await pilot.press("y")
            await pilot.pause()
            assert app.state.why_results[proc.pid] == "why: sampling..."  # the UI goes on meanwhile
            await pilot.press("s")  # the screen still answers keys while the worker samples
            await wait_for(pilot, lambda: type(app.screen).__name__ == "WhyScreen", timeout=120)
            await wait_for(pilot, lambda: f"gpudoctor why {proc.pid}" in screen_text(app))  # drawn
            text = screen_text(app)
            assert f"gpudoctor why {proc.pid}" in text and "asleep.py" in text and ": idle" in text, text
            await pilot.press("escape")
            await pilot.pause()
            assert app.screen is screen
            assert _rows(table)[str(proc.pid)][-2] == "why: idle"
            await pilot.press("q")
    finally:
        stop(proc)
        _published.remove(proc.pid, _published.runtime_dir())


@run_async
async def test_why_on_a_process_that_is_gone_shows_the_error(tmp_path):
    app = make_test_app(STANDIN)
    app.why_seconds = 1.0
    async with app.run_test(size=(120, 30)) as pilot:
        await open_processes(pilot, app)
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()  # reaped: its PID names no process now
        app.start_why(gone.pid)
        await wait_for(pilot, lambda: type(app.screen).__name__ == "WhyScreen", timeout=60)
        await wait_for(pilot, lambda: f"no process with PID {gone.pid}" in screen_text(app))
        await pilot.press("escape")
        await pilot.press("q")


@run_async
async def test_the_y_key_on_a_sleeping_gpu_holder_whose_source_cannot_be_read_says_idle(monkeypatch):
    """Issue 36, item 5, in the TUI: `y` on `python3 -c "import time; time.sleep(900)"` holding a
    GPU (the NVML stand-in lists it) said "CPU-bound ... computing on the CPU" beside its own
    "(CPU 0%)". The live path: `why` asks NVML which GPU the process holds."""
    from gpudoctor import backends
    from gpudoctor.core.errors import GpudoctorError
    from gpudoctor.why.pyspy import find_py_spy

    from test_why_rules import StandInNvml

    try:
        find_py_spy()
    except GpudoctorError:
        pytest.skip("py-spy is not installed: `why` answers at once with its install hint")

    class HeldGpu(StandInNvml):
        def close(self) -> None:
            pass

    proc = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(900)"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        monkeypatch.setattr(backends, "NvmlBackend", lambda: HeldGpu(proc.pid, None))
        app = make_test_app(STANDIN)
        app.why_seconds = 2.0
        async with app.run_test(size=(140, 30)) as pilot:
            app.replay = None  # as on a live machine: the answer joins NVML's (the stand-in's) figures
            app.start_why(proc.pid)
            await wait_for(pilot, lambda: type(app.screen).__name__ == "WhyScreen", timeout=120)
            await wait_for(pilot, lambda: f"gpudoctor why {proc.pid}" in screen_text(app))  # drawn
            text = screen_text(app)
            assert ": idle" in text and "holds a GPU" in text, text
            assert "CPU-bound" not in text and "computing on the CPU" not in text, text
            await pilot.press("q")
    finally:
        stop(proc)
