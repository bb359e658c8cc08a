"""Time `gpudoctor bench mnist --quick` end to end (target: <= 60 s on a 2-core CPU machine).

Runs the real command in a fresh process, as a user would, a few times, and prints the
wall time of each with the machine it ran on. Writes the last sweep's JSON next to the
figures when --json-out is given.

    python benchmarks/bench_mnist_quick.py [--repeat 3] [--json-out FILE] [-- extra bench args]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time

TARGET_S = 60.0


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json-out", metavar="FILE")
    parser.add_argument("extra", nargs="*", help="extra arguments for bench mnist (after --)")
    args = parser.parse_args()
    out = args.json_out or os.devnull
    times = []
    for i in range(args.repeat):
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "gpudoctor", "bench", "mnist", "--quick",
                               "-o", out, *args.extra], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        elapsed = time.monotonic() - start
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return proc.returncode
        times.append(elapsed)
        load = os.getloadavg()[0]
        print(f"run {i + 1}: {elapsed:.1f} s (load average before next run {load:.2f})", flush=True)
    print(json.dumps({
        "benchmark": "gpudoctor bench mnist --quick",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{cpu_model()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "wall_s": [round(t, 1) for t in times],
        "max_s": round(max(times), 1),
        "target_s": TARGET_S,
        "within_target": max(times) <= TARGET_S,
    }, indent=2))
    return 0 if max(times) <= TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
