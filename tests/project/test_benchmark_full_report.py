"""benchmarks/full_report.py: the target arithmetic, on a structured report (no GPU needed)."""

from __future__ import annotations

from pathlib import Path

from support.script_loader import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "full_report.py"


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
    summary = bench.summarise(_report([]), wall=5.0)  # the transfer probe ran and measured nothing
    assert {r["name"]: r["met"] for r in summary["targets"]} == {"d2d_bandwidth": False, "pinned_h2d_bandwidth": False}
    assert summary["all_met"] is False
    assert bench.summarise({"results": []}, wall=5.0)["all_met"] is False


def test_slow_report_misses_the_wall_target():
    bench = _load()
    summary = bench.summarise(_report([
        {"name": "bf16_matmul", "value": 800.0, "unit": "TFLOP/s", "reference": 989.5, "device": 0}]), wall=75.0)
    assert summary["targets"][0]["met"] is True
    assert not summary["wall_met"] and not summary["all_met"]


def test_a_figure_without_a_reference_is_unknown_and_not_met():
    bench = _load()
    summary = bench.summarise(_report([
        {"name": "d2d_bandwidth", "value": 2900.0, "unit": "GB/s", "reference": 3350.0, "device": 0},
        {"name": "pinned_h2d_bandwidth", "value": 45.0, "unit": "GB/s", "reference": None, "device": 0},
    ]), wall=20.0)
    rows = {r["name"]: r for r in summary["targets"]}
    assert rows["d2d_bandwidth"]["met"] is True and rows["d2d_bandwidth"]["unknown"] is False
    assert rows["pinned_h2d_bandwidth"]["met"] is False and rows["pinned_h2d_bandwidth"]["unknown"] is True
    assert summary["wall_met"] and summary["all_met"] is False


def test_a_target_its_probe_did_not_measure_is_not_met():
    bench = _load()
    report = _report([{"name": "d2d_bandwidth", "value": 2900.0, "unit": "GB/s", "reference": 3350.0, "device": 0},
                      {"name": "pinned_h2d_bandwidth", "value": 60.0, "unit": "GB/s", "reference": 63.0, "device": 0}])
    report["results"].append({"probe": "compute", "status": "skip", "duration_s": 0.1, "measurements": []})
    summary = bench.summarise(report, wall=20.0)
    bf16 = [r for r in summary["targets"] if r["name"] == "bf16_matmul"]
    assert len(bf16) == 1 and bf16[0]["value"] is None and bf16[0]["met"] is False
    assert summary["all_met"] is False
    # a probe that was not asked for (--probe transfer) adds no row: its targets are not in this run
    alone = bench.summarise(_report(report["results"][0]["measurements"]), wall=20.0)
    assert {r["name"] for r in alone["targets"]} == {"d2d_bandwidth", "pinned_h2d_bandwidth"} and alone["all_met"]
