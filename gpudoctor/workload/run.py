"""One run of the reference workload: train, time every step, sample the GPU, evaluate.

What is measured, and how:

- ``epoch_s``: wall time of each epoch, from asking the first batch (DataLoader worker
  start-up included, as a user pays it) to the end of the last step, after a device
  synchronise. ``samples_per_s`` = training samples / total training time.
- ``data_wait_share``: the part of the training time the loop spent waiting for its
  next batch (``next()`` on the loader plus the copy to the device).
- ``step_p50_ms``/``step_p95_ms``: host wall time from one step's batch request to the
  next. The ``dataloader`` mode reads ``loss.item()`` every step, as the tutorials do, so
  it synchronises every step; ``tuned`` and ``resident`` do not, so their step time is
  the loop's pace, which equals the device's once CUDA's launch queue is full.
- GPU utilisation: NVML's own timestamped ``utilization.gpu`` samples
  (``nvmlDeviceGetSamples``) whose whole sample period lies inside the run; a run shorter
  than NVML's period gets a reason instead of a figure (:class:`UtilSampler`).
- Peak allocated/reserved memory: torch's caching allocator statistics for the run.
- Loss: mean training loss of the last epoch (and the first step's, to show it fell);
  accuracy on the held-out split after training.

A warm-up step on a throw-away copy of the network (same batch size) runs first, so CUDA
start-up and cuBLAS handle creation are not charged to the first configuration, and an
out-of-memory shows up before the timed part. Out of memory is a result (status "oom"):
the run's tensors are dropped and the allocator's cache emptied, so the sweep goes on.
"""

from __future__ import annotations

import gc
import itertools
import math
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from gpudoctor.core._num import is_number
from gpudoctor.core.errors import first_line as _first_line
from gpudoctor.core.stats import percentile
from gpudoctor.workload.config import RunConfig
from gpudoctor.workload.data import MnistData, MnistItems, normalised
from gpudoctor.workload.wording import UTIL_REASON_WORDS

if TYPE_CHECKING:
    import torch
    from torch.utils.data import DataLoader

    from gpudoctor.backends.base import GpuBackend
    from gpudoctor.workload.energy import RunEnergy

    #: One batch: the images and their labels.
    Batch = tuple[torch.Tensor, torch.Tensor]

#: Called as ``hook(phase, run)`` at "setup", "warmup" and before every "step": tests use
#: it to raise a real ``torch.OutOfMemoryError`` at a chosen point of a real run.
FaultHook = Callable[[str, RunConfig], None]

EVAL_CHUNK = 10_000
TUNED_PREFETCH_FACTOR = 4


class StopRequested(Exception):
    """``should_stop()`` said so (the TUI's cancel button): like Ctrl-C, without the signal."""


@dataclass
class RunResult:
    """One row of the sweep. Numbers are None where they do not apply or were not read."""

    device: str
    mode: str
    batch_size: int
    workers: int | None
    status: str = "ok"            # "ok", "oom" or "error"
    error: str | None = None
    device_name: str | None = None
    epochs: int = 0
    train_samples: int = 0
    steps: int = 0
    epoch_s: float | None = None  # mean over epochs
    epoch_times_s: list[float] = field(default_factory=list)
    samples_per_s: float | None = None
    data_wait_share: float | None = None
    step_p50_ms: float | None = None
    step_p95_ms: float | None = None
    gpu_util_mean_pct: float | None = None
    gpu_util_max_pct: float | None = None
    gpu_util_samples: int = 0
    gpu_util_hz: float | None = None
    gpu_util_note: str | None = None
    gpu_util_reason: str | None = None     # why there is no utilisation figure (UTIL_REASON_WORDS)
    gpu_util_period_ms: float | None = None  # NVML's utilisation sample period, as measured
    gpu_sm_active_pct: float | None = None      # GPM over the run (Hopper and later): SM activity
    gpu_tensor_active_pct: float | None = None  # and tensor-core activity
    gpu_gpm_note: str | None = None             # why there are none (NA reason: needs Hopper or later, ...)
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    device_memory_total_bytes: int | None = None
    first_loss: float | None = None
    final_loss: float | None = None
    test_accuracy: float | None = None
    wall_s: float | None = None
    energy_j: float | None = None          # over the timed epochs (NVML counter or RAPL)
    energy_per_epoch_j: float | None = None
    avg_power_w: float | None = None
    samples_per_joule: float | None = None
    energy_source: str | None = None       # "nvml" (the GPU) or "rapl" (the CPU packages)
    energy_note: str | None = None         # why there is no energy figure
    energy_window_s: float | None = None   # seconds the energy counter was read over
    energy_epochs: int | None = None       # epochs inside that window (the run's, plus top-up ones)

    @property
    def run(self) -> RunConfig:
        return RunConfig(self.device, self.mode, self.batch_size, self.workers)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, float) and not math.isfinite(value):
                out[key] = None  # JSON has no NaN: a diverged loss is reported as None + error
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunResult":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


# --------------------------------------------------------------------------- NVML sampling
#: NVML's utilisation sample period is between 1/6 s and 1 s depending on the product
#: (nvmlUtilization_t). When too few samples are seen to measure it, the longest is assumed.
NVML_MAX_UTIL_PERIOD_S = 1.0

#: How far (s) NVML's newest sample may lie ahead of the host clock before the two clocks are
#: taken to differ (NVML stamps samples with the CPU's time in microseconds).
CLOCK_SLACK_S = 60.0


class UtilSampler:
    """NVML's ``utilization.gpu`` of one torch CUDA device over a run, from NVML's own samples.

    NVML averages utilisation over its own sample period (1/6 s to 1 s, by product), so polling
    ``nvmlDeviceGetUtilizationRates`` faster than that repeats values, and its first answer
    describes the time before the run. Instead the driver's buffer of timestamped samples
    (``nvmlDeviceGetSamples``) is read at the start, drained every ``interval_s`` by a thread
    (so a long run does not outlast the buffer), and read once more at the end; only samples
    whose whole period lies inside the run are kept. A run shorter than NVML's period, or one
    that no sample covers, gets no figure and a reason (:data:`UTIL_REASON_WORDS`).
    """

    def __init__(self, torch_index: int, interval_s: float, backend: GpuBackend | None = None,
                 clock_us: Callable[[], int] | None = None) -> None:
        """``backend``: an NvmlBackend (default: a new one; tests pass one over a stand-in
        NVML module through :class:`~gpudoctor.backends.NvmlGate`). ``clock_us``: the host's
        time in microseconds, the clock NVML stamps its samples with (tests pass their own)."""
        self.torch_index = torch_index
        self._given_backend = backend
        self.interval_s = interval_s
        self._clock_us = clock_us or (lambda: time.time_ns() // 1000)
        self.seen: dict[int, float] = {}  # timestamp_us -> percent, every sample read
        self.samples: list[float] = []  # the kept ones (inside the run)
        self.note: str | None = None
        self.reason: str | None = None
        self._backend: Any = None
        self._index = 0
        self._last_seen = 0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_us = 0
        self._stopped_us = 0

    def _resolve(self) -> Any:
        """The NVML backend and index of the device (the one resolver), or None with a note."""
        from gpudoctor.backends import NvmlBackend
        from gpudoctor.backends.visibility import nvml_index_for, torch_device_ids

        backend = self._given_backend if self._given_backend is not None else NvmlBackend()
        status = backend.status()
        if status is not None:
            self.note = f"NVML not available ({status.reason})"
            return None
        index = nvml_index_for(backend, self.torch_index, *torch_device_ids(self.torch_index))
        if index is None:
            self.note = f"no NVML device matches torch device cuda:{self.torch_index}"
            backend.close()
            return None
        return backend, index

    def _drain(self) -> bool:
        """Read the samples NVML took since the last read; False (with a note) when it cannot."""
        from gpudoctor.backends import is_na

        with self._lock:
            if self._backend is None:
                return False
            got = self._backend.utilization_samples(self._index, self._last_seen)
            if is_na(got):
                self.note = f"NVML utilisation samples not available ({got.reason})"
                self.reason = got.reason
                return False
            for stamp, value in got:
                self.seen[int(stamp)] = float(value)
                self._last_seen = max(self._last_seen, int(stamp))
        return True

    def _loop(self) -> None:
        while not self._done.wait(self.interval_s):
            if not self._drain():
                return

    def start(self) -> "UtilSampler":
        found = self._resolve()
        if found is None:
            return self
        self._backend, self._index = found
        if not self._drain():  # the buffer before the run: NVML's period, and where the run starts
            self._close()
            return self
        self._gpm_read()  # opens the run's GPM window (Hopper and later): the read at stop closes it
        self._started_us = self._clock_us()
        self._thread = threading.Thread(target=self._loop, name="gpudoctor-util", daemon=True)
        self._thread.start()
        return self

    def _close(self) -> None:
        with self._lock:
            if self._backend is not None:
                self._backend.close()
                self._backend = None

    def _gpm_read(self) -> dict[str, Any]:
        gpm = getattr(self._backend, "gpm", None)
        if gpm is None:
            return {}
        try:
            return dict(gpm(self._index))
        except Exception:  # a backend that cannot read GPM costs these figures, not the run
            return {}

    def _gpm_activity(self) -> dict[str, Any]:
        """SM and tensor activity over the run, from GPM's two samples at its start and end (the
        same window as the utilisation), or the reason they are missing (no GPM before Hopper, a
        run shorter than GPM's minimum interval, nvml.GPM_MIN_INTERVAL_S, ...)."""
        from gpudoctor.backends import is_na

        found = self._gpm_read()
        out: dict[str, Any] = {"gpu_sm_active_pct": None, "gpu_tensor_active_pct": None, "gpu_gpm_note": None}
        for key, name in (("sm_active_pct", "gpu_sm_active_pct"), ("tensor_active_pct", "gpu_tensor_active_pct")):
            value = found.get(key)
            if is_number(value):
                out[name] = round(float(value), 1)
            elif is_na(value) and out["gpu_gpm_note"] is None:
                out["gpu_gpm_note"] = value.reason
        if not found:
            out["gpu_gpm_note"] = "NotRead"
        return out

    def period_us(self) -> float:
        """NVML's sample period: the median gap between consecutive samples, else the longest."""
        stamps = sorted(self.seen)
        gaps = sorted(b - a for a, b in itertools.pairwise(stamps) if b > a)
        if not gaps:
            return NVML_MAX_UTIL_PERIOD_S * 1e6
        return float(gaps[len(gaps) // 2])

    def stop(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gpu_util_samples": 0, "gpu_util_note": self.note, "gpu_util_reason": self.reason,
                               "gpu_util_mean_pct": None, "gpu_util_max_pct": None, "gpu_util_hz": None,
                               "gpu_util_period_ms": None}
        if self._backend is None:
            return out
        self._stopped_us = self._clock_us()
        self._done.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        drained = self._drain()
        out.update(self._gpm_activity())
        self._close()
        if not drained:
            out.update(gpu_util_note=self.note, gpu_util_reason=self.reason)
            return out
        out.update(self.judge(self._started_us, self._stopped_us))
        return out

    def judge(self, started_us: int, stopped_us: int) -> dict[str, Any]:
        """The samples whose whole period lies in [started_us, stopped_us], or the reason none do."""
        period = self.period_us()
        run_us = stopped_us - started_us
        out: dict[str, Any] = {"gpu_util_period_ms": round(period / 1000, 1)}
        inside = [value for stamp, value in sorted(self.seen.items())
                  if started_us + period <= stamp <= stopped_us]
        words = {"run_ms": run_us / 1000, "period_ms": period / 1000}
        if inside:
            self.samples = inside
            out.update(gpu_util_samples=len(inside), gpu_util_mean_pct=round(sum(inside) / len(inside), 1),
                       gpu_util_max_pct=max(inside), gpu_util_hz=round(1e6 / period, 1),
                       gpu_util_note=None, gpu_util_reason=None)
            return out
        if self.seen and max(self.seen) > stopped_us + CLOCK_SLACK_S * 1e6:
            reason = "NvmlClockMismatch"
        elif run_us < period:
            reason = "RunShorterThanNvmlPeriod"
        else:
            reason = "NoSampleInsideRun"
        self.reason, self.note = reason, UTIL_REASON_WORDS[reason].format(**words)
        out.update(gpu_util_samples=0, gpu_util_note=self.note, gpu_util_reason=reason)
        return out


# --------------------------------------------------------------------------- one run
def _is_oom(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    # The same condition reached through other layers: cuBLAS failing to allocate its
    # workspace, or the CPU allocator.
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(
        marker in text for marker in ("out of memory", "can't allocate memory", "cublas_status_alloc_failed"))




def device_name(device: str, cuda_index: int = 0) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(cuda_index)
    from gpudoctor.backends.host import host_facts

    facts = host_facts()
    return f"{facts.get('cpu_model')} ({facts.get('cpu_logical')} logical CPUs)"


def _release(device: torch.device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def run_one(run: RunConfig, data: MnistData, *, epochs: int = 1, seed: int = 0,
            cuda_index: int = 0, util_interval_s: float = 0.05,
            fault_hook: FaultHook | None = None,
            should_stop: Callable[[], bool] | None = None) -> RunResult:
    """Train the reference network once with ``run``'s settings and measure it.

    Never raises for a failed run (out of memory -> status "oom", anything else ->
    "error"); raises KeyboardInterrupt (Ctrl-C) and :class:`StopRequested` so the caller
    can keep what finished.
    """
    import torch

    result = RunResult(run.device, run.mode, run.batch_size, run.workers, epochs=epochs)
    device = torch.device(f"cuda:{cuda_index}" if run.device == "cuda" else "cpu")
    if device.type == "cuda":
        # The DataLoader's pin-memory thread and torch.cuda.* calls without a device use the
        # current device: without this a run on cuda:1 also opens a context on cuda:0.
        torch.cuda.set_device(device)
    started = time.monotonic()
    state: dict[str, Any] = {}
    try:
        result.device_name = device_name(run.device, cuda_index)
        _train_and_measure(run, data, device, epochs, seed, util_interval_s, fault_hook,
                           should_stop, result, state)
    except (KeyboardInterrupt, StopRequested):
        raise
    except Exception as exc:
        # The exception's frames hold the run's tensors: it is dropped at the end of this
        # block, before ``_release`` empties the allocator's cache.
        result.status = "oom" if _is_oom(exc) else "error"
        result.error = _first_line(exc)
        _clear_measurements(result)
    finally:
        sampler = state.pop("sampler", None)
        if sampler is not None:
            sampler.stop()
        meter = state.pop("energy", None)
        if meter is not None:  # a run that ended early (OOM, Ctrl-C): no energy figure, NVML closed
            meter.close()
        state.clear()  # drop the model, optimiser, loader and device tensors
        try:
            _release(device)
        except Exception:
            pass
        result.wall_s = round(time.monotonic() - started, 3)
    return result


def _clear_measurements(result: RunResult) -> None:
    for name in ("epoch_s", "samples_per_s", "data_wait_share", "step_p50_ms", "step_p95_ms",
                 "gpu_util_mean_pct", "gpu_util_max_pct", "gpu_util_hz", "gpu_util_period_ms", "peak_allocated_bytes",
                 "peak_reserved_bytes", "first_loss", "final_loss", "test_accuracy", "energy_j",
                 "energy_per_epoch_j", "avg_power_w", "samples_per_joule", "energy_window_s", "energy_epochs"):
        setattr(result, name, None)
    result.epoch_times_s = []
    result.gpu_util_samples = 0


def _make_loader(run: RunConfig, data: MnistData, device: torch.device, seed: int) -> DataLoader[Batch]:
    from torch.utils.data import DataLoader
    import torch

    dataset = MnistItems(data.train_images, data.train_labels)
    generator = torch.Generator().manual_seed(seed)
    if run.mode == "dataloader":
        return DataLoader(dataset, batch_size=run.batch_size, shuffle=True,
                          num_workers=run.workers or 0, generator=generator)
    workers = run.workers or 0
    return DataLoader(dataset, batch_size=run.batch_size, shuffle=True, num_workers=workers,
                      generator=generator, pin_memory=device.type == "cuda",
                      persistent_workers=workers > 0,
                      prefetch_factor=TUNED_PREFETCH_FACTOR if workers > 0 else None)


def _resident_batches(x: torch.Tensor, y: torch.Tensor, batch_size: int,
                      generator: torch.Generator) -> Iterator[Batch]:
    import torch

    order = torch.randperm(x.shape[0], device=x.device, generator=generator)
    for start in range(0, x.shape[0], batch_size):
        index = order[start:start + batch_size]
        yield x[index], y[index]


def _train_and_measure(run: RunConfig, data: MnistData, device: torch.device, epochs: int, seed: int,
                       util_interval_s: float, fault_hook: FaultHook | None,
                       should_stop: Callable[[], bool] | None, result: RunResult,
                       state: dict[str, Any]) -> None:
    import torch

    from gpudoctor.workload.network import build_model, build_optimizer

    cuda = device.type == "cuda"
    hook = fault_hook or (lambda phase, r: None)
    n_train = int(data.train_labels.shape[0])
    result.train_samples = n_train

    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        result.device_memory_total_bytes = int(torch.cuda.get_device_properties(device).total_memory)
    hook("setup", run)

    hook("warmup", run)
    _warm_up(run, device, seed, n_train)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)

    model = build_model(device, seed)
    optimizer = build_optimizer(model)
    state["model"], state["optimizer"] = model, optimizer
    batches = _batch_source(run, data, device, seed, state)
    sampler = UtilSampler(device.index or 0, util_interval_s) if cuda else None
    if sampler is not None:
        state["sampler"] = sampler.start()
    from gpudoctor.workload import energy

    meter = state["energy"] = energy.RunEnergy(device).start()
    trained = _train_epochs(run, model, optimizer, batches, device, epochs, hook, should_stop, result)
    if sampler is not None:
        result.__dict__.update(state.pop("sampler").stop())
    extra = _energy_top_up(meter, run, model, batches, device, hook, should_stop)
    energy.fill(result, meter.stop(), n_train * (epochs + extra), epochs + extra)
    state.pop("energy").close()
    if cuda:
        result.peak_allocated_bytes = int(torch.cuda.max_memory_allocated(device))
        result.peak_reserved_bytes = int(torch.cuda.max_memory_reserved(device))
    _fill_figures(result, trained, n_train, epochs)
    result.test_accuracy = round(evaluate(model, data, device), 5)
    if not math.isfinite(trained.last_epoch_loss):
        # Throughput is still a measurement; the numbers the network produced are not.
        result.status = "error"
        result.error = f"training diverged: mean loss of the last epoch is {trained.last_epoch_loss}"


def _energy_top_up(meter: RunEnergy, run: RunConfig, model: torch.nn.Module, batches: Callable[[], Iterator[Batch]],
                   device: torch.device,
                   hook: FaultHook, should_stop: Callable[[], bool] | None) -> int:
    """More epochs of the same configuration until the energy window is long enough for the
    counter (:data:`gpudoctor.workload.energy.MIN_ENERGY_WINDOW_S`), on a throw-away copy of
    the network so the run's own accuracy is unchanged. Returns the number of extra epochs."""
    import copy

    from gpudoctor.workload.network import build_optimizer

    if not meter.needs_more():
        return 0
    spare = copy.deepcopy(model)
    optimizer = build_optimizer(spare)
    scratch = RunResult(run.device, run.mode, run.batch_size, run.workers)
    extra = 0
    while meter.needs_more():
        _train_epochs(run, spare, optimizer, batches, device, 1, hook, should_stop, scratch)
        extra += 1
    del spare, optimizer
    return extra


def _warm_up(run: RunConfig, device: torch.device, seed: int, n_train: int) -> None:
    """One step on a throw-away network: CUDA/cuBLAS start-up, and an early out-of-memory."""
    import torch

    from gpudoctor.workload.network import build_model, build_optimizer, loss_function

    warm_model = build_model(device, seed)
    warm_opt = build_optimizer(warm_model)
    warm_x = torch.zeros(min(run.batch_size, n_train), 784, device=device)
    warm_y = torch.zeros(warm_x.shape[0], dtype=torch.int64, device=device)
    warm_loss = loss_function()(warm_model(warm_x), warm_y)
    warm_loss.backward()
    warm_opt.step()
    del warm_model, warm_opt, warm_x, warm_y, warm_loss
    _release(device)


def _batch_source(run: RunConfig, data: MnistData, device: torch.device, seed: int,
                  state: dict[str, Any]) -> Callable[[], Iterator[Batch]]:
    """What gives one epoch's batches: the mode's DataLoader, or shuffled slices of device tensors."""
    import torch

    if run.mode == "resident":
        x_all = normalised(data.train_images).to(device)
        y_all = data.train_labels.to(device)
        state["x"], state["y"] = x_all, y_all
        shuffle = torch.Generator(device=device).manual_seed(seed)
        return lambda: _resident_batches(x_all, y_all, run.batch_size, shuffle)
    loader = _make_loader(run, data, device, seed)
    state["loader"] = loader
    return lambda: iter(loader)


@dataclass
class _Trained:
    """What the timed epochs leave behind (host clock, seconds)."""

    step_times: list[float] = field(default_factory=list)
    wait_total: float = 0.0
    train_total: float = 0.0
    first_loss: Any = None
    last_epoch_loss: float = 0.0


def _train_epochs(run: RunConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                  batches_of: Callable[[], Iterator[Batch]], device: torch.device,
                  epochs: int, hook: FaultHook, should_stop: Callable[[], bool] | None,
                  result: RunResult) -> _Trained:
    import torch

    from gpudoctor.workload.network import loss_function

    cuda = device.type == "cuda"
    criterion = loss_function()
    sync_every_step = run.mode == "dataloader"  # the tutorials' running loss.item()
    non_blocking = run.mode == "tuned" and cuda
    out = _Trained()
    model.train()
    for _epoch in range(epochs):
        epoch_start = time.perf_counter()
        batches = batches_of()
        loss_sum: Any = torch.zeros((), device=device) if not sync_every_step else 0.0
        seen = 0
        while True:
            step_start = time.perf_counter()
            try:
                x, y = next(batches)
            except StopIteration:
                break
            x = x.to(device, non_blocking=non_blocking)
            y = y.to(device, non_blocking=non_blocking)
            fetched = time.perf_counter()
            hook("step", run)
            if should_stop is not None and should_stop():
                raise StopRequested()
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            n = int(y.shape[0])
            if sync_every_step:
                loss_sum += loss.item() * n
            else:
                loss_sum += loss.detach() * n
            if out.first_loss is None:
                out.first_loss = loss.detach().clone()
            seen += n
            out.wait_total += fetched - step_start
            out.step_times.append(time.perf_counter() - step_start)
        if cuda:
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - epoch_start
        out.train_total += elapsed
        result.epoch_times_s.append(round(elapsed, 4))
        out.last_epoch_loss = float(loss_sum) / max(seen, 1)
        del batches
    return out


def _fill_figures(result: RunResult, trained: _Trained, n_train: int, epochs: int) -> None:
    train_total = trained.train_total
    result.steps = len(trained.step_times)
    result.epoch_s = round(train_total / epochs, 4)
    result.samples_per_s = round(n_train * epochs / train_total, 1) if train_total > 0 else None
    result.data_wait_share = round(trained.wait_total / train_total, 4) if train_total > 0 else None
    if trained.step_times:
        result.step_p50_ms = round(percentile(trained.step_times, 50) * 1000, 3)  # type: ignore[operator]
        result.step_p95_ms = round(percentile(trained.step_times, 95) * 1000, 3)  # type: ignore[operator]
    result.first_loss = float(trained.first_loss) if trained.first_loss is not None else None
    result.final_loss = round(trained.last_epoch_loss, 5)


def evaluate(model: torch.nn.Module, data: MnistData, device: torch.device) -> float:
    """Accuracy (0..1) on the held-out split."""
    import torch

    model.eval()
    correct = 0
    total = int(data.test_labels.shape[0])
    with torch.no_grad():
        for start in range(0, total, EVAL_CHUNK):
            x = normalised(data.test_images[start:start + EVAL_CHUNK]).to(device)
            y = data.test_labels[start:start + EVAL_CHUNK].to(device)
            correct += int((model(x).argmax(dim=1) == y).sum())
    return correct / max(total, 1)
