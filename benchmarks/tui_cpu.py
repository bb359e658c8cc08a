"""CPU time of the gpudoctor TUI at a fixed refresh, in a real (pseudo-)terminal.

Starts ``python -m gpudoctor tui`` on a pty of a fixed size, lets it start up, then
measures the user+system CPU seconds the process spends over a window of wall time
(psutil), and quits it with ``q``. With ``--replay`` it shows a recording (no GPU
needed); without, it reads live NVML. ``--other CMD`` measures another monitor the same
way (e.g. ``--other "nvitop --interval 1"`` on a GPU machine: the issue's target is
gpudoctor <= nvitop at the same refresh, same machine and GPUs).

    python benchmarks/tui_cpu.py --replay tests/data/handmade_two_gpu_training_standin.json
    python benchmarks/tui_cpu.py --seconds 30 --interval 1 --other "nvitop --interval 1"

Without a driver, ``--fake-nvml`` gives both programs the same fake one-GPU NVML
(``benchmarks/fake_nvml``, an idle H100 PCIe) through PYTHONPATH, so gpudoctor's live
path and nvitop do their own full work at the same refresh:

    python benchmarks/tui_cpu.py --fake-nvml --other ".venv/bin/nvitop --interval 1"

``--busy`` makes the fake GPU a training one (readings that change every second), and
``--rounds N`` measures both programs N times, alternating which goes first, and compares
the medians: one 30 s window holds only about 30 ticks of CPU time, so a single pair of
runs is within noise of a 20 % difference.

Prints a table, or JSON with --json. Not part of the test run.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import pty
import shlex
import signal
import statistics
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent


def measure(argv: list[str], *, seconds: float, warmup: float, cols: int, rows: int,
            quit_keys: str = "q", fake_nvml: bool = False, busy: bool = False) -> dict[str, Any]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
    if fake_nvml:
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "benchmarks" / "fake_nvml")]
                                            + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as an installed package runs
        env["FAKE_NVML_BUSY"] = "1" if busy else "0"
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env,
                            start_new_session=True)
    os.close(slave)
    received = [0]

    def drain() -> None:  # a terminal that reads everything, as fast as it comes
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            received[0] += len(data)

    threading.Thread(target=drain, daemon=True).start()
    ps = psutil.Process(proc.pid)
    try:
        time.sleep(warmup)
        if proc.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited during start-up with code {proc.returncode}")
        t0 = ps.cpu_times()
        bytes0 = received[0]
        w0 = time.monotonic()
        time.sleep(seconds)
        t1 = ps.cpu_times()
        wall = time.monotonic() - w0
        bytes1 = received[0]
        rss = ps.memory_info().rss
        startup_cpu = t0.user + t0.system
        window_cpu = (t1.user - t0.user) + (t1.system - t0.system)
        os.write(master, quit_keys.encode())
        try:
            code = proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        try:
            os.close(master)
        except OSError:
            pass
    return {
        "command": " ".join(shlex.quote(a) for a in argv),
        "terminal": f"{cols}x{rows}",
        "startup_wall_s": round(warmup, 1),
        "startup_cpu_s": round(startup_cpu, 3),
        "window_wall_s": round(wall, 2),
        "window_cpu_s": round(window_cpu, 3),
        "cpu_pct_of_one_core": round(100.0 * window_cpu / wall, 2),
        "terminal_output_bytes_per_s": round((bytes1 - bytes0) / wall),
        "rss_mib": round(rss / 2**20, 1),
        "exit_code": code,
        "total_wall_s": round(time.monotonic() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="measured window (default 30)")
    parser.add_argument("--warmup", type=float, default=6.0, help="start-up time not measured (default 6)")
    parser.add_argument("--interval", type=float, default=1.0, help="TUI refresh interval (default 1)")
    parser.add_argument("--replay", help="recording to show (default: live NVML)")
    parser.add_argument("--cols", type=int, default=120)
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--other", help="another monitor's command line to measure the same way")
    parser.add_argument("--fake-nvml", action="store_true",
                        help="give both programs benchmarks/fake_nvml's one-GPU NVML (no driver here)")
    parser.add_argument("--busy", action="store_true",
                        help="with --fake-nvml: a training GPU whose readings change every second")
    parser.add_argument("--rounds", type=int, default=1, help="measure each program this many times (default 1)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.rounds < 1 or args.seconds <= 0 or args.warmup < 0 or args.interval <= 0:
        parser.error("--rounds takes a whole number of at least 1; --seconds and --interval positive seconds")
    if args.busy and not args.fake_nvml:
        parser.error("--busy makes the fake NVML a training board: give --fake-nvml too")

    ours = [sys.executable, "-m", "gpudoctor", "tui", "--interval", str(args.interval)]
    if args.replay:
        ours += ["--replay", args.replay]
    programs = [ours] + ([shlex.split(args.other)] if args.other else [])
    runs: list[list[dict[str, Any]]] = [[] for _ in programs]
    for r in range(args.rounds):
        order = range(len(programs)) if r % 2 == 0 else reversed(range(len(programs)))
        for i in order:
            runs[i].append(measure(programs[i], seconds=args.seconds, warmup=args.warmup, cols=args.cols,
                                   rows=args.rows, fake_nvml=args.fake_nvml, busy=args.busy))
    machine = {"host_cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
               "python": platform.python_version(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
               "load_average": [round(x, 2) for x in os.getloadavg()],
               "nvml": ("fake one-GPU H100 PCIe (benchmarks/fake_nvml), "
                        + ("training: readings change every second" if args.busy else "idle: constant readings"))
               if args.fake_nvml else ("replay" if args.replay else "live")}
    medians = [statistics.median(x["window_cpu_s"] for x in program_runs) for program_runs in runs]
    ratio = medians[0] / medians[1] if len(medians) > 1 and medians[1] else None
    if args.json:
        print(json.dumps({"machine": machine, "interval_s": args.interval, "runs": runs,
                          "median_window_cpu_s": medians,
                          "ratio_of_medians": ratio},
                         indent=2))
    else:
        print(f"machine: {machine}  refresh: {args.interval:g} s")
        for program_runs, median in zip(runs, medians):
            r = program_runs[0]
            print(f"{r['command']}\n  {r['terminal']}, window {args.warmup:g}-{args.warmup + args.seconds:g} s "
                  f"after start, {len(program_runs)} run(s): CPU s " + ", ".join(
                      f"{x['window_cpu_s']:.2f}" for x in program_runs)
                  + f"; median {median:.2f} ({100 * median / args.seconds:.2f} % of one core); B/s to the terminal "
                  + ", ".join(str(x["terminal_output_bytes_per_s"]) for x in program_runs)
                  + f"; RSS {r['rss_mib']} MiB; exit codes {sorted({x['exit_code'] for x in program_runs})}")
        if ratio is not None:
            print(f"ratio of medians (gpudoctor / other): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
