"""The TUI's terminal driver (gpudoctor.tui.driver): chosen where Textual's driver is the one it
was written for, Textual's own elsewhere. Its behaviour on a real terminal (keys, a lone
Escape after a quiet spell, no wake-ups while nothing happens) is tested in
test_tui_terminal.py."""

from __future__ import annotations

import sys

import pytest

from support.tui_support import make_test_app

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Textual's Linux/macOS driver")


def test_the_app_runs_on_the_quiet_driver():
    from gpudoctor.tui.driver import driver_class

    quiet = driver_class()
    assert quiet is not None and quiet.__name__ == "QuietLinuxDriver"
    assert make_test_app().driver_class is quiet


def test_textual_driver_chosen_in_the_environment_is_kept(monkeypatch):
    from textual import constants
    from textual.drivers.linux_driver import LinuxDriver

    monkeypatch.setattr(constants, "DRIVER", "textual.drivers.linux_driver:LinuxDriver")
    assert make_test_app().driver_class is LinuxDriver


def test_a_textual_whose_parser_differs_keeps_its_own_driver(monkeypatch):
    import textual._xterm_parser as xterm

    from gpudoctor.tui.driver import driver_class

    class OtherParser:
        def __init__(self, more_data, debug=False):
            pass

        def feed(self, data):
            return []

        def tick(self):
            return []

    monkeypatch.setattr(xterm, "XTermParser", OtherParser)
    driver_class.cache_clear()
    try:
        assert driver_class() is None
        from textual.drivers.linux_driver import LinuxDriver

        assert make_test_app().driver_class is LinuxDriver
    finally:
        monkeypatch.undo()
        driver_class.cache_clear()
    assert driver_class() is not None
