"""The compact Overview: a fake 8-GPU node fits 80x24 with every GPU, every process and the
doctor's verdict on one screen; 64 GPUs are navigable; Enter opens one GPU's detailed panel,
Esc goes back, v switches views; wide screens put GPUs in columns. Also ``once_lines`` (``gpudoctor
--once``), which the compact view shares."""

from __future__ import annotations

import re
from typing import Any

import pytest

from support.tui_support import fixed_host, run_async, running, screen_lines, wait_for

pytestmark = pytest.mark.timeout(300)

PIDS = ("41021", "41022", "41023", "41024", "52210", "52211", "52990", "41028")


def _node_app(gpus: int) -> Any:
    from support.fake_node import node
    from gpudoctor.backends import NvmlBackend, NvmlGate
    from gpudoctor.tui.app import GpudoctorApp

    fake = node(gpus)
    return GpudoctorApp(lambda: NvmlBackend(NvmlGate(fake)), interval=3600.0, host_sampler=fixed_host,
                        process_info=lambda pid, p: {"user": "alice", "command": "python train.py"},
                        workload_check=lambda: "not wired")


def _gpu_rows(lines: list[str]) -> dict[int, str]:
    """GPU index -> its compact row (``NN util ...``), for each row on screen (columns split)."""
    found = {}
    for line in lines:
        for m in re.finditer(r"(?:^|\s)(\d{1,2}) (?:H100 80GB HBM3 )?util \d+%", line):
            found[int(m.group(1))] = line
    return found


@run_async
async def test_eight_gpus_and_their_processes_fit_80x24_with_the_verdict():
    from gpudoctor.tui.app import HeaderVerdict

    async with running(_node_app(8), size=(80, 24), samples=2) as (app, pilot):
        app.post_message(HeaderVerdict(("warn", "persistence mode is off")))
        await wait_for(pilot, lambda: app.headline is not None)
        await pilot.pause()
        assert app.screen.compact_shown()  # 8 detailed panels do not fit: the screen chose
        lines = screen_lines(app)
        assert "Doctor: WARN" in lines[0] and "· live" in lines[0]
        assert sorted(_gpu_rows(lines)) == list(range(8))
        text = "\n".join(lines)
        assert all(pid in text for pid in PIDS), "a process is missing"
        assert "smact" in text or "work" in text
        assert app.screen.query_one("#panels").max_scroll_y == 0  # all of it, no scrolling
        await pilot.press("v")  # the detailed panels, by choice
        await pilot.pause()
        assert not app.screen.compact_shown() and "GPU 0: NVIDIA H100" in "\n".join(screen_lines(app))
        await pilot.press("v")
        await pilot.pause()
        assert app.screen.compact_shown()


@run_async
async def test_sixty_four_gpus_are_navigable_and_enter_opens_one():
    async with running(_node_app(64), size=(80, 24), samples=1) as (app, pilot):
        assert app.screen.compact_shown()
        assert 63 not in _gpu_rows(screen_lines(app))
        for _ in range(63):
            await pilot.press("down")
        await wait_for(pilot, lambda: 63 in _gpu_rows(screen_lines(app)))  # scrolled to the selection
        assert app.screen.selected == 63
        await pilot.press("enter")
        await wait_for(pilot, lambda: "GPU 63: NVIDIA H100" in "\n".join(screen_lines(app)))
        assert "Esc" in screen_lines(app)[0]
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen.compact_shown())
        await pilot.press("up")
        await pilot.pause()
        assert app.screen.selected == 62


@run_async
async def test_a_wide_screen_puts_gpus_in_columns():
    async with running(_node_app(8), size=(200, 60), samples=2) as (app, pilot):
        await pilot.press("v") if not app.screen.compact_shown() else None
        await pilot.pause()
        lines = screen_lines(app)
        rows = _gpu_rows(lines)
        assert sorted(rows) == list(range(8))
        assert len(set(rows.values())) < 8, "one GPU a line on a 200-column screen"
        assert all(len(line) <= 200 for line in lines)


@pytest.mark.parametrize("width", [40, 60, 80, 120, 200])
def test_once_lines_fit_the_width_and_hold_every_gpu(width):
    from support.fake_node import node
    from gpudoctor.backends import NvmlBackend, NvmlGate
    from gpudoctor.sampling.presentation import once_lines, process_rows
    from gpudoctor.sampling.sampler import Sampler

    snap = Sampler(NvmlBackend(NvmlGate(node(8))), fixed_host).read()
    rows, _ = process_rows(snap, lambda pid, p: {"user": "alice", "command": "python train.py " + "x" * 300})
    lines = once_lines(snap, rows, width, "Doctor: PASS")
    assert all(len(line) <= max(40, width) for line in lines), [line for line in lines if len(line) > width]
    assert sorted(_gpu_rows(lines)) == list(range(8))
    assert all(pid in "\n".join(lines) for pid in PIDS)
    assert "live" in lines[0]
