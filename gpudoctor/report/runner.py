"""Choose probes, run them, and turn every failure into a result.

This is the one place that catches every exception a probe can raise. Probes that use
torch run in a child process (``multiprocessing`` spawn) with a per-probe time limit:
a hang, a segfault, an ``os.abort()`` or a poisoned CUDA context costs one ``error``
result, and the remaining probes go on in a fresh child. The calling process (the CLI,
the TUI) never imports torch and never creates a CUDA context.

NVML-only probes run in-process in a daemon thread, also with a time limit (an NVML
call on a GPU that is falling off the bus can block).

``RunSpec.python`` (``report --python PATH``) starts the child with another interpreter,
the user's training environment, so one gpudoctor checks any environment's torch. That
child loads gpudoctor from this installation's files (it need not be installed there).
When the checked interpreter has no torch, the torch probes do not start a child: the
quick-level ones answer from NVML and say so, the others are skipped with the way to
check the environment that has torch.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

# multiprocessing and subprocess are imported where a child starts: `report --quick`
# starts none, and their imports are a tenth of its run time.
from gpudoctor.core._record import field, record
from gpudoctor import _version
from gpudoctor.core import findings
from gpudoctor.system import signals
from gpudoctor.system import _cpuwait, _proc
from gpudoctor.system._proc import describe_exit, silence_stdio
from gpudoctor.core.errors import first_line
from gpudoctor.backends.nvml import STUCK_S, thread_blocked
from gpudoctor.core.model import POISONED, ProbeResult, Report, Status
from gpudoctor.system.safejson import json_safe

if TYPE_CHECKING:
    import subprocess
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

    from gpudoctor.backends.base import GpuBackend
    from gpudoctor.backends.events import EventSource
    from gpudoctor.probes import Probe, ProbeContext

# Seconds a child process gets to import torch and start, on top of the probe's own limit.
CHILD_START_ALLOWANCE_S = 60.0
# How often a probe child's limit is looked at while it runs: each look reads how long the child's
# threads waited for a CPU (gpudoctor.system._cpuwait), which the limit does not count.
CHILD_POLL_S = 1.0
# How often a probe run in this process is looked at while it runs: whether it is done, or held
# inside an NVML call the driver does not answer (then it is abandoned, not waited for).
PROBE_POLL_S = 0.25


class ProbeSelectionError(ValueError):
    """Unknown probe name or level (a usage error)."""


@record
class RunSpec:
    """Everything a (child) process needs to rebuild the probe context. Picklable."""

    level: str = "standard"
    device: int | None = None
    replay: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    # Send the probe child's stdout/stderr to /dev/null (the TUI owns the terminal; library
    # warnings printed there would draw over its screen). Results travel over the pipe.
    quiet_child: bool = False
    # The interpreter whose torch the torch probes use (None: this one).
    python: str | None = None


def all_probes() -> dict[str, Probe]:
    from gpudoctor.probes import registry

    return registry()


def select_probes(names: Iterable[str] | None = None, level: str = "standard") -> list[Probe]:
    """Probes named (in report order), or every probe that runs at ``level``."""
    from gpudoctor.probes import LEVELS, probe_names, registry

    if level not in LEVELS:
        raise ProbeSelectionError(f"unknown level {level!r} (choose from {', '.join(LEVELS)})")
    # Import only the modules of the probes that will run (--quick loads no measuring probe).
    if names:
        wanted = list(dict.fromkeys(names))
        known = probe_names()
        unknown = [n for n in wanted if n not in known]
        if unknown:
            raise ProbeSelectionError(
                f"unknown probe {unknown[0]!r}; known probes: {', '.join(known)}")
        return list(registry(names=wanted).values())
    return list(registry(level=level).values())


def build_context(spec: RunSpec, gpu: GpuBackend | None = None,
                  events: EventSource | None = None) -> ProbeContext:
    from gpudoctor.backends import open_gpu_backend
    from gpudoctor.probes import ProbeContext

    if gpu is None:
        gpu = open_gpu_backend(spec.replay)
    return ProbeContext(gpu=gpu, device=spec.device, level=spec.level, options=dict(spec.options),
                        replay=bool(spec.replay), python=spec.python, events=events)


def call_probe(probe: Probe, ctx: ProbeContext) -> ProbeResult:
    """Run one probe in this process; never raises (except KeyboardInterrupt)."""
    start = time.monotonic()
    ctx.deadline = start + probe.timeout_s
    try:
        result = probe.run(ctx)
        if not isinstance(result, ProbeResult):
            raise TypeError(f"probe returned {type(result).__name__}, not ProbeResult")
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit from a library too: one result, not the report
        import traceback  # only here: `report --quick` should not pay for its import

        result = ProbeResult.error(probe.name, findings.words("probe_error:crashed", error=first_line(exc))[0],
                                   traceback=traceback.format_exc(limit=8))
    result.probe = probe.name
    result.duration_s = time.monotonic() - start
    return result


# --------------------------------------------------------------------------- child side
def _child_main(conn: Connection, spec: RunSpec) -> None:
    """Child process: serve probes until told to stop.

    The parent handles Ctrl-C (keeps finished results, stops us). Its stop, SIGTERM, raises
    :class:`~gpudoctor.system.signals.Terminated` here, so the running probe's ``finally`` blocks
    run (the distributed probe's ranks and temporary directory); then the child ends
    quietly, as it does when the parent is gone (a broken pipe): never a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _proc.own_group()  # the parent ends this child with everything it starts (torch's ranks, workers)
    signals.install()
    if spec.quiet_child:
        silence_stdio()
    try:
        try:
            _serve(conn, spec)
        except (KeyboardInterrupt, EOFError, OSError):  # stopped, or the parent is gone
            pass
        finally:
            # On the way out (multiprocessing's exit functions) a stop just ends the process.
            signals.set_handlers(signal.SIG_DFL)
    except KeyboardInterrupt:  # the parent's stop (SIGTERM) landed while this child was ending
        pass


def _serve(conn: Connection, spec: RunSpec) -> None:
    try:
        ctx = build_context(spec)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        conn.send(("fatal", first_line(exc)))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            probe = conn.recv()  # a Probe (pickled by reference to its run function), or None
        except EOFError:
            return
        except Exception as exc:  # the probe's module cannot be imported here
            conn.send(("result", json.dumps(findings.errored("unknown", "not_loaded", error=first_line(exc)).to_dict())))
            continue
        if probe is None:
            return
        result = call_probe(probe, ctx)
        # JSON text, not pickled objects: the parent must not import torch to read it
        # (torch.__version__ is a str subclass from torch), and results must be JSON-safe.
        try:
            text = json.dumps(json_safe(result.to_dict()), allow_nan=False)
        except (TypeError, ValueError) as exc:
            text = json.dumps(findings.errored(probe.name, "not_json", error=first_line(exc),
                                               duration_s=result.duration_s).to_dict())
        conn.send(("result", text))


# Run by --python's interpreter: load gpudoctor from this installation's folders (argv 1
# and 2: the gpudoctor and gpudoctor.probes package folders, which setuptools' package-dir
# mapping keeps apart in a source tree), fall back to this installation's NVML binding
# (argv 3) when that environment has none, then serve probes on the inherited pipe (argv 4).
# Ctrl-C is the parent's to handle, and a failure to start is one line to the parent,
# never a traceback on the user's terminal.
_INTERPRETER_CHILD_BOOT = r"""
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
import importlib.util, os, sys
from multiprocessing.connection import Connection
_conn = Connection(int(sys.argv[4]))
def _load(name, path):
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(path, "__init__.py"), submodule_search_locations=[path])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
try:
    _pkg = _load("gpudoctor", sys.argv[1])
    _pkg.probes = _load("gpudoctor.probes", sys.argv[2])
    if sys.argv[3]:
        from gpudoctor.backends.nvml import load_binding
        load_binding(sys.argv[3])
    from gpudoctor.report.runner import _child_main
    _spec = _conn.recv()
except BaseException as exc:
    _text = str(exc).strip().splitlines()
    _conn.send(("fatal", f"{type(exc).__name__}: {_text[0][:300]}" if _text else type(exc).__name__))
    sys.exit(1)
_child_main(_conn, _spec)
"""


def _installation_paths() -> tuple[str, str, str]:
    """This gpudoctor's package folders and its NVML binding's file ('' when absent)."""
    import gpudoctor
    import gpudoctor.probes
    from gpudoctor.backends.nvml import binding_file

    return list(gpudoctor.__path__)[0], list(gpudoctor.probes.__path__)[0], binding_file()


class _InterpreterProcess:
    """The part of ``multiprocessing.Process`` that :class:`_Child` uses, for a child
    started with another interpreter (``subprocess.Popen``)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def join(self, timeout: float | None = None) -> None:
        import subprocess

        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def terminate(self) -> None:
        if self.is_alive():
            self._popen.terminate()

    def kill(self) -> None:
        if self.is_alive():
            self._popen.kill()

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()


def _start_interpreter_child(spec: RunSpec, python: str) -> tuple[Connection, _InterpreterProcess]:
    """(connection, process) for a probe child run by ``python`` (``spec.python``)."""
    import multiprocessing as mp
    import subprocess

    parent_conn, child_conn = mp.Pipe()
    package, probes, nvml = _installation_paths()
    try:
        quiet = subprocess.DEVNULL if spec.quiet_child else None  # the TUI owns the terminal
        with _proc.starting():
            popen = subprocess.Popen(
                [python, "-c", _INTERPRETER_CHILD_BOOT, package, probes, nvml, str(child_conn.fileno())],
                stdin=subprocess.DEVNULL, stdout=quiet, stderr=quiet, pass_fds=(child_conn.fileno(),),
                close_fds=True, **_proc.NEW_GROUP)
            _proc.track(popen.pid)
    finally:
        child_conn.close()
    parent_conn.send(spec)
    return parent_conn, _InterpreterProcess(popen)


class _Child:
    """One child process that runs torch probes one after another."""

    def __init__(self, spec: RunSpec) -> None:
        self.process: _InterpreterProcess | BaseProcess
        if spec.python:
            self.conn, self.process = _start_interpreter_child(spec, spec.python)
            self.ready = False
            return
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.conn, child_conn = ctx.Pipe()
        self.process = ctx.Process(target=_child_main, args=(child_conn, spec), daemon=True,
                                   name="gpudoctor-probe")
        # Started under the registry's lock: a parent that quits meanwhile (the TUI's q) ends the
        # child once its start is complete, where a child half started printed "EOFError: Ran out
        # of input" over the restored terminal.
        with _proc.starting():
            self.process.start()
            if self.process.pid is not None:
                _proc.track(self.process.pid)
        child_conn.close()
        self.ready = False

    def _answered(self, limit_s: float) -> str | None:
        """None once the child has sent something, else the limit it ran past ('60 s', or '60 s of its
        own time (150 s on the clock, ...)'): the time its threads waited for a CPU is not counted."""
        limit = _cpuwait.of_process(limit_s, self.process.pid)
        while (left := limit.left()) > 0:
            if self.conn.poll(min(left, CHILD_POLL_S)):
                return None
        return limit.describe()

    def wait_ready(self, timeout: float) -> str | None:
        """None when ready, else why not."""
        late = self._answered(timeout)
        if late is None:
            try:
                kind, payload = self.conn.recv()
            except (EOFError, OSError):
                self.process.join(1)
                return findings.words("probe_error:child_exited_starting", exit=describe_exit(self.process.exitcode))[0]
            if kind == "ready":
                self.ready = True
                return None
            return findings.words("probe_error:child_not_started", error=payload)[0]
        return findings.words("probe_error:child_start_timed_out", limit=late)[0]

    def run(self, probe: Probe, timeout: float) -> tuple[str | None, str | None]:
        try:
            self.conn.send(probe)
        except (BrokenPipeError, OSError):
            self.process.join(1)
            return None, findings.words("probe_error:child_exited", exit=describe_exit(self.process.exitcode))[0]
        late = self._answered(timeout)
        if late is not None:
            return None, findings.words("probe_error:timed_out", limit=late)[0] + findings.PROBE_PROCESS_STOPPED
        try:
            kind, payload = self.conn.recv()
        except (EOFError, OSError):
            self.process.join(2)
            return None, findings.words("probe_error:child_exited", exit=describe_exit(self.process.exitcode))[0]
        return payload, None

    def stop(self, graceful: bool = True) -> None:
        if graceful and self.process.is_alive():
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self.process.join(5)
        pid = self.process.pid
        if pid is not None:  # the child and whatever it started (ranks, workers), however it ended
            _proc.end_tree(pid, grace_s=2.0, leader=self.process.is_alive())
            self.process.join(2)
            _proc.untrack(pid)
        self.conn.close()


# --------------------------------------------------------------------------- parent side
def _run_in_thread(probe: Probe, ctx: ProbeContext) -> ProbeResult:
    """Run ``probe`` in a daemon thread of this process, for at most its time limit. A probe held
    inside an NVML call that the driver has not answered for STUCK_S is abandoned at once (its
    thread stays blocked in the driver; the process can still exit): every later NVML call
    answers DriverNotAnswering, so waiting out the limit would only delay that verdict."""
    box: list[ProbeResult] = []
    start = time.monotonic()
    thread = threading.Thread(target=lambda: box.append(call_probe(probe, ctx)), daemon=True,
                              name=f"gpudoctor-{probe.name}")
    thread.start()
    # the limit does not count the time the probe's thread waited for a CPU (gpudoctor.system._cpuwait)
    limit = _cpuwait.Limit(probe.timeout_s, _cpuwait.thread_waits(thread.native_id))
    while not box and (left := limit.left()) > 0:
        thread.join(min(left, PROBE_POLL_S))
        if not box and thread.ident is not None and thread_blocked(thread.ident):
            return _driver_not_answering(probe.name, time.monotonic() - start)
    if not box:
        return findings.errored(probe.name, "timed_out", limit=limit.describe(),
                                duration_s=time.monotonic() - start)
    return box[0]


def _driver_not_answering(probe: str, duration_s: float) -> ProbeResult:
    """A probe abandoned inside an NVML call the driver does not answer: the driver's state is the
    finding (FAIL, with its cause and fix), not an unexplained error of the check."""
    result = ProbeResult(probe=probe, status=Status.FAIL, summary=findings.ABANDONED_SUMMARY,
                         duration_s=duration_s)
    result.findings.append(findings.finding("driver_not_answering", seconds=f"{STUCK_S:.0f}",
                                            where=findings.ABANDONED.format(probe=probe)))
    return result


class _ProbeChild:
    """The child process the torch probes run in: started at the first one, and again at the
    next one after a probe cost it (a crash, a time-out) or said its process is poisoned
    (:meth:`ProbeResult.poison_process`: GPU work it queued never finished)."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.child: _Child | None = None

    def run(self, probe: Probe) -> ProbeResult:
        start = time.monotonic()
        if self.child is None:
            self.child = _Child(self.spec)
            why = self.child.wait_ready(CHILD_START_ALLOWANCE_S)
            if why is not None:
                self.child.stop(graceful=False)
                self.child = None
                return ProbeResult.error(probe.name, why, duration_s=time.monotonic() - start)
        payload, why = self.child.run(probe, probe.timeout_s)
        if payload is None:
            self.child.stop(graceful=False)
            self.child = None
            if why:  # the child's own account of how it ended
                return ProbeResult.error(probe.name, why, duration_s=time.monotonic() - start)
            return findings.errored(probe.name, "child_failed", duration_s=time.monotonic() - start)
        result = ProbeResult.from_dict(json.loads(payload))
        if result.details.get(POISONED):
            # work it queued never finished (a hung peer copy blocks both devices' streams): every
            # later probe in this process would wait on it to its own time limit
            self.child.stop(graceful=False)
            self.child = None
        return result


def _new_report(spec: RunSpec, ctx: ProbeContext) -> Report:
    """An empty report that says where its readings come from, with the host's facts."""
    report = Report(tool_version=_version.__version__,
                    source=f"replay:{os.path.basename(spec.replay)}" if spec.replay else "live")
    try:
        report.host = ctx.host_facts()  # cached: the environment probe reads the same facts
    except Exception as exc:
        report.host = {"error": first_line(exc)}
    report.host = json_safe(report.host)
    return report


def run_probes(
    probes: list[Probe],
    spec: RunSpec,
    *,
    gpu: GpuBackend | None = None,
    on_start: Callable[[Probe], None] | None = None,
    on_result: Callable[[ProbeResult], None] | None = None,
    isolate: bool | None = None,
    events: EventSource | None = None,
) -> Report:
    """Run ``probes`` and return a complete report.

    ``isolate``: run torch probes in a child process (default: yes, unless the level is
    quick, where torch probes answer from NVML in-process). On Ctrl-C the report is
    returned with the finished results and ``interrupted=True``; the caller decides the
    exit code. ``events``: a running event watcher whose NVML stream the events probe reads
    (the TUI's, the exporter's).
    """

    if isolate is None:
        isolate = spec.level != "quick"
    if spec.python and spec.level != "quick":
        isolate = True  # the other interpreter's torch can only be used in its own process
    ctx = build_context(spec, gpu, events)
    if not isolate and any(p.asks_cuda_start for p in probes):
        ctx.begin_cuda_start()  # the driver starts in a child while the NVML probes run
    report = _new_report(spec, ctx)
    no_torch = _torch_absence(probes, spec, ctx)
    child = _ProbeChild(spec)
    try:
        for probe in probes:
            if on_start is not None:
                on_start(probe)
            if probe.uses_torch and no_torch is not None:
                result = no_torch(probe)
            elif probe.uses_torch and isolate:
                result = child.run(probe)
            else:
                result = _run_in_thread(probe, ctx)
            if result.probe == "devices":
                ctx.torch_to_nvml = _torch_to_nvml(result)
            report.results.append(result)
            if on_result is not None:
                on_result(result)
    except KeyboardInterrupt:
        report.interrupted = True
    finally:
        ctx.cancel_cuda_start()
        if _close(child.child, ctx.gpu if gpu is None else None, graceful=not report.interrupted):
            report.interrupted = True
    return report


def _torch_to_nvml(devices: ProbeResult) -> dict[int, int | None]:
    """The devices probe's torch -> NVML map (its details; keys are JSON strings)."""
    found = devices.details.get("torch_to_nvml") if isinstance(devices.details, dict) else None
    if not isinstance(found, dict):
        return {}
    out: dict[int, int | None] = {}
    for key, value in found.items():
        if isinstance(key, str) and key.isdigit() and (value is None or (isinstance(value, int)
                                                                          and not isinstance(value, bool))):
            out[int(key)] = value
    return out


def _close(child: _Child | None, gpu: GpuBackend | None, graceful: bool) -> bool:
    """Stop the child and close ``gpu``, whatever arrives meanwhile.

    The child's stop waits up to 5 s for it to end; a Ctrl-C or SIGTERM then only hurries
    it (terminate, then kill) and must not escape, or every finished result is lost.
    Returns whether one arrived."""
    interrupted = False
    while True:
        try:
            if child is not None:
                child.stop(graceful=graceful)
                child = None
            if gpu is not None:
                try:
                    gpu.close()
                except Exception:
                    pass
                gpu = None
            return interrupted
        except KeyboardInterrupt:
            interrupted, graceful = True, False


def _torch_absence(probes: list[Probe], spec: RunSpec, ctx: ProbeContext) -> Callable[[Probe], ProbeResult] | None:
    """When the checked interpreter has no torch (or --python cannot be used): how each torch
    probe answers instead of starting a child. None when torch is there (or not needed)."""
    if spec.replay or spec.level == "quick" or not any(p.uses_torch for p in probes):
        return None
    from gpudoctor.backends.torch_build import CHECK_ANOTHER_ENV_HINT, InterpreterError

    try:
        build = ctx.torch_build()
    except InterpreterError as exc:
        reason = str(exc)
        return lambda probe: ProbeResult.error(probe.name, reason)
    if build.installed:
        return None
    ctx.torch_missing = True
    where = "torch_not_installed:interpreter" if spec.python else "torch_not_installed:environment"

    def answer(probe: Probe) -> ProbeResult:
        if probe.level == "quick":  # answers from NVML and says torch was not checked
            return _run_in_thread(probe, ctx)
        return findings.skipped(probe.name, where, python=build.python, hint=CHECK_ANOTHER_ENV_HINT)
    return answer


def overall(report: Report) -> Status:
    return report.status
