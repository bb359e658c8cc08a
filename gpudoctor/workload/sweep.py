"""The sweep: every (device, mode, batch size, workers) run, in one process, one after another.

:func:`run_sweep` is the entry point for every front end. The CLI calls it in-process;
the TUI runs :func:`sweep_with_progress` in a spawned child process
(:mod:`gpudoctor.tui.workload_runner`), so its own process never imports torch nor
creates a CUDA context.

Ctrl-C (KeyboardInterrupt) or a stop request ends the sweep between or inside runs: the
unfinished run is dropped, the finished ones are kept, and the result says
``interrupted``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from gpudoctor import _version
from gpudoctor.core.model import utc_now_iso
from gpudoctor.workload.config import RunConfig, SweepConfig
from gpudoctor.workload.data import MnistData
from gpudoctor.workload.run import FaultHook, RunResult, StopRequested

#: Layout version of the sweep JSON document (``kind`` = "gpudoctor.bench.mnist").
SWEEP_SCHEMA_VERSION = "1.0"
SWEEP_KIND = "gpudoctor.bench.mnist"

# Load average per CPU above which the sweep notes that other work shares the machine.
BUSY_LOAD_PER_CPU = 0.5

#: ``on_run(result, fraction_done)`` after every finished run (fraction in 0..1).
OnRun = Callable[[RunResult, float], None]
#: ``on_start(run, index, total)`` before every run (index from 0).
OnStart = Callable[[RunConfig, int, int], None]


@dataclass
class SweepResult:
    config: SweepConfig
    runs: list[RunResult] = field(default_factory=list)
    planned: int = 0
    devices: dict[str, str] = field(default_factory=dict)  # "cpu"/"cuda" -> name
    dataset: dict[str, Any] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    created: str = field(default_factory=utc_now_iso)
    duration_s: float = 0.0
    interrupted: bool = False

    def to_dict(self) -> dict[str, Any]:
        from gpudoctor.workload.recommend import recommend, speedups

        return {
            "kind": SWEEP_KIND,
            "schema_version": SWEEP_SCHEMA_VERSION,
            "tool": {"name": "gpudoctor", "version": _version.__version__},
            "created": self.created,
            "duration_s": round(self.duration_s, 3),
            "interrupted": self.interrupted,
            "complete": not self.interrupted and len(self.runs) == self.planned,
            "planned_runs": self.planned,
            "config": self.config.to_dict(),
            "devices": self.devices,
            "dataset": self.dataset,
            "host": self.host,
            "notes": self.notes,
            "runs": [r.to_dict() for r in sorted_runs(self.runs)],
            "speedups": speedups(self.runs),
            "recommendation": recommend(self.runs, quick=self.config.quick),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SweepResult":
        return cls(config=SweepConfig.from_dict(data.get("config", {})),
                   runs=[RunResult.from_dict(r) for r in data.get("runs", [])],
                   planned=int(data.get("planned_runs", 0)), devices=dict(data.get("devices", {})),
                   dataset=dict(data.get("dataset", {})), host=dict(data.get("host", {})),
                   notes=list(data.get("notes", [])), created=data.get("created", ""),
                   duration_s=float(data.get("duration_s", 0.0)),
                   interrupted=bool(data.get("interrupted", False)))


def sorted_runs(runs: list[RunResult]) -> list[RunResult]:
    """Fastest epoch first; runs without a time (oom, error) last, in run order."""
    timed = [(r.epoch_s, r) for r in runs if r.status == "ok" and r.epoch_s is not None]
    untimed = [r for r in runs if not (r.status == "ok" and r.epoch_s is not None)]
    return [r for _, r in sorted(timed, key=lambda pair: pair[0])] + untimed


def cuda_available() -> bool:
    import torch

    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def resolve_devices(config: SweepConfig) -> list[str]:
    """The devices to run: the ones asked for (cuda must exist), else cpu (+ cuda if present)."""
    from gpudoctor.core.errors import UsageError

    have_cuda = cuda_available()
    if config.devices is None:
        return ["cpu", "cuda"] if have_cuda else ["cpu"]
    if "cuda" in config.devices and not have_cuda:
        raise UsageError("--device cuda: torch sees no CUDA device on this machine "
                         "(run `gpudoctor report` to see why)")
    if "cuda" in config.devices:
        import torch

        count = torch.cuda.device_count()
        if config.cuda_index >= count:
            raise UsageError(f"cuda device {config.cuda_index} does not exist: torch sees {count} "
                             f"CUDA device{'s' if count != 1 else ''}")
    return list(config.devices)


def _setting_notes(config: SweepConfig) -> list[str]:
    """What the sweep's setting does to its figures: worker counts capped to the CPUs, and
    other work already loading the machine."""
    notes = []
    _, capped = config.effective_workers()
    if capped and any(mode != "resident" for mode in config.modes):
        from gpudoctor.workload.config import cpu_count

        notes.append(
            f"worker counts {', '.join(map(str, capped))} exceed the {cpu_count()} CPUs this "
            f"process may use: capped to {cpu_count()}")
    busy = _busy_note()
    if busy:
        notes.append(busy)
    return notes


def _describe_machine(result: SweepResult, devices: list[str]) -> None:
    """The host (CPU, OS, Python, torch) and the name of each device the sweep runs on."""
    from gpudoctor.backends.host import host_facts
    from gpudoctor.workload.run import device_name

    facts = host_facts()
    result.host = {k: facts.get(k) for k in ("cpu_model", "cpu_logical", "os", "python")}
    import torch

    result.host["torch"] = torch.__version__
    result.devices = {d: device_name(d, result.config.cuda_index) for d in devices}


def _sweep_data(config: SweepConfig, data: MnistData | None) -> MnistData:
    """The samples the sweep trains and tests on: loaded per ``config``, or cut from ``data``."""
    from gpudoctor.workload.data import load_data

    if data is None:
        train, test = config.sample_limits()
        return load_data(config.data_dir, config.download, config.seed, train, test)
    return data.limited(*config.sample_limits())


def run_sweep(config: SweepConfig, *, on_run: OnRun | None = None, on_start: OnStart | None = None,
              should_stop: Callable[[], bool] | None = None, fault_hook: FaultHook | None = None,
              data: MnistData | None = None) -> SweepResult:
    """Run the whole sweep and return what finished.

    ``on_start(run, index, total)`` before each run; ``on_run(result, fraction)`` after
    each. ``should_stop()`` is polled between steps (a TUI cancel). Ctrl-C and stop
    requests do not raise: the result has ``interrupted=True`` and the finished runs.
    Bad configuration raises :class:`gpudoctor.core.errors.UsageError` before anything runs;
    unreadable data raises :class:`gpudoctor.workload.data.WorkloadDataError`.
    ``data``: an already loaded :class:`MnistData` (tests), else loaded per ``config``.
    """
    from gpudoctor.workload.run import run_one

    config.validate()
    started = time.monotonic()
    devices = resolve_devices(config)
    result = SweepResult(config=config, notes=_setting_notes(config))
    runs = config.expand(devices)
    result.planned = len(runs)
    try:
        _describe_machine(result, devices)
        data = _sweep_data(config, data)
        result.dataset = data.info()
        for index, run in enumerate(runs):
            if should_stop is not None and should_stop():
                raise StopRequested()
            if on_start is not None:
                on_start(run, index, len(runs))
            outcome = run_one(run, data, epochs=config.epochs, seed=config.seed,
                              cuda_index=config.cuda_index,
                              util_interval_s=config.util_interval_s, fault_hook=fault_hook,
                              should_stop=should_stop)
            result.runs.append(outcome)
            if on_run is not None:
                on_run(outcome, len(result.runs) / len(runs))
    except (KeyboardInterrupt, StopRequested):
        result.interrupted = True
    finally:
        result.duration_s = time.monotonic() - started
    return result


def _busy_note() -> str | None:
    """A note when other work already loads the CPUs: then CPU timings (and the input
    pipeline of GPU runs) include someone else's work."""
    import os

    from gpudoctor.workload.config import cpu_count

    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        return None
    cpus = cpu_count()
    if load > BUSY_LOAD_PER_CPU * cpus:
        return (f"the machine was busy before the sweep started (1-minute load average {load:.1f} "
                f"on {cpus} CPUs): timings include other processes' work and vary from run to run")
    return None


def sweep_with_progress(progress: Callable[..., None], quick: bool = False,
                        should_stop: Callable[[], bool] | None = None, **overrides: object) -> dict[str, Any]:
    """Run a sweep for a front end that streams progress (the TUI's Workload screen).

    ``progress(**event)`` is called before each run with ``message``, ``done``, ``total``
    and ``fraction``, and after each run with the run's fields (``RunResult.to_dict()``)
    plus ``done``, ``total`` and ``fraction``. ``quick`` starts from the ``--quick``
    sweep; ``overrides`` are :class:`SweepConfig` fields. Returns the sweep document
    (``SweepResult.to_dict()``), JSON-safe.
    """
    unknown = sorted(set(overrides) - set(SweepConfig.__dataclass_fields__))
    if unknown:
        raise TypeError(f"unknown sweep option(s): {', '.join(unknown)}")
    config = SweepConfig.quick_defaults(**overrides) if quick else SweepConfig.from_dict(overrides)
    config.validate()
    state = {"total": 0}

    def on_start(run: RunConfig, index: int, total: int) -> None:
        state["total"] = total
        workers = "" if run.workers is None else f", {run.workers} workers"
        progress(message=f"run {index + 1}/{total}: {run.device} {run.mode} batch {run.batch_size}{workers}",
                 done=index, total=total, fraction=index / total if total else 0.0)

    def on_run(result: RunResult, fraction: float) -> None:
        total = state["total"]
        progress(**result.to_dict(), done=round(fraction * total), total=total, fraction=fraction)

    return run_sweep(config, on_start=on_start, on_run=on_run, should_stop=should_stop).to_dict()
