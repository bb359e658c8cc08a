"""Benchmark: `gpudoctor watch`'s first line against `nvitop -1`, paired runs as whole processes.

Target (issue 33 item 3, where nvidia-smi is absent): the time until `gpudoctor watch` has written
its first GPU line at most 0.65x the time `nvitop -1` takes to print its whole snapshot and exit.
With ``--smi``, `nvidia-smi --query-gpu=...` (the query watch's line answers) is timed instead of
nvitop, for the target "at most 1.0x nvidia-smi's" on a machine that has it.

Each run is a fresh process; watch's clock stops when its first line has arrived on a pipe (then
it is stopped), nvitop's when it exits. Runs are interleaved (ours, theirs, theirs, ours...) so
that other work on the machine falls on both alike; medians and their ratio are reported.

    .venv/bin/python benchmarks/watch_first_line.py --fake-nvml --bin /path/to/light-venv/bin [-n 15]

``--bin DIR``: where ``gpudoctor`` and ``nvitop`` are (a venv's bin; gpudoctor installed from a
wheel there times what users have). Exit 0 when the target is met, 1 when not, 2 when a program
failed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _paired import interleaved, paired_parser, paired_result, program_env, show  # noqa: E402

SMI_QUERY = ["nvidia-smi", "--query-gpu=index,name,utilization.gpu,memory.used,memory.total,temperature.gpu,"
             "power.draw,clocks.sm", "--format=csv,noheader"]


def first_line_s(argv: list[str], env: dict[str, str]) -> float | None:
    """Seconds until ``argv`` has written its first line (it is then stopped); None if it wrote none."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    took = time.perf_counter() - start
    proc.kill()
    proc.wait(10)
    proc.stdout.close()
    return took if line.strip() else None


def whole_run_s(argv: list[str], env: dict[str, str]) -> float | None:
    start = time.perf_counter()
    code = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env).returncode
    return time.perf_counter() - start if code == 0 else None


def main() -> int:
    parser = paired_parser(__doc__, runs=15, warmup=3)
    parser.add_argument("--smi", action="store_true", help="compare with nvidia-smi's query instead of nvitop -1")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    bin_dir = Path(args.bin)
    ours = [str(bin_dir / "gpudoctor"), "watch", "-i", "1"]
    theirs, target = (SMI_QUERY, 1.0) if args.smi else ([str(bin_dir / "nvitop"), "-1"], 0.65)
    env = program_env(args.fake_nvml)
    runs = {"gpudoctor": (lambda: first_line_s(ours, env)), "other": (lambda: whole_run_s(theirs, env))}
    rounds = interleaved(runs, args.n, args.warmup)
    if isinstance(rounds, str):
        print(f"watch_first_line: {rounds} failed", file=sys.stderr)
        return 2
    result, _medians, ratio = paired_result(rounds[0], "gpudoctor", "other", target, args.fake_nvml)
    result.update(ours=" ".join(ours[1:]) + " (first line)", theirs=" ".join(Path(theirs[0]).name.split() + theirs[1:]))
    return show(result, ratio, f"({bin_dir})", [f"  gpudoctor {result['ours']}: median {result['gpudoctor_median_ms']:.1f} ms;  "
                                              f"{result['theirs']}: median {result['other_median_ms']:.1f} ms;  n={args.n}"],
                args.json)


if __name__ == "__main__":
    raise SystemExit(main())
