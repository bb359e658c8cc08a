"""Every screen of the TUI is readable at 80x24 and at 200x60: no value cut mid-token.

Each screen is rendered headlessly (replayed recordings, test doubles for the doctor, the
workload and Prometheus) at both sizes. The checks are general: every value string the model
gives for a cell appears whole on screen, no column header of a table is cut (a header of one
letter where the label is longer), and the advice of an Xid notice is on screen to its last word.

GPUDOCTOR_SHOW_SCREENS=1 prints every frame (for reading what a user sees).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from support.tui_support import STANDIN, make_test_app, run_async, run_sweep_on_screen, screen_lines, take_samples, wait_for

pytestmark = pytest.mark.timeout(300)

SIZES = [(80, 24), (200, 60)]
GiB = 2**30
XID_TIME = 1_800_000_000.0


def recording(tmp_path: Path, *, gpus: int = 2, reserved: bool = True, xid: bool = False) -> Path:
    """The two-GPU stand-in, with the driver's reserved memory read apart (NVML v2), an Xid in
    the kernel log of GPU 0, or only its first GPU."""
    rec = json.loads(STANDIN.read_text())
    nvml = rec["nvml"]
    if reserved:
        for sample in nvml["samples"]:
            for dev in sample["devices"]:
                dev["memory_reserved_bytes"] = GiB // 2
    if xid:
        nvml["events"] = [[{"time": XID_TIME, "kind": "xid", "code": 79, "source": "kernel_log"}], []]
    if gpus == 1:
        nvml["device_count"] = 1
        nvml["static"] = nvml["static"][:1]
        for sample in nvml["samples"]:
            sample["devices"] = sample["devices"][:1]
        if xid:
            nvml["events"] = nvml["events"][:1]
    path = tmp_path / f"rec_{gpus}_{reserved}_{xid}.json"
    path.write_text(json.dumps(rec))
    return path


def _show(name: str, size: tuple[int, int], lines: list[str]) -> None:
    if os.environ.get("GPUDOCTOR_SHOW_SCREENS") == "1":
        print(f"\n===== {name} {size[0]}x{size[1]}")
        print("\n".join(line.rstrip() for line in lines))


def _joined(lines: list[str]) -> str:
    """The screen's text with panel borders and runs of spaces made single spaces, so a value
    wrapped over two rows reads as one."""
    text = " ".join(line.strip(" │┃╭╮╰╯─━") for line in lines)
    return re.sub(r"\s+", " ", text)


def assert_whole(values: list[str], lines: list[str], where: str) -> None:
    text = "\n".join(lines)
    missing = [v for v in values if v and v not in text]
    assert not missing, f"{where}: values cut or missing on screen: {missing}"


def assert_title_whole(app: Any, lines: list[str]) -> None:
    """The title line holds its parts whole: a narrow terminal drops the least important ones
    (`· every 3600 s`), never half of one, and never the doctor's verdict or the source marker."""
    from support.tui_support import assert_title_parts_whole

    assert_title_parts_whole(app, lines[0])


# --------------------------------------------------------------------------- overview
def overview_values(app: Any) -> list[str]:
    """The value of every panel cell, as the model formats it."""
    from gpudoctor.sampling.presentation import fmt_memory, fmt_num, fmt_power, fmt_rate_kbps, tiny_na
    from gpudoctor.backends.na import is_na

    def shown(text: str, raw: Any) -> str:
        return tiny_na(raw) if is_na(raw) else text

    values = []
    for dev in app.state.snapshot.devices:
        g = dev.get
        values += [
            shown(fmt_num(g("gpu_util_pct"), "%"), g("gpu_util_pct")),
            shown(fmt_memory(dev), g("memory_used_bytes")),
            shown(fmt_num(g("temperature_c"), "°C"), g("temperature_c")),
            shown(fmt_power(dev), g("power_w")),
            shown(fmt_num(g("clock_sm_mhz"), "MHz"), g("clock_sm_mhz")),
            shown(fmt_num(g("clock_mem_mhz"), "MHz"), g("clock_mem_mhz")),
            shown(fmt_rate_kbps(g("pcie_rx_kbps")), g("pcie_rx_kbps")),
            shown(fmt_rate_kbps(g("pcie_tx_kbps")), g("pcie_tx_kbps")),
            shown(fmt_num(g("fan_pct"), "%"), g("fan_pct")),
        ]
    return values


async def _overview(path: Path, size: tuple[int, int], compact: bool = False) -> tuple[list[str], list[str]]:
    """The Overview's detailed panels (``v`` where the screen chose the compact view), or its compact view."""
    app = make_test_app(path)
    async with app.run_test(size=size) as pilot:
        await take_samples(pilot, app, 3)
        await pilot.pause()
        if app.screen.compact_shown() != compact:
            await pilot.press("v")
            await pilot.pause()
        assert app.screen.compact_shown() == compact
        lines = screen_lines(app)
        values = overview_values(app)
        assert_title_whole(app, lines)
        await pilot.press("q")
    return lines, values


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("gpus", [1, 2])
def test_overview_cells_are_whole(tmp_path, size, gpus):
    lines, values = run_async(_overview)(recording(tmp_path, gpus=gpus), size)
    _show(f"overview {gpus} GPU(s)", size, lines)
    assert any("reserved" in v for v in values)  # the case that was cut: `1.0/80.0 GiB +`
    assert_whole(values, lines, f"overview, {gpus} GPU(s)")
    # no cell ends in a lone fragment of a value (`GiB +`)
    assert not re.search(r"GiB \+(\s|$)", "\n".join(lines))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_xid_notice_shows_its_advice_to_the_last_word(tmp_path, size):
    from gpudoctor.core import xid

    lines, values = run_async(_overview)(recording(tmp_path, gpus=2, xid=True), size)
    _show("overview with an Xid", size, lines)
    info = xid.explain(79)
    text = _joined(lines)
    assert "79 (critical), logged before start" in text
    assert f"{info.words}; {info.action}" in text, "the Xid advice is cut"
    assert_whole(values[:9], lines, "overview with an Xid (GPU 0)")
    # the compact view holds the advice whole too (it lists no panel cells)
    lines, _ = run_async(_overview)(recording(tmp_path, gpus=2, xid=True), size, True)
    _show("compact overview with an Xid", size, lines)
    assert f"{info.words}; {info.action}" in _joined(lines), "the Xid advice is cut in the compact view"


# --------------------------------------------------------------------------- tables
def header_cells(lines: list[str], labels: list[str]) -> list[str]:
    """The header row of a table: the row holding the most of ``labels`` (or their first
    letters), split into its cells."""
    def score(line: str) -> int:
        return sum(1 for label in labels if re.search(rf"(^|\s){re.escape(label[0])}", line))

    row = max(lines, key=score)
    return row.split()


def assert_headers_whole(lines: list[str], labels: list[str], where: str) -> None:
    """A table's column header is shown whole, or not at all (scrolled off to the right):
    never cut to a prefix such as `R` for REPORT."""
    cells = header_cells(lines, labels)
    words = {w for label in labels for w in label.split()}
    for cell in cells:
        cut = [label for label in labels if label.startswith(cell) and cell not in words]
        assert not cut, f"{where}: header {cell!r} is a cut {cut[0]!r}: {' '.join(cells)}"


async def _processes(size: tuple[int, int]) -> tuple[list[str], list[list[str]]]:

    app = make_test_app(STANDIN)
    async with app.run_test(size=size) as pilot:
        await take_samples(pilot, app, 2)
        await pilot.press("p")
        await pilot.pause()
        assert_title_whole(app, screen_lines(app))
        table = app.screen.query_one("#procs")
        rows = [[cell.plain for cell in table.get_row_at(k)] for k in range(table.row_count)]
        lines = screen_lines(app)
        await pilot.press("q")
    return lines, rows


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_processes_table_is_whole(size):
    from gpudoctor.tui.screens import PROCESS_COLUMNS

    lines, rows = run_async(_processes)(size)
    _show("processes", size, lines)
    assert rows
    assert_headers_whole(lines, [label for _, label in PROCESS_COLUMNS], "processes")
    # the columns shown hold their values whole (the pid, user, GPU and memory columns at least)
    assert_whole([cell for row in rows for cell in row[:4]], lines, "processes")


def _fleet_view():
    from gpudoctor import fleet
    from support.fleet_doubles import NOW, gpu, make

    extra = [(dict(gpu("b:9402", 0), __name__="gpudoctor_gpu_up"), 0),
             (dict(gpu("b:9402", 0), __name__="gpudoctor_gpu_error_info", reason="GpuIsLost"), 1)]
    fake = make([("a:9402", 1), ("b:9402", 1)], extra=extra)
    return fleet.collect(fleet.Prometheus("http://prom.example:9090", opener=fake), now=NOW)


async def _fleet(size: tuple[int, int]) -> tuple[list[str], Any]:
    from textual.app import App

    from gpudoctor.tui.fleet import FleetScreen

    view = _fleet_view()
    screen = FleetScreen("http://prom.example:9090", interval=3600, collect=lambda: view)

    class FleetApp(App):
        def on_mount(self) -> None:
            self.push_screen(screen)

    app = FleetApp()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: screen.view is not None)
        await pilot.pause()
        lines = screen_lines(app)
    return lines, view


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_fleet_table_is_whole(size):
    from gpudoctor.fleet import fmt_mem, fmt_number
    from gpudoctor.tui.fleet import columns

    COLUMNS = columns()
    lines, view = run_async(_fleet)(size)
    _show("fleet", size, lines)
    assert_headers_whole(lines, [label for label, _ in COLUMNS], "fleet")
    text = "\n".join(lines)
    for label, _ in COLUMNS:
        assert re.search(rf"\b{label}\b", text), f"fleet: column {label} not on screen"
    values = []
    for row in view.rows:
        values += [row.status.upper(), row.instance, fmt_number(row.utilization, 100, "%"), fmt_mem(row),
                   fmt_number(row.temperature_c, 1, "C"), fmt_number(row.power_w, 1, "W")]
    assert_whole(values, lines, "fleet")
    # the reason of each row is on screen to its last word (wrapped where it must be)
    joined = _joined(lines)
    for row in view.rows:
        assert row.reason in joined, f"fleet: reason cut: {row.reason!r}"


# --------------------------------------------------------------------------- doctor, workload, help
def _doctor_runner(probes, spec, *, on_start, on_result):
    from gpudoctor.core.model import Finding, ProbeResult, Report, Status

    for probe in probes:
        on_start(probe)
    result = ProbeResult("double_hot", summary="GPU 0 runs hot (84 C) under a steady load")
    result.findings.append(Finding(status=Status.WARN, code="hot", summary="GPU 0 runs hot",
                                   why="clocks drop above 83 C and the run slows down without saying so",
                                   fix="Clean the fan intake and check the airflow of the chassis."))
    result.status = Status.WARN
    on_result(result)
    on_result(ProbeResult("double_devices", summary="2 device(s) in the recording", status=Status.PASS))
    return Report(results=[result])


async def _whole_screen(app: Any, size: tuple[int, int], open_screen: Callable[[Any], Awaitable[None]]) -> list[str]:
    """The lines of the screen that ``open_screen(pilot)`` leads to, its title checked whole."""
    async with app.run_test(size=size) as pilot:
        await open_screen(pilot)
        lines = screen_lines(app)
        assert_title_whole(app, lines)
        await pilot.press("q")
    return lines


async def _doctor(size: tuple[int, int]) -> list[str]:
    from test_tui_app import DOUBLE_PROBES

    app = make_test_app(STANDIN, probe_source=lambda: DOUBLE_PROBES[:2], doctor_runner=_doctor_runner)

    async def run_doctor(pilot: Any) -> None:
        await pilot.press("d")
        await wait_for(pilot, lambda: app.doctor.finished)
        await pilot.pause()

    return await _whole_screen(app, size, run_doctor)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_doctor_screen_is_whole(size):
    lines = run_async(_doctor)(size)
    _show("doctor", size, lines)
    text = _joined(lines)
    for words in ("GPU 0 runs hot (84 C) under a steady load",
                  "clocks drop above 83 C and the run slows down without saying so",
                  "Clean the fan intake and check the airflow of the chassis.",
                  "2 device(s) in the recording"):
        assert words in text, f"doctor: cut: {words!r}"


class _FakeWorkload:
    """Stands in for the workload child process: a finished sweep of four runs."""

    pid = 4242
    finished = False

    def start(self) -> None:
        pass

    def events(self, stop):
        yield "started", {"pid": self.pid, "options": {"quick": True}}
        runs = [{"mode": mode, "batch_size": bs, "samples_per_s": rate, "gpu_util": util, "device": "cuda:0",
                 "workers": 4, "status": "ok"}
                for mode, bs, rate, util in (("dataloader", 64, 8123.0, 41.0), ("dataloader", 1024, 51234.0, 77.0),
                                             ("resident", 64, 20500.0, 63.0), ("resident", 1024, 187654.0, 96.0))]
        for k, run in enumerate(runs):
            yield "progress", dict(run, done=k + 1, total=len(runs), message=f"ran {run['mode']} at {run['batch_size']}")
        self.finished = True
        yield "done", {"runs": runs}

    def cancel(self) -> None:
        pass


async def _workload(size: tuple[int, int]) -> list[str]:
    app = make_test_app(STANDIN, workload_check=lambda: None, workload_factory=lambda options: _FakeWorkload())
    return await _whole_screen(app, size, lambda pilot: run_sweep_on_screen(pilot, app))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_workload_screen_is_whole(size):
    lines = run_async(_workload)(size)
    _show("workload", size, lines)
    text = "\n".join(lines)
    for value in ("187,654", "51,234", "8,123", "96%", "resident", "dataloader"):
        assert value in text, f"workload: {value!r} cut or missing"
    # the chart's header is whole
    assert "samples/s" in text and "GPU util" in text


async def _help(size: tuple[int, int]) -> list[str]:
    app = make_test_app(STANDIN)
    async with app.run_test(size=size) as pilot:
        await take_samples(pilot, app, 1)
        await pilot.press("question_mark")
        await pilot.pause()
        lines = screen_lines(app)
        await pilot.press("q")
    return lines


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_help_screen_is_whole(size):
    from gpudoctor.tui.screens import HELP_KEYS

    lines = run_async(_help)(size)
    _show("help", size, lines)
    text = _joined(lines)
    for _key, what in HELP_KEYS:
        assert re.sub(r"\s+", " ", what) in text, f"help: cut: {what!r}"
