"""Benchmark: `gpudoctor report --quick --json` against `gpustat --json`, same machine.

Target (issue 2): --quick is no slower than gpustat. Both are run as fresh processes, the
way a cron job or provisioning script runs them; wall time per run, median of N.

    pip install gpustat          # not a gpudoctor dependency
    python benchmarks/quick_vs_gpustat.py [-n 20] [--json]

Prints a table and exits 0 when gpudoctor's median is <= gpustat's, 1 when slower, 2 when
gpustat could not run (e.g. no NVIDIA driver: then only gpudoctor's figure is shown).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import time


def time_command(cmd: list[str], n: int) -> dict:
    times, codes, last_err = [], set(), ""
    for _ in range(n):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        codes.add(out.returncode)
        last_err = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
    return {"cmd": " ".join(cmd), "median_s": statistics.median(times), "min_s": min(times),
            "max_s": max(times), "exit_codes": sorted(codes), "last_stderr": last_err}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    ours = time_command([sys.executable, "-m", "gpudoctor", "report", "--quick", "--json"], args.n)
    gpustat = shutil.which("gpustat")
    theirs = time_command([gpustat, "--json"], args.n) if gpustat else None
    result = {"machine": f"{platform.node()} {platform.machine()} python {platform.python_version()}",
              "gpudoctor_quick": ours, "gpustat": theirs}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"machine: {result['machine']}")
        for name, r in (("gpudoctor report --quick --json", ours), ("gpustat --json", theirs)):
            if r is None:
                print(f"{name:<34} not installed")
                continue
            print(f"{name:<34} median {r['median_s'] * 1000:7.1f} ms  min {r['min_s'] * 1000:7.1f} ms  "
                  f"exit {r['exit_codes']}  {r['last_stderr'][:60]}")
    if theirs is None or theirs["exit_codes"] != [0]:
        return 2
    return 0 if ours["median_s"] <= theirs["median_s"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
