"""Helpers for the TUI tests: recordings, a fixed host sampler, and screen text.

Test doubles live here and in tui_workload_double.py, never in the product.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[1] / "data"
STANDIN = DATA / "handmade_two_gpu_training_standin.json"
GPU_LOST = DATA / "handmade_gpu_lost_midsession.json"
NOT_SUPPORTED = DATA / "handmade_notsupported_fields.json"
NVML_GONE = DATA / "handmade_nvml_gone_midsession.json"
NO_NVML = DATA / "handmade_no_nvml.json"

GiB = 2**30


def fixed_host() -> dict[str, Any]:
    """Host readings that do not change, so screens are reproducible."""
    return {"cpu_pct": 25.0, "cpu_per_core_pct": [10.0, 40.0, 20.0, 30.0],
            "ram_used_bytes": 6 * GiB, "ram_total_bytes": 16 * GiB}


def replay_factory(path: Path, loop: bool = False) -> Callable[[], Any]:
    from gpudoctor.backends import ReplayBackend

    return lambda: ReplayBackend.from_file(path, loop=loop)


def make_test_app(path: Path = STANDIN, *, loop: bool = False, **kw: Any) -> Any:
    """An app on a recording, sampling only when the test asks (interval of an hour)."""
    from gpudoctor.tui.app import GpudoctorApp

    kw.setdefault("interval", 3600.0)
    kw.setdefault("host_sampler", fixed_host)
    kw.setdefault("workload_check", lambda: "workload module not available (test: not wired)")
    return GpudoctorApp(replay_factory(path, loop), replay=str(path), **kw)


def workload_app(sweep: str, **kw: Any) -> Any:
    """The app on the stand-in recording whose Workload screen runs ``sweep`` (module:function, one
    of tui_workload_double's) in a child process."""
    from gpudoctor.tui.workload_runner import WorkloadProcess

    return make_test_app(STANDIN, workload_check=lambda: None,
                         workload_factory=lambda options: WorkloadProcess(sweep, options), **kw)


@contextlib.asynccontextmanager
async def running_app(path: Path, *, size: tuple[int, int], samples: int, **kw: Any) -> AsyncIterator[tuple[Any, Any]]:
    """The app on recording ``path``, headless at ``size``, after ``samples`` readings: (app, pilot).
    Leaving the block quits it with q."""
    async with running(make_test_app(path, **kw), size=size, samples=samples) as (app, pilot):
        yield app, pilot


@contextlib.asynccontextmanager
async def running(app: Any, *, size: tuple[int, int], samples: int) -> AsyncIterator[tuple[Any, Any]]:
    """``app`` headless at ``size``, after ``samples`` readings: (app, pilot). Leaving the block
    quits it with q."""
    async with app.run_test(size=size) as pilot:
        await take_samples(pilot, app, samples)
        yield app, pilot
        await pilot.press("q")


def screen_lines(app: Any) -> list[str]:
    """The text of the screen as shown, one string per terminal row."""
    strips = app.screen._compositor.render_strips()  # the composed frame (what a terminal gets)
    return ["".join(segment.text for segment in strip) for strip in strips]


def screen_text(app: Any) -> str:
    return "\n".join(line.rstrip() for line in screen_lines(app))


async def wait_for(pilot: Any, condition: Callable[[], bool], timeout: float = 60.0, step: float = 0.05) -> None:
    """Let the app run until ``condition()`` holds (workers finish, messages land); the bound is
    generous: a busy machine only makes the wait longer, never the condition false."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await pilot.pause(step)


async def take_samples(pilot: Any, app: Any, n: int) -> None:
    """Read the backend ``n`` more times, one after another."""
    for _ in range(n):
        target = app.state.samples + 1
        await wait_for(pilot, lambda: app._sample_started is None)
        app.request_sample()
        await wait_for(pilot, lambda: app.state.samples >= target)  # noqa: B023 (awaited at once)
    await pilot.pause()


async def show(pilot: Any, app: Any, key: str) -> str:
    """Press ``key``, let the app redraw, and return the screen's text."""
    await pilot.press(key)
    await pilot.pause()
    return screen_text(app)


async def run_sweep_on_screen(pilot: Any, app: Any, until: tuple[str, ...] = ("finished",),
                              timeout: float = 60.0) -> None:
    """Open the Workload screen, start its sweep (s) and wait until its phase is one of ``until``."""
    await pilot.press("w")
    await pilot.press("s")
    await wait_for(pilot, lambda: app.workload.phase in until, timeout=timeout)
    await pilot.pause()


async def open_processes(pilot: Any, app: Any, samples: int = 1) -> tuple[Any, Any]:
    """Take ``samples`` readings and switch to the Processes screen: (the screen, its table)."""
    await take_samples(pilot, app, samples)
    await pilot.press("p")
    await pilot.pause()
    return app.screen, app.screen.query_one("#procs")


def run_async(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run an ``async def`` test with asyncio.run (no pytest-asyncio dependency)."""
    import asyncio
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


# --------------------------------------------------------------------------- bare pty
class PtyApp:
    """The TUI as a child process on a pseudo-terminal of a fixed size."""

    def __init__(self, argv: list[str], cols: int = 100, rows: int = 30, cwd: Path = ROOT,
                 env: dict[str, str] | None = None) -> None:
        import threading

        from support.script_loader import load_script

        self._terminal = terminal = load_script("benchmarks/pty_terminal.py", "pty_terminal")
        self.proc, self.master = terminal.start_on_pty(argv, cols=cols, rows=rows, cwd=cwd, env=env)
        self.chunks: list[bytes] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=terminal.read_until_closed, args=(self.master, self._keep),
                                       daemon=True)
        self.reader.start()

    def _keep(self, data: bytes) -> None:
        with self.lock:
            self.chunks.append(data)

    def text(self) -> str:
        """Everything the app wrote, escape sequences removed."""
        with self.lock:
            raw = b"".join(self.chunks).decode("utf-8", "replace")
        return ANSI.sub("", raw)

    def mark(self) -> int:
        return len(self.text())

    def wait_for(self, needle: str, since: int = 0, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text()[since:]:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{needle!r} not shown within {timeout} s; output tail:\n{self.text()[-2000:]}")

    def keys(self, data: str) -> None:
        os.write(self.master, data.encode())

    def quit(self, timeout: float = 30.0) -> int:
        """Press q and wait for the exit code (subprocess.TimeoutExpired after ``timeout``)."""
        self.keys("q")
        return self.proc.wait(timeout)

    def __enter__(self) -> "PtyApp":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._terminal.end(self.proc, self.master)


ANSI = re.compile(r"\x1b(\[[0-9;?<>=]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[PX^_][^\x1b]*\x1b\\|.)")


def assert_tui_header_fails(env: dict[str, str], cols: int = 160) -> None:
    """Start the TUI (quick doctor) with ``env`` on a pseudo-terminal: its header says
    "Doctor: FAIL" within 60 s, and ``q`` ends it with 0."""
    import sys

    app = PtyApp([sys.executable, "-m", "gpudoctor", "tui", "--interval", "0.5", "--doctor-level", "quick"],
                 env=env, cols=cols, rows=30)
    with app:
        app.wait_for("Doctor: FAIL", timeout=60)
        assert app.quit(30) == 0


def assert_title_parts_whole(app: Any, shown: str) -> None:
    """``shown`` (the title row as on screen) is the title's parts that fit, each whole and in
    their order, and holds every part that is never dropped: the verdict and the source marker."""
    parts = app.screen.query_one("#title")._parts
    assert parts, "no title"
    shown = shown.rstrip()
    rest = shown
    for text, rank in parts:
        piece = text.plain
        if rest.startswith(piece):
            rest = rest[len(piece):]
        elif rest and rest == piece.rstrip():  # the last part shown, its trailing space trimmed
            rest = ""
        elif rank == 0:
            raise AssertionError(f"title lost a part it must keep, {piece!r}: {shown!r}")
    assert not rest, f"title cut inside a part: {shown!r} (parts {[t.plain for t, _ in parts]})"
