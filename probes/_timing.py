"""Timing for the measuring probes: the timing loop, its clocks and the figures made from it.

Plain Python (no torch at import time), so it is tested on any machine. ``time_op`` runs
an operation after a warm-up and reports the median of repeats; each timed sample can
cover several calls, and the operation gets a running index so that it can rotate its
inputs through several buffers (caches must not flatter the figure). A CPU clock serves
host work and tests; on a GPU, CUDA events time the device's own work.

Units: bytes, seconds, GB/s (10^9 bytes per second, as datasheets and PCIe rates use),
TFLOP/s (10^12 floating-point operations per second).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, TypeVar

from gpudoctor.core.stats import percentile

if TYPE_CHECKING:  # torch is an optional extra: imported for its types only
    import torch as _torch

MiB = 1 << 20
GiB = 1 << 30


# --------------------------------------------------------------------------- statistics
@dataclass(frozen=True)
class TimingStats:
    """Robust summary of repeated timings (seconds per operation)."""

    median: float
    minimum: float
    maximum: float
    q1: float
    q3: float
    count: int

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.02 = 2 %): how noisy the figure is."""
        return (self.q3 - self.q1) / self.median if self.median > 0 else math.inf

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def summarise(samples: Sequence[float]) -> TimingStats:
    """Median and quartiles of ``samples`` (at least one), by :func:`gpudoctor.core.stats.percentile`."""
    values = sorted(float(s) for s in samples)
    if not values:
        raise ValueError("no samples to summarise")
    q1, median, q3 = (percentile(values, q) for q in (25, 50, 75))
    return TimingStats(median, values[0], values[-1], q1, q3, len(values))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- clocks
TokenT = TypeVar("TokenT")


class Clock(Protocol[TokenT]):
    """What the timing loop needs of a clock: ``start()`` gives a token, ``stop(token)`` the
    seconds since. (A ``kind`` attribute, where a clock has one, names it in the results.)"""

    def start(self) -> TokenT: ...

    def stop(self, token: TokenT) -> float: ...

class CpuClock:
    """Wall-clock timing for work that runs on the host (CPU matmul, tests)."""

    kind = "perf_counter"

    def start(self) -> float:
        return time.perf_counter()

    def stop(self, token: float) -> float:
        return time.perf_counter() - token


class CudaEventClock:
    """Times GPU work with CUDA events recorded on the current stream.

    Host-side timers would measure the launch, not the kernel: CUDA calls return before
    the work is done. Events are timestamped by the GPU itself when the stream reaches
    them; ``stop`` waits for the end event and returns the GPU time in between.
    """

    kind = "cuda_event"

    def __init__(self, torch: ModuleType, device: _torch.device | None = None) -> None:
        self._torch = torch
        self._device = device

    def start(self) -> _torch.cuda.Event:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, token: _torch.cuda.Event) -> float:
        end = self._torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        return token.elapsed_time(end) / 1000.0  # elapsed_time is in milliseconds


# --------------------------------------------------------------------------- the loop
@dataclass
class Timing:
    """Result of :func:`time_op`: seconds per operation, and how it was obtained."""

    stats: TimingStats
    warmup: int
    repeats: int
    inner: int
    clock: str
    stopped_early: bool = False

    @property
    def seconds(self) -> float:
        return self.stats.median

    def to_dict(self) -> dict[str, Any]:
        out = {"warmup": self.warmup, "repeats": self.repeats, "inner": self.inner,
               "clock": self.clock, "stopped_early": self.stopped_early}
        out.update({f"{k}_s": v for k, v in self.stats.to_dict().items() if k != "count"})
        return out


def time_op(op: Callable[[int], object], clock: Clock[TokenT], *, warmup: int = 2, repeats: int = 7, inner: int = 1,
            budget_s: float | None = None, min_repeats: int = 3) -> Timing:
    """Median time of ``op`` per call.

    ``op(i)`` is called with a running index so that it can rotate through several input
    buffers (caches must not flatter the figure). ``warmup`` calls are not timed (they pay
    for lazy loading, autotuning and first-touch). Each timed sample covers ``inner``
    consecutive calls, so that launch gaps are small against the work. ``budget_s`` (wall
    clock, warm-up included) stops the repeats early, after ``min_repeats`` at least.
    """
    if repeats < 1 or inner < 1 or warmup < 0:
        raise ValueError("repeats and inner must be >= 1, warmup >= 0")
    began = time.monotonic()
    index = 0
    for _ in range(warmup):
        op(index)
        index += 1
    samples: list[float] = []
    stopped = False
    for rep in range(repeats):
        token = clock.start()
        for _ in range(inner):
            op(index)
            index += 1
        samples.append(clock.stop(token) / inner)
        if budget_s is not None and rep + 1 >= min_repeats and rep + 1 < repeats:
            spent = time.monotonic() - began
            per_rep = spent / (rep + 1 + warmup)
            if spent + per_rep > budget_s:
                stopped = True
                break
    return Timing(summarise(samples), warmup, len(samples), inner, getattr(clock, "kind", "clock"), stopped)


def inner_count(seconds_per_op: float, window_s: float = 0.002, cap: int = 64) -> int:
    """How many calls one timed sample should cover so that it lasts about ``window_s``."""
    if seconds_per_op <= 0 or not math.isfinite(seconds_per_op):
        return cap
    return max(1, min(cap, int(math.ceil(window_s / seconds_per_op))))


# --------------------------------------------------------------------------- figures
def bandwidth_gbs(nbytes: float, seconds: float) -> float:
    """GB/s (10^9 bytes per second)."""
    return nbytes / seconds / 1e9 if seconds > 0 else math.nan


def matmul_tflops(m: int, n: int, k: int, seconds: float) -> float:
    """TFLOP/s of an (m x k) @ (k x n) product: 2*m*n*k operations (one multiply, one add)."""
    return 2.0 * m * n * k / seconds / 1e12 if seconds > 0 else math.nan


def percent_of(value: float | None, ceiling: float | None) -> float | None:
    if value is None or ceiling is None or not ceiling > 0 or not math.isfinite(value):
        return None
    return 100.0 * value / ceiling
