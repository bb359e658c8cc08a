"""Run the MNIST sweep (gpudoctor.workload) in a child process and stream its progress.

The TUI process must never import torch nor create a CUDA context, so the sweep runs
in a ``multiprocessing`` *spawn* child. The child imports the target function, calls
it with a progress callback, and sends every progress event, then the result (or the
error), over a Pipe as plain JSON-safe dictionaries. Nothing here imports textual: the
TUI's worker thread reads :meth:`WorkloadProcess.poll` and posts messages.

Events received by the parent are tuples ``(kind, payload)``:

* ``("started", {"pid", "target", "options"})``
* ``("progress", {...})`` one per progress call, the sweep's own fields
* ``("done", {...})`` the sweep's return value (``to_dict()`` when it has one)
* ``("unavailable", {"message"})`` the target module cannot be imported
* ``("error", {"message", "traceback"})`` the sweep raised
* ``("exited", {"message"})`` the child died without saying why (killed, segfault)

The target's progress callback parameter is found by name (``progress``,
``on_progress``, ``callback``); options the target does not accept are dropped and
listed in the ``started`` event, so the screen can say what was really run.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import signal
import traceback
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from gpudoctor.system import _proc
from gpudoctor.system._proc import describe_exit, silence_stdio
from gpudoctor.system.safejson import json_safe

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

DEFAULT_TARGET = "gpudoctor.workload:sweep_with_progress"
PROGRESS_PARAMETERS = ("progress", "on_progress", "callback", "progress_callback")


#: What the Workload screen says where PyTorch is missing (the sweep runs a real training loop).
NO_TORCH = ("The MNIST sweep trains a small network with PyTorch, which is not installed in this environment. "
            "Install it with: pip install 'gpudoctor[torch]'")


def workload_available(target: str = DEFAULT_TARGET) -> str | None:
    """None when the target's module can be found, else why not.

    Uses ``find_spec`` only: importing the module here could import torch into the TUI
    process.
    """
    module = target.split(":", 1)[0]
    try:
        spec = importlib.util.find_spec(module)
        torch = importlib.util.find_spec("torch") if target == DEFAULT_TARGET else True
    except (ImportError, ValueError) as exc:
        return f"{module}: {type(exc).__name__}: {exc}"
    if spec is None:
        return f"workload module not available ({module} is not installed in this build)"
    if torch is None:
        return NO_TORCH
    return None


def plain(obj: object) -> Any:
    """A JSON-safe copy of a progress event or result (dataclass, to_dict(), mapping...)."""
    return json_safe(obj, max_depth=8)


def _resolve(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr or "sweep")


def _child_main(conn: Connection, target: str, options: dict[str, Any], quiet: bool = True) -> None:
    """Child process: import the sweep, run it, stream events. Runs under spawn."""
    import os

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent cancels by terminating us
    _proc.own_group()  # cancel() ends this child with its DataLoader workers
    if quiet:
        # The parent's terminal belongs to the TUI: library warnings printed here would
        # land in the middle of its screen. Everything we report goes over the pipe.
        silence_stdio()

    def send(kind: str, payload: object) -> None:
        try:
            conn.send((kind, plain(payload)))
        except (BrokenPipeError, OSError):
            os._exit(0)  # the parent is gone: nobody to report to

    try:
        fn = _resolve(target)
    except ImportError as exc:
        send("unavailable", {"message": f"workload module not available: {type(exc).__name__}: {exc}"})
        return
    except Exception as exc:
        send("error", {"message": f"cannot load {target}: {type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc(limit=6)})
        return
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    progress_name = next((n for n in PROGRESS_PARAMETERS if n in params), None)
    if progress_name is None and takes_kwargs:
        progress_name = "progress"
    if progress_name is None:
        send("error", {"message": f"{target} takes no progress callback (expected one of "
                                  f"{', '.join(PROGRESS_PARAMETERS)})", "traceback": ""})
        return
    used = {k: v for k, v in options.items() if k in params or takes_kwargs}
    dropped = sorted(set(options) - set(used))
    send("started", {"pid": os.getpid(), "target": target, "options": used, "dropped_options": dropped})

    def report(event: object = None, **fields: object) -> None:
        payload = plain(event)
        if not isinstance(payload, dict):
            payload = {} if payload is None else {"message": str(payload)}
        payload.update(plain(fields))
        send("progress", payload)

    try:
        result = fn(**used, **{progress_name: report})
    except BaseException as exc:  # SystemExit, KeyboardInterrupt from the library too
        send(*_failure(exc))
        return
    send("done", result)


def _failure(exc: BaseException) -> tuple[str, dict[str, str]]:
    """The event for a sweep that raised: torch missing is a sentence with the install command
    ("unavailable"), anything else its one-line error and traceback."""
    if isinstance(exc, ModuleNotFoundError) and exc.name == "torch":
        return "unavailable", {"message": NO_TORCH}
    text = str(exc).strip()
    message = type(exc).__name__ + (f": {text.splitlines()[0]}" if text else "")
    return "error", {"message": message, "traceback": traceback.format_exc(limit=8)}


class WorkloadProcess:
    """One sweep in a spawned child; poll it from a worker thread."""

    def __init__(self, target: str = DEFAULT_TARGET, options: dict[str, Any] | None = None,
                 quiet: bool = True) -> None:
        self.target = target
        self.quiet = quiet
        self.options = dict(options or {})
        import multiprocessing  # here: the TUI's start does not load it for a sweep that may never run

        self._ctx = multiprocessing.get_context("spawn")
        self.conn: Any = None
        self.process: Any = None
        self.finished = False

    def start(self) -> None:
        self.conn, child_conn = self._ctx.Pipe(duplex=False)
        # Not daemonic: the sweep's DataLoader workers are child processes, which a daemonic
        # process may not have. cancel() (called on quit) terminates it instead.
        self.process = self._ctx.Process(target=_child_main, args=(child_conn, self.target, self.options, self.quiet),
                                         daemon=False, name="gpudoctor-workload")
        with _proc.starting():  # a parent that quits meanwhile ends it once started (_proc)
            self.process.start()
            if self.process.pid is not None:
                _proc.track(self.process.pid, grace_s=3.0)
        child_conn.close()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def poll(self, timeout: float = 0.2) -> Iterator[tuple[str, dict[str, Any]]]:
        """Events that arrived within ``timeout``; ends with a final event once the child is done."""
        if self.finished or self.conn is None:
            return
        try:
            ready = self.conn.poll(timeout)
        except (OSError, EOFError):
            ready = True
        while ready:
            try:
                kind, payload = self.conn.recv()
            except (EOFError, OSError):
                self.finished = True
                self.process.join(2)
                code = self.process.exitcode
                yield "exited", {"message": f"the workload process ended without a result ({describe_exit(code)})"}
                return
            if kind in ("done", "error", "unavailable"):
                self.finished = True
                self.process.join(5)
                yield kind, payload if isinstance(payload, dict) or kind != "done" else {"result": payload}
                return
            yield kind, payload
            try:
                ready = self.conn.poll(0)
            except (OSError, EOFError):
                ready = True

    def cancel(self) -> None:
        """Stop the child and its DataLoader workers (its tree: terminate, then kill); its CUDA
        context dies with it."""
        self.finished = True
        if self.process is not None and self.process.pid is not None:
            _proc.end_tree(self.process.pid, grace_s=3.0, leader=self.process.is_alive())
            self.process.join(2)
            _proc.untrack(self.process.pid)
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass

    def events(self, stop: Callable[[], bool] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """All events until the child finishes (or ``stop()`` returns true, then cancel)."""
        while not self.finished:
            if stop is not None and stop():
                self.cancel()
                yield "cancelled", {"message": "cancelled"}
                return
            yield from self.poll(0.2)


# --------------------------------------------------------------------------- reading events
_ALIASES = {
    "batch_size": ("batch_size", "batch", "bs"),
    "mode": ("mode", "pipeline", "pipeline_mode"),
    "workers": ("workers", "num_workers"),
    "device": ("device",),
    "samples_per_s": ("samples_per_s", "samples_per_sec", "samples_per_second", "throughput"),
    "gpu_util": ("gpu_util_mean_pct", "gpu_util_mean", "gpu_util_pct", "gpu_utilization", "gpu_util"),
    "status": ("status", "state", "outcome"),
    "done": ("done", "completed", "index", "run_index", "step"),
    "total": ("total", "count", "runs", "total_runs", "steps"),
    "fraction": ("fraction", "progress"),
    "message": ("message", "msg", "phase", "stage"),
}


def field_of(event: dict[str, Any], name: str) -> Any:
    """A field of a progress event under any of its usual names (also inside ``run``/``result``)."""
    for key in _ALIASES.get(name, (name,)):
        if key in event and event[key] is not None:
            return event[key]
    for nested in ("run", "result", "config", "spec"):
        inner = event.get(nested)
        if isinstance(inner, dict):
            value = field_of(inner, name)
            if value is not None:
                return value
    return None


__all__ = ["WorkloadProcess", "workload_available", "field_of", "plain", "DEFAULT_TARGET"]
