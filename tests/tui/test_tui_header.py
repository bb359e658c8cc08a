"""The header of every screen and pop-up keeps the doctor's verdict and the live/replay marker,
whole, at every size from 60x20 to 200x60 and in every status; what gives way is the least
important part, whole (docs/tui.md, "The doctor's verdict in the header").

The screens are those the app's keys show (its ``show(...)`` bindings, the Fleet screen included:
the app runs with ``--prometheus``), and the pop-ups every ModalScreen in gpudoctor.tui: a new
screen or pop-up is checked without a change here (a pop-up needs a way to build it below, and the
test says so when it has none).

Each status is a real app: a live fake 8-GPU node (nvml_fake through the real NVML gate), a live
machine without a driver, a replayed recording; the verdict comes in as the start-up quick
doctor's does (a HeaderVerdict message), with a long reason, and in one case with the sampler
reporting trouble too."""

from __future__ import annotations

from typing import Any

import pytest

from support.tui_support import STANDIN, assert_title_parts_whole, fixed_host, run_async, screen_lines, take_samples, wait_for

pytestmark = pytest.mark.timeout(300)

SIZES = [(60, 20), (80, 24), (120, 40), (200, 60)]
#: How each pop-up is built for the test (every ModalScreen of gpudoctor.tui must have one).
POPUPS = {
    "HelpScreen": lambda screens: screens.HelpScreen(),
    "WhyScreen": lambda screens: screens.WhyScreen(41021, "no such process (it ended before why sampled it)"),
    "ConfirmScreen": lambda screens: screens.ConfirmScreen("Send SIGTERM to pid 41021 (python train.py)?"),
}
LONG = ("GPU 3 fell off the bus (Xid 79): it stopped answering NVML; check dmesg, reseat the board and its "
        "power cables, then reboot")
#: status -> (source, the verdict (status, reason), trouble in the sampler, the word in the header)
STATUSES = {
    "pass": ("node", ("pass", ""), False, "PASS"),
    "warn": ("node", ("warn", "persistence mode is off on 8 GPUs: the first CUDA call waits for the driver"),
             False, "WARN"),
    "fail": ("node", ("fail", LONG), True, "FAIL"),
    "no-gpu": ("no-driver", ("fail", "No NVIDIA driver found (libnvidia-ml.so is missing)"), False, "FAIL"),
    "replay": ("replay", ("warn", "a recording of a two-GPU training run"), False, "WARN"),
}


def _app(source: str) -> Any:
    from gpudoctor.backends import NvmlBackend, NvmlGate
    from gpudoctor.tui.app import GpudoctorApp
    from support.fake_node import node
    from support.nvml_fake import FakePynvml
    from support.tui_support import replay_factory

    # --prometheus to a port where nothing listens: the Fleet screen is there, and says so
    common: dict[str, Any] = dict(interval=3600.0, host_sampler=fixed_host, probe_source=lambda: [],
                                  workload_check=lambda: "workload module not available (test: not wired)",
                                  prometheus="http://127.0.0.1:9", fleet_interval=3600.0)
    if source == "replay":
        return GpudoctorApp(replay_factory(STANDIN), replay=str(STANDIN), **common)
    fake = node(8) if source == "node" else FakePynvml(init_error="LibraryNotFound")
    info = lambda pid, p: {"user": "alice", "command": "python train.py"}  # noqa: E731 (fake pids)
    return GpudoctorApp(lambda: NvmlBackend(NvmlGate(fake)), process_info=info, **common)


def screen_keys() -> dict[str, str]:
    """Each screen the app's keys show, and the first key that shows it."""
    from gpudoctor.tui.app import GpudoctorApp

    keys: dict[str, str] = {}
    for binding in GpudoctorApp.BINDINGS:
        if binding.action.startswith("show("):
            keys.setdefault(binding.action[len("show('"):-2], binding.key.split(",")[0])
    return keys


def popup_classes() -> list[type]:
    """Every pop-up (ModalScreen) defined in gpudoctor.tui's modules."""
    import importlib
    import pkgutil

    from textual.screen import ModalScreen

    import gpudoctor.tui

    for info in pkgutil.iter_modules(gpudoctor.tui.__path__, "gpudoctor.tui."):
        importlib.import_module(info.name)
    found, todo = [], list(ModalScreen.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("gpudoctor.tui."):
            found.append(cls)
    return sorted(set(found), key=lambda c: c.__name__)


def test_every_screen_and_popup_is_in_the_header_check():
    keys = screen_keys()
    assert {"overview", "processes", "doctor", "workload", "fleet"} <= set(keys), keys
    popups = popup_classes()
    assert {"HelpScreen", "WhyScreen"} <= {c.__name__ for c in popups}
    missing = [c.__name__ for c in popups if c.__name__ not in POPUPS]
    assert not missing, f"pop-ups with no way to build them in this test (add them to POPUPS): {missing}"


async def _headers(status: str, size: tuple[int, int]) -> dict[str, str]:
    from gpudoctor.tui import screens
    from gpudoctor.tui.app import HeaderVerdict

    source, verdict, trouble, _ = STATUSES[status]
    app = _app(source)
    shown: dict[str, str] = {}

    async def header() -> str:
        app.screen.refresh_view()
        await pilot.pause()
        row = screen_lines(app)[0]
        assert_title_parts_whole(app, row)
        return row.rstrip()

    async with app.run_test(size=size) as pilot:
        await take_samples(pilot, app, 2)
        app.post_message(HeaderVerdict(verdict))
        await wait_for(pilot, lambda: app.headline is not None and app.headline[0] == verdict[0])
        if trouble:
            app.state.stalled_s = 12.0
        for name, key in screen_keys().items():
            await pilot.press(key)
            await wait_for(pilot, lambda: app.is_screen_installed(name) and app.screen is app.get_screen(name))  # noqa: B023
            shown[app.screen.TITLE] = await header()
        for cls in popup_classes():
            popup = POPUPS[cls.__name__](screens)
            app.push_screen(popup)
            await wait_for(pilot, lambda: app.screen is popup and bool(popup.query("#title")))  # noqa: B023
            shown[popup.TITLE] = await header()
            app.pop_screen()
            await pilot.pause()
        await pilot.press("q")
    return shown


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("status", list(STATUSES))
def test_every_header_keeps_the_verdict_and_the_source_whole(status, size):
    source, _, _, word = STATUSES[status]
    marker = "· replay" if source == "replay" else "· live"
    shown = run_async(_headers)(status, size)
    assert {"Overview", "Processes", "Doctor", "Workload", "Fleet", "Help", "Why"} <= set(shown)
    for screen, row in shown.items():
        assert len(row) <= size[0], (screen, row)
        assert f"· Doctor: {word}" in row, f"{screen} {size}: verdict lost: {row!r}"
        assert marker in row, f"{screen} {size}: source marker lost: {row!r}"
        assert f" {screen} " in row
        if size[0] >= 200 and status != "fail":
            assert "every 3600 s" in row  # a wide screen drops nothing of a short line


def test_the_least_important_part_gives_way_first():
    from rich.text import Text

    from gpudoctor.tui.screens import fit_parts

    parts = [(Text("head "), 0), (Text("verdict "), 0), (Text("reason "), 3), (Text("marker "), 0),
             (Text("driver "), 7), (Text("every "), 8)]
    assert fit_parts(parts, 100).plain == "head verdict reason marker driver every "
    assert fit_parts(parts, 33).plain == "head verdict reason marker "
    assert fit_parts(parts, 26).plain == "head verdict marker "  # the reason went whole
    assert fit_parts(parts, 10).plain.endswith("…")  # only what must stay, cut: narrower than 60 columns


@pytest.mark.parametrize("name", ["fleet", "help"])
def test_the_header_follows_a_new_verdict_on_the_fleet_screen_and_under_a_popup(name):
    """The verdict that comes while the Fleet screen or the help is in front shows at once, as
    on every other screen (the app refreshes the header of the screen in front)."""
    from gpudoctor.tui.app import HeaderVerdict

    async def run() -> str:
        app = _app("node")
        async with app.run_test(size=(80, 24)) as pilot:
            await take_samples(pilot, app, 1)
            await pilot.press({"fleet": "n", "help": "question_mark"}[name])
            await wait_for(pilot, lambda: app.screen.TITLE in ("Fleet", "Help") and bool(app.screen.query("#title")))
            app.post_message(HeaderVerdict(("fail", LONG)))
            await wait_for(pilot, lambda: "Doctor: FAIL" in screen_lines(app)[0])
            row = screen_lines(app)[0]
            await pilot.press("q")
        return row

    row = run_async(run)()
    assert "· Doctor: FAIL" in row and "· live" in row and len(row.rstrip()) <= 80, row
