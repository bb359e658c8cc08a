"""The TUI's start (issue 33): the first frame builds only the screen it shows; the others are
built when first shown, and work the same then."""

from __future__ import annotations

from tui_support import STANDIN, make_test_app, run_async, screen_text, wait_for

LATER = ("processes", "doctor", "workload")


@run_async
async def test_only_the_start_screen_is_built_and_the_others_when_shown():
    app = make_test_app(STANDIN)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.state.samples >= 1, timeout=30)
        assert app.is_screen_installed("overview")
        assert not [name for name in LATER if app.is_screen_installed(name)]
        for key, name, words in (("p", "processes", "Processes"), ("d", "doctor", "Doctor"),
                                 ("w", "workload", "Workload"), ("o", "overview", "Overview")):
            await pilot.press(key)
            await wait_for(pilot, lambda name=name: app.screen is app.get_screen(name), timeout=30)
            assert words in screen_text(app)
        await pilot.press("q")


@run_async
async def test_a_start_screen_other_than_the_overview_is_built_first():
    app = make_test_app(STANDIN, start_screen="doctor")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.screen is app.get_screen("doctor"), timeout=30)
        assert not app.is_screen_installed("overview")
        await pilot.press("q")
