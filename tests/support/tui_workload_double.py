"""Test doubles standing in for gpudoctor.workload's sweep (issue 4) in the adapter tests.

They are NOT the workload: they only exercise the child-process plumbing (progress
events, results, errors, crashes, cancellation) with the calling convention the
adapter supports.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


@dataclass
class FakeRun:
    mode: str
    batch_size: int
    samples_per_s: float
    gpu_util_mean_pct: float | None


def fake_sweep(progress, quick: bool = False, batch_sizes=(64, 1000, 10000)):
    """Three runs per mode, reported as dataclasses; returns a dict with the runs."""
    runs = []
    total = len(batch_sizes) * 2
    done = 0
    for mode in ("dataloader", "resident"):
        for bs in batch_sizes:
            progress({"message": f"running {mode} at batch {bs}", "done": done, "total": total})
            run = FakeRun(mode, bs, samples_per_s=1000.0 * (2 if mode == "resident" else 1) * (bs ** 0.5),
                          gpu_util_mean_pct=None if mode == "dataloader" and bs == 64 else 40.0 + bs / 1000)
            done += 1
            progress(run, done=done, total=total)
            runs.append(run)
    return {"runs": runs, "quick": quick, "pid": os.getpid(), "torch_loaded": "torch" in __import__("sys").modules}


def failing_sweep(progress):
    progress({"message": "about to fail"})
    raise RuntimeError("CUDA out of memory in the double")


def dying_sweep(progress):
    progress({"message": "about to die"})
    os._exit(7)


def slow_sweep(progress):
    for i in range(600):
        progress({"done": i, "total": 600})
        time.sleep(0.1)
    return {"finished": True}


def no_callback_sweep(quick: bool = False):
    return {}


def kwargs_sweep(**options):
    options["progress"]({"message": "kwargs"})
    return {"options": sorted(options)}


BUSY_NOTE = ("the machine was busy before the sweep started (1-minute load average 7.5 on 2 CPUs): "
             "timings include other processes' work and vary from run to run")


def busy_sweep(progress, quick: bool = False):
    """fake_sweep whose result carries the busy-machine note the real sweep adds."""
    result = fake_sweep(progress, quick=quick)
    result["notes"] = [BUSY_NOTE]
    return result


def torchless_sweep(progress, quick: bool = False):
    """A sweep in an environment without PyTorch: its first import fails as torch's does."""
    raise ModuleNotFoundError("No module named 'torch'", name="torch")


def tree_sweep(progress):
    """A sweep that starts a process of its own (as a DataLoader starts its workers) and runs on."""
    import subprocess

    worker = subprocess.Popen(["sleep", "600"])
    for i in range(6000):
        progress({"done": i, "total": 6000, "worker": worker.pid})
        time.sleep(0.1)
    return {"finished": True}
