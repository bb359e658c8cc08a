"""What TrainingMonitor costs per step.

    python benchmarks/hooks_overhead.py [--steps 200000] [--repeats 7] [--json FILE]

CPU (always): host time added per step by ``monitor.wrap()`` + ``with monitor.step()``,
against the same loop without them, with an empty body (the pure cost) and with the
reference MNIST MLP step (the cost in context). Target: <= 10 µs per step.

CUDA (when a GPU is present): the same with device timing on (two CUDA events per step),
then a loop of ~1 ms GPU steps with and without the monitor (target: <= 1% slower), and
the monitored loop run under ``torch.cuda.set_sync_debug_mode("error")`` (target: no
sync added, i.e. no error). Prints a JSON document; ``--json`` also writes it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable

import torch

from gpudoctor import TrainingMonitor
from gpudoctor.backends.host import host_facts
from gpudoctor.system.fileio import atomic_write_json


def _plain(items: list[Any], body: Callable[[Any], None]) -> float:
    null = contextlib.nullcontext()
    t0 = time.perf_counter()
    for item in items:
        with null:
            body(item)
    return time.perf_counter() - t0


def _monitored(items: list[Any], body: Callable[[Any], None], **kwargs: Any) -> tuple[float, TrainingMonitor]:
    monitor = TrainingMonitor(sample_gpu=False, **kwargs)
    t0 = time.perf_counter()
    for item in monitor.wrap(items):
        with monitor.step():
            body(item)
    elapsed = time.perf_counter() - t0
    return elapsed, monitor


def overhead_per_step(items: list[Any], body: Callable[[Any], None], repeats: int, **kwargs: Any) -> dict[str, Any]:
    """Median over ``repeats`` of (monitored - plain) / steps, runs interleaved to share drift."""
    n = len(items)
    diffs, plain_times, summary_times = [], [], []
    for _ in range(repeats):
        plain = _plain(items, body)
        monitored, monitor = _monitored(items, body, **kwargs)
        diffs.append((monitored - plain) / n)
        plain_times.append(plain / n)
        t0 = time.perf_counter()
        monitor.summary()
        summary_times.append(time.perf_counter() - t0)
    return {"steps": n, "repeats": repeats,
            "overhead_per_step_us_median": statistics.median(diffs) * 1e6,
            "overhead_per_step_us_min": min(diffs) * 1e6,
            "plain_step_us_median": statistics.median(plain_times) * 1e6,
            "summary_s_median": statistics.median(summary_times)}


def cpu_results(steps: int, repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out["empty_step"] = overhead_per_step(list(range(steps)), lambda _: None, repeats, device="cpu")

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    batches = [(torch.randn(64, 784), torch.randint(0, 10, (64,))) for _ in range(8)]

    def train_step(batch: Any) -> None:
        inputs, targets = batch
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
        opt.step()

    mlp_steps = max(200, min(1000, steps // 200))
    items = [batches[i % len(batches)] for i in range(mlp_steps)]
    plain = statistics.median(_plain(items, train_step) / mlp_steps for _ in range(repeats))
    # The monitor's cost is additive and does not depend on the step's body, so the empty-step
    # figure (precise) over this step's time gives its share; timing the MLP loop twice and
    # subtracting would only measure the machine's noise.
    out["mnist_mlp_step_batch64"] = {
        "steps": mlp_steps, "repeats": repeats, "plain_step_us_median": plain * 1e6,
        "overhead_share_of_step": out["empty_step"]["overhead_per_step_us_median"] / (plain * 1e6)}
    return out


def gpu_results(steps: int, repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(0)}
    out["empty_step_with_cuda_events"] = overhead_per_step(list(range(min(steps, 50000))), lambda _: None,
                                                           repeats, device="cuda", count_syncs=False)
    # A GPU step of about 1 ms: square matmuls sized by a quick calibration.
    size = 2048
    a = torch.randn(size, size, device="cuda")
    b = torch.randn(size, size, device="cuda")
    torch.cuda.synchronize()
    for _ in range(8):
        t0 = time.perf_counter()
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
        per = (time.perf_counter() - t0) / 20
        if 0.0008 <= per <= 0.0012:
            break
        size = max(256, int(size * (0.001 / per) ** (1 / 3)))
        a = torch.randn(size, size, device="cuda")
        b = torch.randn(size, size, device="cuda")
        torch.cuda.synchronize()
    out["gpu_step_matmul_size"] = size
    n = 2000
    items = list(range(n))

    def gpu_step(_: Any) -> None:
        a @ b

    plain_times, monitored_times = [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        _plain(items, gpu_step)
        torch.cuda.synchronize()
        plain_times.append((time.perf_counter() - t0) / n)
        monitor = TrainingMonitor(device="cuda", sample_gpu=False, count_syncs=False)
        t0 = time.perf_counter()
        for item in monitor.wrap(items):
            with monitor.step():
                gpu_step(item)
        torch.cuda.synchronize()
        monitored_times.append((time.perf_counter() - t0) / n)
    plain, monitored = statistics.median(plain_times), statistics.median(monitored_times)
    out["gpu_step_s_plain_median"] = plain
    out["gpu_step_s_monitored_median"] = monitored
    out["gpu_step_slowdown_share"] = (monitored - plain) / plain

    # Zero syncs: the monitored loop (with NVML sampling on) under sync debug mode "error".
    monitor = TrainingMonitor(device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for item in monitor.wrap(items[:500]):
            with monitor.step():
                gpu_step(item)
        out["syncs_added"] = 0
    except RuntimeError as exc:
        out["syncs_added"] = f"a sync was made: {exc}"
    finally:
        torch.cuda.set_sync_debug_mode(0)
    out["monitored_summary"] = monitor.summary().to_dict()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads for the CPU MLP step (default 1: steady timings on a shared machine)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    host = host_facts()
    result: dict[str, Any] = {
        "benchmark": "gpudoctor hooks overhead",
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"cpu_model": host.get("cpu_model"), "cpu_logical": os.cpu_count(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "load_avg_1m": host.get("load_avg_1m")},
        "torch_threads": torch.get_num_threads(),
        "cpu": cpu_results(args.steps, args.repeats),
    }
    if torch.cuda.is_available():
        result["cuda"] = gpu_results(args.steps, args.repeats)
    else:
        result["cuda"] = "not measured: no CUDA GPU on this machine"
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.json:
        atomic_write_json(args.json, json.loads(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
