"""Load test for ``gpudoctor exporter``: N scrapes per second for S seconds on loopback.

Starts the exporter (serving a recording by default, live NVML with ``--live``), warms it
up, then scrapes ``/metrics`` at a steady rate and reports errors, latency and the
exporter process's resident memory (RSS) before and after. Exit 1 when a scrape failed
or RSS grew by more than ``--max-growth-mib``.

    python benchmarks/exporter_load.py                 # 50/s for 10 s, hand-made recording
    python benchmarks/exporter_load.py --live --rate 50 --seconds 10

Only 127.0.0.1; the loop is bounded by --seconds.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from gpudoctor.system._proc import stop_popen

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "tests" / "data" / "exporter_gpu_lost_handmade.json"


def scrape(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as response:
        body = response.read()
        if response.status != 200 or b"gpudoctor_nvml_up" not in body:
            raise RuntimeError(f"bad scrape: HTTP {response.status}, {len(body)} bytes")
        return len(body)


def paced(url: str, rate: float, seconds: float) -> dict:
    latencies, errors = [], []
    n = int(rate * seconds)
    t0 = time.monotonic()
    for i in range(n):
        due = t0 + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        start = time.monotonic()
        try:
            scrape(url)
        except Exception as exc:  # counted, not fatal: the test is about errors
            errors.append(f"{type(exc).__name__}: {exc}")
        latencies.append(time.monotonic() - start)
    elapsed = time.monotonic() - t0
    return {"scrapes": n, "errors": len(errors), "first_errors": errors[:3], "elapsed_s": round(elapsed, 3),
            "achieved_rate_per_s": round(n / elapsed, 2),
            "latency_ms_p50": round(statistics.median(latencies) * 1e3, 3),
            "latency_ms_p99": round(sorted(latencies)[int(0.99 * (len(latencies) - 1))] * 1e3, 3),
            "latency_ms_max": round(max(latencies) * 1e3, 3)}


def run(rate: float = 50.0, seconds: float = 10.0, warmup_s: float = 3.0, live: bool = False,
        interval: float = 1.0) -> dict:
    cmd = [sys.executable, "-m", "gpudoctor", "exporter", "--port", "0", "--interval", str(interval),
           "--report-interval", "0", "--exit-after", str(warmup_s + seconds + 60)]
    if not live:
        cmd += ["--replay", str(RECORDING)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = proc.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        if not match:
            raise RuntimeError(f"exporter did not start: {line}")
        url = f"http://127.0.0.1:{match.group(1)}/metrics"
        ps = psutil.Process(proc.pid)
        warm = paced(url, rate, warmup_s)
        rss_before = ps.memory_info().rss
        load = paced(url, rate, seconds)
        rss_after = ps.memory_info().rss
        return {"rate_per_s": rate, "seconds": seconds, "source": "nvml" if live else RECORDING.name,
                "warmup_errors": warm["errors"], **load,
                "rss_before_mib": round(rss_before / 2**20, 2), "rss_after_mib": round(rss_after / 2**20, 2),
                "rss_growth_mib": round((rss_after - rss_before) / 2**20, 3),
                "machine": f"{platform.node()} {platform.machine()}, {psutil.cpu_count()} logical CPUs",
                "python": platform.python_version()}
    finally:
        stop_popen(proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--live", action="store_true", help="live NVML instead of the hand-made recording")
    parser.add_argument("--max-growth-mib", type=float, default=2.0)
    args = parser.parse_args()
    result = run(args.rate, args.seconds, live=args.live)
    print(json.dumps(result, indent=2))
    ok = result["errors"] == 0 and result["warmup_errors"] == 0 and result["rss_growth_mib"] <= args.max_growth_mib
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
