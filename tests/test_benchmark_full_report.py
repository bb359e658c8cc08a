"""benchmarks/full_report.py: the target arithmetic, on a structured report (no GPU needed)."""

from __future__ import annotations

from pathlib import Path

from script_loader import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "full_report.py"


def _load():
    return load_script(SCRIPT, "full_report_bench")


def _report(measurements):
    return {"results": [{"probe": "transfer", "status": "pass", "duration_s": 5.0, "measurements": measurements}]}


def test_targets_met_and_missed():
    bench = _load()
    summary = bench.summarise(_report([
        {"name": "d2d_bandwidth", "value": 2900.0, "unit": "GB/s", "reference": 3350.0, "device": 0},
        {"name": "pinned_h2d_bandwidth", "value": 45.0, "unit": "GB/s", "reference": 63.0, "device": 0},
        {"name": "pageable_h2d_bandwidth", "value": 20.0, "unit": "GB/s", "reference": 63.0, "device": 0},
    ]), wall=41.0)
    rows = {r["name"]: r for r in summary["targets"]}
    assert set(rows) == {"d2d_bandwidth", "pinned_h2d_bandwidth"}
    assert rows["d2d_bandwidth"]["pct"] == 86.6 and rows["d2d_bandwidth"]["met"] is True
    assert rows["pinned_h2d_bandwidth"]["pct"] == 71.4 and rows["pinned_h2d_bandwidth"]["met"] is False
    assert summary["wall_met"] and not summary["all_met"]


def test_nothing_measured_is_not_met():
    bench = _load()
    summary = bench.summarise(_report([]), wall=5.0)
    assert summary["targets"] == [] and summary["all_met"] is False


def test_slow_report_misses_the_wall_target():
    bench = _load()
    summary = bench.summarise(_report([
        {"name": "bf16_matmul", "value": 800.0, "unit": "TFLOP/s", "reference": 989.5, "device": 0}]), wall=75.0)
    assert summary["targets"][0]["met"] is True
    assert not summary["wall_met"] and not summary["all_met"]
