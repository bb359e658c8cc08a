"""The TUI's start (issue 33): the first frame builds only the screen it shows; the others are
built when first shown, and work the same then."""

from __future__ import annotations

from support.tui_support import STANDIN, fixed_host, make_test_app, replay_factory, run_async, screen_text, wait_for

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


# --------------------------------------------------------------------------- the forks' answers
# `gpudoctor` takes its first reading and the quick report in forks while it imports Textual
# (gpudoctor.tui.early, gpudoctor.report.quick). What the app does with their answers is tested here with
# stand-ins of the fork (gpudoctor.system._fork.ForkedCall's methods); the forks themselves in
# tests/report/test_quick_start.py.
class AnsweredFork:
    """A fork that has answered (``ready``), or answers only when read (``ready=False``)."""

    def __init__(self, answer: bytes, why: str = "", ready: bool = True) -> None:
        self._answer, self._ready, self.cancelled = (answer, why), ready, False

    def ready(self) -> bool:
        return self._ready

    def answer_bytes(self) -> tuple[bytes, str]:
        return self._answer

    def answer(self) -> tuple[str, str]:
        return self._answer[0].decode(), self._answer[1]

    def cancel(self) -> None:
        self.cancelled = True


def _pickled_reading() -> bytes:
    """A reading of the stand-in recording whose GPUs are named "forked GPU" (the same GPUs, told apart)."""
    import pickle

    from gpudoctor.sampling.presentation import recorded_process_info
    from gpudoctor.sampling.sampler import Sampler
    from gpudoctor.tui.early import take_reading

    snap, rows, notes, published = take_reading(Sampler(replay_factory(STANDIN)(), fixed_host), recorded_process_info)
    for device in snap.devices:
        device.static = {**device.static, "name": "forked GPU"}
    return pickle.dumps((snap, rows, notes, published))


def _names(snapshot) -> list[str]:
    return [d.static.get("name") for d in snapshot.devices]


async def _app_with_first_reading(fork: AnsweredFork, readings: int = 2) -> tuple[list, list]:
    """Run the app (its own backend: the stand-in recording) with ``fork`` as its first reading
    until it has kept ``readings``: (the GPU names on screen when the app opened its own backend,
    the GPU names of each reading it kept, in order)."""
    from gpudoctor.tui.app import GpudoctorApp

    opened: list = []
    kept: list = []
    own = replay_factory(STANDIN)

    def factory():
        snap = app.state.snapshot
        opened.append(None if snap is None else _names(snap))
        return own()

    app = GpudoctorApp(factory, interval=3600.0, host_sampler=fixed_host, replay=str(STANDIN),
                       workload_check=lambda: "n/a", first_reading=fork)
    keep = app._keep_reading
    app._keep_reading = lambda snap, *rest: (kept.append(_names(snap)), keep(snap, *rest))  # type: ignore[method-assign]
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.state.samples >= readings, timeout=30)
        await pilot.press("q")
    return opened, kept


FORKED, OWN = ["forked GPU"] * 2, ["NVIDIA A100-SXM4-40GB"] * 2


@run_async
async def test_the_forks_first_reading_is_the_first_frame_and_the_app_reads_itself_after_it():
    """Answered by the time the app is mounted: the first frame shows it, and the app opens its
    own backend only then (for the readings that follow)."""
    opened, kept = await _app_with_first_reading(AnsweredFork(_pickled_reading()))
    assert opened == [FORKED] and kept[:2] == [FORKED, OWN]


@run_async
async def test_a_first_reading_that_answers_after_the_mount_is_still_shown_first():
    opened, kept = await _app_with_first_reading(AnsweredFork(_pickled_reading(), ready=False))
    assert len(opened) == 1 and kept[:2] == [FORKED, OWN]


@run_async
async def test_a_fork_that_gave_no_reading_costs_nothing_but_itself():
    for fork in (AnsweredFork(b"", "ChildFailed"), AnsweredFork(b"", "Timeout", ready=False),
                 AnsweredFork(b"not a pickle")):
        opened, kept = await _app_with_first_reading(fork, readings=1)
        assert opened == [None] and kept == [OWN]


@run_async
async def test_a_quick_report_answered_by_the_mount_is_the_headers_verdict_from_the_first_frame():
    import json

    from gpudoctor.core.model import Finding, ProbeResult, Report, Status

    failed = Report(results=[ProbeResult(probe="devices", status=Status.FAIL, summary="no GPU",
                                         findings=[Finding(status=Status.FAIL, code="x", summary="CUDA cannot start")])])
    fork = AnsweredFork(json.dumps(failed.to_dict()).encode())
    app = make_test_app(STANDIN, startup_doctor=True, early_report=fork)
    async with app.run_test(size=(100, 30)) as pilot:
        assert app.headline == ("fail", "CUDA cannot start", "quick")  # set in on_mount: no thread, no wait
        await wait_for(pilot, lambda: "Doctor: FAIL" in screen_text(app), timeout=30)
        await pilot.press("q")
