"""How long `gpudoctor fleet` takes over 1,000 GPUs held by a real Prometheus.

A synthetic endpoint on loopback serves the gpudoctor exporter series of NODES nodes with
GPUS GPUs each (the same metric names and labels a real exporter serves, one `instance`
label per node, scraped with honor_labels like a federation endpoint); a real Prometheus
scrapes it, then `gpudoctor fleet --json` runs RUNS times and its wall time is reported
(median, min, max). Needs the `prometheus` binary. Outside the default test run.

    python benchmarks/fleet_scale.py --nodes 125 --gpus 8 --runs 7 [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def exposition(nodes: int, gpus: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    now = time.time()
    lines = []
    for n in range(nodes):
        inst = f"gpu-node-{n:04d}:9402"
        lines.append(f'gpudoctor_nvml_up{{instance="{inst}"}} 1')
        lines.append(f'gpudoctor_sample_age_seconds{{instance="{inst}"}} {rng.uniform(0.1, 5):.2f}')
        lines.append(f'gpudoctor_sample_timestamp_seconds{{instance="{inst}"}} {now:.3f}')
        status = "fail" if n % 97 == 3 else "pass"
        for s in ("pass", "skip", "warn", "fail", "error"):
            lines.append(f'gpudoctor_report_status{{instance="{inst}",status="{s}"}} {1 if s == status else 0}')
        lines.append(f'gpudoctor_report_timestamp_seconds{{instance="{inst}"}} {now - 300:.0f}')
        for g in range(gpus):
            base = f'instance="{inst}",gpu="{g}"'
            full = base + f',uuid="GPU-{n:04d}-{g}",name="NVIDIA H100 80GB HBM3",pci_bus_id="0000:{g:02x}:00.0"'
            lost = (n * gpus + g) % 211 == 5
            lines.append(f'gpudoctor_gpu_info{{{full},driver_version="580.95.05"}} 1')
            lines.append(f'gpudoctor_gpu_up{{{base}}} {0 if lost else 1}')
            if lost:
                lines.append(f'gpudoctor_gpu_error_info{{{base},reason="GpuIsLost"}} 1')
                continue
            lines.append(f'gpudoctor_gpu_utilization_ratio{{{full}}} {rng.random():.2f}')
            lines.append(f'gpudoctor_gpu_memory_used_bytes{{{full}}} {rng.randint(1, 80) * 2**30}')
            lines.append(f'gpudoctor_gpu_memory_total_bytes{{{full}}} {80 * 2**30}')
            lines.append(f'gpudoctor_gpu_temperature_celsius{{{full}}} {rng.randint(30, 85)}')
            lines.append(f'gpudoctor_gpu_power_watts{{{full}}} {rng.uniform(60, 700):.1f}')
            lines.append(f'gpudoctor_gpu_power_limit_watts{{{full}}} 700')
            for reason in ("gpu_idle", "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                           "any_harmful"):
                lines.append(f'gpudoctor_gpu_throttled{{{full},reason="{reason}"}} 0')
            for kind in ("corrected", "uncorrected"):
                lines.append(f'gpudoctor_gpu_ecc_errors_total{{{full},error_type="{kind}",counter="volatile"}} 0')
            lines.append(f'gpudoctor_gpu_remapped_rows_pending{{{full}}} 0')
            lines.append(f'gpudoctor_gpu_remapped_rows_failure{{{full}}} 0')
            lines.append(f'gpudoctor_gpu_xid_errors_total{{{full}}} {1 if (n + g) % 331 == 0 else 0}')
            if (n + g) % 331 == 0:
                lines.append(f'gpudoctor_gpu_last_xid{{{full}}} 79')
    return ("\n".join(lines) + "\n").encode()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=125)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print("fleet_scale: needs the prometheus binary (apt-get install prometheus)", file=sys.stderr)
        return 2
    body = exposition(args.nodes, args.gpus)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        prom_port = s.getsockname()[1]
    work = Path(tempfile.mkdtemp(prefix="gpudoctor-fleet-bench-"))
    (work / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 5s\n  scrape_timeout: 4s\nscrape_configs:\n  - job_name: gpudoctor\n"
        f"    honor_labels: true\n    static_configs:\n      - targets: ['127.0.0.1:{server.server_address[1]}']\n")
    prom = subprocess.Popen([prometheus, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=work)
    try:
        url = f"http://127.0.0.1:{prom_port}"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                q = urllib.parse.urlencode({"query": "count(gpudoctor_gpu_info)"})
                with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as r:
                    result = json.load(r)["data"]["result"]
                if result and int(float(result[0]["value"][1])) == args.nodes * args.gpus:
                    break
            except OSError:
                pass
            time.sleep(1)
        else:
            print("fleet_scale: Prometheus never held every GPU", file=sys.stderr)
            return 1
        times, rows = [], 0
        for _ in range(args.runs):
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "gpudoctor", "fleet", "--prometheus", url, "--json"],
                                  capture_output=True, text=True, cwd=ROOT, timeout=120)
            times.append(time.perf_counter() - t0)
            if proc.returncode not in (0, 3, 4, 5):
                print(proc.stderr, file=sys.stderr)
                return 1
            rows = len(json.loads(proc.stdout)["rows"])
        result = {"gpus": args.nodes * args.gpus, "nodes": args.nodes, "rows": rows, "runs": args.runs,
                  "median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
                  "series_served": body.count(b"\n"), "date": time.strftime("%Y-%m-%d"),
                  "prometheus": subprocess.run([prometheus, "--version"], capture_output=True, text=True).stdout.splitlines()[0]}
        print(json.dumps(result, indent=2))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        return 0
    finally:
        prom.terminate()
        prom.wait(10)
        server.shutdown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
