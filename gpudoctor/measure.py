"""Measurement logic shared by the memory, transfer, compute and correctness probes.

Everything here is plain Python (no torch, no pynvml at import time) so that it can be
tested on any machine: timing statistics, the timing loop itself (with a CPU clock in
tests, CUDA events on a GPU), PCIe link ceilings, the datasheet table of common GPUs,
bandwidth and FLOP arithmetic, the caching-allocator explanation, the largest-allocation
search, and the error bounds of the correctness check.

Units: bytes, seconds, GB/s (10^9 bytes per second, as datasheets and PCIe rates use),
TFLOP/s (10^12 floating-point operations per second).
"""

from __future__ import annotations

import math
import os
import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

MiB = 1 << 20
GiB = 1 << 30


# --------------------------------------------------------------------------- statistics
@dataclass(frozen=True)
class Summary:
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


def summarise(samples: Sequence[float]) -> Summary:
    """Median and quartiles of ``samples`` (at least one)."""
    values = sorted(float(s) for s in samples)
    if not values:
        raise ValueError("no samples to summarise")
    if len(values) == 1:
        v = values[0]
        return Summary(v, v, v, v, v, 1)
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return Summary(statistics.median(values), values[0], values[-1], q1, q3, len(values))


# --------------------------------------------------------------------------- timing
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

    def __init__(self, torch: Any, device: Any = None) -> None:
        self._torch = torch
        self._device = device

    def start(self) -> Any:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, token: Any) -> float:
        end = self._torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        return token.elapsed_time(end) / 1000.0  # elapsed_time is in milliseconds


@dataclass
class Timing:
    """Result of :func:`time_op`: seconds per operation, and how it was obtained."""

    summary: Summary
    warmup: int
    repeats: int
    inner: int
    clock: str
    stopped_early: bool = False

    @property
    def seconds(self) -> float:
        return self.summary.median

    def to_dict(self) -> dict[str, Any]:
        out = {"warmup": self.warmup, "repeats": self.repeats, "inner": self.inner,
               "clock": self.clock, "stopped_early": self.stopped_early}
        out.update({f"{k}_s": v for k, v in self.summary.to_dict().items() if k != "count"})
        return out


def time_op(op: Callable[[int], Any], clock: Any, *, warmup: int = 2, repeats: int = 7, inner: int = 1,
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


# --------------------------------------------------------------------------- arithmetic
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


# --------------------------------------------------------------------------- PCIe
# Per lane and direction, after line encoding (8b/10b up to gen 2, 128b/130b for gen 3-5,
# 242/256 FLIT payload for gen 6), in GB/s. Source: PCI-SIG base specifications 1.0-6.0
# (transfer rates 2.5, 5, 8, 16, 32, 64 GT/s).
PCIE_LANE_GBS: dict[int, float] = {
    1: 2.5 * 8 / 10 / 8,
    2: 5.0 * 8 / 10 / 8,
    3: 8.0 * 128 / 130 / 8,
    4: 16.0 * 128 / 130 / 8,
    5: 32.0 * 128 / 130 / 8,
    6: 64.0 * 242 / 256 / 8,
}


def pcie_ceiling_gbs(generation: Any, width: Any) -> float | None:
    """Theoretical one-direction data rate of a PCIe link (e.g. gen 4 x16: 31.5 GB/s).

    Packet headers and flow control cost a further 5-15 %, so no transfer reaches it.
    None when the generation or width is unknown (NVML said NotSupported, a virtual GPU).
    """
    if not isinstance(generation, int) or not isinstance(width, int) or isinstance(generation, bool):
        return None
    lane = PCIE_LANE_GBS.get(generation)
    if lane is None or width <= 0:
        return None
    return lane * width


# --------------------------------------------------------------------------- datasheets
@dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures of one GPU model: dense (non-sparse) peaks at boost clock.

    ``fp16``/``bf16`` are tensor-core rates with FP32 accumulation (what torch uses);
    ``tf32`` is the TF32 tensor-core rate; ``fp32`` is the plain CUDA-core rate.
    None: the model has no such unit or the datasheet gives no figure.
    """

    model: str
    memory_bandwidth_gbs: float
    fp32: float | None
    tf32: float | None
    fp16: float | None
    bf16: float | None
    source: str

    def peak_tflops(self, dtype: str) -> float | None:
        return getattr(self, dtype, None)


_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (sparse figures halved)"
_H200_DS = "NVIDIA H200 Tensor Core GPU datasheet (sparse figures halved)"
_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (sparse figures halved)"
_GA102 = "NVIDIA Ampere GA102 GPU architecture whitepaper, GeForce RTX 30 table (FP32-accumulate rates)"
_AD102 = "NVIDIA Ada GPU architecture whitepaper, GeForce RTX 40 table (FP32-accumulate rates)"
_GEFORCE_SPEC = ("NVIDIA GeForce product specifications: FP32 = CUDA cores x boost clock x 2, memory = "
                 "data rate x bus width; tensor rates by the whitepapers' GeForce ratios")


def _geforce(model: str, fp32: float, bandwidth: float, source: str) -> GpuSpec:
    # GeForce Ampere/Ada: TF32 tensor = FP32 rate; FP16/BF16 tensor with FP32 accumulate = 2x FP32
    # (both whitepapers' tables; FP16-accumulate is twice that again, torch does not use it).
    return GpuSpec(model, bandwidth, fp32, fp32, 2 * fp32, 2 * fp32, source)


#: (regular expression on the normalised device name, spec). First match wins, so more
#: specific names come first. Names as NVML / torch report them, e.g. "NVIDIA H100 80GB HBM3"
#: (SXM), "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB", "Tesla T4", "NVIDIA GeForce RTX 4090".
DATASHEET: list[tuple[str, GpuSpec]] = [
    (r"\bh200 nvl\b", GpuSpec("H200 NVL", 4800, 60, 417.5, 835.5, 835.5, _H200_DS)),
    (r"\bh200\b", GpuSpec("H200 SXM", 4800, 67, 494.5, 989.5, 989.5, _H200_DS)),
    (r"\bh100 nvl\b", GpuSpec("H100 NVL", 3900, 60, 417.5, 835.5, 835.5, _H100_DS)),
    (r"\bh100\b.*\bpcie\b", GpuSpec("H100 PCIe", 2000, 51, 378, 756.5, 756.5, _H100_DS)),
    (r"\bh100\b.*\b(sxm|hbm3)\b", GpuSpec("H100 SXM", 3350, 67, 494.5, 989.5, 989.5, _H100_DS)),
    (r"\ba100\b.*\bsxm4?\b.*\b80gb\b", GpuSpec("A100 SXM4 80GB", 2039, 19.5, 156, 312, 312, _A100_DS)),
    (r"\ba100\b.*\b80gb\b.*\bpcie\b", GpuSpec("A100 PCIe 80GB", 1935, 19.5, 156, 312, 312, _A100_DS)),
    (r"\ba100\b.*\b40gb\b", GpuSpec("A100 40GB", 1555, 19.5, 156, 312, 312, _A100_DS)),
    (r"\ba10\b", GpuSpec("A10", 600, 31.2, 62.5, 125, 125, "NVIDIA A10 Tensor Core GPU datasheet")),
    (r"\bl4\b", GpuSpec("L4", 300, 30.3, 60, 121, 121, "NVIDIA L4 Tensor Core GPU datasheet (sparse figures halved)")),
    # T4: Turing has no TF32 or BF16 tensor cores; 65 TFLOP/s is its FP16/FP32 mixed-precision rate.
    (r"\bt4\b", GpuSpec("T4", 320, 8.1, None, 65, None, "NVIDIA T4 Tensor Core GPU datasheet")),
    (r"\bv100\b.*\bsxm2\b", GpuSpec("V100 SXM2", 900, 15.7, None, 125, None, "NVIDIA V100 Tensor Core GPU datasheet")),
    (r"\bv100\b.*\bpcie\b", GpuSpec("V100 PCIe", 900, 14, None, 112, None, "NVIDIA V100 Tensor Core GPU datasheet")),
    (r"\brtx 4090\b", _geforce("GeForce RTX 4090", 82.6, 1008, _AD102)),
    (r"\brtx 4080 super\b", _geforce("GeForce RTX 4080 SUPER", 52.2, 736, _GEFORCE_SPEC)),
    (r"\brtx 4080\b", _geforce("GeForce RTX 4080", 48.7, 716.8, _AD102)),
    (r"\brtx 4070 ti\b(?! super)", _geforce("GeForce RTX 4070 Ti", 40.1, 504, _GEFORCE_SPEC)),
    (r"\brtx 4070\b(?! ti| super)", _geforce("GeForce RTX 4070", 29.1, 504, _GEFORCE_SPEC)),
    (r"\brtx 3090 ti\b", _geforce("GeForce RTX 3090 Ti", 40.0, 1008, _GEFORCE_SPEC)),
    (r"\brtx 3090\b", _geforce("GeForce RTX 3090", 35.6, 936, _GA102)),
    (r"\brtx 3080 ti\b", _geforce("GeForce RTX 3080 Ti", 34.1, 912, _GEFORCE_SPEC)),
    (r"\brtx 3080\b(?! ti)", _geforce("GeForce RTX 3080", 29.8, 760, _GA102)),
    (r"\brtx 3070\b(?! ti)", _geforce("GeForce RTX 3070", 20.3, 448, _GEFORCE_SPEC)),
    (r"\brtx 3060\b(?! ti)", _geforce("GeForce RTX 3060", 12.7, 360, _GEFORCE_SPEC)),
]


def normalise_gpu_name(name: str) -> str:
    """'NVIDIA GeForce RTX 4090' -> 'geforce rtx 4090'; 'NVIDIA A100-SXM4-80GB' -> 'a100 sxm4 80gb'."""
    text = name.lower().replace("-", " ").replace("_", " ")
    text = re.sub(r"^(nvidia|tesla)\s+", "", text.strip())
    return re.sub(r"\s+", " ", text)


def lookup_gpu_spec(name: Any) -> GpuSpec | None:
    """Datasheet figures for a device name as NVML or torch reports it, or None if unknown."""
    if not isinstance(name, str) or not name.strip():
        return None
    text = normalise_gpu_name(name)
    if re.search(r"\b(laptop|mobile|max q)\b", text):
        return None  # notebook parts share desktop names but run at a fraction of the power
    if re.search(r"\bmig\b", text):
        return None  # a MIG slice ("... MIG 1g.10gb") has a fraction of the SMs and bandwidth
    for pattern, spec in DATASHEET:
        if re.search(pattern, text):
            return spec
    return None


# --------------------------------------------------------------------------- TF32 overrides
@dataclass(frozen=True)
class Tf32Environment:
    """Environment variables that change what an "fp32" or "tf32" matmul really runs.

    - ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` (set in NVIDIA's NGC PyTorch containers) makes
      cuBLAS use TF32 for fp32 matmuls whatever ``torch.backends.cuda.matmul.allow_tf32`` says.
    - ``NVIDIA_TF32_OVERRIDE=0`` stops cuBLAS/cuDNN from using TF32 at all.
    """

    fp32_runs_as_tf32: bool
    tf32_disabled: bool

    @property
    def note(self) -> str:
        parts = []
        if self.fp32_runs_as_tf32:
            parts.append("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1: fp32 matmuls run in TF32 (NGC containers set this)")
        if self.tf32_disabled:
            parts.append("NVIDIA_TF32_OVERRIDE=0: TF32 is disabled, 'tf32' matmuls run in plain fp32")
        return "; ".join(parts)


def tf32_environment(environ: Mapping[str, str] | None = None) -> Tf32Environment:
    env = os.environ if environ is None else environ
    forced = env.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "").strip() not in ("", "0")
    disabled = env.get("NVIDIA_TF32_OVERRIDE", "").strip() == "0"
    # NVIDIA_TF32_OVERRIDE=0 wins: cuBLAS will not use TF32 even when torch asks for it.
    return Tf32Environment(fp32_runs_as_tf32=forced and not disabled, tf32_disabled=disabled)


# --------------------------------------------------------------------------- allocator
@dataclass
class WalkStep:
    """One step of the caching-allocator walk: what was done and the three readings."""

    label: str
    allocated: int
    reserved: int
    nvml_used: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "WalkStep":
        used = data.get("nvml_used")
        return cls(str(data["label"]), int(data["allocated"]), int(data["reserved"]),
                   int(used) if isinstance(used, (int, float)) else None)


def _fmt_bytes(n: float) -> str:
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n >= GiB:
        return f"{sign}{n / GiB:.2f} GiB"
    if n >= MiB:
        return f"{sign}{n / MiB:.0f} MiB"
    return f"{sign}{n / 1024:.0f} KiB"


def explain_walk(steps: Sequence[WalkStep | Mapping[str, Any]]) -> dict[str, Any]:
    """Turn the walk's readings into numbers and sentences about the caching allocator.

    Expects steps labelled ``baseline``, ``freed_all`` and ``empty_cache`` (others are
    allowed and ignored here; ``fragment_alloc`` with the step before it shows
    fragmentation). Returns ``{"facts": {...}, "sentences": [...]}``.
    """
    walk = [s if isinstance(s, WalkStep) else WalkStep.from_dict(s) for s in steps]
    by = {s.label: s for s in walk}
    facts: dict[str, Any] = {}
    sentences: list[str] = []
    peak = max(walk, key=lambda s: s.reserved) if walk else None
    if peak is not None:
        facts["peak_reserved"] = peak.reserved
        facts["peak_allocated"] = max(s.allocated for s in walk)
    freed = by.get("freed_all")
    if freed is not None:
        cached = freed.reserved - freed.allocated
        facts["cached_after_free"] = cached
        if cached > 0:
            sentences.append(
                f"After every tensor was freed, torch still reserved {_fmt_bytes(freed.reserved)} "
                f"(allocated {_fmt_bytes(freed.allocated)}): the caching allocator keeps freed blocks "
                "to reuse them without asking the driver again, so nvidia-smi keeps counting them as "
                "this process's memory.")
    # fragmentation: the request did not fit in the cache although enough was free in total
    order = [s.label for s in walk]
    if "fragment_alloc" in by and order.index("fragment_alloc") > 0:
        after = by["fragment_alloc"]
        before = walk[order.index("fragment_alloc") - 1]
        grew = after.reserved - before.reserved
        free_before = before.reserved - before.allocated
        request = after.allocated - before.allocated
        facts["fragment_request"] = request
        facts["fragment_free_in_cache"] = free_before
        facts["fragment_reserved_growth"] = grew
        if grew > 0 and 0 < request <= free_before:
            sentences.append(
                f"A {_fmt_bytes(request)} tensor made torch reserve {_fmt_bytes(grew)} more although "
                f"{_fmt_bytes(free_before)} lay free in its cache: the free blocks were not contiguous "
                "(fragmentation). PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets segments grow "
                "instead, which avoids most of this.")
    emptied = by.get("empty_cache")
    if freed is not None and emptied is not None:
        returned = freed.reserved - emptied.reserved
        facts["empty_cache_returned"] = returned
        if freed.nvml_used is not None and emptied.nvml_used is not None:
            facts["empty_cache_nvml_drop"] = freed.nvml_used - emptied.nvml_used
        sentence = (f"torch.cuda.empty_cache() gave {_fmt_bytes(returned)} back to the driver")
        if "empty_cache_nvml_drop" in facts:
            sentence += f" (NVML 'used' fell by {_fmt_bytes(facts['empty_cache_nvml_drop'])})"
        sentence += (". That helps other processes on this GPU; it does not give the calling process "
                     "more memory or speed, and its next allocations must ask the driver again (slower).")
        sentences.append(sentence)
    base = by.get("baseline")
    if base is not None and base.nvml_used is not None and emptied is not None and emptied.nvml_used is not None:
        facts["nvml_used_not_returned"] = emptied.nvml_used - base.nvml_used
    return {"facts": facts, "sentences": sentences}


@dataclass
class AllocatorAdvice:
    status: str  # "pass" or "warn"
    code: str
    summary: str
    why: str = ""
    fix: str = ""


def expandable_segments_enabled(env: Mapping[str, str | None]) -> bool:
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        value = (env.get(name) or "").replace(" ", "").lower()
        if "expandable_segments:true" in value:
            return True
    return False


def _stat(stats: Mapping[str, Any], key: str) -> int:
    value = stats.get(key, 0)
    return int(value) if isinstance(value, (int, float)) else 0


def assess_allocator_stats(stats: Mapping[str, Any], env: Mapping[str, str | None], *,
                           fragmentation_ratio: float = 0.25,
                           fragmentation_min_bytes: int = 256 * MiB) -> list[AllocatorAdvice]:
    """Findings about pressure and fragmentation from ``torch.cuda.memory_stats()``.

    - ``num_ooms``: allocations that failed outright (an OutOfMemoryError was raised).
    - ``num_alloc_retries``: cudaMalloc failed, torch released its whole cache and tried
      again; it worked, but each retry synchronises the device (slow steps).
    - ``inactive_split_bytes``: free pieces of partly used segments. When they are a large
      share of ``reserved_bytes`` the cache is fragmented: memory is free but not in one piece.
    Thresholds (25 % of at least 256 MiB reserved) are ours: below them fragmentation
    costs little.
    """
    advice: list[AllocatorAdvice] = []
    expandable = expandable_segments_enabled(env)
    remedy = ("reduce the batch size or activation memory (gradient checkpointing, mixed precision)"
              if expandable else
              "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before the process starts")
    ooms = _stat(stats, "num_ooms")
    retries = _stat(stats, "num_alloc_retries")
    inactive = _stat(stats, "inactive_split_bytes.all.current")
    reserved = _stat(stats, "reserved_bytes.all.current")
    if ooms:
        advice.append(AllocatorAdvice(
            "warn", "allocator_ooms", f"{ooms} allocation(s) ran out of GPU memory.",
            "Each was an OutOfMemoryError in this process (caught or not).",
            remedy[0].upper() + remedy[1:] + "; check memory held by other processes."))
    if retries:
        advice.append(AllocatorAdvice(
            "warn", "allocator_retries",
            f"The caching allocator had to free its cache and retry {retries} time(s).",
            "A retry means cudaMalloc failed: torch released every cached block and asked again. "
            "It succeeds, but synchronises the GPU, so steps where it happens are slow.",
            remedy[0].upper() + remedy[1:] + "."))
    if reserved >= fragmentation_min_bytes and inactive >= fragmentation_ratio * reserved:
        advice.append(AllocatorAdvice(
            "warn", "allocator_fragmentation",
            f"{_fmt_bytes(inactive)} of {_fmt_bytes(reserved)} reserved is in free fragments "
            f"({100 * inactive / reserved:.0f} %).",
            "Free pieces inside partly used segments cannot hold a larger tensor, so the process "
            "may run out of memory while nvidia-smi shows it holding plenty.",
            ("Fragmentation persists with expandable segments on: vary tensor sizes less "
             "(fixed sequence lengths, padding to buckets)." if expandable else
             "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; it lets segments grow in place.")))
    if not advice:
        advice.append(AllocatorAdvice(
            "pass", "allocator_ok", "No allocator pressure: no out-of-memory errors, no cache-flush retries, "
            "little fragmentation.", "", ""))
    return advice


# --------------------------------------------------------------------------- largest allocation
def looks_like_oom(exc: BaseException) -> bool:
    """torch.OutOfMemoryError (any version), MemoryError, or a CUDA 'out of memory' RuntimeError."""
    if isinstance(exc, MemoryError):
        return True
    if any(cls.__name__ == "OutOfMemoryError" for cls in type(exc).__mro__):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


@dataclass
class LargestAllocation:
    largest_ok: int
    smallest_failed: int | None
    tries: list[dict[str, Any]] = field(default_factory=list)
    stopped_early: bool = False

    @property
    def oom_count(self) -> int:
        return sum(1 for t in self.tries if not t["ok"])


def _round_down(value: int, step: int) -> int:
    return (value // step) * step


def largest_allocation(allocate: Callable[[int], Any], release: Callable[[Any], None], *, upper: int,
                       granularity: int = 64 * MiB, max_tries: int = 14,
                       is_oom: Callable[[BaseException], bool] = looks_like_oom,
                       after_try: Callable[[], None] | None = None,
                       time_left: Callable[[], float] | None = None) -> LargestAllocation:
    """Bounded binary search for the largest single allocation that succeeds now.

    ``allocate(nbytes)`` returns a handle or raises; ``release(handle)`` frees it at once.
    Only errors for which ``is_oom`` is true count as "too big"; any other error is
    re-raised, after the handle (if any) was released. ``after_try`` runs after every try,
    success or failure (e.g. ``torch.cuda.empty_cache``), so nothing stays cached. At most
    ``max_tries`` allocations; the answer is exact to ``granularity`` bytes.
    """
    if upper < granularity or granularity <= 0:
        raise ValueError("upper must be at least one granularity step")
    result = LargestAllocation(largest_ok=0, smallest_failed=None)

    def attempt(size: int) -> bool:
        handle = None
        ok = False
        started = time.perf_counter()
        try:
            handle = allocate(size)
            ok = True
        except BaseException as exc:
            if not is_oom(exc):
                raise
        finally:
            try:
                if handle is not None:
                    release(handle)
                    handle = None
            finally:
                if after_try is not None:
                    after_try()
        result.tries.append({"bytes": size, "ok": ok, "seconds": round(time.perf_counter() - started, 6)})
        return ok

    low, high = 0, None  # largest success, smallest failure
    size = _round_down(upper, granularity)
    while len(result.tries) < max_tries:
        if time_left is not None and time_left() <= 0:
            result.stopped_early = True
            break
        if attempt(size):
            low = size
        else:
            high = size
        if high is None:
            break  # the upper bound itself fits
        if high - low <= granularity:
            break
        size = _round_down(low + (high - low) // 2, granularity)
        if size <= low:
            break
    else:
        result.stopped_early = high is not None and high - low > granularity
    result.largest_ok = low
    result.smallest_failed = high
    return result


# --------------------------------------------------------------------------- correctness
# Unit roundoff (half the spacing of numbers near 1) of each format.
UNIT_ROUNDOFF: dict[str, float] = {
    "float64": 2.0 ** -53,
    "float32": 2.0 ** -24,
    "tf32": 2.0 ** -11,      # 10 explicit mantissa bits
    "float16": 2.0 ** -11,
    "bfloat16": 2.0 ** -8,
}

#: For each checked mode: (input format, accumulation format, output format).
MATMUL_FORMATS: dict[str, tuple[str, str, str]] = {
    "fp32": ("float32", "float32", "float32"),
    "tf32": ("tf32", "float32", "float32"),
    "fp16": ("float16", "float32", "float16"),
    "bf16": ("bfloat16", "float32", "bfloat16"),
}

#: Norm-wise relative error above which a result is wrong (||C - C_ref||_F / ||C_ref||_F).
#: Correct hardware lands near sqrt(k)*u_acc + u_in + u_out, orders of magnitude below these.
NORMWISE_LIMIT: dict[str, float] = {
    "fp32": 1e-5,
    "tf32": 5e-3,
    "fp16": 5e-3,
    "bf16": 3e-2,
}


def componentwise_tolerance(mode: str, k: int, safety: float = 2.0) -> float:
    """Bound on |C - C_ref| / (|A| @ |B|) for a length-``k`` dot product in ``mode``.

    Rounding-error analysis (Higham, *Accuracy and Stability of Numerical Algorithms*,
    section 3.1) bounds a computed dot product by gamma_k * (|a| . |b|) with
    gamma_k ~ k*u. We allow 2u per step for truncating accumulators, the rounding of the
    inputs to ``tf32`` inside the tensor cores (2u_in: both factors), and the final
    rounding of the output; ``safety`` doubles it. Correct hardware cannot exceed it;
    a flipped high bit or a wrong kernel does by orders of magnitude.
    """
    fmt_in, fmt_acc, fmt_out = MATMUL_FORMATS[mode]
    u_acc = UNIT_ROUNDOFF[fmt_acc]
    u_in = UNIT_ROUNDOFF[fmt_in] if fmt_in == "tf32" else 0.0  # fp16/bf16 inputs are rounded by us
    u_out = UNIT_ROUNDOFF[fmt_out]
    return safety * (2 * k * u_acc + 2 * u_in + u_out)


@dataclass
class ErrorCheck:
    mode: str
    normwise: float | None
    componentwise: float | None
    normwise_limit: float
    componentwise_limit: float
    nonfinite: int

    @property
    def ok(self) -> bool:
        return (self.nonfinite == 0 and self.normwise is not None and self.componentwise is not None
                and math.isfinite(self.normwise) and math.isfinite(self.componentwise)
                and self.normwise <= self.normwise_limit and self.componentwise <= self.componentwise_limit)

    def to_dict(self) -> dict[str, Any]:
        def clean(v: float | None) -> float | None:
            return v if v is not None and math.isfinite(v) else None
        return {"mode": self.mode, "normwise": clean(self.normwise), "componentwise": clean(self.componentwise),
                "normwise_limit": self.normwise_limit, "componentwise_limit": self.componentwise_limit,
                "nonfinite": self.nonfinite, "ok": self.ok}


#: Element-wise fp32 a*b + c against float64: at most two roundings, each <= u relative to
#: |a*b| + |c|; twice that is the limit (norm-wise and per element).
ELEMENTWISE_NORMWISE_LIMIT = 1e-6
ELEMENTWISE_COMPONENTWISE_LIMIT = 4 * UNIT_ROUNDOFF["float32"]


def judge_elementwise(*, normwise: float, componentwise: float, nonfinite: int) -> ErrorCheck:
    return ErrorCheck("fp32_elementwise", float(normwise), float(componentwise), ELEMENTWISE_NORMWISE_LIMIT,
                      ELEMENTWISE_COMPONENTWISE_LIMIT, int(nonfinite))


def judge_errors(mode: str, k: int, *, normwise: float, componentwise: float, nonfinite: int) -> ErrorCheck:
    """Compare measured errors with the limits for ``mode``; NaN/Inf never pass."""
    return ErrorCheck(mode, float(normwise), float(componentwise), NORMWISE_LIMIT[mode],
                      componentwise_tolerance(mode, k), int(nonfinite))

