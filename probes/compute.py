"""compute: matrix-multiply TFLOP/s (fp32, tf32, fp16, bf16) against the datasheet, and a CPU figure.

Square matmuls large enough to fill every SM (n = 8192 where memory allows) are timed
with CUDA events after a warm-up, median of repeats, with inputs rotated through three
random pairs so that no cache flatters the figure. Each figure is compared with the
device's dense datasheet peak (table and sources in :mod:`gpudoctor.probes._datasheet`,
docs/measurements.md). A CPU fp32 figure is always measured, GPU or not, so the
GPU/CPU ratio the tutorials argue about is a number for this machine.

Thresholds (ours): a tensor-core mode below 50 % of its datasheet peak is a warning
(healthy datacenter GPUs reach 70-90 %; consumer cards boost less reliably).
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from gpudoctor.core import findings
from gpudoctor.core._num import is_number
from gpudoctor.backends.nvml import GPM_MIN_INTERVAL_S, GPM_WARMING, throttle_reason_names
from gpudoctor.core.model import Finding, ProbeResult, Status

from . import Probe, ProbeContext, _gpu, _wording
from ._datasheet import GpuSpec, lookup_gpu_spec
from ._precision import Fp32Precision, Tf32Environment, matmul_tf32_on, tf32_environment, uses_fp32_precision_api
from ._timing import Clock, CpuClock, Timing, inner_count, matmul_tflops, percent_of, time_op

if TYPE_CHECKING:  # torch is an optional extra: imported for its types only
    import torch as _torch

#: A reader of a device's GPM readings (SM and tensor activity since its previous call)
GpmReader = Callable[[], dict[str, Any]]

MODES = ("fp32", "tf32", "fp16", "bf16")
MAX_N = 8192  # 8192^2 outputs: thousands of tiles, every SM of the largest GPUs busy
SLOW_PCT = 50.0


def matmul_timing(torch: ModuleType, device: _torch.device | str, dtype: _torch.dtype, n: int,
                  clock: Clock[Any], *, budget_s: float, slots: int = 3, repeats: int = 10,
                  generator: _torch.Generator | None = None) -> Timing:
    """Median seconds of one n x n x n matmul in ``dtype`` on ``device`` (CPU works too)."""
    pairs = []
    for _ in range(slots):
        # made where they are used: random normal values, never zeros
        a = torch.randn(n, n, generator=generator, device=device, dtype=dtype)
        b = torch.randn(n, n, generator=generator, device=device, dtype=dtype)
        pairs.append((a, b))
    out = torch.empty(n, n, device=device, dtype=dtype)

    def op(i: int) -> None:
        a, b = pairs[i % slots]
        torch.matmul(a, b, out=out)

    first = clock.start()
    op(0)
    once = clock.stop(first)
    inner = inner_count(once, window_s=0.005, cap=16)
    warmup = 1 if once * inner > budget_s / 4 else 2
    return time_op(op, clock, warmup=warmup, repeats=repeats, inner=inner, budget_s=budget_s)


def cpu_matmul_tflops(torch: ModuleType, budget_s: float = 1.5) -> dict[str, Any]:
    """fp32 matmul on the CPU (all of torch's threads), the size grown until one takes ~20 ms."""
    clock = CpuClock()
    gen = torch.Generator().manual_seed(1234)
    n = 512
    while n < 4096:
        a = torch.randn(n, n, generator=gen)
        torch.matmul(a, a)  # the first call pays for thread-pool start-up
        quickest = math.inf
        for _ in range(3):  # the quickest of three: a busy machine must not stop the growth early
            start = clock.start()
            torch.matmul(a, a)
            quickest = min(quickest, clock.stop(start))
        if quickest > 0.02:
            break
        n *= 2
    timing = matmul_timing(torch, "cpu", torch.float32, n, clock, budget_s=budget_s, repeats=7, generator=gen)
    return {"n": n, "threads": torch.get_num_threads(), "tflops": matmul_tflops(n, n, n, timing.seconds),
            **timing.to_dict()}


def spin_up(torch: ModuleType, device: _torch.device, seconds: float = 0.3) -> int:
    """Keep the GPU busy for ``seconds`` so that its clocks leave their idle state first.

    Idle GPUs run at low clocks and take a moment to boost; without this, the first mode
    measured would pay for the ramp. Returns how many matmuls it ran.
    """
    import time

    n = min(4096, MAX_N)
    a = torch.randn(n, n, device=device, dtype=torch.float16)
    out = torch.empty_like(a)
    runs = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(8):
            torch.matmul(a, a, out=out)
        runs += 8
        torch.cuda.synchronize(device)
    return runs


def _mode_setup(torch: ModuleType, mode: str) -> tuple[_torch.dtype, bool]:
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[mode]
    return dtype, mode == "tf32"


def bf16_supported(torch: ModuleType, dev: _gpu.Device) -> bool:
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # older torch
        return dev.compute_capability >= (8, 0)


def _probe_device(ctx: ProbeContext, r: ProbeResult, torch: ModuleType, dev: _gpu.Device, budget_s: float,
                  cpu_tflops: float | None) -> None:
    d = dev.index
    device = _gpu.torch_device(torch, dev)
    torch.cuda.set_device(device)
    spec = lookup_gpu_spec(dev.name)
    tf32_env = tf32_environment()
    r.details.setdefault("spin_up_matmuls", {})[str(d)] = spin_up(torch, device, min(0.3, budget_s / 20))
    load = _gpu.LoadSampler(ctx, dev).start()
    try:
        rows = _time_modes(torch, dev, device, spec, tf32_env, budget_s, gpm=_gpm_reader(ctx, dev))
    finally:
        load.stop()
    after = _gpu.nvml_sample(ctx, dev)
    # Throttle reasons seen while the matmuls ran; after them the GPU is idle again.
    reasons = load.reasons if load.samples else after.get("throttle_reasons")
    r.details.setdefault("matmul", {})[str(d)] = rows
    r.details.setdefault("datasheet", {})[str(d)] = (
        {"model": spec.model, "fp32": spec.fp32, "tf32": spec.tf32, "fp16": spec.fp16, "bf16": spec.bf16,
         "fp8": spec.fp8,
         "source": spec.source} if spec else None)
    r.details.setdefault("after_load", {})[str(d)] = {
        "throttle_reasons": throttle_reason_names(reasons) if isinstance(reasons, int) else None,
        "throttle_reasons_source": "during the matmuls" if load.samples else "after the matmuls",
        "samples_during_load": load.samples, "min_sm_clock_during_load_mhz": load.min_sm_clock,
        "max_power_during_load_w": load.max_power_w, "max_power_during_load_source": load.max_power_source,
        "clock_sm_mhz": after.get("clock_sm_mhz") if isinstance(after.get("clock_sm_mhz"), int) else None,
        "power_w": after.get("power_w") if isinstance(after.get("power_w"), (int, float)) else None}

    for mode in MODES:
        row = rows[mode]
        if "skipped" in row:
            r.measure(f"{mode}_matmul", None, "TFLOP/s", device=d, note=row["skipped"])
            continue
        note = f"n={row['n']}"
        if row["pct_of_peak"] is not None and spec is not None:  # a percentage needs the datasheet's peak
            note += f"; {row['pct_of_peak']:.0f} % of {spec.model} datasheet"
        r.measure(f"{mode}_matmul", row["tflops"], "TFLOP/s", device=d, reference=row["peak_tflops"], note=note)
    _tensor_activity(r, dev, rows.get("bf16") or {})
    _cpu_ratio_finding(r, dev, rows, cpu_tflops)
    _speed_finding(r, dev, rows, spec)
    if tf32_env.note:
        r.findings.append(findings.finding("tf32_override:compute", device=d, note=tf32_env.note))
    _throttle_finding(r, dev, reasons, during=bool(load.samples))
    _tf32_available_finding(r, torch, dev, rows)


GPM_KEYS = ("sm_active_pct", "tensor_active_pct", "tensor_hmma_active_pct")


def _gpm_reader(ctx: ProbeContext, dev: _gpu.Device) -> GpmReader | None:
    """GPM readings of the device (SM and tensor activity since the previous read), or None where
    NVML cannot match the device; each value a number or NA with its reason."""
    index = dev.nvml_index
    if index is None or not hasattr(ctx.gpu, "gpm"):
        return None
    gpm = ctx.gpu.gpm

    def read() -> dict[str, Any]:
        try:
            found = gpm(index)
        except Exception:  # a backend that cannot read GPM costs this figure, not the probe
            return {}
        return {k: found.get(k) for k in GPM_KEYS}
    return read


#: How long bf16 GEMMs run between the two GPM samples of the tensor-core proof: several times GPM's
#: minimum interval by construction, whatever one GEMM takes (an H100's timed bf16 run is 35-65 ms in
#: all, under that interval, so reads around it gave the previous window's reading or "Warming").
TENSOR_WINDOW_S = max(0.5, 5 * GPM_MIN_INTERVAL_S)
#: GEMMs run this long before the opening sample: a read that returns the last reading (a sample was
#: taken less than the minimum interval before) then leaves a window that still holds bf16 work only.
TENSOR_LEAD_S = 1.5 * GPM_MIN_INTERVAL_S


# Ours: each group of GEMMs between two waits for the GPU lasts at least this long at the GPU's
# measured rate, so the wait's gap (the GPU drained, the next launch) is under ~1 % of the window:
# groups of 4 at n = 1024-2048 were ~16 us of work per wait and left the SMs idle (a false
# tensor_cores_idle where free memory forced n down).
TENSOR_GROUP_S = 0.005
TENSOR_GROUP_MAX = 20_000


def gemms_per_wait(n: int, gemm_s: float | None) -> int:
    """How many n x n GEMMs make a group of >= TENSOR_GROUP_S, at ``gemm_s`` seconds each (the timed
    matmul's median on this GPU); without it, at a rate above any GPU's (2 PFLOP/s, dense bf16)."""
    each = gemm_s if gemm_s and gemm_s > 0 else 2.0 * n ** 3 / 2e15
    return max(4, min(TENSOR_GROUP_MAX, math.ceil(TENSOR_GROUP_S / each)))


def tensor_window(torch: ModuleType, device: _torch.device, n: int, generator: _torch.Generator | None,
                  gpm: GpmReader, seconds: float = TENSOR_WINDOW_S, gemm_s: float | None = None) -> dict[str, Any]:
    """GPM readings over ``seconds`` of back-to-back bf16 n x n GEMMs on ``device``: the two GPM samples
    bracket that work and nothing else (a GEMM is in flight at each sample, the lead-in covers a read
    that returns the previous sample). The GEMMs are queued in groups of >= TENSOR_GROUP_S of work at
    ``gemm_s`` seconds each (:func:`gemms_per_wait`) between waits, so the SMs do not idle at the
    waits. Adds ``gpm_window_s`` and ``gpm_window_matmuls``."""
    import time

    from gpudoctor.backends.na import is_na

    first = gpm()
    if first and all(is_na(v) and v.reason != GPM_WARMING for v in first.values()):
        return first  # no GPM here (before Hopper, an old driver): nothing to run the window for
    a = torch.randn(n, n, generator=generator, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, generator=generator, device=device, dtype=torch.bfloat16)
    out = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    runs, group = 0, gemms_per_wait(n, gemm_s)

    def run_for(span: float) -> None:
        nonlocal runs
        end = time.monotonic() + span
        while True:
            for _ in range(group):  # queued ahead of the GPU; the host stops launching at the end
                torch.matmul(a, b, out=out)
                runs += 1
                if time.monotonic() >= end:
                    break
            torch.cuda.synchronize(device)
            if time.monotonic() >= end:
                return

    run_for(TENSOR_LEAD_S)
    torch.matmul(a, b, out=out)  # in flight while NVML takes the opening sample
    gpm()
    opened, counted = time.monotonic(), runs
    run_for(seconds)
    torch.matmul(a, b, out=out)  # in flight at the closing sample
    found = dict(gpm())
    closed = time.monotonic()
    torch.cuda.synchronize(device)
    found.update(gpm_window_s=round(closed - opened, 3), gpm_window_matmuls=runs - counted + 2)
    return found


def _gpm_row(readings: dict[str, Any]) -> dict[str, Any]:
    """GPM over one timed matmul for its row: numbers, or the reason they are missing."""
    from gpudoctor.backends.na import is_na

    out: dict[str, Any] = {k: readings[k] for k in ("gpm_window_s", "gpm_window_matmuls") if k in readings}
    for key in GPM_KEYS:
        value = readings.get(key)
        if is_na(value):
            out.setdefault("gpm_note", value.reason)
        elif is_number(value):
            out[key] = round(float(value), 1)
    return out


def _time_modes(torch: ModuleType, dev: _gpu.Device, device: _torch.device, spec: GpuSpec | None,
                tf32_env: Tf32Environment, budget_s: float, gpm: GpmReader | None = None) -> dict[str, Any]:
    """One timed matmul per mode, as large as half the free memory allows (n <= MAX_N). With
    ``gpm`` (a reader of the device's GPM readings), the bf16 row also carries the SM and tensor
    activity NVML measured over :data:`TENSOR_WINDOW_S` of bf16 GEMMs of that size
    (:func:`tensor_window`): proof that the tensor cores did the work."""
    clock = _gpu.event_clock(torch, device)
    gen = torch.Generator(device=device).manual_seed(0xC0DE + dev.index)
    rows: dict[str, Any] = {}
    for mode in MODES:
        if mode == "bf16" and not bf16_supported(torch, dev):
            rows[mode] = {"skipped": f"no bf16 tensor cores on sm_{dev.compute_capability[0]}{dev.compute_capability[1]}"}
            continue
        dtype, tf32 = _mode_setup(torch, mode)
        with Fp32Precision(torch, tf32):
            free, _ = torch.cuda.mem_get_info(device)
            size = torch.tensor([], dtype=dtype).element_size()
            n = MAX_N
            while n > 1024 and 7 * n * n * size > free // 2:  # 3 input pairs + output, half the free memory
                n //= 2
            timing = matmul_timing(torch, device, dtype, n, clock, budget_s=budget_s / len(MODES), generator=gen)
            activity = (_gpm_row(tensor_window(torch, device, n, gen, gpm, gemm_s=timing.seconds))
                        if gpm is not None and mode == "bf16" else {})
            tflops = matmul_tflops(n, n, n, timing.seconds)
            peak = spec.peak_tflops(mode) if spec else None
            if (mode == "tf32" and tf32_env.tf32_disabled) or (mode == "fp32" and tf32_env.fp32_runs_as_tf32):
                peak = None  # cuBLAS ran another format than the row's name: no fair datasheet figure
            rows[mode] = {"n": n, "tflops": round(tflops, 3), "peak_tflops": peak,
                          "pct_of_peak": None if peak is None else round(percent_of(tflops, peak) or 0, 1),
                          **timing.to_dict(), **activity}
        torch.cuda.empty_cache()
    return rows


# A bf16 GEMM that keeps the tensor cores busy reads well above this; one that ran on the plain
# CUDA cores (no tensor-core kernel chosen) reads near 0 (docs/utilisation.md).
TENSOR_PROOF_PCT = 20.0


def _tensor_activity(r: ProbeResult, dev: _gpu.Device, bf16: dict[str, Any]) -> None:
    """The tensor-core activity NVML measured while the bf16 matmul ran, and what it proves."""
    d = dev.index
    if "skipped" in bf16 or "tflops" not in bf16:
        return
    active = bf16.get("tensor_active_pct")
    r.measure("bf16_tensor_active", active, "%", device=d, note="" if active is not None else
              f"GPM: {bf16.get('gpm_note') or 'not read'}")
    if active is None:
        return
    if active >= TENSOR_PROOF_PCT:
        sm = bf16.get("sm_active_pct")  # absent when GPM answered for tensors but not for SMs
        sm_text = _wording.SM_ACTIVITY.format(sm=sm) if isinstance(sm, (int, float)) else ""
        r.findings.append(findings.finding("tensor_cores_used", device=d, gpu=dev.label, active=active, sm=sm_text))
    else:
        r.findings.append(findings.finding("tensor_cores_idle", device=d, gpu=dev.label, active=active))


def _cpu_ratio_finding(r: ProbeResult, dev: _gpu.Device, rows: dict[str, Any], cpu_tflops: float | None) -> None:
    d = dev.index
    if cpu_tflops:
        fp32 = rows["fp32"].get("tflops")
        if fp32:
            r.measure("gpu_cpu_fp32_ratio", round(fp32 / cpu_tflops, 1), "x", device=d)
        best = max((row["tflops"] for row in rows.values() if "tflops" in row), default=None)
        if best and fp32:
            r.findings.append(findings.finding("gpu_cpu_ratio", device=d, gpu=dev.label, fp32=fp32 / cpu_tflops,
                                               best=best / cpu_tflops))


def _speed_finding(r: ProbeResult, dev: _gpu.Device, rows: dict[str, Any], spec: GpuSpec | None) -> None:
    d = dev.index
    slow = [m for m in ("tf32", "fp16", "bf16")
            if rows[m].get("pct_of_peak") is not None and rows[m]["pct_of_peak"] < SLOW_PCT]
    if spec is None:  # no datasheet: no row has a percentage of its peak, none is slow
        r.findings.append(findings.finding("no_datasheet:compute", device=d, name=dev.name))
    elif slow:
        worst = min(slow, key=lambda m: rows[m]["pct_of_peak"])
        r.findings.append(findings.finding("matmul_slow", device=d, modes=", ".join(slow), gpu=dev.label,
                                           pct=rows[worst]["pct_of_peak"], model=spec.model, worst=worst,
                                           tflops=rows[worst]["tflops"], peak=rows[worst]["peak_tflops"]))
    else:
        shares = ", ".join(_wording.MATMUL_SHARE.format(mode=m, pct=rows[m]["pct_of_peak"])
                           for m in ("tf32", "fp16", "bf16") if rows[m].get("pct_of_peak") is not None)
        r.findings.append(findings.finding("matmul_ok", device=d, gpu=dev.label, shares=shares, model=spec.model))


def _throttle_finding(r: ProbeResult, dev: _gpu.Device, reasons: object, during: bool) -> None:
    d = dev.index
    held = [name for name in throttle_reason_names(reasons) if name in findings.HELD_DOWN] \
        if isinstance(reasons, int) else []
    if held:
        r.findings.append(findings.finding("throttled_under_load", label=dev.label, device=d,
                                           when="during" if during else "right after", reasons=", ".join(held)))


def _tf32_available_finding(r: ProbeResult, torch: ModuleType, dev: _gpu.Device, rows: dict[str, Any]) -> None:
    d = dev.index
    fp32, tf32 = rows["fp32"].get("tflops"), rows["tf32"].get("tflops")
    if fp32 and tf32 and tf32 >= 1.5 * fp32 and not matmul_tf32_on(torch):
        how = ('torch.backends.cuda.matmul.fp32_precision = "tf32"' if uses_fp32_precision_api(torch)
               else 'torch.set_float32_matmul_precision("high")')
        r.findings.append(findings.finding("tf32_available", device=d, speedup=tf32 / fp32, gpu=dev.label, how=how))


def run(ctx: ProbeContext) -> ProbeResult:
    early = _gpu.precheck(ctx)
    if early is not None:
        return _gpu.skip_result(early, "compute")
    torch = _gpu.import_torch_or_reason()
    if isinstance(torch, _gpu.NoDevice):
        return _gpu.skip_result(torch, "compute")
    r = ProbeResult("compute")
    cpu = cpu_matmul_tflops(torch, budget_s=min(1.5, max(0.3, ctx.time_left() / 10)))
    r.details["cpu"] = cpu
    cpu_tflops = cpu["tflops"] if math.isfinite(cpu["tflops"]) else None
    r.measure("cpu_fp32_matmul", round(cpu["tflops"], 4), "TFLOP/s",
              note=f"n={cpu['n']}, {cpu['threads']} threads")
    devices = _gpu.cuda_devices(ctx, torch)
    if isinstance(devices, _gpu.NoDevice):
        r.findings.append(Finding(Status.SKIP, devices.code, devices.summary + _wording.CPU_MEASURED, devices.why,
                                  devices.fix))
        return r.settle(f"no GPU measured; CPU fp32 matmul {cpu['tflops']:.3g} TFLOP/s")
    for dev in devices:
        _probe_device(ctx, r, torch, dev, _gpu.work_budget(ctx, 8.0, len(devices), reserve_s=4.0), cpu_tflops)
    parts = [f"cuda:{m.device} {m.name.replace('_matmul', '')} {m.value:.0f} TFLOP/s"
             for m in r.measurements if m.name == "bf16_matmul" and m.value is not None]
    parts.append(f"CPU fp32 {cpu['tflops']:.3g} TFLOP/s")
    return r.settle(", ".join(parts))


PROBE = Probe.define(__name__, run, "Matrix-multiply TFLOP/s (fp32, tf32, fp16, bf16) against the datasheet, and the CPU",
                     level="full", uses_torch=True, timeout_s=30, order=60)
