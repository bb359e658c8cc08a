"""What a terminal shows after many partial repaints equals a full repaint of the same frame.

The GPU and host panels repaint only the lines whose text changed (tui/widgets.py). A mistake
there leaves stale cells on a real terminal while every in-process screen capture still looks
right, so this test feeds the exact bytes Textual would send to the terminal (each update's
``render_segments``) into pyte, a terminal emulator, and compares that screen, cell by cell
with colours and bold, with a full repaint.
"""

from __future__ import annotations

import io

import pyte
import pytest
from rich.console import Console

from support.tui_support import GPU_LOST, STANDIN, make_test_app, run_async, take_samples

pytestmark = pytest.mark.timeout(180)


def _cells(screen: pyte.Screen) -> list[list[tuple[str, str, str, bool]]]:
    return [[(c.data, c.fg, c.bg, c.bold) for c in (screen.buffer[y][x] for x in range(screen.columns))]
            for y in range(screen.lines)]


async def _partial_and_full(path, size: tuple[int, int], samples: int) -> tuple[pyte.Screen, pyte.Screen, int]:
    app = make_test_app(path, loop=True)
    console = Console(file=io.StringIO(), force_terminal=True, color_system="256", width=size[0], height=size[1])
    terminal = pyte.Screen(*size)
    stream = pyte.Stream(terminal)
    partial_updates = [0]

    def display(screen, renderable) -> None:  # what App._display writes to a real terminal
        if renderable is not None and hasattr(renderable, "render_segments"):
            partial_updates[0] += type(renderable).__name__ == "ChopsUpdate"  # Textual's partial update
            stream.feed(renderable.render_segments(console))

    app._display = display
    async with app.run_test(size=size) as pilot:
        for _ in range(samples):
            await take_samples(pilot, app, 1)
        await pilot.pause()
        full = pyte.Screen(*size)
        pyte.Stream(full).feed(app.screen._compositor.render_update(full=True).render_segments(console))
        await pilot.press("q")
    return terminal, full, partial_updates[0]


@pytest.mark.parametrize("path, size, samples", [
    (STANDIN, (120, 40), 40),   # two training GPUs: sparklines, values and the tall graph change
    (STANDIN, (80, 24), 25),
    (GPU_LOST, (100, 30), 14),  # a GPU lost mid-session: panels change their number of lines
])
def test_partial_repaints_leave_the_screen_a_full_repaint_draws(path, size, samples):
    terminal, full, partial_updates = run_async(_partial_and_full)(path, size, samples)
    assert partial_updates >= samples // 2, "the panels were repainted whole, not in part"
    assert "GPU 0" in "\n".join(full.display)
    shown, expected = _cells(terminal), _cells(full)
    stale = [(y, x, shown[y][x], expected[y][x]) for y in range(size[1]) for x in range(size[0])
             if shown[y][x] != expected[y][x]]
    assert not stale, f"{len(stale)} cells differ from a full repaint, first: {stale[:3]}"
