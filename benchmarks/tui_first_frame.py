"""Benchmark: the TUI's time to its first full frame against nvitop's, paired runs on a pseudo-terminal.

Target (issue 33 item 3): gpudoctor's median at most 2.5x nvitop's, on the same GPU.

Each program starts as a fresh process on its own 120x40 pseudo-terminal
(benchmarks/pty_terminal.py); what it writes is fed as it comes into a terminal emulator
(pyte), and the clock stops at the first chunk after which the screen shows a full frame:

- gpudoctor: a GPU panel (the GPU's name) and the header's doctor verdict ("Doctor: PASS",
  or any other status word): the verdict comes from the quick check, which runs beside the
  first frame, so this is the time until the screen says both what the GPU does and whether
  the node is usable;
- nvitop: the GPU's name and its process panel's header ("Processes"), i.e. its whole screen.

Then the program is killed. Runs are paired and interleaved (ours, theirs, theirs, ours...)
so that load from other work falls on both alike; the ratio of medians is reported.

    .venv/bin/python benchmarks/tui_first_frame.py --fake-nvml --bin /path/to/light-venv/bin [-n 15]

``--bin DIR``: where both ``gpudoctor`` and ``nvitop`` are (a venv's bin: install gpudoctor there
from a wheel, ``pip install . nvitop``, to time what users have). This script itself needs pyte
(the development venv has it). ``--fake-nvml`` puts benchmarks/fake_nvml on PYTHONPATH (one idle
H100 PCIe, for a machine without a driver). Exit 0 when the target is met, 1 when not, 2 when a
program did not draw its frame within the limit.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pyte

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _paired import interleaved, paired_parser, paired_result, program_env, show  # noqa: E402
from pty_terminal import end, read_until_closed, start_on_pty  # noqa: E402

HERE = Path(__file__).resolve().parent
TARGET_RATIO = 2.5
COLS, ROWS = 120, 40
VERDICT_WORDS = ("PASS", "WARN", "FAIL", "ERROR", "SKIP")


def gpudoctor_frame(text: str, gpu: str) -> bool:
    """A GPU panel and the header's doctor verdict are on the screen."""
    header = next((line for line in text.splitlines() if "Doctor:" in line), "")
    return gpu in text and any(word in header for word in VERDICT_WORDS)


def nvitop_frame(text: str, gpu: str) -> bool:
    return gpu in text and "Processes" in text


def first_frame(argv: list[str], done, env: dict[str, str], gpu: str, limit_s: float) -> float | None:
    """Seconds from starting ``argv`` until ``done(screen text)``; None when not within ``limit_s``."""
    screen = pyte.Screen(COLS, ROWS)
    stream = pyte.ByteStream(screen)
    seen = threading.Event()
    when: list[float] = []

    def sink(data: bytes) -> None:
        if seen.is_set():
            return
        stream.feed(data)
        if done("\n".join(screen.display), gpu):
            when.append(time.perf_counter())
            seen.set()

    start = time.perf_counter()
    proc, master = start_on_pty(argv, cols=COLS, rows=ROWS, cwd=HERE, env=env)
    reader = threading.Thread(target=read_until_closed, args=(master, sink), daemon=True)
    reader.start()
    try:
        seen.wait(limit_s)
    finally:
        end(proc, master)
        reader.join(5)
    return when[0] - start if when else None


def main() -> int:
    parser = paired_parser(__doc__, runs=15, warmup=2)
    parser.add_argument("--gpu", default="H100", help="text of the GPU's name both screens show (default H100)")
    parser.add_argument("--limit", type=float, default=30.0, help="seconds a program gets to draw (default 30)")
    parser.add_argument("--floor", action="store_true",
                        help="also time `python -c 'import textual.app'` (a whole process) in the same rounds: "
                             "what gpudoctor's first frame cannot be under")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    bin_dir = Path(args.bin)
    programs = {"gpudoctor": ([str(bin_dir / "gpudoctor")], gpudoctor_frame),
                "nvitop": ([str(bin_dir / "nvitop")], nvitop_frame)}
    env = program_env(args.fake_nvml)
    for argv, _ in programs.values():
        if not Path(argv[0]).exists():
            print(f"tui_first_frame: {argv[0]} not found (pip install nvitop into that venv)", file=sys.stderr)
            return 2
    def import_textual() -> float:
        began = time.perf_counter()
        subprocess.run([str(bin_dir / "python"), "-c", "import textual.app"], env=env, check=True)
        return time.perf_counter() - began

    def frame(name: str) -> Callable[[], float | None]:
        return lambda: first_frame(*programs[name], env, args.gpu, args.limit)

    rounds = interleaved({name: frame(name) for name in programs}, args.n, args.warmup,
                         before=import_textual if args.floor else None)
    if isinstance(rounds, str):
        print(f"tui_first_frame: {rounds} drew no full frame within {args.limit:g} s", file=sys.stderr)
        return 2
    times, floor = rounds
    result, medians, ratio = paired_result(times, "gpudoctor", "nvitop", TARGET_RATIO, args.fake_nvml)
    result["terminal"] = f"{COLS}x{ROWS}"
    result.update({f"{name}_runs_ms": [round(t * 1000, 1) for t in times[name]] for name in programs})
    if floor:
        result["import_textual_median_ms"] = round(statistics.median(floor) * 1000, 1)
        result["import_textual_ratio"] = round(statistics.median(floor) * 1000 / medians["nvitop"], 3)
    lines = []
    for name in programs:
        t = times[name]
        q = statistics.quantiles(t, n=4) if len(t) > 1 else [t[0]] * 3
        lines.append(f"  {name:<10} first full frame: median {medians[name]:6.1f} ms  "
                     f"IQR {q[0] * 1000:6.1f}-{q[2] * 1000:6.1f}  n={len(t)}")
    if floor:
        lines.append(f"  python -c 'import textual.app' (whole process): median "
                     f"{result['import_textual_median_ms']:6.1f} ms = {result['import_textual_ratio']:.2f}x nvitop's first frame")
    return show(result, ratio, f"({bin_dir}), {COLS}x{ROWS}", lines, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
