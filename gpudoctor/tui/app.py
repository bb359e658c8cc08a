"""The gpudoctor TUI: a live nvidia-smi companion with Doctor and Workload screens.

The app is built from injected parts so that tests and replays drive the same code:

* ``backend_factory()`` returns a GPU backend (``NvmlBackend`` live, ``ReplayBackend``
  for a recording); it is read only in worker threads.
* ``host_sampler()`` returns host readings (psutil by default).
* ``probe_source()`` / ``doctor_runner(...)`` choose and run the doctor's probes
  (``gpudoctor.report.runner``, which runs torch probes in child processes).
* ``workload_factory(options)`` makes a :class:`WorkloadProcess` (a spawned child).

Threads never touch widgets: workers post :class:`Message` objects and the handlers
below update :class:`AppState` and ask the active screen to redraw. The TUI process
never imports torch and never creates a CUDA context.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.message import Message
from textual.worker import get_current_worker

from gpudoctor.core.errors import first_line
from gpudoctor.backends.host import PsutilProcessInfo, default_host_sampler
from gpudoctor.sampling.presentation import ProcessRow, recorded_process_info
from gpudoctor.sampling.sampler import History, Sampler, Snapshot
from gpudoctor.core.model import ProbeResult, Report
from gpudoctor.tui.early import take_reading
from gpudoctor.tui.screens import (
    DoctorScreen, HelpScreen, OverviewScreen, PopUp, ProcessesScreen, WhyScreen, WorkloadScreen,
)
from gpudoctor.tui.workload_runner import DEFAULT_TARGET, WorkloadProcess, field_of, workload_available

if TYPE_CHECKING:
    from gpudoctor.system._fork import ForkedCall
    from gpudoctor.backends.base import GpuBackend

MIN_INTERVAL_S = 0.25
DEFAULT_INTERVAL_S = 1.0
SCREEN_NAMES = ("overview", "processes", "doctor", "workload")
_SCREENS: dict[str, Callable[[], Any]] = {"overview": OverviewScreen, "processes": ProcessesScreen,
                                          "doctor": DoctorScreen, "workload": WorkloadScreen}


# --------------------------------------------------------------------------- state
@dataclass
class AppState:
    snapshot: Snapshot | None = None
    history: History = field(default_factory=History)
    processes: list[ProcessRow] = field(default_factory=list)
    process_notes: list[str] = field(default_factory=list)
    sample_error: str = ""
    stalled_s: float | None = None
    samples: int = 0
    #: Critical GPU events (Xid, ECC) per NVML index, from NVML's event set or a replay.
    events: dict[int, Any] = field(default_factory=dict)
    #: live summaries published by processes that use TrainingMonitor, by PID
    published: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: `gpudoctor why` answers by PID: the diagnosis, or the one-line error
    why_results: dict[int, Any] = field(default_factory=dict)


@dataclass
class DoctorState:
    level: str = "standard"
    run_id: int = 0
    running: bool = False
    finished: bool = False
    probes: list[tuple[str, str]] = field(default_factory=list)
    results: dict[str, ProbeResult] = field(default_factory=dict)
    current: str | None = None
    error: str = ""
    verdict: str = ""


@dataclass
class WorkloadState:
    phase: str = "idle"
    running: bool = False
    unavailable: str = ""
    pid: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    events: int = 0
    fraction: float | None = None
    last_message: str = ""
    runs: list[dict[str, Any]] = field(default_factory=list)
    result: Any = None
    error: str = ""


# --------------------------------------------------------------------------- messages
class WhyDone(Message):
    def __init__(self, pid: int, answer: dict[str, Any] | str) -> None:
        super().__init__()
        self.pid = pid
        self.answer = answer


class SampleReady(Message):
    def __init__(self, snapshot: Snapshot, rows: list[ProcessRow], notes: list[str],
                 published: dict[int, dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.snapshot, self.rows, self.notes = snapshot, rows, notes
        self.published = published or {}


class SampleFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class DoctorStarted(Message):
    def __init__(self, run_id: int, probes: list[tuple[str, str]]) -> None:
        super().__init__()
        self.run_id, self.probes = run_id, probes


class DoctorProbeStarted(Message):
    def __init__(self, run_id: int, name: str) -> None:
        super().__init__()
        self.run_id, self.name = run_id, name


class DoctorResult(Message):
    def __init__(self, run_id: int, result: ProbeResult) -> None:
        super().__init__()
        self.run_id, self.result = run_id, result


class DoctorFinished(Message):
    def __init__(self, run_id: int, verdict: str = "", error: str = "", headline: tuple[str, str] | None = None) -> None:
        super().__init__()
        self.run_id, self.verdict, self.error, self.headline = run_id, verdict, error, headline


class HeaderVerdict(Message):
    """The start-up quick doctor's verdict for the header: (status, reason)."""

    def __init__(self, headline: tuple[str, str]) -> None:
        super().__init__()
        self.headline = headline


def report_headline(report: Report) -> tuple[str, str]:
    """(status, reason) of a finished report for the header, from the verdict the quick check,
    ``report --quick`` and the exporter share (:func:`gpudoctor.report.quick.verdict_of`); a pass
    carries no reason."""
    from gpudoctor.report.quick import verdict_of

    verdict = verdict_of(report)
    status = verdict.status.value
    return status, ("" if status == "pass" else verdict.headline)


class WorkloadEvent(Message):
    def __init__(self, kind: str, payload: dict[str, Any]) -> None:
        super().__init__()
        self.kind, self.payload = kind, payload


_TRACKER_LOCK = threading.Lock()


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker with the terminal's own stderr.

    Spawning a child (the doctor's torch probes, the workload) starts the tracker on
    first use and passes it ``sys.stderr.fileno()``. Inside a running Textual app
    sys.stderr is a capture object whose fileno() is -1, and the spawn then fails with
    "bad value(s) in fds_to_keep"; so the real one (sys.__stderr__) stands in for the moment
    the tracker takes to start. Called by the workers that spawn, not at start-up: importing
    multiprocessing and starting the tracker cost the first frame tens of milliseconds.
    """
    with _TRACKER_LOCK:
        saved = sys.stderr
        try:
            from multiprocessing import resource_tracker

            if sys.__stderr__ is not None:
                sys.stderr = sys.__stderr__
            resource_tracker.ensure_running()
        except Exception:  # no tracker on this platform: spawning works without it
            pass
        finally:
            sys.stderr = saved


def not_recorded_host() -> Any:
    """The host readings of a replay: recordings hold no host time series."""
    from gpudoctor.backends.na import NA

    return NA("NotRecorded")


# --------------------------------------------------------------------------- app
#: Seconds after the first reading at which the start-up objects are frozen (see below).
FREEZE_AFTER_S = 3.0
#: Seconds after the start at which the cyclic collector is on whatever happened (see gpudoctor.cli).
COLLECTOR_ON_AFTER_S = 30.0


def _freeze_startup_objects() -> None:
    """What was built to start the app (modules, styles, screens, the first panels) lives as
    long as the app: moved out of the cyclic collector's reach once the first reading is on
    screen, so the full collections that come every minute or two no longer walk it. Not in
    tests (a headless app), where the test runner's own objects would be frozen too."""
    import gc

    gc.collect()
    gc.freeze()
    gc.enable()  # `gpudoctor` (gpudoctor.cli) starts with the collector off


def _enable_collector() -> None:
    """The collector on, even if no reading ever came to freeze the start-up objects."""
    import gc

    gc.enable()


class GpudoctorApp(App[int]):
    """``gpudoctor``: Overview, Processes, Doctor, Workload and Help screens."""

    CSS_PATH = "gpudoctor.tcss"
    TITLE = "gpudoctor"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("o", "show('overview')", "overview"),
        Binding("p", "show('processes')", "processes"),
        Binding("d", "show('doctor')", "doctor"),
        Binding("w", "show('workload')", "workload"),
        Binding("1", "show('overview')", "overview", show=False),
        Binding("2", "show('processes')", "processes", show=False),
        Binding("3", "show('doctor')", "doctor", show=False),
        Binding("4", "show('workload')", "workload", show=False),
        Binding("n", "show('fleet')", "fleet", show=False),  # nodes (f starts the full sweep on Workload)
        Binding("5", "show('fleet')", "fleet", show=False),
        Binding("question_mark", "help", "help"),
        Binding("h", "help", "help", show=False),
        Binding("f1", "help", "help", show=False),
        Binding("q", "quit_app", "quit"),
        # Textual reads Ctrl-C as a key (the terminal is raw) and only hints at Ctrl-Q; here it
        # quits as an interrupt does everywhere else in gpudoctor: exit 130 (docs/tui.md).
        Binding("ctrl+c", "quit_app(130)", "quit", show=False, priority=True),
    ]

    def get_driver_class(self) -> Any:
        """Textual's driver, or on Linux and macOS the one whose input thread sleeps until a key
        comes (gpudoctor.tui.driver); ``TEXTUAL_DRIVER`` in the environment still chooses."""
        from textual import constants

        if constants.DRIVER is None and sys.platform != "win32":
            from gpudoctor.tui.driver import driver_class

            quiet = driver_class()
            if quiet is not None:
                return quiet
        return super().get_driver_class()

    def __init__(
        self,
        backend_factory: Callable[[], Any],
        *,
        interval: float = DEFAULT_INTERVAL_S,
        host_sampler: Callable[[], Any] | None = None,
        process_info: Callable[..., dict[str, Any]] | None = None,
        doctor_level: str = "standard",
        replay: str | None = None,
        probe_source: Callable[[], list[Any]] | None = None,
        doctor_runner: Callable[..., Any] | None = None,
        workload_factory: Callable[[dict[str, Any]], WorkloadProcess] | None = None,
        workload_check: Callable[[], str | None] | None = None,
        start_screen: str = "overview",
        startup_doctor: bool = False,
        prometheus: str | None = None,
        fleet_interval: float = 15.0,
        early_report: ForkedCall | None = None,
        first_reading: ForkedCall | None = None,
    ) -> None:
        super().__init__()
        if interval < MIN_INTERVAL_S:
            raise ValueError(f"interval must be at least {MIN_INTERVAL_S} s")
        self.interval = float(interval)
        self.backend_factory = backend_factory
        self.host_sampler = host_sampler
        self.process_info = process_info
        self.replay = replay
        self.probe_source = probe_source
        self.doctor_runner = doctor_runner
        self.workload_factory = workload_factory or (lambda options: WorkloadProcess(DEFAULT_TARGET, options))
        self.workload_check = workload_check or workload_available
        self.start_screen = start_screen
        self.startup_doctor = startup_doctor
        #: the quick report started in a fork before the app (gpudoctor.tui.early.begin_early_start)
        self.early_report = early_report
        #: the first GPU reading taken in a fork before the app (gpudoctor.tui.early.begin_early_start)
        self.first_reading = first_reading
        #: ``gpudoctor --prometheus URL``: the Fleet screen (f) reads every node from Prometheus.
        self.prometheus = prometheus
        self.fleet_interval = fleet_interval
        #: how long the Processes screen's `y` (why) samples the selected process
        self.why_seconds = 5.0
        #: The header's doctor verdict: (status, reason, level), empty until a doctor run ends.
        self.headline: tuple[str, str, str] | None = None
        self.state = AppState()
        self.doctor = DoctorState(level=doctor_level)
        self.workload = WorkloadState()
        self.sampler: Sampler | None = None
        self.event_watcher: Any = None
        self._sample_started: float | None = None
        self._sample_thread: threading.Thread | None = None
        self._sample_wanted = threading.Event()
        self._workload_stop = threading.Event()
        self._quitting = False

    # -- lifecycle ------------------------------------------------------------------
    def on_mount(self) -> None:
        # The first frame needs its own screen only: the others are built when first shown.
        early = self._take_early_answers()
        if self.startup_doctor and self.headline is None:
            self._quick_verdict_worker()  # first: it runs beside the first frame, not after it
        if self.prometheus:
            from gpudoctor.tui.fleet import FleetScreen

            self.install_screen(FleetScreen(self.prometheus, interval=self.fleet_interval), "fleet")
        self._install(self.start_screen)
        self.push_screen(self.start_screen)
        if early:  # the first frame shows the forked reading; this process opens NVML after it
            self.call_after_refresh(self._tick)
        else:
            self._tick()
        self.set_interval(self.interval, self._tick, name="sample")
        self.set_timer(COLLECTOR_ON_AFTER_S, _enable_collector)

    def _take_early_answers(self) -> bool:
        """What the forks started before Textual's import (the first reading, the quick report)
        have answered by now goes into the first frame itself, without waiting for them; True
        when the first reading did. What has not answered yet is read by the threads."""
        first, report = self.first_reading, self.early_report
        taken = False
        if first is not None and first.ready():
            from gpudoctor.tui.early import read_first_reading

            self.first_reading = None
            reading = read_first_reading(first)
            if reading is not None:
                self._keep_reading(*reading)
                taken = True
        if self.startup_doctor and report is not None and report.ready():
            from gpudoctor.report.quick import read_quick_report

            quick = read_quick_report(report)
            if quick is not None:
                self.headline = (*report_headline(quick), "quick")
        return taken

    def _install(self, name: str) -> None:
        """Build screen ``name`` if it is not built yet (the Workload screen asks, once, whether
        the workload can run here)."""
        if name not in _SCREENS or self.is_screen_installed(name):
            return
        if name == "workload":
            why = self.workload_check()
            if why and not self.workload.running:
                self.workload.unavailable = why
                self.workload.phase = "not available"
        self.install_screen(_SCREENS[name](), name)

    def _quick_verdict_worker(self) -> None:
        """The quick doctor (NVML and text only: no torch import, no CUDA context in this
        process) for the header verdict; it never blocks the screen, nor the way out.

        It runs in a daemon thread of its own, not a Textual worker: its probes wait on NVML,
        which can hang on a failing GPU, and Textual's exit (asyncio's executor shutdown) joins
        its worker threads, so `q` waited for the driver."""
        def run() -> None:
            from gpudoctor.report.quick import quick_report, read_quick_report

            try:
                report = read_quick_report(self.early_report) if self.early_report is not None else None
                if report is None:
                    report = quick_report(replay=self.replay, events=self.event_watcher)
            except Exception as exc:  # the header says the doctor could not run; the app goes on
                headline = ("error", f"the quick doctor could not run: {first_line(exc)}")
            else:
                headline = report_headline(report)
            if not self._quitting:
                self.post_message(HeaderVerdict(headline))

        threading.Thread(target=run, name="gpudoctor-tui-verdict", daemon=True).start()

    def on_header_verdict(self, message: HeaderVerdict) -> None:
        # A verdict of the Doctor screen (a deeper level) is not replaced by the quick one.
        if self.headline is None or self.headline[2] == "quick":
            self.headline = (*message.headline, "quick")
            self._redraw(*SCREEN_NAMES)

    def _fail_header_on_critical_events(self) -> None:
        """A critical event seen on a GPU panel (a critical Xid, an uncorrectable ECC error) fails the
        header's verdict too, whatever the last doctor run said: the same judgement as the events
        probe's, which the next doctor run then repeats from this app's watcher."""
        from gpudoctor.backends.events import critical_events, describe_event

        worst = [(event.time, index, event) for index, state in sorted(self.state.events.items())
                 for event in critical_events(state)]
        if not worst or (self.headline is not None and self.headline[0] == "fail"):
            return
        _, index, event = max(worst, key=lambda item: item[0])
        self.headline = ("fail", describe_event(index, event), "events")
        self._redraw(*SCREEN_NAMES)

    def _redraw(self, *names: str) -> None:
        """Refresh the screen in front if it is one of ``names``; a pop-up's header (and the Fleet
        screen's, when the header is asked for: all of SCREEN_NAMES) follows the verdict and the
        source as every screen's does."""
        screen = self.screen
        if isinstance(screen, PopUp) or (names == SCREEN_NAMES and self.is_screen_installed("fleet")
                                         and screen is self.get_screen("fleet")):
            screen.refresh_view()
            return
        for name in names:
            if self.is_screen_installed(name) and screen is self.get_screen(name):
                screen.refresh_view()

    # -- actions --------------------------------------------------------------------
    def action_show(self, name: str) -> None:
        if name not in SCREEN_NAMES and not (name == "fleet" and self.prometheus):
            return
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
        self._install(name)
        if self.screen is not self.get_screen(name):
            self.switch_screen(name)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_quit_app(self, code: int = 0) -> None:
        self._quitting = True
        self._workload_stop.set()
        if self.event_watcher is not None:
            self.event_watcher.stop(join_s=0)  # never waits for the driver
        self.exit(code, return_code=code)

    # -- sampling -------------------------------------------------------------------
    def request_sample(self) -> None:
        """Read the backend now (the timer does this every interval)."""
        self._tick()

    def _tick(self) -> None:
        if self._sample_started is not None:
            # The previous reading has not come back: NVML can block on a failing GPU.
            waited = time.monotonic() - self._sample_started
            if waited > max(3 * self.interval, 2.0):
                self.state.stalled_s = waited
                self._redraw(*SCREEN_NAMES)
            return
        self._sample_started = time.monotonic()
        self._sample_worker()

    def _sample_worker(self) -> None:
        """Ask the sampling thread for a reading.

        The GPUs are read in a daemon thread of our own, not a Textual worker: an NVML call can
        hang on a failing GPU, and Textual (and the interpreter at exit) wait for their worker
        threads. Nothing waits for this one, so `q` and Ctrl-C quit at once. It lives as long as
        the app and sleeps between readings (a new thread for each reading cost about as much
        CPU as the reading itself)."""
        if self._sample_thread is None:
            self._sample_thread = threading.Thread(target=self._sample_loop, name="gpudoctor-tui-sample",
                                                   daemon=True)
            self._sample_thread.start()
        self._sample_wanted.set()

    def _sample_loop(self) -> None:
        wanted = self._sample_wanted
        while True:
            wanted.wait()
            wanted.clear()
            if self._quitting:
                return
            self._read_sample()

    def on_unmount(self) -> None:
        """The app is closing, however it was asked to (q, Ctrl-C, the end of a test): the
        sampling thread ends instead of waiting for a request that will not come."""
        self._quitting = True
        self._sample_wanted.set()
        for early in (self.early_report, self.first_reading):
            if early is not None:
                early.cancel()

    def _read_sample(self) -> None:
        first = self.first_reading
        if first is not None:  # the fork's reading came after the app was mounted
            from gpudoctor.tui.early import read_first_reading

            self.first_reading = None
            reading = read_first_reading(first)
            if reading is not None and not self._quitting:
                self.post_message(SampleReady(*reading))  # then this process's own, as after the mount
        opened = self.sampler is None
        try:
            if self.sampler is None:
                info = self.process_info
                gpu = self.backend_factory()
                if info is None:
                    info = recorded_process_info if gpu.kind == "replay" else PsutilProcessInfo()
                    self.process_info = info
                # A replay's GPUs are another machine's: this machine's CPU and RAM are not shown beside them.
                host = self.host_sampler or (not_recorded_host if gpu.kind == "replay" else default_host_sampler())
                self.sampler = Sampler(gpu, host)
            reading = take_reading(self.sampler, self.process_info)  # type: ignore[arg-type]
        except Exception as exc:  # a backend is not supposed to raise; if it does, say so and go on
            if not self._quitting:
                self.post_message(SampleFailed(f"reading failed: {first_line(exc)}"))
            return
        if not self._quitting:
            self.post_message(SampleReady(*reading))
        if opened:  # after the first reading is on its way: it does not wait for the event set
            self._watch_events(self.sampler.gpu)

    def _watch_events(self, gpu: GpuBackend) -> None:
        """Watch NVML's event set (Xid, ECC) for the GPU panels; without it the panels go on."""
        from gpudoctor.backends.events import open_event_watcher

        try:
            watcher = open_event_watcher(gpu)
            watcher.start()
        except Exception:  # a backend without events (a test stand-in): no event line
            return
        if self._quitting:
            watcher.stop(join_s=0)
            return
        self.event_watcher = watcher

    def on_sample_ready(self, message: SampleReady) -> None:
        self._sample_started = None
        self._keep_reading(message.snapshot, message.rows, message.notes, message.published)
        self._redraw("overview", "processes")

    def _keep_reading(self, snapshot: Snapshot, rows: list[ProcessRow], notes: list[str],
                      published: dict[int, dict[str, Any]]) -> None:
        state = self.state
        state.snapshot = snapshot
        state.history.add(snapshot)
        state.processes = rows
        state.process_notes = notes
        state.published = published
        state.sample_error = ""
        state.stalled_s = None
        state.samples += 1
        watcher = self.event_watcher
        if watcher is not None:
            state.events = {d.index: watcher.snapshot(d.index) for d in snapshot.devices}
            self._fail_header_on_critical_events()
        if state.samples == 1 and not self.is_headless:
            # a full collection takes tens of ms: after the first frame (and its verdict), not in it
            self.set_timer(FREEZE_AFTER_S, _freeze_startup_objects)

    # -- why ------------------------------------------------------------------------
    def start_why(self, pid: int) -> None:
        """Run `gpudoctor why` on ``pid`` in a worker; the answer opens in a :class:`WhyScreen`."""
        self.state.why_results[pid] = "why: sampling..."
        self.notify(f"gpudoctor why: sampling pid {pid} for {self.why_seconds:g} s")
        self._redraw("processes")
        self._why_worker(pid)

    @work(thread=True, group="why", exit_on_error=False)
    def _why_worker(self, pid: int) -> None:
        from gpudoctor.core.errors import GpudoctorError
        from gpudoctor.why import why

        gpu = None
        if not self.replay:
            from gpudoctor.backends import NvmlBackend

            gpu = NvmlBackend()
        try:
            answer: dict[str, Any] | str = why(pid, self.why_seconds, gpu_backend=gpu)
        except GpudoctorError as exc:
            answer = str(exc)
        except Exception as exc:  # never a crash of the screen: the error is the answer
            answer = first_line(exc)
        finally:
            if gpu is not None:
                gpu.close()
        self.post_message(WhyDone(pid, answer))

    def on_why_done(self, message: WhyDone) -> None:
        self.state.why_results[message.pid] = message.answer
        self._redraw("processes")
        if not self._quitting:
            self.push_screen(WhyScreen(message.pid, message.answer))

    def on_sample_failed(self, message: SampleFailed) -> None:
        self._sample_started = None
        self.state.sample_error = message.error
        self._redraw(*SCREEN_NAMES)

    # -- doctor ---------------------------------------------------------------------
    def start_doctor(self) -> None:
        doc = self.doctor
        if doc.running:
            self.notify("The doctor is still running; r re-runs it once it is done.", severity="warning")
            return
        doc.run_id += 1
        doc.running, doc.finished = True, False
        doc.probes, doc.results, doc.current, doc.error, doc.verdict = [], {}, None, "", ""
        self._redraw("doctor")
        self._doctor_worker(doc.run_id, doc.level)

    @work(thread=True, exclusive=True, group="doctor", exit_on_error=False)
    def _doctor_worker(self, run_id: int, level: str) -> None:
        from gpudoctor.report import runner
        from gpudoctor.core.findings import REPORT_VERDICT

        start_resource_tracker()  # before the runner spawns the torch probes' child
        worker = get_current_worker()
        try:
            probes = self.probe_source() if self.probe_source else runner.select_probes(None, level)
        except Exception as exc:
            self.post_message(DoctorFinished(run_id, error=f"cannot choose probes: {first_line(exc)}"))
            return
        self.post_message(DoctorStarted(run_id, [(p.name, p.title) for p in probes]))
        if not probes:
            self.post_message(DoctorFinished(run_id))
            return
        spec = runner.RunSpec(level=level, replay=self.replay, quiet_child=True)
        run = self.doctor_runner or runner.run_probes
        # The events probe reads what this app's watcher saw on NVML's stream (runner.run_probes).
        extra = {"events": self.event_watcher} if self.doctor_runner is None else {}
        done = threading.Event()
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["report"] = run(
                    probes, spec,
                    on_start=lambda p: self.post_message(DoctorProbeStarted(run_id, p.name)),
                    on_result=lambda r: self.post_message(DoctorResult(run_id, r)), **extra)
            except BaseException as exc:  # the runner is not supposed to raise; if it does, show it
                box["error"] = first_line(exc)
            finally:
                done.set()

        # The runner waits on child processes with long time limits; running it in a
        # daemon thread lets `q` quit at once (its daemon children die with us).
        threading.Thread(target=target, name="gpudoctor-doctor", daemon=True).start()
        while not done.wait(0.1):
            if worker.is_cancelled:
                return
        report = box.get("report")
        verdict = ""
        headline = None
        if report is not None:
            status = str(report.status)
            verdict = f"Verdict: {status.upper()}. {REPORT_VERDICT.get(status, '')}"
            headline = report_headline(report)
        self.post_message(DoctorFinished(run_id, verdict=verdict, error=box.get("error", ""), headline=headline))

    def on_doctor_started(self, message: DoctorStarted) -> None:
        if message.run_id == self.doctor.run_id:
            self.doctor.probes = message.probes
            self._redraw("doctor")

    def on_doctor_probe_started(self, message: DoctorProbeStarted) -> None:
        if message.run_id == self.doctor.run_id:
            self.doctor.current = message.name
            self._redraw("doctor")

    def on_doctor_result(self, message: DoctorResult) -> None:
        if message.run_id == self.doctor.run_id:
            self.doctor.results[message.result.probe] = message.result
            if self.doctor.current == message.result.probe:
                self.doctor.current = None
            self._redraw("doctor")

    def on_doctor_finished(self, message: DoctorFinished) -> None:
        if message.run_id == self.doctor.run_id:
            doc = self.doctor
            doc.running, doc.finished, doc.current = False, True, None
            doc.verdict, doc.error = message.verdict, message.error
            if message.headline is not None:
                self.headline = (*message.headline, doc.level)
                self._redraw(*SCREEN_NAMES)
            else:
                self._redraw("doctor")

    # -- workload -------------------------------------------------------------------
    def start_workload(self, options: dict[str, Any]) -> None:
        wl = self.workload
        if wl.running:
            self.notify("A sweep is already running (x cancels it).", severity="warning")
            return
        why = self.workload_check()
        if why:
            wl.unavailable, wl.phase = why, "not available"
            self._redraw("workload")
            return
        self.workload = WorkloadState(phase="starting", running=True, options=dict(options))
        self._workload_stop.clear()
        self._redraw("workload")
        self._workload_worker(dict(options))

    def cancel_workload(self) -> None:
        if self.workload.running:
            self._workload_stop.set()
            self.workload.phase = "cancelling"
            self._redraw("workload")

    @work(thread=True, exclusive=True, group="workload", exit_on_error=False)
    def _workload_worker(self, options: dict[str, Any]) -> None:
        worker = get_current_worker()
        start_resource_tracker()  # before the workload's child is spawned
        try:
            proc = self.workload_factory(options)
            proc.start()
        except Exception as exc:
            self.post_message(WorkloadEvent("error", {"message": f"could not start the workload process: "
                                                                 f"{first_line(exc)}"}))
            return
        self.post_message(WorkloadEvent("launched", {"pid": proc.pid}))
        try:
            for kind, payload in proc.events(stop=lambda: worker.is_cancelled or self._workload_stop.is_set()):
                if worker.is_cancelled and kind != "cancelled":
                    break
                self.post_message(WorkloadEvent(kind, payload))
        finally:
            if not proc.finished:
                proc.cancel()

    def on_workload_event(self, message: WorkloadEvent) -> None:
        wl = self.workload
        kind, payload = message.kind, message.payload or {}
        wl.events += 1
        if kind == "launched":
            wl.pid = payload.get("pid")
            wl.phase = "starting (importing the workload in its own process)"
        elif kind == "started":
            wl.pid = payload.get("pid", wl.pid)
            wl.options = payload.get("options", wl.options)
            wl.dropped = list(payload.get("dropped_options") or [])
            wl.phase = "running"
        elif kind == "progress":
            wl.phase = "running"
            fraction = field_of(payload, "fraction")
            done, total = field_of(payload, "done"), field_of(payload, "total")
            if isinstance(fraction, (int, float)) and 0 <= fraction <= 1:
                wl.fraction = float(fraction)
            elif isinstance(done, (int, float)) and isinstance(total, (int, float)) and total > 0:
                wl.fraction = min(1.0, float(done) / float(total))
            msg = field_of(payload, "message")
            if isinstance(msg, str):
                wl.last_message = msg
            if field_of(payload, "batch_size") is not None and (
                    field_of(payload, "samples_per_s") is not None or field_of(payload, "status") is not None):
                wl.runs.append(payload)
        elif kind == "done":
            wl.running, wl.phase, wl.result, wl.fraction = False, "finished", payload, 1.0
            wl.last_message = "sweep finished"
            result_runs = payload.get("runs") if isinstance(payload, dict) else None
            if isinstance(result_runs, list) and not wl.runs:
                wl.runs = [r for r in result_runs if isinstance(r, dict)]
        elif kind == "unavailable":
            wl.running, wl.phase = False, "not available"
            wl.unavailable = str(payload.get("message", "workload module not available"))
        elif kind in ("error", "exited"):
            wl.running, wl.phase = False, "failed"
            wl.error = str(payload.get("message", kind))
        elif kind == "cancelled":
            wl.running, wl.phase = False, "cancelled"
        self._redraw("workload")


def make_app(*, replay: str | None = None, interval: float = DEFAULT_INTERVAL_S, doctor_level: str = "standard",
             **kw: Any) -> GpudoctorApp:
    """The app on live NVML, or on a recording played in a loop."""
    if replay:
        from gpudoctor.backends.replay import ReplayBackend

        recording = ReplayBackend.from_file(replay, loop=True).recording  # validate now, before the screen opens

        def factory() -> Any:
            return ReplayBackend(recording, loop=True, source=str(replay))
    else:
        def factory() -> Any:  # NVML's backend loads when the app opens it, after the first frame
            from gpudoctor.backends.nvml import NvmlBackend

            return NvmlBackend()
    kw.setdefault("startup_doctor", True)
    return GpudoctorApp(factory, interval=interval, doctor_level=doctor_level, replay=replay, **kw)


__all__ = ["GpudoctorApp", "make_app", "report_headline", "MIN_INTERVAL_S", "DEFAULT_INTERVAL_S", "AppState", "DoctorState",
           "WorkloadState"]
