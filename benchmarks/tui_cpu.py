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

``--side-by-side K`` runs both programs at once, each on its own terminal, and measures K
consecutive windows of ``--seconds`` for both: whatever else the machine does in a window it
does to both, so the per-window ratio is far steadier than two runs one after the other. It
reports the ratio of total CPU with a 95 % bootstrap interval over the windows. ``--other``
can also be another gpudoctor tree (``python -m`` imports the package from the directory it
starts in), to compare two versions of the TUI the same way:

    python benchmarks/tui_cpu.py --fake-nvml --busy --side-by-side 8 --seconds 60 \
        --other ".venv/bin/nvitop --interval 1"
    python benchmarks/tui_cpu.py --fake-nvml --busy --side-by-side 6 --seconds 40 \
        --other "sh -c 'cd /tmp/old-tree && exec $PWD/.venv/bin/python -m gpudoctor tui --interval 1'"

Prints a table, or JSON with --json. Exit 0; 1 when a monitor is not installed or exits
early (one line on stderr); 2 on bad arguments. Not part of the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from pty_terminal import end, read_until_closed, start_on_pty  # benchmarks/, this script's folder

ROOT = Path(__file__).resolve().parent.parent


class Monitor:
    """One monitor running on its own pseudo-terminal of a fixed size, whose output is read
    (and counted) as fast as it comes, as a terminal would."""

    def __init__(self, argv: list[str], *, cols: int, rows: int, fake_nvml: bool = False,
                 busy: bool = False) -> None:
        self.argv = argv
        self.terminal = f"{cols}x{rows}"
        env = dict(os.environ)
        if fake_nvml:
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "benchmarks" / "fake_nvml")]
                                                + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
            env.pop("PYTHONDONTWRITEBYTECODE", None)  # as an installed package runs
            env["FAKE_NVML_BUSY"] = "1" if busy else "0"
        self.started = time.monotonic()
        # in the caller's folder: from the repo root `-m gpudoctor` is the checkout, from elsewhere (the
        # GPU kit runs outside the checkout) the installed gpudoctor
        self.proc, self.master = start_on_pty(argv, cols=cols, rows=rows, cwd=os.getcwd(), env=env)
        self.received = 0
        threading.Thread(target=read_until_closed, args=(self.master, self._count), daemon=True).start()
        self.ps = psutil.Process(self.proc.pid)

    def _count(self, data: bytes) -> None:
        self.received += len(data)

    def check_running(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.argv[0]} exited early with code {self.proc.returncode}")

    def cpu_s(self) -> float:
        """User+system CPU seconds of the process so far (all its threads, ended ones too)."""
        t = self.ps.cpu_times()
        return t.user + t.system

    def stop(self, quit_keys: str = "q") -> int:
        """Quits with ``quit_keys`` (SIGTERM, then SIGKILL, if that does not end it); the exit code."""
        try:
            if self.proc.poll() is None:
                os.write(self.master, quit_keys.encode())
                try:
                    return self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.proc.send_signal(signal.SIGTERM)
                    return self.proc.wait(10)
            return self.proc.returncode
        finally:
            end(self.proc, self.master)


def measure(argv: list[str], *, seconds: float, warmup: float, cols: int, rows: int,
            quit_keys: str = "q", fake_nvml: bool = False, busy: bool = False) -> dict[str, Any]:
    mon = Monitor(argv, cols=cols, rows=rows, fake_nvml=fake_nvml, busy=busy)
    try:
        time.sleep(warmup)
        mon.check_running()
        cpu0 = mon.cpu_s()
        bytes0 = mon.received
        w0 = time.monotonic()
        time.sleep(seconds)
        cpu1 = mon.cpu_s()
        wall = time.monotonic() - w0
        bytes1 = mon.received
        rss = mon.ps.memory_info().rss
    finally:
        code = mon.stop(quit_keys)
    return {
        "command": " ".join(shlex.quote(a) for a in argv),
        "terminal": mon.terminal,
        "startup_wall_s": round(warmup, 1),
        "startup_cpu_s": round(cpu0, 3),
        "window_wall_s": round(wall, 2),
        "window_cpu_s": round(cpu1 - cpu0, 3),
        "cpu_pct_of_one_core": round(100.0 * (cpu1 - cpu0) / wall, 2),
        "terminal_output_bytes_per_s": round((bytes1 - bytes0) / wall),
        "rss_mib": round(rss / 2**20, 1),
        "exit_code": code,
        "total_wall_s": round(time.monotonic() - mon.started, 1),
    }


def measure_side_by_side(programs: list[list[str]], *, windows: int, seconds: float, warmup: float,
                         cols: int, rows: int, fake_nvml: bool = False, busy: bool = False,
                         last_first: bool = False) -> dict[str, Any]:
    """Both monitors at once, each on its own terminal, over the same consecutive windows of
    wall time: whatever else the machine does in a window, it does to both, so the per-window
    ratio is much steadier than the ratio of two programs measured one after the other.
    ``last_first`` starts them in the other order; the results stay in the order given."""
    started: list[Monitor | None] = [None] * len(programs)
    try:
        for i in (reversed(range(len(programs))) if last_first else range(len(programs))):
            started[i] = Monitor(programs[i], cols=cols, rows=rows, fake_nvml=fake_nvml, busy=busy)
        mons = [mon for mon in started if mon is not None]
        time.sleep(warmup)
        for mon in mons:
            mon.check_running()
        cpu = [[mon.cpu_s() for mon in mons]]
        received = [[mon.received for mon in mons]]
        marks = [time.monotonic()]
        for _ in range(windows):
            time.sleep(max(0.0, marks[0] + seconds * len(marks) - time.monotonic()))
            cpu.append([mon.cpu_s() for mon in mons])
            received.append([mon.received for mon in mons])
            marks.append(time.monotonic())
            for mon in mons:
                mon.check_running()
        rss = [round(mon.ps.memory_info().rss / 2**20, 1) for mon in mons]
    finally:
        codes = [mon.stop() if mon is not None else None for mon in started]
    rows_out = []
    for k in range(windows):
        wall = marks[k + 1] - marks[k]
        rows_out.append({
            "window_s": [round(warmup + marks[k] - marks[0], 1), round(warmup + marks[k + 1] - marks[0], 1)],
            "cpu_s": [round(b - a, 3) for a, b in zip(cpu[k], cpu[k + 1])],
            "bytes_per_s": [round((b - a) / wall) for a, b in zip(received[k], received[k + 1])],
        })
    return {"commands": [" ".join(shlex.quote(a) for a in argv) for argv in programs],
            "terminal": f"{cols}x{rows}", "windows": rows_out, "rss_mib": rss, "exit_codes": codes}


def ratio_interval(pairs: list[tuple[float, float]], *, draws: int = 10000,
                   seed: int = 1) -> tuple[float, float, float]:
    """The ratio of total CPU (first over second) across paired windows and a 95 % bootstrap
    interval for it, resampling whole windows (each keeps both programs' readings)."""
    import random

    rng = random.Random(seed)
    ours = sum(a for a, _ in pairs)
    theirs = sum(b for _, b in pairs)
    ratios = []
    for _ in range(draws):
        pick = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        den = sum(b for _, b in pick)
        if den > 0:
            ratios.append(sum(a for a, _ in pick) / den)
    if not ratios:  # the peer used no measurable CPU in any window
        return float("nan"), float("nan"), float("nan")
    ratios.sort()
    lo = ratios[int(0.025 * (len(ratios) - 1))]
    hi = ratios[int(0.975 * (len(ratios) - 1))]
    return ours / theirs, lo, hi


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
    parser.add_argument("--side-by-side", type=int, metavar="K", default=0,
                        help="with --other: run both at once and measure K consecutive windows of "
                             "--seconds each (per round), paired by window")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.rounds < 1 or args.seconds <= 0 or args.warmup < 0 or args.interval <= 0:
        parser.error("--rounds takes a whole number of at least 1; --seconds and --interval positive seconds")
    if args.busy and not args.fake_nvml:
        parser.error("--busy makes the fake NVML a training board: give --fake-nvml too")
    if args.side_by_side < 0 or (args.side_by_side and not args.other):
        parser.error("--side-by-side takes a number of windows and a peer to pair with (--other)")

    ours = [sys.executable, "-m", "gpudoctor", "tui", "--interval", str(args.interval)]
    if args.replay:
        ours += ["--replay", args.replay]
    programs = [ours] + ([shlex.split(args.other)] if args.other else [])
    machine = {"host_cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
               "python": platform.python_version(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
               "nvml": ("fake one-GPU H100 PCIe (benchmarks/fake_nvml), "
                        + ("training: readings change every second" if args.busy else "idle: constant readings"))
               if args.fake_nvml else ("replay" if args.replay else "live")}
    if args.side_by_side:
        return side_by_side(args, programs, machine)
    runs: list[list[dict[str, Any]]] = [[] for _ in programs]
    for r in range(args.rounds):
        order = range(len(programs)) if r % 2 == 0 else reversed(range(len(programs)))
        for i in order:
            runs[i].append(measure(programs[i], seconds=args.seconds, warmup=args.warmup, cols=args.cols,
                                   rows=args.rows, fake_nvml=args.fake_nvml, busy=args.busy))
    machine["load_average"] = [round(x, 2) for x in os.getloadavg()]
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


def side_by_side(args: argparse.Namespace, programs: list[list[str]], machine: dict[str, Any]) -> int:
    rounds = []
    for r in range(args.rounds):  # which one starts first alternates between rounds
        rounds.append(measure_side_by_side(programs, windows=args.side_by_side, seconds=args.seconds,
                                           warmup=args.warmup, cols=args.cols, rows=args.rows,
                                           fake_nvml=args.fake_nvml, busy=args.busy, last_first=r % 2 == 1))
    machine["load_average"] = [round(x, 2) for x in os.getloadavg()]
    pairs = [tuple(w["cpu_s"]) for got in rounds for w in got["windows"]]
    ratio, lo, hi = ratio_interval(pairs)  # type: ignore[arg-type]
    per_window = [a / b for a, b in pairs if b > 0]
    summary = {"windows": len(pairs), "cpu_s_total": [round(sum(p[0] for p in pairs), 3),
                                                      round(sum(p[1] for p in pairs), 3)],
               "ratio_of_totals": round(ratio, 3) if ratio == ratio else None,  # None: the peer used no CPU
               "ratio_95ci": [round(lo, 3), round(hi, 3)] if lo == lo else None,
               "median_window_ratio": round(statistics.median(per_window), 3) if per_window else None,
               "windows_at_most_peer": sum(1 for a, b in pairs if a <= b)}
    if args.json:
        print(json.dumps({"machine": machine, "interval_s": args.interval, "seconds": args.seconds,
                          "warmup_s": args.warmup, "rounds": rounds, "summary": summary}, indent=2))
        return 0
    print(f"machine: {machine}  refresh: {args.interval:g} s, both at once on {args.cols}x{args.rows} terminals")
    for r, got in enumerate(rounds, 1):
        print(f"round {r}: " + "  vs  ".join(got["commands"]) + f"; RSS MiB {got['rss_mib']}; exit codes {got['exit_codes']}")
        for w in got["windows"]:
            a, b = w["cpu_s"]
            print(f"  {w['window_s'][0]:6.1f}-{w['window_s'][1]:6.1f} s  CPU s {a:.3f} vs {b:.3f}"
                  + (f"  ratio {a / b:.2f}" if b else "") + f"  B/s {w['bytes_per_s'][0]} vs {w['bytes_per_s'][1]}")
    print(f"{summary['windows']} paired windows: CPU s {summary['cpu_s_total'][0]:.2f} vs {summary['cpu_s_total'][1]:.2f}; "
          f"ratio of totals {ratio:.3f} (95 % bootstrap interval {lo:.3f}-{hi:.3f}); median window ratio "
          f"{summary['median_window_ratio']}; windows at most the peer's: {summary['windows_at_most_peer']}")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except (OSError, RuntimeError) as exc:  # a monitor not installed, or one that exited early
        print(f"tui_cpu.py: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
