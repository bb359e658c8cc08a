"""A torchrun job whose last rank misbehaves while the others wait in an all-reduce (gloo, CPU,
loopback only): the targets of tests/why/test_why_hang_gloo.py.

Modes: ``stuck`` (the rank sleeps for ever before its all-reduce), ``backward`` (its backward
pass takes an hour), ``data`` (its DataLoader's dataset blocks for ever). Rank 0 prints
``ready`` as it enters the all-reduce the last rank never reaches.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HUNG_JOB = '''
import sys, threading, time
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)
mode = sys.argv[1]
dist.init_process_group("gloo")
rank, odd = dist.get_rank(), dist.get_world_size() - 1
grad = torch.ones(1024)
dist.all_reduce(grad)  # every rank connected


class SlowGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        m = torch.randn(128, 128)
        end = time.monotonic() + 3600
        while time.monotonic() < end:
            m = torch.tanh(m @ m)  # SLOW BACKWARD LINE
        return g * 2


class Blocked(Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, index):
        threading.Event().wait()  # BLOCKED DATA LINE: a read that never returns
        return torch.zeros(4)


if rank == odd and mode == "stuck":
    while True:
        time.sleep(0.2)  # STUCK LINE
elif rank == odd and mode == "backward":
    x = torch.ones(8, requires_grad=True)
    SlowGrad.apply(x).sum().backward()  # BACKWARD LINE
elif rank == odd and mode == "data":
    for batch in DataLoader(Blocked(), batch_size=2, num_workers=1):  # DATA LOOP LINE
        pass
if rank == 0:
    print("ready", flush=True)
dist.all_reduce(grad)  # ALL_REDUCE LINE
'''


def line_of(mark: str) -> int:
    return next(n for n, text in enumerate(HUNG_JOB.splitlines(), 1) if mark in text)


def start_hung_job(tmp_path: Path, mode: str, nproc: int, timeout: float = 240.0,
                   nccl_settings: bool = True) -> subprocess.Popen:
    """torchrun with ``nproc`` gloo ranks; returns once rank 0 waits in the all-reduce. The caller
    stops it with ``_why_targets.stop_group`` (the launcher's group and every rank). With
    ``nccl_settings`` false, none of the flight recorder's variables is set (a plain gloo job)."""
    from support._why_targets import stop_group

    path = tmp_path / "hung.py"
    path.write_text(HUNG_JOB, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_NCCL_", "TORCH_FR_"))}
    if nccl_settings:
        env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = str(tmp_path / "nccl_trace_rank_")
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                             "--standalone", str(path), mode], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, cwd=tmp_path, start_new_session=True,
                            env=dict(env, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1"))
    assert proc.stdout is not None
    try:
        line = _readline(proc, timeout)
    except BaseException:
        stop_group(proc)
        raise
    if "ready" not in line:
        stop_group(proc)
        raise AssertionError(f"torchrun did not start: {line!r}")
    return proc


def _readline(proc: subprocess.Popen, timeout: float) -> str:
    import threading

    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline() if proc.stdout else ""), daemon=True)
    reader.start()
    reader.join(timeout)
    return got[0] if got else ""
