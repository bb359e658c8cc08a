"""The TUI Fleet screen (headless Pilot): rows worst first from a fleet view, labels shown as
plain text, and a Prometheus failure shown on the screen while the last rows stay."""

from __future__ import annotations

import pytest
from textual.app import App

from gpudoctor import fleet
from support.fleet_doubles import NOW, gpu, make
from support.tui_support import run_async, screen_text, wait_for

pytestmark = pytest.mark.timeout(120)


class FleetApp(App):
    def __init__(self, screen):
        super().__init__()
        self._fleet_screen = screen

    def on_mount(self) -> None:
        self.push_screen(self._fleet_screen)


def _view(extra=(), up=None):
    fake = make([("a:9402", 1), ("b:9402", 1)], extra=extra, up=up)
    return fleet.collect(fleet.Prometheus("http://prom.example:9090", opener=fake), now=NOW)


@run_async
async def test_fleet_screen_shows_rows_worst_first_as_plain_text():
    from gpudoctor.tui.fleet import FleetScreen

    hostile = "[bold]x[/] [@click=app.quit]q\x1b[2J"
    extra = [(dict(gpu("b:9402", 0), __name__="gpudoctor_gpu_up"), 0),
             (dict(gpu("b:9402", 0), __name__="gpudoctor_gpu_error_info", reason=hostile), 1)]
    view = _view(extra)
    screen = FleetScreen("http://prom.example:9090", interval=3600, collect=lambda: view)
    app = FleetApp(screen)
    async with app.run_test(size=(160, 20)) as pilot:
        await wait_for(pilot, lambda: screen.view is not None)
        await pilot.pause()
        text = screen_text(app)
        assert "Fleet" in text and "1 fail" in text and "1 pass" in text
        lines = [line for line in text.splitlines() if "b:9402" in line or "a:9402" in line]
        assert lines[0].lstrip().startswith("FAIL") and "b:9402" in lines[0]
        assert "[@click=app.quit]" in text and "[bold]x[/]" in text  # shown, not interpreted
        assert "\x1b" not in text
        assert app.is_running


@run_async
async def test_prometheus_failure_is_shown_and_the_last_rows_stay():
    from gpudoctor.tui.fleet import FleetScreen

    answers = [_view()]

    def collect():
        if answers:
            return answers.pop()
        raise fleet.FleetError("unreachable", "Prometheus at http://prom.example:9090 cannot be reached: refused")

    screen = FleetScreen("http://prom.example:9090", interval=3600, collect=collect)
    app = FleetApp(screen)
    async with app.run_test(size=(160, 20)) as pilot:
        await wait_for(pilot, lambda: screen.view is not None)
        await pilot.press("r")
        await wait_for(pilot, lambda: bool(screen.error))
        await pilot.pause()
        text = screen_text(app)
        assert "cannot be reached" in text and "last answer" in text
        assert "a:9402" in text


@run_async
async def test_gpudoctor_with_prometheus_has_a_fleet_screen_on_n():
    from support.tui_support import make_test_app

    from gpudoctor.tui.fleet import FleetScreen

    app = make_test_app(prometheus="http://127.0.0.1:9", fleet_interval=3600)  # port 9: nothing listens
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, FleetScreen) and bool(app.screen.error))
        await pilot.pause()
        text = screen_text(app)
        assert "Fleet" in text and "cannot be reached" in text
        await pilot.press("o")
        await wait_for(pilot, lambda: not isinstance(app.screen, FleetScreen))


@run_async
async def test_without_prometheus_n_does_nothing():
    from support.tui_support import make_test_app

    app = make_test_app()
    async with app.run_test(size=(100, 30)) as pilot:
        before = app.screen
        await pilot.press("n")
        await pilot.pause()
        assert app.screen is before


def test_tui_refuses_a_bad_prometheus_url(capsys):
    from gpudoctor.core import exitcodes
    from gpudoctor.cli import main

    assert main(["--prometheus", "not-a-url"]) == exitcodes.USAGE
    assert "expected http(s)://" in capsys.readouterr().err


@run_async
async def test_fleet_screen_lists_the_held_but_idle_gpus_with_their_holder_and_cost():
    """The held-but-idle list (fleet.idle) shows above the table, holder text plain, and goes when none."""
    from gpudoctor.fleet import idle
    from gpudoctor.tui.fleet import FleetScreen

    view = _view()
    row = view.rows[0]
    row.holder = "pod ml/[bold]trainer-0[/] (container main)"
    idle._mark(row, 5400.0, 300.0, "utilisation")
    row.settle()
    quiet = _view()
    answers = [quiet, view]
    screen = FleetScreen("http://prom.example:9090", interval=3600, collect=lambda: answers.pop())
    app = FleetApp(screen)
    async with app.run_test(size=(160, 24)) as pilot:
        await wait_for(pilot, lambda: screen.view is view)
        await pilot.pause()
        text = screen_text(app)
        assert "held but idle for 30m or more: 1 GPU(s), 1.5 GPU-hours, 0.45 kWh" in text
        assert f"{row.instance} GPU {row.gpu}: pod ml/[bold]trainer-0[/] (container main), idle 90 min" in text
        assert "but idle for 90 min (1.5 GPU-hours, 0.45 kWh)" in text  # the row's reason too
        await pilot.press("r")
        await wait_for(pilot, lambda: screen.view is quiet)
        await pilot.pause()
        assert "held but idle" not in screen_text(app)
