"""TUI output: foreign text shown as plain text (#11 items 2 and 17), the header verdict and
the busy-machine note (#12 items 2 and 4).

A replayed recording whose GPU name and a process command line hold Rich/Textual markup
and terminal escape sequences: the TUI shows them literally (no MarkupError, no action),
the text report prints no escape sequence, and both bound the length.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.style import Style

from gpudoctor.sampling.presentation import MAX_TEXT, plain_text
from support.tui_support import (NO_NVML, STANDIN, make_test_app, run_async, run_sweep_on_screen, screen_text, take_samples,
                         wait_for, workload_app)

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
HOSTILE_NAME = "A100 [/] [bold]x[@click=app.quit] [a-z]\x1b]0;pwned\x07\x1b[2J\x07end"
HOSTILE_COMMAND = "python train.py data=[/data/a,/data/b] [@click=app.quit]q [/] \x1b[31mred\nnext"


def hostile_recording(tmp_path: Path) -> Path:
    """A copy of the hand-made two-GPU stand-in with hostile GPU 0 name and command line."""
    data = json.loads(STANDIN.read_text(encoding="utf-8"))
    data = copy.deepcopy(data)
    data["meta"]["scenario"] = "hand-made hostile copy of the two-GPU stand-in (markup and escapes)"
    data["meta"]["device_names"][0] = HOSTILE_NAME
    data["nvml"]["static"][0]["name"] = HOSTILE_NAME
    for sample in data["nvml"]["samples"]:
        sample["processes"][0][0]["command"] = HOSTILE_COMMAND
        sample["devices"][0]["temperature_c"] = {"__na__": "\x1b[2Jt"}  # a reading's reason, in a value cell
    path = tmp_path / "handmade_hostile_text.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_plain_text_replaces_controls_and_escapes_and_bounds_length():
    text = plain_text(HOSTILE_NAME)
    assert "\x1b" not in text and "\x07" not in text
    assert "␛]0;pwned␇" in text and "␛[2J" in text  # visible, not executed
    assert "[/] [bold]x[@click=app.quit] [a-z]" in text  # markup kept as literal characters
    assert plain_text("a\nb\tc\x9bd\x85") == "a␊b c␛d\ufffd"  # C1 CSI is an escape too
    assert all(ord(c) >= 0x20 for c in plain_text("".join(chr(i) for i in range(0, 0xA0))))
    long = plain_text("x" * 100_000)
    assert len(long) == MAX_TEXT and long.endswith("…")


@run_async
async def test_tui_shows_hostile_gpu_name_and_command_line_literally(tmp_path):
    path = hostile_recording(tmp_path)
    app = make_test_app(path)
    async with app.run_test(size=(160, 40)) as pilot:
        await take_samples(pilot, app, 2)
        await pilot.pause()
        overview = screen_text(app)
        assert "GPU 0: A100 [/] [bold]x[@click=app.quit] [a-z]␛]0;pwned␇␛[2J" in overview
        assert "temp   n/a (␛[2Jt)" in overview
        await pilot.press("p")
        await pilot.pause()
        processes = screen_text(app)
        assert "data=[/data/a,/data/b] [@click=app.quit]q [/] ␛[31mred␊next" in processes
        assert "\x1b" not in overview + processes
        await pilot.press("q")
    assert app.return_code == 0  # no MarkupError, and [@click=app.quit] did not quit on its own


def test_text_report_prints_no_escape_sequence_from_a_replayed_name(tmp_path):
    path = hostile_recording(tmp_path)
    run = subprocess.run([sys.executable, "-m", "gpudoctor", "report", "--quick", "--replay", str(path)],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode in (0, 3, 4), run.stderr
    assert "\x1b" not in run.stdout and "\x07" not in run.stdout
    assert "A100 [/] [bold]x[@click=app.quit] [a-z]␛]0;pwned␇␛[2J" in run.stdout
    assert "Traceback" not in run.stderr


@run_async
async def test_header_keeps_the_start_up_quick_doctor_verdict():
    from gpudoctor.report.quick import quick_verdict

    verdict = quick_verdict(replay=str(NO_NVML))  # the verdict report --quick and the exporter give
    expected = (verdict.status.value, verdict.headline)
    assert expected[0] == "fail" and expected[1]
    app = make_test_app(NO_NVML, startup_doctor=True)
    async with app.run_test(size=(200, 24)) as pilot:
        await wait_for(pilot, lambda: app.headline is not None)
        await take_samples(pilot, app, 1)
        await pilot.pause()
        first_line = screen_text(app).splitlines()[0]
        assert app.headline == (*expected, "quick")
        assert f"Doctor: FAIL: {expected[1][:40]}" in first_line and "· d" in first_line
        await pilot.press("q")


@run_async
async def test_workload_screen_shows_the_busy_machine_note_like_the_cli():
    from support.tui_workload_double import BUSY_NOTE

    app = workload_app("support.tui_workload_double:busy_sweep")
    async with app.run_test(size=(120, 50)) as pilot:
        await run_sweep_on_screen(pilot, app, until=("finished", "failed"), timeout=60)
        assert app.workload.phase == "finished", (app.workload.error, app.workload.last_message)
        text = " ".join(screen_text(app).split())
        assert "note: " + BUSY_NOTE[:60] in text
        await pilot.press("q")


def test_tall_util_graph_has_a_time_axis_like_nvitop():
    from gpudoctor.tui.widgets import util_graph

    lines = [line.plain for line in util_graph([50.0] * 120, rows=4, width=140, interval_s=1.0)]
    assert len(lines) == 5 and all(len(line) == 140 for line in lines)
    axis = lines[-1]
    assert "30s" in axis and "60s" in axis and "120s" in axis and "util" in lines[2]
    assert axis.index("120s") < axis.index("60s") < axis.index("30s")
    assert axis.index("30s") + len("30s") == 140 - 30  # the mark ends at the sample taken 30 s ago
    assert lines[0].strip() == "100%" and set(lines[3][-120:]) == {"█"}  # half of 4 rows filled



def test_free_rows_split_between_utilisation_and_memory_graphs():
    from gpudoctor.tui.widgets import LABEL_W, history_graph

    lines = [line.plain for line in history_graph(
        [("util", [100.0] * 50, "dim green"), ("mem", [25.0] * 50, "dim cyan")], rows=9, width=LABEL_W + 40,
        interval_s=1.0)]
    assert len(lines) == 10  # 5 rows of utilisation (the odd row), 4 of memory, one time axis
    labels = [line[:LABEL_W].strip() for line in lines]
    assert labels == ["100%", "", "util", "", "0%", "100%", "", "mem", "0%", ""]
    plots = [set(line[LABEL_W:]) for line in lines[:-1]]  # 50 readings fill the 40 columns
    assert plots[:5] == [{"█"}] * 5  # 100 %: all five rows
    assert plots[5:] == [{" "}, {" "}, {" "}, {"█"}]  # 25 % of four rows: the bottom one
    assert "30s" in lines[-1]


def test_util_graph_columns_in_eighths_of_a_row():
    """A column per reading, newest on the right: rows fill in eighths from the bottom, a 0 %
    reading still shows a sliver, readings beyond 0-100 % are clamped, and a missing one (or
    NaN) is blank."""
    from gpudoctor.tui.widgets import LABEL_W, util_graph

    values = [None, 0.0, 100.0, 50.0, 12.5, 6.25, 3.0, 250.0, -5.0, 62.5, float("nan")]
    rows = [line.plain[LABEL_W:] for line in util_graph(values, rows=4, width=LABEL_W + 11, interval_s=1.0)[:-1]]
    columns = ["".join(row[k] for row in rows) for k in range(11)]  # top to bottom
    assert columns == ["    ", "   ▁", "████", "  ██", "   ▄", "   ▂", "   ▁", "████", "   ▁", " ▄██", "    "]


@run_async
async def test_a_reading_repaints_only_the_changed_lines_each_across_the_panel():
    """A new reading marks dirty just the lines whose text or style changed, each as one whole
    row of the panel, border cells included (so Textual neither crops nor splits them)."""
    from gpudoctor.tui.widgets import _same_line

    app = make_test_app(STANDIN, loop=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await take_samples(pilot, app, 3)
        panel = app.screen.query_one("#gpu-0")
        before = list(panel._shown)
        regions = []
        original = panel.refresh

        def refresh(*args, **kw):
            regions.extend(args)
            return original(*args, **kw)

        panel.refresh = refresh
        await take_samples(pilot, app, 1)
        after = list(panel._shown)
        assert len(after) == len(before)
        changed = {y for y, (a, b) in enumerate(zip(after, before)) if not _same_line(a, b)}
        assert changed, "the stand-in's readings change from one sample to the next"
        assert {r.y for r in regions} == changed and all(r.height == 1 for r in regions)
        assert {(r.x, r.width) for r in regions} == {(-1, panel.outer_size.width)}  # a round border: 1 cell
        await pilot.press("q")


def test_runs_lines_style_as_the_rich_text_they_replace():
    """A line of cells written as runs draws what appending the cells' Rich texts would."""
    from rich.console import Console
    from rich.text import Text

    from gpudoctor.tui.widgets import _cells_line

    cells = ([("util   ", "cyan"), ("37%", "bold"), (" ▁▂", "green")],
             [("ECC    ", "cyan"), ("2 uncorrected", "bold red")], [("fan", ""), ("n/a", "dim")])
    expected = Text(cells[0][0][0], style=cells[0][0][1])
    for text, style in cells[0][1:]:
        expected.append(text, style=style)
    for cell in cells[1:]:
        part = Text(cell[0][0], style=cell[0][1])
        for text, style in cell[1:]:
            part.append(text, style=style)
        expected.append(" ")
        expected.append_text(part)
    console = Console(width=200)

    def merged(pairs: list) -> list:
        """Neighbours of one style joined: where each splits its text does not matter."""
        out: list = []
        for text, style in pairs:
            style = style or Style()
            if out and out[-1][1] == style:
                out[-1] = (out[-1][0] + text, style)
            else:
                out.append((text, style))
        return out

    want = [(seg.text, seg.style) for seg in expected.render(console) if seg.text and seg.text != "\n"]
    got = [(text, console.get_style(style) if style else None) for text, style in _cells_line(*cells)]
    assert merged(got) == merged(want)
    assert merged(got)[-1] == ("n/a", Style.parse("cyan dim"))  # the line's style beneath the cell's

@run_async
async def test_idle_clock_reason_is_not_called_nothing_running_beside_busy_util(tmp_path):
    data = json.loads(STANDIN.read_text(encoding="utf-8"))
    for sample in data["nvml"]["samples"]:
        sample["devices"][0]["throttle_reasons"] = 1  # NVML's GpuIdle bit, read at one instant
        sample["devices"][0]["gpu_util_pct"] = 37
    path = tmp_path / "handmade_idle_bit_busy_util.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    app = make_test_app(path)
    async with app.run_test(size=(120, 40)) as pilot:
        await take_samples(pilot, app, 1)
        await pilot.pause()
        gpu0 = screen_text(app).split("GPU 1:")[0]
        assert "37%" in gpu0 and "nothing is running" not in gpu0
        assert "idle between kernels" in gpu0
        await pilot.press("q")


@run_async
async def test_one_sampling_thread_reads_every_sample_and_ends_with_the_app():
    app = make_test_app(STANDIN, loop=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await take_samples(pilot, app, 3)
        thread = app._sample_thread
        assert thread is not None and thread.is_alive()
        await take_samples(pilot, app, 3)
        assert app._sample_thread is thread  # the same thread, woken for each reading
        await pilot.press("q")
    thread.join(10)
    assert not thread.is_alive()
