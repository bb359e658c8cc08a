"""How much `gpudoctor why` slows the process it samples: a CPU training loop, timed in
alternating windows without and with py-spy attached at the default rate (the same command
line `gpudoctor why` runs), so that drift in the machine's load hits both alike.

    python benchmarks/why_overhead.py [--pairs 20] [--window 2] [--rate 100] [--json]

Two figures, because on a shared machine the wall clock mostly measures the neighbours:

* the slowdown per CPU-second of the loop (steps per second of the loop's own CPU time,
  sampled against unsampled): what sampling costs the process itself (pauses, cache), and its
  whole cost when a core is free for py-spy;
* py-spy's own CPU use, in % of one core: what it takes from the machine, which slows the
  loop only when no core is idle.

The wall-clock slowdown is printed too, with its spread. Target: under 2% at the default rate.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gpudoctor.why import pyspy  # noqa: E402

LOOP = r'''
import sys, time, torch
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
loss_fn = torch.nn.CrossEntropyLoss()
step = 0
while True:
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()
    step += 1
    if step % 10 == 0:
        print(time.monotonic(), step, time.process_time(), flush=True)
'''


class Progress:
    """The loop's (time, step) lines, read in a thread."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.points: list[tuple[float, int, float]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            t, step, cpu = line.split()
            with self.lock:
                self.points.append((float(t), int(step), float(cpu)))

    def rates(self, t0: float, t1: float) -> tuple[float, float]:
        """(steps per wall second, steps per CPU second of the loop) within [t0, t1]."""
        with self.lock:
            inside = [p for p in self.points if t0 <= p[0] <= t1]
        if len(inside) < 2:
            return float("nan"), float("nan")
        steps = inside[-1][1] - inside[0][1]
        return steps / (inside[-1][0] - inside[0][0]), steps / max(inside[-1][2] - inside[0][2], 1e-9)


def _pair(i: int, args: argparse.Namespace, binary: str, pid: int, progress: Progress, folder: str) -> dict:
    """One window unsampled and one sampled, in alternating order."""
    import psutil

    rates: dict[str, tuple[float, float]] = {}
    spy_cpu = 0.0
    for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
        spy = None
        if mode == "on":
            cmd = pyspy.record_command(binary, pid, args.window + 3, args.rate, os.path.join(folder, f"{i}.txt"))
            spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # attached and sampling
            before = sum(psutil.Process(spy.pid).cpu_times()[:2])
        t0 = time.monotonic()
        time.sleep(args.window)
        t1 = time.monotonic()
        rates[mode] = progress.rates(t0, t1)
        if spy is not None:
            spy_cpu = 100.0 * (sum(psutil.Process(spy.pid).cpu_times()[:2]) - before) / (t1 - t0)
            spy.wait()
    return {"pair": i, "off_steps_per_s": rates["off"][0], "on_steps_per_s": rates["on"][0],
            "off_steps_per_cpu_s": rates["off"][1], "on_steps_per_cpu_s": rates["on"][1],
            "wall_slowdown": 1.0 - rates["on"][0] / rates["off"][0],
            "cpu_slowdown": 1.0 - rates["on"][1] / rates["off"][1], "py_spy_cpu_pct": spy_cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--window", type=float, default=2.0)
    parser.add_argument("--rate", type=int, default=pyspy.DEFAULT_RATE_HZ)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    binary = pyspy.find_py_spy()
    loop = subprocess.Popen([sys.executable, "-c", LOOP], stdout=subprocess.PIPE, text=True)
    progress = Progress(loop)
    rows = []
    try:
        time.sleep(8.0)  # start-up and warm-up
        with tempfile.TemporaryDirectory() as folder:
            for i in range(args.pairs):
                rows.append(_pair(i, args, binary, loop.pid, progress, folder))
                if not args.json:
                    r = rows[-1]
                    print(f"pair {i}: per CPU-second {r['cpu_slowdown'] * 100:+.2f}%, wall "
                          f"{r['wall_slowdown'] * 100:+.2f}%, py-spy {r['py_spy_cpu_pct']:.1f}% of a core", flush=True)
    finally:
        loop.kill()
        loop.wait()
    result = {"rate_hz": args.rate, "window_s": args.window, "pairs": rows,
              "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
              "date": time.strftime("%Y-%m-%d", time.gmtime())}
    for key in ("cpu_slowdown", "wall_slowdown", "py_spy_cpu_pct"):
        values = [r[key] for r in rows if math.isfinite(r[key])]  # a window with no progress line: left out
        result[key + "_median"] = statistics.median(values)
        result[key + "_stdev"] = statistics.stdev(values) if len(values) > 1 else None
    if not args.json:
        print(f"at {args.rate} Hz over {len(rows)} pairs of {args.window:g} s windows, {result['cpus']} CPUs: "
              f"slowdown per CPU-second median {result['cpu_slowdown_median'] * 100:+.2f}% "
              f"(sd {result['cpu_slowdown_stdev'] * 100:.2f}%), wall median {result['wall_slowdown_median'] * 100:+.2f}% "
              f"(sd {result['wall_slowdown_stdev'] * 100:.2f}%), py-spy {result['py_spy_cpu_pct_median']:.1f}% of a core")
    else:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
