"""Benchmark: `gpudoctor report --quick --json` against `nvitop -1`, same machine, same GPU.

Target (issue 33, item 1; issue 12 asked 0.8x): gpudoctor's median wall time at most 0.65x
nvitop's, one GPU, with the CUDA-start check in the report (its child runs beside the NVML probes).

Both run as fresh processes, the way a script or a user runs them, interleaved (ours,
theirs, theirs, ours, ...) so that load from other processes falls on both alike; wall
time per run, median and quartiles of N each after warm-up runs. The CPU time of each
run (user + system, from wait4) is given too: on a machine that other work keeps busy it
moves far less than wall time, and for these single-threaded start-ups it is the wall time
an idle machine would show, give or take file-system waits.

On a machine without an NVIDIA driver, ``--fake-nvml`` puts ``benchmarks/fake_nvml`` on
PYTHONPATH: its ``sitecustomize`` gives nvidia-ml-py's ``pynvml`` a fake one-GPU library
(an idle H100 PCIe), so both tools do all their own Python work against the same device.
What it cannot show is the cost of real driver calls (a few ms per tool on a real GPU).

    .venv/bin/pip install nvitop                     # benchmark peer, not a dependency
    python benchmarks/quick_vs_nvitop.py --fake-nvml [-n 30] [--bin .venv/bin] [--json]

``--bin DIR`` names the folder holding both ``gpudoctor`` and ``nvitop`` (a venv's bin):
point it at a venv where gpudoctor is installed from a wheel (``pip install .``) to time
the installed case, or at the development venv for the editable one. Bytecode is written
and used as a normal install would (PYTHONDONTWRITEBYTECODE is removed for the runs).

Exit 0 when the target is met, 1 when not, 2 when a tool could not run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _paired import paired_parser, program_env, run_facts  # noqa: E402

TARGET_RATIO = 0.65


def _run_once(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, CPU s, exit code) of one run."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def _summary(times: list[float], cpu: list[float]) -> dict[str, float]:
    q = statistics.quantiles(times, n=4)
    qc = statistics.quantiles(cpu, n=4)
    return {"median_ms": statistics.median(times) * 1000, "q1_ms": q[0] * 1000, "q3_ms": q[2] * 1000,
            "min_ms": min(times) * 1000, "max_ms": max(times) * 1000, "runs": len(times),
            "cpu_median_ms": statistics.median(cpu) * 1000, "cpu_q1_ms": qc[0] * 1000, "cpu_q3_ms": qc[2] * 1000}


def main() -> int:
    parser = paired_parser(__doc__, runs=30, warmup=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    bin_dir = Path(args.bin)
    ours = [str(bin_dir / "gpudoctor"), "report", "--quick", "--json"]
    theirs = [str(bin_dir / "nvitop"), "-1"]
    env = program_env(args.fake_nvml)
    for cmd in (ours, theirs):
        if not Path(cmd[0]).exists():
            print(f"quick_vs_nvitop: {cmd[0]} not found (pip install nvitop into that venv)", file=sys.stderr)
            return 2

    for _ in range(args.warmup):
        for cmd in (ours, theirs):
            _run_once(cmd, env)
    times: dict[str, list[float]] = {"ours": [], "theirs": []}
    cpu: dict[str, list[float]] = {"ours": [], "theirs": []}
    codes: dict[str, set[int]] = {"ours": set(), "theirs": set()}
    for i in range(args.n):
        order = (("ours", ours), ("theirs", theirs)) if i % 2 == 0 else (("theirs", theirs), ("ours", ours))
        for key, cmd in order:
            elapsed, cpu_s, code = _run_once(cmd, env)
            times[key].append(elapsed)
            cpu[key].append(cpu_s)
            codes[key].add(code)

    result = {
        **run_facts(args.fake_nvml),
        "bin": str(bin_dir),
        "gpudoctor": {"cmd": " ".join(ours[1:]), "exit_codes": sorted(codes["ours"]),
                      **_summary(times["ours"], cpu["ours"])},
        "nvitop": {"cmd": " ".join(theirs[1:]), "exit_codes": sorted(codes["theirs"]),
                   **_summary(times["theirs"], cpu["theirs"])},
    }
    ratio = result["gpudoctor"]["median_ms"] / result["nvitop"]["median_ms"]
    result["ratio_of_medians"] = ratio
    result["cpu_ratio_of_medians"] = result["gpudoctor"]["cpu_median_ms"] / result["nvitop"]["cpu_median_ms"]
    result["target"] = TARGET_RATIO
    result["met"] = ratio <= TARGET_RATIO
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['date']}  {result['machine']}  NVML: {result['nvml']}  ({bin_dir})")
        for name in ("gpudoctor", "nvitop"):
            r = result[name]
            print(f"  {name:<10} {r['cmd']:<22} wall median {r['median_ms']:6.1f} ms  "
                  f"IQR {r['q1_ms']:6.1f}-{r['q3_ms']:6.1f}  min {r['min_ms']:6.1f}  max {r['max_ms']:6.1f}  "
                  f"| CPU median {r['cpu_median_ms']:6.1f} ms IQR {r['cpu_q1_ms']:6.1f}-{r['cpu_q3_ms']:6.1f}  "
                  f"n={r['runs']}  exit {r['exit_codes']}")
        print(f"  wall ratio of medians {ratio:.2f} (target <= {TARGET_RATIO}): "
              f"{'met' if result['met'] else 'NOT met'};  CPU ratio {result['cpu_ratio_of_medians']:.2f}")
    if codes["ours"] - {0, 3} or codes["theirs"] != {0}:
        return 2
    return 0 if result["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
