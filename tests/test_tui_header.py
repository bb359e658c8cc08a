"""The header of every screen keeps the doctor's verdict and the live/replay marker, whole, at
every size from 60x20 to 200x60 and in every status; what gives way is the least important part,
whole (docs/tui.md, "The doctor's verdict in the header").

Each status is a real app: a live fake 8-GPU node (nvml_fake through the real NVML gate), a live
machine without a driver, a replayed recording; the verdict comes in as the start-up quick
doctor's does (a HeaderVerdict message), with a long reason, and in one case with the sampler
reporting trouble too."""

from __future__ import annotations

from typing import Any

import pytest

from tui_support import STANDIN, assert_title_parts_whole, fixed_host, run_async, screen_lines, take_samples, wait_for

pytestmark = pytest.mark.timeout(300)

SIZES = [(60, 20), (80, 24), (120, 40), (200, 60)]
SCREENS = {"o": "Overview", "p": "Processes", "d": "Doctor", "w": "Workload"}
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
    from fake_node import node
    from nvml_fake import FakePynvml
    from tui_support import replay_factory

    common: dict[str, Any] = dict(interval=3600.0, host_sampler=fixed_host, probe_source=lambda: [],
                                  workload_check=lambda: "workload module not available (test: not wired)")
    if source == "replay":
        return GpudoctorApp(replay_factory(STANDIN), replay=str(STANDIN), **common)
    fake = node(8) if source == "node" else FakePynvml(init_error="LibraryNotFound")
    info = lambda pid, p: {"user": "alice", "command": "python train.py"}  # noqa: E731 (fake pids)
    return GpudoctorApp(lambda: NvmlBackend(NvmlGate(fake)), process_info=info, **common)


async def _headers(status: str, size: tuple[int, int]) -> dict[str, str]:
    from gpudoctor.tui.app import HeaderVerdict

    source, verdict, trouble, _ = STATUSES[status]
    app = _app(source)
    shown: dict[str, str] = {}
    async with app.run_test(size=size) as pilot:
        await take_samples(pilot, app, 2)
        app.post_message(HeaderVerdict(verdict))
        await wait_for(pilot, lambda: app.headline is not None and app.headline[0] == verdict[0])
        if trouble:
            app.state.stalled_s = 12.0
        for key, name in SCREENS.items():
            await pilot.press(key)
            await wait_for(pilot, lambda: app.screen.TITLE == name)  # noqa: B023 (awaited at once)
            app.screen.refresh_view()
            await pilot.pause()
            row = screen_lines(app)[0]
            assert_title_parts_whole(app, row)
            shown[name] = row.rstrip()
        await pilot.press("q")
    return shown


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("status", list(STATUSES))
def test_every_header_keeps_the_verdict_and_the_source_whole(status, size):
    source, _, _, word = STATUSES[status]
    marker = "· replay" if source == "replay" else "· live"
    for screen, row in run_async(_headers)(status, size).items():
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
