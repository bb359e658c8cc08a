"""Process actions on the Processes screen, on real processes: a `sleep` child of the test, listed
on a fake GPU, gets SIGTERM (T), SIGKILL (K) or SIGINT (I) after the user confirms with y, and the
test waits for it to exit; n cancels; another user's process is refused unless root; a replayed
process is never signalled. Also the tree view (t), the elapsed time, and this user's processes
first with the `u` filter."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from types import SimpleNamespace
from typing import Any

import pytest

from support.tui_support import STANDIN, fixed_host, make_test_app, run_async, screen_text, take_samples, wait_for

pytestmark = pytest.mark.timeout(120)
GiB = 2**30


@pytest.fixture
def child() -> Any:
    """A real process of this user to signal: `sleep 600`, killed at the end if still there."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _app_with(pids: list[int]) -> Any:
    """The app on a fake GPU whose process list holds ``pids`` (real processes of this machine)."""
    from gpudoctor.backends import NvmlBackend, NvmlGate
    from gpudoctor.tui.app import GpudoctorApp
    from support.nvml_fake import FakePynvml

    fake = FakePynvml(count=1, readings={"nvmlDeviceGetComputeRunningProcesses": [
        SimpleNamespace(pid=pid, usedGpuMemory=GiB) for pid in pids], "nvmlDeviceGetGraphicsRunningProcesses": []})
    return GpudoctorApp(lambda: NvmlBackend(NvmlGate(fake)), interval=3600.0, host_sampler=fixed_host,
                        workload_check=lambda: "not wired")


async def _select(pilot: Any, app: Any, pid: int) -> Any:
    await take_samples(pilot, app, 1)
    await pilot.press("p")
    await wait_for(pilot, lambda: app.screen.TITLE == "Processes" and app.screen.query_one("#procs").row_count)
    table = app.screen.query_one("#procs")
    row = next(k for k in range(table.row_count) if table.get_row_at(k)[0].plain == str(pid))
    table.move_cursor(row=row, animate=False)
    await pilot.pause()
    return app.screen


@pytest.mark.parametrize("key, name", [("T", "SIGTERM"), ("K", "SIGKILL"), ("I", "SIGINT")])
def test_a_confirmed_signal_reaches_the_selected_process(key, name, child):
    @run_async
    async def run() -> None:
        app = _app_with([child.pid])
        async with app.run_test(size=(120, 30)) as pilot:
            screen = await _select(pilot, app, child.pid)
            await pilot.press(key)
            await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmScreen")
            assert child.poll() is None  # nothing sent before the answer
            await pilot.press("y")
            await wait_for(pilot, lambda: child.poll() is not None, timeout=30)
            await wait_for(pilot, lambda: f"sent {name} to pid {child.pid}" in screen_text(app))
            assert screen.last_action == f"sent {name} to pid {child.pid}"
            await pilot.press("q")

    run()
    assert child.wait(timeout=30) == -getattr(signal, name)


def test_no_cancels_and_the_process_lives_on(child):
    @run_async
    async def run() -> None:
        app = _app_with([child.pid])
        async with app.run_test(size=(120, 30)) as pilot:
            screen = await _select(pilot, app, child.pid)
            await pilot.press("K")
            await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmScreen")
            await pilot.press("n")
            await wait_for(pilot, lambda: "cancelled" in screen.last_action)
            await pilot.press("q")

    run()
    assert child.poll() is None


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX user ids")
def test_another_users_process_is_refused_without_asking(monkeypatch, child):
    """The test's own `sleep` child seen by a user who is neither its owner nor root (the ids this
    process reports are changed for the test): refused, not asked, the child lives on."""
    stranger = os.getuid() + 4242
    @run_async
    async def run() -> None:
        app = _app_with([child.pid])
        async with app.run_test(size=(120, 30)) as pilot:
            screen = await _select(pilot, app, child.pid)
            monkeypatch.setattr(os, "getuid", lambda: stranger)
            monkeypatch.setattr(os, "geteuid", lambda: stranger)
            await pilot.press("T")
            await wait_for(pilot, lambda: "not sent" in screen.last_action)
            assert "another user" in screen.last_action
            assert type(app.screen).__name__ != "ConfirmScreen"
            monkeypatch.undo()
            await pilot.press("q")

    run()
    assert child.poll() is None


def test_a_recorded_process_is_never_signalled():
    @run_async
    async def run() -> None:
        app = make_test_app(STANDIN)
        async with app.run_test(size=(120, 30)) as pilot:
            screen = await _select(pilot, app, 424242)
            await pilot.press("T")
            await wait_for(pilot, lambda: "recorded process" in screen.last_action)
            assert type(app.screen).__name__ != "ConfirmScreen"
            await pilot.press("q")

    run()


def test_tree_view_elapsed_time_and_mine_first(child):
    started = time.time()
    @run_async
    async def run() -> None:
        app = _app_with([child.pid, 1])
        async with app.run_test(size=(160, 30)) as pilot:
            screen = await _select(pilot, app, child.pid)
            table = screen.query_one("#procs")
            rows = [[c.plain for c in table.get_row_at(k)] for k in range(table.row_count)]
            mine = [r[0] == str(child.pid) or os.geteuid() == 0 for r in rows]
            assert mine == sorted(mine, reverse=True)  # this user's processes first
            assert next(r for r in rows if r[0] == str(child.pid))[7].count(":") >= 1  # elapsed, mm:ss
            await pilot.press("t")
            await wait_for(pilot, lambda: "tree" in screen_text(app))
            rows = [[c.plain for c in table.get_row_at(k)] for k in range(table.row_count)]
            mine = next(r for r in rows if r[0] == str(child.pid))
            assert mine[-1].lstrip().startswith("└─ sleep 600")  # under its parent, this test
            assert any(r[0] == str(os.getpid()) for r in rows)
            await pilot.press("u")
            await wait_for(pilot, lambda: "mine only" in screen_text(app))
            rows = [[c.plain for c in table.get_row_at(k)] for k in range(table.row_count)]
            assert str(child.pid) in [r[0] for r in rows]
            assert ("1" in [r[0] for r in rows]) == (os.geteuid() == 0)  # pid 1 is root's
            await pilot.press("q")

    run()
    assert time.time() - started < 600
