"""Known answers for "is the GPU really busy?": GPM against kernels whose answer is known.

Run on a GPU (Hopper or later for GPM), in the GPU kit's first command:

    python benchmarks/gpm_truth.py --json gpm_truth.json

Four phases of a few seconds each on GPU 0 (torch device cuda:0, matched to NVML by PCI bus id),
NVML read every half second while each runs (utilisation, and SM / tensor / DRAM activity from
GPM through gpudoctor's backend), then gpudoctor's verdict on each phase's median readings:

    idle          nothing runs                          -> idle
    bf16_gemm     8192^3 bf16 matrix products            -> tensor cores busy (tensor_bound)
    tiny_kernels  a loop of one-element additions        -> utilisation ~100 %, SM activity low
                                                            (busy_small_kernels)
    copy          1 GiB device-to-device copies          -> DRAM busy (memory_bound)

It also measures what one GPM read costs the host (the target: under 1 ms of CPU time per device
per read). Output: one line per phase (medians, the verdict, met or not) and, with --json, every
reading. Exit 0 when every phase met its known answer, 1 when one did not (or GPM is missing: a
GPU without GPM cannot show it), 2 on usage errors, 3 when no CUDA GPU is here (nothing measured).
--smoke runs each phase for a fraction of a second: the script's own check, on any machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Any, Callable

PHASES = ("idle", "bf16_gemm", "tiny_kernels", "copy")
EXPECTED = {"idle": "idle", "bf16_gemm": "tensor_bound", "tiny_kernels": "busy_small_kernels",
            "copy": "memory_bound"}
READ_INTERVAL_S = 0.5
GPM_READ_TARGET_MS = 1.0
KEYS = ("gpu_util_pct", "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct",
        "fp32_active_pct", "power_w", "power_limit_w")


def _work(torch: Any, phase: str, size: str) -> Callable[[], None]:
    """One step of a phase's kernel; each returns after enqueueing work (the reader syncs nothing)."""
    dev = "cuda:0"
    if phase == "bf16_gemm":
        n = 8192 if size == "big" else 256
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        return lambda: torch.matmul(a, b)
    if phase == "tiny_kernels":
        x = torch.zeros(1, device=dev)
        return lambda: x.add_(1.0)
    if phase == "copy":
        n = (1 << 28) if size == "big" else (1 << 16)  # 1 GiB of float32
        src = torch.empty(n, device=dev)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)
    return lambda: time.sleep(0.01)


def _run_phase(torch: Any, gpu: Any, index: int, phase: str, seconds: float, size: str) -> dict[str, Any]:
    from gpudoctor.backends import is_na

    step = _work(torch, phase, size)
    stop = threading.Event()
    readings: list[dict[str, Any]] = []
    costs_ms: list[float] = []

    def read() -> None:
        gpu.gpm(index)  # the first GPM read only arms the pair of samples
        while not stop.wait(READ_INTERVAL_S):
            started = time.thread_time()
            gpm = gpu.gpm(index)
            costs_ms.append((time.thread_time() - started) * 1000.0)
            sample = dict(gpu.fast_sample(index))
            sample.update(gpm)
            sample["power_limit_w"] = gpu.static(index).get("power_limit_w")
            readings.append({k: (None if is_na(sample.get(k)) else sample.get(k)) for k in KEYS})

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + seconds
    launched = 0
    while time.monotonic() < deadline:
        step()
        launched += 1
        if phase != "idle" and launched % 64 == 0:
            torch.cuda.synchronize()  # keep the queue short so the phase ends when it should
    torch.cuda.synchronize()
    stop.set()
    reader.join(5)
    medians = {k: statistics.median(v) for k in KEYS if (v := [r[k] for r in readings if r[k] is not None])}
    return {"phase": phase, "seconds": seconds, "launched": launched, "readings": readings, "median": medians,
            "gpm_read_cpu_ms": statistics.median(costs_ms) if costs_ms else None}


def _judge(result: dict[str, Any]) -> dict[str, Any]:
    from gpudoctor.backends.busy import basis, verdict

    found = verdict(result["median"])
    result["verdict"] = {"code": found.code, "words": found.summary, "evidence": basis(found)}
    result["expected"] = EXPECTED[result["phase"]]
    result["met"] = found.code == result["expected"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per phase (default 5)")
    parser.add_argument("--json", metavar="FILE", help="also write every reading here")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and 0.6 s phases (any machine)")
    args = parser.parse_args(argv)
    if not 0.2 <= args.seconds <= 120:
        parser.error("--seconds must be between 0.2 and 120")
    try:
        import torch
    except ImportError:
        print("gpm_truth: torch is not installed: nothing measured", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("gpm_truth: no CUDA GPU here: nothing measured", file=sys.stderr)
        return 3
    from gpudoctor.backends import NvmlBackend
    from gpudoctor.backends.visibility import nvml_index_for, torch_device_ids

    gpu = NvmlBackend()
    index = nvml_index_for(gpu, 0, *torch_device_ids(0, torch))
    if index is None:
        print("gpm_truth: NVML cannot match cuda:0 to a device: nothing measured", file=sys.stderr)
        return 3
    seconds, size = (0.6, "small") if args.smoke else (args.seconds, "big")
    static = gpu.static(index)
    results = [_judge(_run_phase(torch, gpu, index, phase, seconds, size)) for phase in PHASES]
    costs = [r["gpm_read_cpu_ms"] for r in results if r["gpm_read_cpu_ms"] is not None]
    summary = {"device": static.get("name"), "driver": gpu.driver_version(),
               "date": time.strftime("%Y-%m-%d", time.gmtime()), "phases": results,
               "gpm_read_cpu_ms_median": statistics.median(costs) if costs else None,
               "gpm_read_target_ms": GPM_READ_TARGET_MS}
    gpu.close()
    print(f"gpm_truth on {summary['device']}, driver {summary['driver']}, {summary['date']}")
    for r in results:
        m = r["median"]
        shown = " ".join(f"{k.replace('_pct', '')}={m[k]:.0f}" for k in KEYS[:5] if k in m)
        print(f"{r['phase']:13s} {shown:60s} -> {r['verdict']['code']} "
              f"({'met' if r['met'] else 'not met: expected ' + r['expected']})")
    cost = summary["gpm_read_cpu_ms_median"]
    print(f"GPM read: {cost:.3f} ms of host CPU per device per read (target < {GPM_READ_TARGET_MS:g} ms)"
          if cost is not None else "GPM read: not measured")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(summary, handle, indent=2, default=str)
    return 0 if all(r["met"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
