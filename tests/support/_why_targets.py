"""Training scripts that the `gpudoctor why` tests start and sample (real processes, CPU).

Each prints ``ready`` once its loop runs, so a test samples the loop, not the start-up.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

SLOW_DATASET = '''
import sys, time
import torch
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __len__(self):
        return 10_000_000

    def __getitem__(self, index):
        time.sleep(0.02)  # SLOW LINE: a decode that takes 20 ms per sample
        return torch.zeros(32), index % 2


def main():
    loader = DataLoader(SlowDataset(), batch_size=4, num_workers=int(sys.argv[1]))
    model = torch.nn.Linear(32, 2)
    for step, (x, y) in enumerate(loader):
        model(x).sum().backward()
        if step == 1:
            print("ready", flush=True)


if __name__ == "__main__":
    main()
'''

HEAVY_MODEL = '''
import torch
torch.set_num_threads(1)
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(6)])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batches = [torch.randn(128, 512) for _ in range(4)]  # pre-batched: no loader at all
step = 0
while True:
    for x in batches:
        opt.zero_grad()
        model(x).relu().sum().backward()
        opt.step()
        step += 1
        if step == 3:
            print("ready", flush=True)
'''

ASLEEP = '''
import time
print("ready", flush=True)
while True:
    time.sleep(0.5)  # ASLEEP LINE
'''


# A loop under TrainingMonitor over a slow dataset; it publishes every 0.5 s and stops when the
# file named by its first argument exists. The monitor reads a clock that leaps 1000 s per sample
# loaded: the data wait dominates by orders of magnitude whatever the machine's load (a 4 ms sleep
# against a step that a busy CPU preempts did not).
MONITORED_LOOP = '''
import os, sys, time, torch
from torch.utils.data import DataLoader, Dataset
from gpudoctor.hooks import TrainingMonitor, publish
from gpudoctor.hooks import monitor as monitor_module
publish.INTERVAL_S = 0.5
leap = [0.0]
monitor_module._clock = lambda: time.perf_counter() + leap[0]

class Slow(Dataset):
    def __len__(self):
        return 1_000_000
    def __getitem__(self, i):
        time.sleep(0.004)
        leap[0] += 1000.0
        return torch.zeros(8), 0

mon = TrainingMonitor()
weight = torch.ones(2, 8)
for step, (x, y) in enumerate(mon.wrap(DataLoader(Slow(), batch_size=4))):
    with mon.step():
        torch.nn.functional.linear(x, weight).sum()
    if step == 5:
        print("ready", flush=True)
    if step > 5 and os.path.exists(sys.argv[1]):
        break
mon.close()
'''


def line_of(script: str, mark: str) -> int:
    return next(n for n, text in enumerate(script.splitlines(), 1) if mark in text)


def start(tmp_path: Path, name: str, script: str, *args: str, timeout: float = 180.0) -> subprocess.Popen:
    """Start ``script`` and return once it printed ``ready`` (its loop is running)."""
    path = tmp_path / f"{name}.py"
    path.write_text(script, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, str(path), *args], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready" or time.monotonic() > deadline:
        proc.kill()
        raise AssertionError(f"{name} did not start: {line!r}")
    return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=60)

DDP_STRAGGLER = '''
import os, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
model = DistributedDataParallel(torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(3)]))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 128)
extra = torch.randn(256, 256)


def slow_rank_work():
    for _ in range(30):
        extra @ extra  # STRAGGLER LINE: only rank 1 does this


step = 0
while True:
    if rank == 1:
        slow_rank_work()
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    step += 1
    if step == 3 and rank == 0:
        print("ready", flush=True)
'''


def start_torchrun(tmp_path: Path, script: str, timeout: float = 240.0) -> subprocess.Popen:
    """torchrun with 2 gloo ranks on CPU; returns once rank 0 printed ``ready``."""
    path = tmp_path / "ddp.py"
    path.write_text(script, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                             str(path)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=tmp_path, start_new_session=True,
                            env=dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1"))
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "ready" not in line:
        stop_group(proc)
        raise AssertionError(f"torchrun did not start: {line!r}")
    return proc


def stop_group(proc: subprocess.Popen) -> None:
    """Stop torchrun and its ranks. torchrun starts each rank in a session of its own, so
    killing the launcher's group leaves them running (a straggler rank spun on for good after
    the test): the ranks are found as the launcher's descendants first and killed too."""
    import signal

    import psutil

    try:
        ranks = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        ranks = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for rank in ranks:
        try:
            rank.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(ranks, timeout=30)
    proc.wait(timeout=60)


# A job with a long start-up (building its dataset takes 4 s) before a loop that prints each
# step on stdout: `why -- CMD` must wait for the loop and keep its verdict apart from that output.
SLOW_START = '''
import time
import torch


class Prepared(torch.utils.data.Dataset):
    def __init__(self):
        t = time.time()
        while time.time() - t < 4:  # START LINE: indexing the files
            sum(range(1000))

    def __len__(self):
        return 10_000_000

    def __getitem__(self, index):
        time.sleep(0.02)  # SLOW LINE
        return torch.zeros(8), 0


loader = torch.utils.data.DataLoader(Prepared(), batch_size=4)
model = torch.nn.Linear(8, 2)
for step, (x, y) in enumerate(loader):
    model(x).sum().backward()
    print("step", step, flush=True)
'''
