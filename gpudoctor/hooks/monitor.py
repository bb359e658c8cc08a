"""TrainingMonitor: where each step of the user's own training loop spends its time.

    monitor = TrainingMonitor()
    for inputs, targets in monitor.wrap(loader):   # time spent waiting for the loader
        with monitor.step():                       # time spent in the step
            ...
    print(monitor.summary())

The hot path (one ``next()`` of the wrapped loader and one ``with monitor.step()``) does a
few clock reads and array appends on the host; on CUDA it also records two CUDA events
and queries finished ones, which never waits for the device. Everything else (NVML
sampling, the figures, the diagnosis) happens in a background thread or in ``summary()``.

Misuse never stops the user's training: a nested ``step()`` is ignored (one warning, a
note in the summary), steps outside ``wrap()`` are timed without a data-wait figure, a
summary with no steps is an empty summary that says so, and a fault inside the monitor
switches it off with one logged warning. ``strict=True`` turns misuse into
:class:`MonitorUsageError` instead, for tests and for people who want to know at once.
"""

from __future__ import annotations

import dataclasses

import logging
import math
import time
import warnings
from array import array
from types import TracebackType
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Literal

from gpudoctor.core.errors import UsageError

from .devices import DeviceMismatchError, explain_device_error
from gpudoctor.core.stats import percentile

from .summary import RawTimings, Summary, build_summary, find_stragglers, iteration_spans
from . import publish

if TYPE_CHECKING:
    import torch

    from gpudoctor.backends.base import GpuBackend
    from gpudoctor.backends.na import NA

log = logging.getLogger("gpudoctor.hooks")
_clock = time.perf_counter


class MonitorUsageError(UsageError):
    """The monitor was used in a way it cannot measure (only raised with ``strict=True``)."""


class MonitorUsageWarning(UserWarning):
    """The monitor was used in a way it cannot measure; the step was not counted."""


class _StepContext:
    """What ``monitor.step()`` returns: one reusable object, so a step allocates nothing."""

    __slots__ = ("_monitor",)

    def __init__(self, monitor: "TrainingMonitor") -> None:
        self._monitor = monitor

    def __enter__(self) -> "_StepContext":
        self._monitor._begin_step()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        self._monitor._end_step(exc_type, exc)
        return False


class _Wrapped:
    """An iterable over the user's loader that times each ``next()``; keeps ``len()``."""

    def __init__(self, monitor: "TrainingMonitor", loader: Iterable[Any]) -> None:
        self._monitor = monitor
        self._loader = loader

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        monitor = self._monitor
        monitor._wrap_depth += 1
        monitor._pass += 1
        this_pass = monitor._pass
        try:
            start = _clock()
            iterator = iter(self._loader)  # the first wait includes starting the workers
            while True:
                try:
                    item = next(iterator)
                except StopIteration:
                    return
                now = _clock()
                monitor._pending_wait = now - start
                monitor._pending_pass = this_pass
                monitor._batches += 1
                if monitor._keep_batch:
                    monitor._last_batch = item
                yield item
                start = _clock()
        finally:
            monitor._wrap_depth -= 1
            monitor._pending_wait = None
            monitor._last_batch = None


def _check_settings(log_every: int | None, warmup_steps: int, batch_size: int | None) -> None:
    """TrainingMonitor's arguments that no loop can be measured with: a usage error at once."""
    if log_every is not None and (not isinstance(log_every, int) or log_every < 1):
        raise MonitorUsageError(f"log_every must be a positive whole number of steps, not {log_every!r}")
    if warmup_steps < 0:
        raise MonitorUsageError(f"warmup_steps must be 0 or more, not {warmup_steps!r}")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                   or batch_size < 1):
        raise MonitorUsageError(f"batch_size must be a positive whole number of samples, not {batch_size!r}")


class TrainingMonitor:
    """Measures a training loop: data wait, step time, host syncs, GPU use; then a diagnosis.

    Parameters
    ----------
    device:
        What the loop trains on: ``"cuda"``, ``"cuda:1"``, ``1``, ``"cpu"``, a
        ``torch.device``. ``None``: the device of ``model``'s first parameter, else the
        current CUDA device when CUDA is usable, else the CPU. Decided at the first step.
    model:
        Optional; used to infer the device and to say where each parameter lives when a
        "tensors on different devices" error happens inside ``step()``.
    log_every:
        Log one line through :mod:`logging` (logger ``gpudoctor.hooks``, level INFO) every
        this many steps. Off (None) by default.
    warmup_steps:
        Steps left out of the figures (start-up: workers, CUDA context, autotuning).
    sample_gpu, sample_interval_s:
        Sample utilisation, memory, power and clocks through NVML in a background thread.
    count_syncs:
        On CUDA, count host syncs with ``torch.cuda.set_sync_debug_mode("warn")`` and name
        the lines that make them.
    gpu_backend:
        An NVML backend to sample (default: a new :class:`gpudoctor.backends.NvmlBackend`).
    batch_size:
        Samples per step, for samples per second and per joule. ``None``: the length of the
        first dimension of each batch from ``wrap(loader)`` (the first tensor of a tuple,
        list or dict batch).
    measure_energy:
        Read the GPU's NVML total-energy counter (RAPL for a CPU loop) at step boundaries,
        about every ``sample_interval_s``: joules per step, samples per joule, average power.
    strict:
        Raise :class:`MonitorUsageError` on misuse instead of warning and carrying on.
    publish:
        Publish the live figures every few seconds for ``gpudoctor why``, the TUI and the
        exporter (:mod:`gpudoctor.hooks.publish`). None: on unless ``GPUDOCTOR_PUBLISH=0``.
    """

    def __init__(self, device: str | int | torch.device | None = None, *, model: torch.nn.Module | None = None,
                 log_every: int | None = None, warmup_steps: int = 1, sample_gpu: bool = True,
                 sample_interval_s: float = 0.5, count_syncs: bool = True, gpu_backend: GpuBackend | None = None,
                 strict: bool = False, batch_size: int | None = None, measure_energy: bool = True,
                 publish: bool | None = None) -> None:
        _check_settings(log_every, warmup_steps, batch_size)
        self._device_arg = device
        self._model = model
        self.log_every = log_every
        self.warmup_steps = warmup_steps
        self.sample_gpu = sample_gpu
        self.sample_interval_s = sample_interval_s
        self.count_syncs = count_syncs
        self.strict = strict
        self._gpu_backend = gpu_backend
        self.batch_size = batch_size
        self.measure_energy = measure_energy
        self.publish = publish
        self._ctx = _StepContext(self)
        self._init_step_records()
        self._init_collectors()

    def _init_step_records(self) -> None:
        """The hot path's state: one entry per counted step, and the step in progress."""
        self._samples = array("q")  # samples in each step (-1: unknown)
        self._waits = array("d")
        self._host_steps = array("d")
        self._iter_starts = array("d")
        self._ends = array("d")
        self._passes = array("q")  # which pass over a wrapped loader each step belongs to (-1: none)
        self._pass = 0
        self._step_pass = -1
        self._pending_wait: float | None = None
        self._wrap_depth = 0
        self._batches = 0
        self._keep_batch = True
        self._last_batch: Any = None
        self._in_step = False
        self._nested_depth = 0
        self._step_t0 = 0.0
        self._t_start_iter = 0.0
        self._wait = math.nan
        self._pending_pass = -1

    def _init_collectors(self) -> None:
        """What the first step starts (device, timers, sync counter, sampler, energy, publisher)
        and what the summary reports beside the figures (notes, misuse, failed steps)."""
        self._energy: Any = None
        self._publisher: Any = None
        self._started = False
        self._collecting = False
        self._disabled: str | None = None
        self._device = "cpu"
        self._device_kind = "cpu"
        self._device_index: int | None = None
        self._timer: Any = None
        self._syncs: Any = None
        self._sampler: Any = None
        self._rank, self._world = 0, 1
        self._notes: list[str] = []
        self._misuse: dict[str, int] = {}
        self._failed_steps = 0
        self._last_log_index = 0
        self._last_log_syncs = 0

    # -- public API ------------------------------------------------------------------------------
    def wrap(self, loader: Iterable[Any]) -> _Wrapped:
        """Iterate over ``loader`` and time how long each batch takes to arrive."""
        return _Wrapped(self, loader)

    def step(self) -> _StepContext:
        """Context manager around one training step (forward, backward, optimizer step)."""
        return self._ctx

    def batch_ready(self, wait_s: float) -> None:
        """For frameworks that fetch batches themselves (the Lightning callback): the next
        step's batch took ``wait_s`` seconds to arrive. Call it just before ``step()``."""
        self._pending_wait = float(wait_s)
        self._pending_pass = self._pass
        self._batches += 1

    def mark_gap(self) -> None:
        """For frameworks: what happens from here to the next ``batch_ready`` (validation, a new
        epoch) is not training time and ends the current pass over the data."""
        self._pass += 1

    @property
    def device(self) -> str:
        """The device being measured (decided at the first step)."""
        return self._device

    @property
    def steps(self) -> int:
        return len(self._host_steps)

    def summary(self, gather: bool = False) -> Summary:
        """The figures and the diagnosis so far.

        Stops the background sampling and sync counting (the next ``step()`` starts them
        again). On CUDA this waits once for the queued steps' events. With ``gather=True``
        under torch.distributed, every rank must call it: each gets its own summary with
        every rank's figures in ``ranks`` and stragglers in the diagnosis.
        """
        try:
            self._finish_collecting()
            summary = self._build()
        except Exception as exc:  # the monitor's own fault: an empty summary that says so
            log.warning("gpudoctor: could not build the summary: %s: %s", type(exc).__name__, exc)
            summary = Summary(steps=self.steps, device=self._device,
                              notes=[f"summary failed inside gpudoctor: {type(exc).__name__}: {exc}"])
        publish.stop(self._publisher)  # the live record ends with the summary (a next step starts it again)
        if gather:
            summary = self._gather(summary)
        return summary

    def close(self) -> None:
        """Stop background sampling and restore torch's sync debug mode."""
        self._finish_collecting()
        publish.stop(self._publisher)

    def __enter__(self) -> "TrainingMonitor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- hot path ---------------------------------------------------------------------------------
    def _begin_step(self) -> None:
        if self._in_step:
            # strict mode raises here, before the inner step counts as open
            self._misused("nested_step", "monitor.step() inside another monitor.step(): the inner one "
                          "is ignored; put one step() around the whole training step")
            self._nested_depth += 1
            return
        self._in_step = True
        if self._disabled is not None:
            return
        try:
            now = _clock()
            if not self._collecting:
                self._start_collecting()
            wait = self._pending_wait
            if wait is None:
                wait = 0.0 if self._wrap_depth else math.nan
                self._t_start_iter = now
                self._step_pass = self._pass if self._wrap_depth else -1
            else:
                self._pending_wait = None
                self._t_start_iter = now - wait
                self._step_pass = self._pending_pass
            self._wait = wait
            energy = self._energy
            if energy is not None and (not self._passes or self._passes[-1] != self._step_pass):
                energy.maybe_read(now, force=True)  # the first step, or the first after a gap
            timer = self._timer
            if timer is not None:
                timer.begin()
            self._step_t0 = _clock()
        except Exception as exc:
            self._disable(exc)

    def _end_step(self, exc_type: type[BaseException] | None, exc: BaseException | None) -> None:
        if self._nested_depth:
            self._nested_depth -= 1
            return
        end = _clock()
        if not self._in_step:
            self._misused("exit_without_enter", "a step ended that never began")
            return
        self._in_step = False
        if exc_type is not None:
            self._failed_step(exc_type, exc)
            return
        if self._disabled is not None:
            return
        try:
            timer = self._timer
            if timer is not None:
                timer.end()
            self._host_steps.append(end - self._step_t0)
            self._waits.append(self._wait)
            self._iter_starts.append(self._t_start_iter)
            self._ends.append(end)
            self._passes.append(self._step_pass)
            self._samples.append(self.batch_size or _batch_samples(self._last_batch))
            energy = self._energy
            if energy is not None:
                energy.maybe_read(end, force=len(self._host_steps) == self.warmup_steps)
            every = self.log_every
            if every is not None and len(self._host_steps) % every == 0:
                self._log_window()
        except Exception as exc:
            self._disable(exc)

    def _failed_step(self, exc_type: type[BaseException], exc: BaseException | None) -> None:
        self._failed_steps += 1
        if self._timer is not None:
            try:
                self._timer.cancel()
            except Exception:
                pass
        if isinstance(exc, RuntimeError) and not isinstance(exc, DeviceMismatchError):
            batch = self._last_batch
            try:
                words = explain_device_error(exc, self._model, (batch,) if batch is not None else ())
            except Exception:  # never replace the user's error with one of ours
                words = None
            if words is not None:
                raise DeviceMismatchError(words) from exc

    # -- misuse and faults --------------------------------------------------------------------------
    def _misused(self, kind: str, words: str) -> None:
        count = self._misuse.get(kind, 0)
        self._misuse[kind] = count + 1
        if self.strict:
            raise MonitorUsageError(words)
        if count == 0:
            warnings.warn(f"gpudoctor: {words}", MonitorUsageWarning, stacklevel=4)

    def _disable(self, exc: BaseException) -> None:
        self._disabled = f"{type(exc).__name__}: {exc}"
        log.warning("gpudoctor: the training monitor stopped measuring after an internal error (%s); "
                    "training goes on", self._disabled)
        try:
            self._finish_collecting()
        except Exception:
            pass

    # -- background collection ----------------------------------------------------------------------
    def _start_collecting(self) -> None:
        if not self._started:
            self._started = True
            self._resolve_device()
        self._collecting = True
        self._publisher = publish.start(self, self._publisher, self.publish)
        if self._device_kind != "cuda":
            if self.measure_energy and self._energy is None:
                self._start_energy()
            return
        if self._timer is None:
            try:
                from .torch_support import CudaEventTimer

                self._timer = CudaEventTimer(self._device_index or 0)
            except Exception as exc:
                self._notes.append(f"CUDA events unavailable ({type(exc).__name__}: {exc}); step times "
                                   "use the host clock")
        if self.count_syncs:
            from .torch_support import SyncCounter, require_torch

            if self._syncs is None:
                self._syncs = SyncCounter(require_torch(), counting=self._in_training_loop)
            if not self._syncs.install() and self._syncs.status not in self._notes:
                self._notes.append(f"host syncs {self._syncs.status}")
        if self.sample_gpu:
            self._start_sampler()
        if self.measure_energy and self._energy is None:
            self._start_energy()

    def _in_training_loop(self) -> bool:
        return self._in_step or self._wrap_depth > 0

    def _start_sampler(self) -> None:
        if self._sampler is not None:
            if self._sampler._thread is None or not self._sampler._thread.is_alive():
                old = self._sampler
                from .sampler import TrainingSampler

                self._sampler = TrainingSampler(old.backend, old.index, self.sample_interval_s)
                self._sampler.samples = old.snapshot()
                self._sampler.start()
            return
        from .sampler import TrainingSampler

        backend, index, status = self._nvml_device()
        if status is not None:
            self._notes.append(f"GPU utilisation, power and clocks not sampled: NVML unavailable ({status.reason})")
            self.sample_gpu = False
            return
        if index is None:
            self._notes.append(f"GPU utilisation not sampled: {self._device} not found among NVML's devices")
            self.sample_gpu = False
            return
        self._sampler = TrainingSampler(backend, index, self.sample_interval_s)
        self._sampler.start()

    def _start_energy(self) -> None:
        from .energy import nvml_step_energy, rapl_step_energy

        if self._device_kind in ("cpu", "cpu-fallback"):
            self._energy = rapl_step_energy(self.sample_interval_s)
            return
        if self._device_kind != "cuda":
            return
        if self._sampler is not None:
            self._energy = nvml_step_energy(self._sampler.backend, self._sampler.index, self.sample_interval_s)
            return
        backend, index, status = self._nvml_device()
        if index is None:
            self._notes.append("energy not measured: " + (f"NVML unavailable ({status.reason})" if status is not None
                                                          else f"{self._device} not found among NVML's devices"))
            self.measure_energy = False
            return
        self._energy = nvml_step_energy(backend, index, self.sample_interval_s)

    def _nvml_device(self) -> tuple[GpuBackend, int | None, NA | None]:
        """The NVML backend to read (the one given, else a new one), the NVML index of the CUDA
        device being measured (None: not found, or NVML unavailable) and why NVML is unavailable."""
        from gpudoctor.backends import NvmlBackend
        from .sampler import nvml_index_for
        from .torch_support import cuda_pci_bus_id

        backend = self._gpu_backend if self._gpu_backend is not None else NvmlBackend()
        status = backend.status() if hasattr(backend, "status") else None
        if status is not None:
            return backend, None, status
        return backend, nvml_index_for(backend, self._device_index or 0, cuda_pci_bus_id(self._device_index or 0)), None

    def _finish_collecting(self) -> None:
        self._collecting = False
        try:
            if self._sampler is not None:
                self._sampler.stop()
        finally:  # torch's patched wait entry points are put back even if the sampler failed to stop
            if self._syncs is not None:
                self._syncs.uninstall()

    def _resolve_device(self) -> None:
        from .torch_support import distributed_rank, resolve_device

        device = self._device_arg
        if device is None and self._model is not None and hasattr(self._model, "parameters"):
            first = next(iter(self._model.parameters()), None)
            if first is not None:
                device = first.device
        kind, index = resolve_device(device)
        if kind == "cuda-unavailable":
            self._notes.append(f"device {device} was asked for but CUDA is not usable here; "
                               "measured with the host clock")
            kind = "cpu-fallback"
        self._device_kind = kind
        self._device_index = index
        self._device = f"{kind}:{index}" if kind == "cuda" else ("cpu" if kind == "cpu-fallback" else
                                                                 (f"{kind}:{index}" if index is not None else kind))
        if kind not in ("cuda", "cpu", "cpu-fallback"):
            self._notes.append(f"{self._device}: no device timers or GPU sampling for this device type; "
                               "step times use the host clock")
        self._rank, self._world = distributed_rank()

    # -- figures ------------------------------------------------------------------------------------
    def _build(self) -> Summary:
        device_steps = None
        if self._timer is not None:
            try:
                self._timer.drain()
                device_steps = list(self._timer.times_s)
            except Exception as exc:
                self._note_once(f"device step times unavailable ({type(exc).__name__}: {exc}); "
                                "host clock used")
            if getattr(self._timer, "dropped", 0):
                self._note_once(f"{self._timer.dropped} step(s) were not timed on the device (the host ran "
                                "more than 1024 steps ahead)")
        memory = None
        if self._device_kind == "cuda":
            from .torch_support import cuda_memory_facts

            memory = cuda_memory_facts(self._device_index or 0)
            if "error" in memory:
                self._note_once(f"allocator statistics unavailable: {memory['error']}")
                memory = None
            elif memory.get("peak_allocated_bytes") == 0 and self.steps:
                self._note_once(f"nothing was allocated on {self._device} during the run: the loop seems to "
                                "train elsewhere (pass device= or model= to TrainingMonitor); GPU figures "
                                "are not diagnosed")
        notes = list(self._notes)
        for kind, count in self._misuse.items():
            notes.append({"nested_step": f"{count} nested monitor.step() call(s) were ignored",
                          "exit_without_enter": f"{count} step end(s) without a beginning were ignored"}[kind])
        if self._failed_steps:
            notes.append(f"{self._failed_steps} step(s) ended with an exception and were not counted")
        if self._disabled:
            notes.append(f"measuring stopped after an internal error: {self._disabled}")
        if self._batches and not self.steps:
            notes.append("monitor.wrap(loader) gave batches but monitor.step() was never used")
        if self._sampler is not None and self._sampler.error:
            notes.append(f"GPU sampling stopped: {self._sampler.error}")
        return build_summary(dataclasses.replace(
            self.raw_timings(), device_steps=device_steps,
            gpu_samples=self._sampler.snapshot() if self._sampler is not None else (),
            energy=self._energy, memory=memory, notes=notes))

    def raw_timings(self) -> RawTimings:
        """The host-clock timings so far, the rank and the host syncs: one view of what the monitor
        measured, read by :meth:`summary` (which adds the device's step times, GPU samples, energy,
        memory and notes) and by the live publisher. Reading it stops nothing and never waits for
        the device; the lists are the monitor's own (the hot path only appends to them)."""
        return RawTimings(
            waits=self._waits, host_steps=self._host_steps, iter_starts=self._iter_starts,
            ends=self._ends, passes=self._passes, device_steps=None, device=self._device,
            rank=self._rank, world_size=self._world, warmup_steps=self.warmup_steps,
            samples=self._samples, host_syncs=self._syncs.snapshot() if self._syncs is not None else None)

    def _note_once(self, text: str) -> None:
        if text not in self._notes:
            self._notes.append(text)

    def _gather(self, summary: Summary) -> Summary:
        from gpudoctor.backends import is_na
        from .torch_support import all_gather_objects

        from .torch_support import loaded_torch, sync_debug_mode_off

        torch = loaded_torch()
        if torch is not None and self._device_kind == "cuda":
            with sync_debug_mode_off(torch):  # NCCL's object gather copies to the host: allowed here
                gathered = all_gather_objects(summary.to_dict())
        else:
            gathered = all_gather_objects(summary.to_dict())
        if is_na(gathered):
            summary.notes.append(f"gather=True: {gathered.reason}; this rank's figures only")
            return summary
        summary.ranks = [{k: d.get(k) for k in ("rank", "steps", "step_time_p50_s", "data_wait_p50_s",
                                                 "data_wait_share", "device_span_share", "device")}
                         | {"device_busy_share": d.get("device_span_share", d.get("device_busy_share"))}
                         | {"gpu_util_mean_pct": (d.get("gpu") or {}).get("util_mean_pct"),
                            "codes": [item["code"] for item in d.get("diagnosis", [])]}
                         for d in gathered]
        summary.diagnosis.extend(find_stragglers(summary.ranks))
        return summary

    def _log_window(self) -> None:
        n = len(self._host_steps)
        first = self._last_log_index
        self._last_log_index = n
        times: list[float] = []
        if self._timer is not None:
            self._timer.poll()  # non-blocking: the steps the device has finished so far
            times = sorted(self._timer.times_s[-(n - first):])
        if not times:
            times = sorted(self._host_steps[first:n])
        waits = [w for w in self._waits[first:n] if not math.isnan(w)]
        wall = sum(iteration_spans(self._iter_starts, self._ends, self._passes, first))
        median_s = percentile(times, 50)
        if median_s is None:  # no step since the last line (it is written after a step)
            return
        parts = [f"step {n}: {median_s * 1000:.2f} ms/step (median of the last {n - first})"]
        if waits and wall > 0:
            parts.append(f"data wait {sum(waits) / wall * 100:.0f}%")
        if self._sampler is not None:
            recent = [s["gpu_util_pct"] for s in self._sampler.snapshot()[-4:] if s.get("gpu_util_pct") is not None]
            if recent:
                parts.append(f"GPU util {sum(recent) / len(recent):.0f}%")
        if self._syncs is not None and self._syncs.active:
            total = self._syncs.total
            parts.append(f"host syncs {(total - self._last_log_syncs) / (n - first):.1f}/step")
            self._last_log_syncs = total
        log.info("gpudoctor: %s", ", ".join(parts))


def _batch_samples(batch: object) -> int:
    """Samples in a batch: the first dimension of its first tensor (-1: unknown)."""
    for _ in range(4):  # a tensor, or a tuple / list / dict whose first item leads to one
        shape = getattr(batch, "shape", None)
        if shape is not None:
            try:
                return int(shape[0]) if len(shape) else -1
            except (TypeError, ValueError, IndexError):
                return -1
        if isinstance(batch, dict):
            batch = next(iter(batch.values()), None)
        elif isinstance(batch, (list, tuple)) and batch:
            batch = batch[0]
        else:
            return -1
    return -1
