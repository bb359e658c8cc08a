"""memory: CUDA context size, the caching allocator in numbers, the largest allocation, other processes.

What users see in nvidia-smi rarely matches ``torch.cuda.memory_allocated()``. This probe
shows why, on the user's own device and torch build:

1. The CUDA context: NVML "used" before and after torch first touches the device (and
   after the first matmul loads cuBLAS). Every process pays it, DataLoader workers that
   touch CUDA included.
2. The caching allocator walk: tensors are allocated and freed, and at each step torch's
   allocated and reserved bytes are set beside NVML's used bytes; a small pattern shows
   fragmentation; ``empty_cache()`` shows what goes back to the driver (for other
   processes, not for the caller).
3. The largest single allocation that succeeds now (bounded search, every OOM caught,
   everything freed), and memory held by other processes (NVML process list).

Thresholds (ours, not a vendor's): other processes holding >= 10 % of the device, a
largest allocation below 50 % of total memory, or less than 5 % free, are warnings.
"""

from __future__ import annotations

import json
import os
import sys
import time
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from gpudoctor.core import findings
from gpudoctor.backends.na import is_na
from gpudoctor.core.model import ProbeResult

from . import Probe, ProbeContext, _gpu, _wording
from ._measuring import measure_each_device
from ._allocator import LargestAllocation, expandable_segments_enabled, explain_walk, format_bytes, largest_allocation
from ._timing import MiB

if TYPE_CHECKING:  # torch is an optional extra: imported for its types only
    import torch as _torch

#: NVML's used bytes of the device being measured, or None where NVML cannot tell
ReadUsed = Callable[[], "int | None"]

OTHERS_WARN_SHARE = 0.10
LARGEST_WARN_SHARE = 0.50
NEARLY_FULL_SHARE = 0.05

def measure_context(torch: ModuleType, device: _torch.device, read_used: ReadUsed) -> dict[str, Any]:
    """NVML used before/after the primary context and after the first matmul (cuBLAS).

    Only meaningful when the device has no context yet in this process. Torch's own
    reserved bytes are subtracted, so what remains is the driver's and libraries' share.
    """
    before = read_used()
    start = time.perf_counter()
    probe = torch.ones(1, device=device)
    torch.cuda.synchronize(device)
    init_s = time.perf_counter() - start
    after_init = read_used()
    reserved_init = torch.cuda.memory_reserved(device)
    a = torch.randn(256, 256, device=device)
    (a @ a).sum().item()
    after_matmul = read_used()
    reserved_matmul = torch.cuda.memory_reserved(device)
    del probe, a
    out: dict[str, Any] = {"init_s": round(init_s, 4), "nvml_before": before, "nvml_after_init": after_init,
                           "nvml_after_matmul": after_matmul, "torch_reserved_init": reserved_init,
                           "torch_reserved_matmul": reserved_matmul}
    if before is not None and after_init is not None:
        out["context_bytes"] = max(0, after_init - before - reserved_init)
    if after_init is not None and after_matmul is not None:
        out["cublas_bytes"] = max(0, (after_matmul - after_init) - (reserved_matmul - reserved_init))
    return out


def _context_in_fresh_process(device: _gpu.Device, timeout_s: float) -> dict[str, Any]:
    code = (
        "import json, sys\n"
        "from gpudoctor.backends.nvml import NvmlBackend\n"
        "from gpudoctor.probes.memory import measure_context\n"
        "gpu = NvmlBackend()\n"
        "n = int(sys.argv[2])\n"
        "def used():\n"
        "    v = gpu.memory(n).get('memory_used_bytes')\n"
        "    return v if isinstance(v, int) else None\n"
        "import torch\n"
        "print(json.dumps(measure_context(torch, torch.device('cuda', int(sys.argv[1])), used)))\n"
    )
    # The same import path as this process, so the child finds this gpudoctor whatever the
    # working directory or install method.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    from gpudoctor.system import _proc

    try:  # its own group, ended with its tree; its output bounded
        returncode, out, err = _proc.run_bounded([sys.executable, "-c", code, str(device.index), str(device.nvml_index)],
                                                 timeout_s=timeout_s, max_output=1 << 20, env=env)
    except _proc.ChildTimeout:
        return {"error": f"fresh process did not finish in {timeout_s:.0f} s"}
    except (_proc.ChildOutputTooLarge, OSError) as exc:
        return {"error": f"fresh process failed: {exc}"}
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    if returncode != 0:
        tail = (stderr.strip().splitlines() or ["no output"])[-1][:300]
        return {"error": f"fresh process failed: {tail}"}
    try:
        return json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "fresh process printed no result"}


def allocator_walk(torch: ModuleType, device: _torch.device, read_used: ReadUsed,
                   big_block: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Allocate and free tensors; record allocated / reserved / NVML used after each step.

    Works on any CUDA device; ``big_block`` is scaled to the free memory by the caller.
    The small 3 MiB tensors share one 20 MiB segment of the allocator's large pool; freeing
    every other one leaves holes that an 8 MiB tensor cannot use (fragmentation).
    Returns the steps and the allocator statistics right after the fragmenting request.
    """
    steps: list[dict[str, Any]] = []

    def record(label: str) -> None:
        torch.cuda.synchronize(device)
        steps.append({"label": label, "allocated": int(torch.cuda.memory_allocated(device)),
                      "reserved": int(torch.cuda.memory_reserved(device)), "nvml_used": read_used()})

    torch.cuda.empty_cache()
    record("baseline")
    small = [torch.empty(3 * MiB, dtype=torch.uint8, device=device) for _ in range(6)]
    record("small_alloc")
    del small[1::2]
    record("small_free_alternate")
    fragment = torch.empty(8 * MiB, dtype=torch.uint8, device=device)
    record("fragment_alloc")
    stats = torch.cuda.memory_stats(device)
    fragment_stats = {k: int(stats.get(k, 0)) for k in (
        "inactive_split_bytes.all.current", "reserved_bytes.all.current", "allocated_bytes.all.current",
        "num_alloc_retries", "num_ooms", "segment.all.current")}
    big = [torch.empty(big_block, dtype=torch.uint8, device=device) for _ in range(4)]
    for t in big:
        t.fill_(1)  # touch the pages: NVML counts memory that was really handed out
    record("big_alloc")
    del big[::2]
    record("big_free_half")
    del big, small, fragment
    record("freed_all")
    torch.cuda.empty_cache()
    record("empty_cache")
    return steps, fragment_stats


def search_largest(torch: ModuleType, device: _torch.device,
                   time_left: Callable[[], float]) -> tuple[LargestAllocation, int, int]:
    """Largest single allocation now; returns (search, leftover allocated bytes, free before)."""
    torch.cuda.empty_cache()
    allocated_before = torch.cuda.memory_allocated(device)
    free, _total = torch.cuda.mem_get_info(device)
    granularity = max(2 * MiB, (free // 256) // (2 * MiB) * (2 * MiB))
    search = largest_allocation(
        lambda n: torch.empty(int(n), dtype=torch.uint8, device=device),
        lambda handle: None,  # dropping the reference frees it; empty_cache hands it back
        upper=max(free, granularity), granularity=granularity,
        after_try=torch.cuda.empty_cache, time_left=time_left)
    leftover = torch.cuda.memory_allocated(device) - allocated_before
    return search, leftover, free


def other_processes(ctx: ProbeContext, device: _gpu.Device) -> tuple[list[dict[str, Any]] | None, str]:
    if device.nvml_index is None:
        return None, "NVML cannot say which device this is"
    procs = ctx.gpu.processes(device.nvml_index)
    if not isinstance(procs, list):
        return None, f"NVML process list unavailable ({getattr(procs, 'reason', procs)})"
    me = {_gpu.own_pid(), os.getppid()}
    return [dict(p) for p in procs if p.get("pid") not in me], ""


def _probe_device(ctx: ProbeContext, r: ProbeResult, torch: ModuleType, dev: _gpu.Device, budget_s: float) -> None:
    device = _gpu.torch_device(torch, dev)
    _context_size(ctx, r, torch, dev, device)
    total = _allocator_walk(ctx, r, torch, dev, device)
    _largest_allocation(r, torch, dev, device, budget_s, total)
    _held_by_others(ctx, r, dev, total)
    _driver_reserved(ctx, r, dev, total)


def _context_size(ctx: ProbeContext, r: ProbeResult, torch: ModuleType, dev: _gpu.Device,
                  device: _torch.device) -> None:
    """1. The CUDA context's size: before this process touches the device, else in a fresh process."""
    d = dev.index
    read_used = partial(_gpu.nvml_used, ctx, dev)

    # Ask before set_device: since torch 2.8 set_device always calls cudaSetDevice, which
    # creates the primary context at once (CUDA 12+), so asking after it always says "yes".
    fresh = not _gpu.has_context(torch, d)
    if fresh:
        context = measure_context(torch, device, read_used)
        context["measured_in"] = "this probe process"
    elif dev.nvml_index is not None:
        context = _context_in_fresh_process(dev, timeout_s=max(5.0, min(20.0, ctx.time_left() - 5)))
        context["measured_in"] = "a fresh python process"
    else:
        context = {"error": "NVML cannot say which device this is"}
    torch.cuda.set_device(device)  # empty_cache() and friends act on the current device
    r.details.setdefault("context", {})[str(d)] = context
    if "context_bytes" in context:
        r.measure("cuda_context", context["context_bytes"], "B", device=d,
                  note="NVML used after the first tensor, minus torch's reserved bytes")
        if "cublas_bytes" in context:
            r.measure("cublas_first_matmul", context["cublas_bytes"], "B", device=d)
        cublas = (_wording.CUBLAS_ADDS.format(cublas=format_bytes(context["cublas_bytes"]))
                  if "cublas_bytes" in context else "")
        r.findings.append(findings.finding("cuda_context_size", device=d, context=format_bytes(context["context_bytes"]),
                                           gpu=dev.label, cublas=cublas))
    else:
        r.measure("cuda_context", None, "B", device=d, note=context.get("error", "NVML used not readable"))


def _allocator_walk(ctx: ProbeContext, r: ProbeResult, torch: ModuleType, dev: _gpu.Device,
                    device: _torch.device) -> int:
    """2. The caching allocator walk (and whether the device is nearly full); returns total memory."""
    d = dev.index
    read_used = partial(_gpu.nvml_used, ctx, dev)

    free, total = torch.cuda.mem_get_info(device)
    big_block = max(4 * MiB, min(256 * MiB, (free // 16) // (2 * MiB) * (2 * MiB)))
    if free < NEARLY_FULL_SHARE * total:
        r.findings.append(findings.finding("memory_nearly_full", device=d, free=format_bytes(free),
                                           total=format_bytes(total), gpu=dev.label))
    if free < 4 * big_block + 64 * MiB:
        r.details.setdefault("allocator_walk", {})[str(d)] = {"skipped": "too little free memory"}
    else:
        steps, fragment_stats = allocator_walk(torch, device, read_used, big_block)
        explained = explain_walk(steps)
        r.details.setdefault("allocator_walk", {})[str(d)] = {
            "big_block_bytes": big_block, "steps": steps, "fragment_stats": fragment_stats,
            "facts": explained["facts"], "sentences": explained["sentences"]}
        facts = explained["facts"]
        if "cached_after_free" in facts:
            r.measure("cached_after_free", facts["cached_after_free"], "B", device=d,
                      note="reserved minus allocated once every tensor was freed")
        if "empty_cache_returned" in facts:
            r.measure("empty_cache_returned", facts["empty_cache_returned"], "B", device=d)
        if "empty_cache_nvml_drop" in facts:
            r.measure("empty_cache_nvml_drop", facts["empty_cache_nvml_drop"], "B", device=d)
        r.measure("fragment_demo_inactive_split", fragment_stats["inactive_split_bytes.all.current"], "B",
                  device=d, note="free pieces of partly used segments in the walk's fragmenting step")
        env = {k: os.environ.get(k) for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
        expandable = expandable_segments_enabled(env)
        r.findings.append(findings.finding("allocator_explained:expandable" if expandable else "allocator_explained",
                                           device=d, said=" ".join(explained["sentences"]) or _wording.ALLOCATOR_WALK_RAN))
    return total


def _largest_allocation(r: ProbeResult, torch: ModuleType, dev: _gpu.Device, device: _torch.device,
                        budget_s: float, total: int) -> None:
    """3. The largest single allocation that succeeds now."""
    d = dev.index
    search_deadline = time.monotonic() + max(1.0, budget_s)
    search, leftover, free_before = search_largest(torch, device, lambda: search_deadline - time.monotonic())
    r.details.setdefault("largest_allocation", {})[str(d)] = {
        "tries": search.tries, "smallest_failed": search.smallest_failed, "free_before": free_before,
        "stopped_early": search.stopped_early, "leftover_allocated": leftover}
    r.measure("free_memory", free_before, "B", device=d, reference=float(total),
              note="cudaMemGetInfo before the search")
    unfinished = search.stopped_early and search.largest_ok == 0
    r.measure("largest_allocation", None if unfinished else search.largest_ok, "B", device=d,
              reference=float(total),
              note=("the search ran out of time before any allocation succeeded" if unfinished else
                    f"{len(search.tries)} tries, {search.oom_count} out-of-memory caught"))
    if leftover > 0:
        r.findings.append(findings.finding("largest_search_leftover", device=d, leftover=format_bytes(leftover)))
    if not unfinished and search.largest_ok < LARGEST_WARN_SHARE * total:
        r.findings.append(findings.finding("largest_allocation_small", device=d, gpu=dev.label,
                                           largest=format_bytes(search.largest_ok),
                                           pct=100 * search.largest_ok / total, total=format_bytes(total)))


def _held_by_others(ctx: ProbeContext, r: ProbeResult, dev: _gpu.Device, total: int) -> None:
    """4. Memory held by other processes."""
    d = dev.index
    others, why_not = other_processes(ctx, dev)
    if others is None:
        r.measure("other_processes_memory", None, "B", device=d, note=why_not)
    else:
        held = sum(int(p.get("gpu_memory_bytes") or 0) for p in others)
        r.measure("other_processes", len(others), device=d)
        r.measure("other_processes_memory", held, "B", device=d, reference=float(total))
        r.details.setdefault("other_processes", {})[str(d)] = others
        if held >= OTHERS_WARN_SHARE * total:
            pids = ", ".join(str(p["pid"]) for p in others[:6])
            r.findings.append(findings.finding("memory_held_by_others", device=d, count=len(others),
                                               held=format_bytes(held), gpu=dev.label, pids=pids))


def _driver_reserved(ctx: ProbeContext, r: ProbeResult, dev: _gpu.Device, total: int) -> None:
    """5. Memory the driver keeps for itself: in neither NVML's used nor its free (v2 memory
    info, as nvidia-smi shows it). Where the driver cannot give it apart, used includes it."""
    if dev.nvml_index is None:
        return
    try:
        reserved = ctx.gpu.memory(dev.nvml_index).get("memory_reserved_bytes")
    except Exception:
        return
    if isinstance(reserved, int):
        r.measure("driver_reserved_memory", reserved, "B", device=dev.index, reference=float(total))
    elif is_na(reserved):
        r.measure("driver_reserved_memory", None, "B", device=dev.index,
                  note=f"not given apart ({reserved.reason}): the driver's used memory includes it")


def _summary(r: ProbeResult) -> str:
    largest = [m for m in r.measurements if m.name == "largest_allocation" and m.value is not None]
    return ", ".join(f"cuda:{m.device} largest allocation {format_bytes(m.value)}" for m in largest)


def run(ctx: ProbeContext) -> ProbeResult:
    return measure_each_device(ctx, "memory", _probe_device, _summary, target_s=4.0)


PROBE = Probe.define(__name__, run, "GPU memory: CUDA context, caching allocator, largest allocation, other processes",
                     level="full", uses_torch=True, timeout_s=30, order=40)
