"""Screens at fixed terminal sizes compared with stored text snapshots.

The app runs on hand-made recordings with a fixed host sampler and samples only when
the test asks, so every frame is reproducible. Colours are not compared, the text is.
To accept a deliberate change: GPUDOCTOR_UPDATE_SNAPSHOTS=1 pytest tests/tui/test_tui_snapshots.py,
then read the diff of tests/tui/snapshots/ before committing it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.tui_support import DATA, GPU_LOST, NO_NVML, STANDIN, make_test_app, run_async, screen_lines, take_samples

GPM_SMALL_KERNELS = DATA / "handmade_h100_gpm_small_kernels.json"  # H100s with GPM: SM activity, the verdict

pytestmark = pytest.mark.timeout(120)

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"


def check_snapshot(name: str, lines: list[str]) -> None:
    text = "\n".join(line.rstrip() for line in lines) + "\n"
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("GPUDOCTOR_UPDATE_SNAPSHOTS") == "1" or not path.exists():
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if os.environ.get("GPUDOCTOR_UPDATE_SNAPSHOTS") != "1":
            pytest.fail(f"snapshot {path.name} did not exist; written now, check it and re-run")
    assert text == path.read_text(encoding="utf-8"), f"screen differs from {path}"


async def _frame(path: Path, size: tuple[int, int], samples: int, keys: tuple[str, ...] = ()) -> list[str]:
    app = make_test_app(path)
    async with app.run_test(size=size) as pilot:
        await take_samples(pilot, app, samples)
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        await pilot.pause()
        lines = screen_lines(app)
        await pilot.press("q")
    assert app.return_code == 0
    return lines


@pytest.mark.parametrize("name, path, size, samples, keys", [
    ("overview_two_gpus_80x24", STANDIN, (80, 24), 12, ()),
    ("overview_two_gpus_120x40", STANDIN, (120, 40), 12, ()),
    ("overview_two_gpus_60x40", STANDIN, (60, 40), 12, ()),
    ("overview_h100_gpm_120x40", GPM_SMALL_KERNELS, (120, 40), 6, ()),
    ("overview_gpu_lost_80x24", GPU_LOST, (80, 24), 9, ()),
    ("overview_no_gpu_80x24", NO_NVML, (80, 24), 2, ()),
    ("processes_80x24", STANDIN, (80, 24), 2, ("p",)),
    ("help_80x24", STANDIN, (80, 24), 1, ("question_mark",)),
])
def test_snapshot(name, path, size, samples, keys):
    lines = run_async(_frame)(path, size, samples, keys)
    assert len(lines) == size[1] and all(len(line) == size[0] for line in lines)
    check_snapshot(name, lines)


def test_two_gpus_fit_80x24_without_scrolling():
    lines = run_async(_frame)(STANDIN, (80, 24), 3)
    text = "\n".join(lines)
    assert "GPU 0: NVIDIA" in text and "GPU 1: NVIDIA" in text
    host_top = next(i for i, line in enumerate(lines) if "Host" in line and line.startswith("╭"))
    assert lines[host_top + 3].startswith("╰")  # the host panel's bottom border is on screen
    assert "q quit" in lines[-1]


@run_async
async def test_resize_reflows_the_panels():
    app = make_test_app(STANDIN)
    async with app.run_test(size=(120, 40)) as pilot:
        await take_samples(pilot, app, 2)
        wide = "\n".join(screen_lines(app))
        # two columns: util|mem on a line; free rows hold tall graphs, utilisation above memory,
        # each named on its middle row
        assert any(line.count("util") == 1 and "mem " in line for line in wide.splitlines())
        assert wide.count("100%") == 4 and wide.count("util") == 4 and wide.count("   mem ") == 2
        await pilot.resize_terminal(60, 40)
        await pilot.pause()
        narrow = screen_lines(app)
        util_line = next(line for line in narrow if "util" in line)
        assert "mem" not in util_line  # one column below 70 columns
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert any("util" in line and "mem" in line for line in screen_lines(app))
        await pilot.press("q")
