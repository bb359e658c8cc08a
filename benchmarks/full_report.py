"""Benchmark: how long `gpudoctor report --full` takes, and how close its figures come to the ceilings.

Run on a GPU machine (the targets are for an H100 or H200):

    python benchmarks/full_report.py --out bench-out            # whole --full report
    python benchmarks/full_report.py --probe transfer --probe compute

It runs the real CLI in a subprocess (so the timing includes torch's import in the probe
child, as a user sees it), writes the JSON report and a summary JSON next to it, and
prints one line per target:

- wall time of `report --full`  <= 60 s
- device-to-device copy          >= 85 % of the datasheet memory bandwidth
- pinned host-to-device copy     >= 80 % of the PCIe link's theoretical rate
- bf16 matmul                    >= 75 % of the datasheet dense peak

Exit code 0 when every target was met, 1 otherwise (a figure without a reference, or a
target its probe did not measure, is unknown, and unknown is not met), 2 on usage errors.
It never edits docs: copy the printed table into docs/measurements.md by hand, with the
device, driver and date it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TARGETS = {
    # measurement name: (minimum % of its reference, what the reference is, the probe that measures it)
    "d2d_bandwidth": (85.0, "datasheet memory bandwidth", "transfer"),
    "pinned_h2d_bandwidth": (80.0, "PCIe link theoretical rate", "transfer"),
    "bf16_matmul": (75.0, "datasheet dense bf16 peak", "compute"),
}
WALL_TARGET_S = 60.0


def run_report(out_dir: Path, probes: list[str], device: int | None,
               anonymize: bool = False) -> tuple[dict[str, Any], float, int]:
    report_path = out_dir / "report-full.json"
    cmd = [sys.executable, "-m", "gpudoctor", "report", "--full", "--json", "-o", str(report_path),
           "--fail-on", "fail"]
    for name in probes:
        cmd += ["--probe", name]
    if device is not None:
        cmd += ["--device", str(device)]
    if anonymize:
        cmd.append("--anonymize")
    started = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - started
    if not report_path.exists():
        sys.stderr.write(done.stderr)
        raise SystemExit(f"no report written (exit {done.returncode})")
    return json.loads(report_path.read_text()), wall, done.returncode


def device_facts() -> dict[str, Any]:
    from gpudoctor.backends import NvmlBackend

    gpu = NvmlBackend()
    try:
        count = gpu.device_count()
        names = [gpu.static(i).get("name") for i in range(count)] if isinstance(count, int) else []
        return {"driver_version": str(gpu.driver_version()), "cuda_driver_version": str(gpu.cuda_driver_version()),
                "devices": [str(n) for n in names]}
    finally:
        gpu.close()


def summarise(report: dict[str, Any], wall: float) -> dict[str, Any]:
    """Each target's row. Only a figure at or above its share of a known reference is met:
    a figure without a reference, or a target its probe did not measure, is unknown, and
    unknown is not met."""
    rows = []
    for result in report["results"]:
        for m in result["measurements"]:
            if m["name"] not in TARGETS:
                continue
            target, what, _ = TARGETS[m["name"]]
            pct = None
            if m.get("reference") and m.get("value") is not None:
                pct = 100.0 * m["value"] / m["reference"]
            rows.append({"probe": result["probe"], "name": m["name"], "device": m.get("device"),
                         "value": m["value"], "unit": m["unit"], "reference": m.get("reference"),
                         "pct": None if pct is None else round(pct, 1), "target_pct": target,
                         "reference_is": what, "met": pct is not None and pct >= target,
                         "unknown": pct is None})
    ran = {r["probe"] for r in report["results"]}
    seen = {row["name"] for row in rows}
    for name, (target, what, probe) in TARGETS.items():
        if probe in ran and name not in seen:  # the probe ran (skipped, failed) but gave no figure
            rows.append({"probe": probe, "name": name, "device": None, "value": None, "unit": "",
                         "reference": None, "pct": None, "target_pct": target, "reference_is": what,
                         "met": False, "unknown": True})
    timings = {r["probe"]: r["duration_s"] for r in report["results"]}
    wall_ok = wall <= WALL_TARGET_S
    # no figure at all (no GPU, or a probe failed) is not a met target
    return {"wall_s": round(wall, 2), "wall_target_s": WALL_TARGET_S, "wall_met": wall_ok,
            "probe_seconds": timings, "targets": rows,
            "all_met": bool(rows) and all(row["met"] for row in rows) and wall_ok,
            "statuses": {r["probe"]: r["status"] for r in report["results"]}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench-out", help="directory for the report and summary (default bench-out)")
    parser.add_argument("--probe", action="append", default=[], help="only these probes (default: all of --full)")
    parser.add_argument("--device", type=int, help="torch device index")
    parser.add_argument("--anonymize", action="store_true", help="strip UUIDs, serials and host names from the report")
    args = parser.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    report, wall, code = run_report(out_dir, args.probe, args.device, args.anonymize)
    summary = summarise(report, wall)
    summary.update(created=report.get("created"), gpudoctor_exit_code=code, host_cpu=report["host"].get("cpu_model"),
                   **device_facts())
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    print(f"devices: {', '.join(summary['devices']) or 'none'}; driver {summary['driver_version']}; "
          f"{summary['created']}")
    print(f"report --full wall time: {wall:.1f} s (target <= {WALL_TARGET_S:.0f} s) "
          f"{'met' if summary['wall_met'] else 'MISSED'}")
    for probe, seconds in summary["probe_seconds"].items():
        print(f"  {probe:<12} {seconds:6.1f} s  {summary['statuses'][probe]}")
    for row in summary["targets"]:
        pct = "n/a" if row["pct"] is None else f"{row['pct']:.1f} %"
        verdict = ("not met: no figure" if row["value"] is None else "not met: no reference" if row["unknown"]
                   else "met" if row["met"] else "MISSED")
        ref = "n/a" if row["reference"] is None else f"{row['reference']:g}"
        print(f"  cuda:{'-' if row['device'] is None else row['device']} {row['name']:<22} {row['value']!s:>10} {row['unit']:<8} of {ref:>8} "
              f"= {pct:>8} (target {row['target_pct']:.0f} % of {row['reference_is']}) {verdict}")
    if not summary["targets"]:
        print("no GPU figures were measured: the bandwidth and compute targets are unchecked")
    print(f"written: {out_dir / 'report-full.json'}, {out_dir / 'summary.json'}")
    return 0 if summary["all_met"] else 1


if __name__ == "__main__":
    import importlib.util

    if importlib.util.find_spec("gpudoctor") is None:  # run from a checkout without an install
        sys.path.insert(0, os.fspath(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
