"""Pilot tests of the TUI on replayed recordings (headless, fixed terminal size)."""

from __future__ import annotations

import threading

import pytest

from gpudoctor.core.model import ProbeResult, Status
from gpudoctor.probes import Probe
from support.tui_support import (
    GPU_LOST, NO_NVML, NOT_SUPPORTED, NVML_GONE, STANDIN, make_test_app, open_processes, run_async,
    run_sweep_on_screen, running_app, screen_text, show, take_samples, wait_for, workload_app,
)

pytestmark = pytest.mark.timeout(120)


@run_async
async def test_screens_switch_and_show_data():
    async with running_app(STANDIN, size=(100, 30), samples=3) as (app, pilot):
        text = screen_text(app)
        assert "Overview" in text
        assert "GPU 0: NVIDIA A100-SXM4-40GB" in text and "GPU 1: NVIDIA A100-SXM4-40GB" in text
        assert "/40.0 GiB" in text and "/400 W" in text and "1215 MHz" in text
        assert "GPU idle: nothing is running" in text  # throttle reasons in words
        assert "n/a (not sup.)" in text  # the SXM board has no fan
        assert "CPU  25% of 4 cores" in text and "RAM 6.0 GiB/16.0 GiB" in text

        text = await show(pilot, app, "p")
        assert "Processes" in text and "424242" in text and "alice" in text and "python train.py" in text

        assert "Doctor" in await show(pilot, app, "d")

        assert "workload module not available" in await show(pilot, app, "w")

        text = await show(pilot, app, "question_mark")
        assert "gpudoctor keys" in text and "quit" in text
        await pilot.press("escape")
        assert "GPU 0: NVIDIA" in await show(pilot, app, "1")
    assert app.return_code == 0


@run_async
async def test_gpu_lost_midsession_keeps_the_app_alive():
    async with running_app(GPU_LOST, size=(80, 24), samples=3) as (app, pilot):
        assert "No readings" not in screen_text(app)
        await take_samples(pilot, app, 6)
        text = screen_text(app)
        assert "No readings: GpuIsLost" in text and "Xid 79" in text
        assert app.screen.query_one("#gpu-0").has_class("fault")
        assert "Host" in text and "CPU  25%" in text  # the rest of the screen still works
        assert "process list n/a (GPU lost)" in await show(pilot, app, "p")
        await take_samples(pilot, app, 2)  # still sampling after the loss
        assert "GpuIsLost" in await show(pilot, app, "o")
        assert app.is_running
    assert app.return_code == 0


@run_async
async def test_nvml_gone_midsession_shows_in_every_gpu_panel():
    async with running_app(NVML_GONE, size=(80, 30), samples=7) as (app, pilot):
        text = screen_text(app)
        assert text.count("No readings: Uninitialized") == 2
        assert "NVML is gone" in text
    assert app.return_code == 0


@run_async
async def test_notsupported_fields_show_as_na_with_reason():
    async with running_app(NOT_SUPPORTED, size=(80, 24), samples=9) as (app, pilot):
        text = screen_text(app)
        assert "PCIe↓  n/a (not sup.)" in text
        assert "power  n/a (not sup.)" in text  # power went NotSupported mid-session
        assert "fan    48%" in text
        assert "No readings" not in text  # one field failing is not a lost GPU
        text = await show(pilot, app, "p")
        assert "2024" in text and "erin" in text and "n/a" in text  # per-process memory NotSupported


@run_async
async def test_no_gpu_opens_with_host_panel_and_points_to_the_doctor():
    async with running_app(NO_NVML, size=(80, 24), samples=2) as (app, pilot):
        text = screen_text(app)
        assert "No NVIDIA driver found (libnvidia-ml.so is missing)" in text
        assert "Press d for the doctor" in text and "CPU  25%" in text
        assert "No GPU, so no GPU processes." in await show(pilot, app, "p")
    assert app.return_code == 0


@run_async
async def test_live_nvml_without_driver_is_useful_too():
    """This machine's real NVML backend (no driver here: LibraryNotFound; a GPU machine shows panels)."""
    from gpudoctor.backends import NvmlBackend
    from gpudoctor.tui.app import GpudoctorApp

    from support.tui_support import fixed_host

    app = GpudoctorApp(NvmlBackend, interval=3600, host_sampler=fixed_host, workload_check=lambda: "n/a")
    async with app.run_test(size=(80, 24)) as pilot:
        await take_samples(pilot, app, 1)
        snap = app.state.snapshot
        text = screen_text(app)
        if snap.has_gpu:
            assert "GPU 0:" in text
        else:
            assert "No GPU" in text and "CPU  25%" in text
        await pilot.press("q")


@run_async
async def test_processes_sort_and_filter():
    app = make_test_app(STANDIN)
    async with app.run_test(size=(100, 24)) as pilot:
        screen, table = await open_processes(pilot, app)

        def pids() -> list[str]:
            return [str(table.get_row_at(i)[0]) for i in range(table.row_count)]

        assert pids() == ["424242", "424300", "515151"]  # by GPU memory, largest first
        assert "sorted by gpu memory" in screen_text(app)
        await pilot.press("s")  # next key: SM util
        await pilot.pause()
        assert screen.sort_key == "sm util" and pids()[0] == "424242"
        await pilot.press("s", "s", "s")  # cpu, host memory, command
        await pilot.pause()
        assert screen.sort_key == "command"
        assert pids() == ["424300", "515151", "424242"]  # python -m jupyter < python eval < python train
        await pilot.click("#procs", offset=(2, 0))  # the "pid" column header
        await pilot.pause()
        assert screen.sort_key == "pid" and pids() == ["424242", "424300", "515151"]

        await pilot.press("slash")
        await pilot.press(*"eval")
        await pilot.pause()
        assert pids() == ["515151"] and "filter 'eval'" in screen_text(app)
        await pilot.press("enter")  # keep the filter, back to the table
        await take_samples(pilot, app, 1)
        assert pids() == ["515151"]  # survives new readings
        await pilot.press("escape")
        await pilot.pause()
        assert len(pids()) == 3
        await pilot.press("q")
    assert app.return_code == 0


# --------------------------------------------------------------------------- doctor
def _probe(name: str, run, order: int) -> Probe:
    return Probe(name=name, title=f"test double {name}", run=run, level="quick", order=order)


def _devices(ctx):
    result = ProbeResult("double_devices")
    count = ctx.gpu.device_count()
    result.measure("device_count", count)
    return result.settle(f"{count} device(s) in the recording")


def _too_hot(ctx):
    result = ProbeResult("double_hot")
    result.find(Status.WARN, "too_hot", "GPU 0 runs hot", why="clocks drop above 83 C",
                fix="Clean the fan intake and check the airflow.")
    return result.settle("hot")


def _crash(ctx):
    raise ZeroDivisionError("boom")


DOUBLE_PROBES = [_probe("double_devices", _devices, 1), _probe("double_hot", _too_hot, 2),
                 _probe("double_crash", _crash, 3)]


@run_async
async def test_doctor_runs_probes_through_the_runner_and_shows_findings():
    """Test-double probes, real runner (quick level: in-process threads)."""
    app = make_test_app(STANDIN, doctor_level="quick", probe_source=lambda: list(DOUBLE_PROBES))
    async with app.run_test(size=(100, 30)) as pilot:
        await take_samples(pilot, app, 1)
        await pilot.press("d")
        await wait_for(pilot, lambda: app.doctor.finished)
        await pilot.pause()
        text = screen_text(app)
        assert "[PASS] double_devices  2 device(s) in the recording" in text
        assert "[WARN] double_hot" in text and "GPU 0 runs hot" in text
        assert "fix: Clean the fan intake" in text and "why: clocks drop above 83 C" in text
        assert "[ERROR] double_crash" in text and "ZeroDivisionError" in text
        assert "Verdict: ERROR" in text and "done: 1 pass, 1 warn, 1 error" in text
        first = app.doctor.run_id
        await pilot.press("r")  # re-run by key
        await wait_for(pilot, lambda: app.doctor.run_id == first + 1 and app.doctor.finished)
        assert len(app.doctor.results) == 3
        await pilot.press("q")
    assert app.return_code == 0


@run_async
async def test_doctor_shows_each_result_as_it_arrives():
    gate = threading.Event()

    def runner(probes, spec, *, on_start, on_result):
        on_start(probes[0])
        on_result(ProbeResult("double_devices", summary="first result"))
        on_start(probes[1])
        gate.wait(300)  # the second probe "runs" until the test lets it finish
        on_result(ProbeResult("double_hot", summary="second result"))
        from gpudoctor.core.model import Report

        return Report()

    app = make_test_app(STANDIN, probe_source=lambda: DOUBLE_PROBES[:2], doctor_runner=runner)
    async with app.run_test(size=(100, 24)) as pilot:
        await pilot.press("d")
        await wait_for(pilot, lambda: "double_devices" in app.doctor.results)
        await pilot.pause()
        text = screen_text(app)
        assert "first result" in text and "[....] double_hot" in text and "running 1/2" in text
        await pilot.press("r")  # refused while running, no second run
        await pilot.pause()
        assert app.doctor.run_id == 1
        gate.set()
        await wait_for(pilot, lambda: app.doctor.finished)
        await pilot.pause()
        assert "second result" in screen_text(app)
        await pilot.press("q")


@run_async
async def test_doctor_with_the_installed_probes_at_quick_level():
    """Whatever probes this build has (none yet on a bare core): the screen says what it ran."""
    from gpudoctor.report import runner

    installed = runner.select_probes(None, "quick")
    app = make_test_app(NO_NVML, doctor_level="quick")
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("d")
        await wait_for(pilot, lambda: app.doctor.finished, timeout=60)
        await pilot.pause()
        text = screen_text(app)
        if not installed:
            assert "No probes are installed" in text
        else:
            assert set(app.doctor.results) == {p.name for p in installed}
            assert "Verdict:" in text
        await pilot.press("q")


# --------------------------------------------------------------------------- workload
@run_async
async def test_workload_screen_runs_a_sweep_in_a_child_and_charts_it():
    app = workload_app("support.tui_workload_double:fake_sweep")
    async with app.run_test(size=(100, 40)) as pilot:
        await run_sweep_on_screen(pilot, app, timeout=60)
        text = screen_text(app)
        assert len(app.workload.runs) == 6
        assert app.workload.options == {"quick": True}
        assert "samples/s" in text and "GPU util" in text and "resident" in text and "10000" in text
        assert "100%" in text  # progress complete
        assert "n/a (no GPU reading)" in text  # a run without a utilisation figure says so
        assert app.workload.result["torch_loaded"] is False
        await pilot.press("q")
    assert app.return_code == 0


@run_async
async def test_workload_cancel_stops_the_child():
    from gpudoctor.tui.workload_runner import WorkloadProcess

    made: list[WorkloadProcess] = []

    def factory(options):
        made.append(WorkloadProcess("support.tui_workload_double:slow_sweep", options))
        return made[-1]

    app = make_test_app(STANDIN, workload_check=lambda: None, workload_factory=factory)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("w", "f")
        await wait_for(pilot, lambda: app.workload.fraction is not None, timeout=60)
        await pilot.press("x")
        await wait_for(pilot, lambda: app.workload.phase == "cancelled", timeout=30)
        assert not made[0].process.is_alive()
        await pilot.press("q")


@run_async
async def test_workload_unavailable_says_so():
    from gpudoctor.tui.workload_runner import workload_available

    app = make_test_app(STANDIN, workload_check=lambda: workload_available("gpudoctor_no_such_module:sweep"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("w", "s")
        await pilot.pause()
        text = screen_text(app)
        assert "workload module not available" in text and not app.workload.running
        await pilot.press("q")


# --------------------------------------------------------------------------- driver stalls
@run_async
async def test_a_stalled_driver_is_reported_and_the_app_answers_keys():
    from gpudoctor.backends import ReplayBackend
    from gpudoctor.tui.app import GpudoctorApp

    from support.tui_support import fixed_host

    release = threading.Event()

    class Hanging(ReplayBackend):
        calls = 0

        def sample(self, index):
            Hanging.calls += 1
            if Hanging.calls > 1:
                release.wait(300)  # NVML blocking on a GPU that is falling off the bus
            return super().sample(index)

    app = GpudoctorApp(lambda: Hanging.from_file(GPU_LOST), interval=0.25, host_sampler=fixed_host,
                       workload_check=lambda: "n/a")
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.state.stalled_s is not None, timeout=60)
            await pilot.pause()
            assert "driver not answering for" in screen_text(app)
            assert "Processes" in await show(pilot, app, "p")
            release.set()
            await wait_for(pilot, lambda: app.state.stalled_s is None, timeout=60)
            await pilot.press("q")
    finally:
        release.set()
    assert app.return_code == 0


def test_interval_below_minimum_is_refused():
    with pytest.raises(ValueError):
        make_test_app(STANDIN, interval=0.1)


@run_async
async def test_start_screen_doctor_runs_the_doctor_at_once():
    app = make_test_app(STANDIN, start_screen="doctor", probe_source=lambda: DOUBLE_PROBES[:1], doctor_level="quick")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.doctor.finished)
        await pilot.pause()
        assert "[PASS] double_devices" in screen_text(app)
        await pilot.press("q")
    assert app.return_code == 0


@run_async
async def test_a_redraw_before_the_process_table_has_its_columns_waits_for_its_mount():
    """Found by the parallel test run on a loaded machine: a sample landed between ``p``'s screen
    switch and that screen's mount, and the redraw added rows to a table without columns
    (DataTable: "More values provided than there are columns"), ending the app."""
    app = make_test_app(STANDIN)
    async with app.run_test(size=(100, 24)) as pilot:
        screen, table = await open_processes(pilot, app)
        assert table.row_count == 3
        table.clear(columns=True)  # the state before on_mount
        screen.refresh_view()  # no rows forced into a table without columns
        assert table.row_count == 0
        screen.on_mount()  # the columns arrive, and the next redraw fills the table
        screen.refresh_view()
        await pilot.pause()
        assert table.row_count == 3 and "424242" in screen_text(app)
        await pilot.press("q")
    assert app.return_code == 0
