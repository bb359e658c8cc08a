"""The distributed check for real: 2 gloo ranks on CPU, self-launched and under torchrun,
plus a crashed and a hung rank (each bounded by a time limit)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpudoctor.probes.distributed import DEFAULT_SIZES, assemble, launch_local

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "docs" / "report.schema.json"
SMALL = [64 << 10, 1 << 20]


def validate(report: dict) -> None:
    if not SCHEMA.exists():
        return  # the lead adds the schema on main; validated there
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))


def check_good_result(result: dict, mode: str, sizes: list[int]) -> None:
    assert result["probe"] == "distributed"
    assert result["status"] == "pass", result["findings"]
    details = result["details"]
    assert details["mode"] == mode and details["backend"] == "gloo" and details["world_size"] == 2
    rows = details["allreduce"]
    assert [row["bytes"] for row in rows] == sizes
    for row in rows:
        assert row["busbw_GBps"] > 0
        # nccl-tests' definition with n = 2: busbw = algbw * 2 * (2 - 1) / 2 = algbw
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"], rel=1e-3)
        assert set(row["per_rank_time_us"]) == {"0", "1"}
    measures = {m["name"]: m for m in result["measurements"]}
    assert measures["allreduce_busbw_64KiB"]["unit"] == "GB/s"
    for name in ("ddp_grad_diff_vs_manual_allreduce", "ddp_grad_spread_across_ranks",
                 "ddp_param_spread_across_ranks"):
        assert measures[name]["value"] <= measures[name]["reference"], name
    assert [r["rank"] for r in details["ranks"]] == [0, 1]
    assert all(r["ddp_compute_ms"] > 0 for r in details["ranks"])
    codes = {f["code"] for f in result["findings"]}
    assert "distributed_ok" in codes
    assert "multi_gpu_skipped" in codes  # no GPUs on the gloo path: said, with the reason


def test_cli_self_launched_two_gloo_ranks(tmp_path):
    out = tmp_path / "dist.json"
    run = subprocess.run([sys.executable, "-m", "gpudoctor", "distributed", "--nproc", "2", "--backend", "gloo",
                          "--sizes", "64K,1M", "--timeout", "90", "--json", "-o", str(out)],
                         capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert json.loads(out.read_text()) == report  # one report, written whole
    validate(report)
    assert len(report["results"]) == 1
    check_good_result(report["results"][0], "local", SMALL)


def test_under_torchrun_every_rank_runs_and_rank0_writes_one_report(tmp_path):
    out = tmp_path / "dist.json"
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--standalone",
                          "-m", "gpudoctor", "report", "--probe", "distributed", "--json", "-o", str(out)],
                         capture_output=True, text=True, timeout=240, cwd=tmp_path,
                         env={**__import__("os").environ, "GLOO_SOCKET_IFNAME": "lo"})
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)  # exactly one JSON document: rank 1 prints nothing
    assert json.loads(out.read_text()) == report
    validate(report)
    assert "rank 1: done" in run.stderr
    result = report["results"][0]
    # with no GPU, auto picks gloo and says why NCCL was not checked
    assert any(f["code"] == "nccl_skipped" and f["status"] == "skip" for f in result["findings"])
    # `report` runs the probe with its default gloo sizes
    check_good_result(result, "torchrun", DEFAULT_SIZES["gloo"])


def test_crashed_rank_is_named():
    t0 = time.monotonic()
    # 240 s: the limit also bounds start-up (two ranks importing torch), which load stretches
    payloads, failures = launch_local(2, "gloo", SMALL, 240, fault="crash:1:allreduce")
    assert time.monotonic() - t0 < 240  # the crash ends the run, not the limit
    assert failures[1]["kind"] == "failed" and "code 17" in failures[1]["text"]
    assert failures[0]["kind"] == "stopped" and "rank 1" in failures[0]["text"]
    result = assemble(payloads, failures, 2, "gloo", "local")
    assert result.status.value == "fail"
    assert [f.code for f in result.findings if f.status.value == "fail"] == ["rank_failed"]
    assert result.summary.startswith("rank 1 exited with code 17")


def test_hung_rank_is_named_within_the_time_limit():
    # rank 1 stops right after joining the group; rank 0 goes on into the first all-reduce and waits.
    t0 = time.monotonic()
    # 90 s: the limit also bounds start-up, and two ranks importing torch on a loaded 2-core
    # machine took 15 s (40 s), and more with a CPU hog on each core, before they joined.
    payloads, failures = launch_local(2, "gloo", SMALL, 90, fault="hang:1:allreduce")
    elapsed = time.monotonic() - t0
    # the limit, plus killing and reading the ranks; below the ranks' own timeout (limit + 60 s)
    assert elapsed < 90 + 50, elapsed
    assert payloads == {}
    assert failures[1]["kind"] == "hung", failures
    assert "did not finish within 90 s" in failures[1]["text"]
    assert "last phase: init_process_group" in failures[1]["text"]
    assert failures[0]["kind"] == "stopped", failures
    assert "waiting for rank(s) 1 in allreduce 64 KiB" in failures[0]["text"]
    result = assemble(payloads, failures, 2, "gloo", "local")
    assert result.status.value == "fail"
    assert result.summary.startswith("rank 1 did not finish")


def test_usage_errors_exit_2(tmp_path):
    for argv in (["--nproc", "1"], ["--sizes", "lots"], ["--timeout", "1"]):
        run = subprocess.run([sys.executable, "-m", "gpudoctor", "distributed", *argv],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert run.returncode == 2, (argv, run.stderr)
        assert "error:" in run.stderr


def test_allocation_failure_on_one_rank_skips_that_size_on_every_rank():
    # Rank 1 cannot allocate the 256 KiB buffer. Every rank must skip that size together and
    # go on in step: before, rank 1 alone moved on to 1 MiB while rank 0 all-reduced 256 KiB.
    sizes = [64 << 10, 256 << 10, 1 << 20]
    t0 = time.monotonic()
    payloads, failures = launch_local(2, "gloo", sizes, 240, fault=f"oom:1:alloc{256 << 10}")
    assert time.monotonic() - t0 < 240  # in step, no rank waits out the limit
    assert failures == {}, failures
    assert set(payloads) == {0, 1}
    rank0, rank1 = (payloads[r]["allreduce"] for r in (0, 1))
    assert [e["bytes"] for e in rank0] == [e["bytes"] for e in rank1] == sizes
    assert "injected" in rank1[1]["error"] and rank1[1]["failed_ranks"] == [1]
    assert "error" not in rank0[1] and rank0[1]["skipped"] == "rank 1 could not allocate 256 KiB"
    assert rank0[1]["failed_ranks"] == [1]
    for entries in (rank0, rank1):  # the sizes around it ran, with the right sums
        assert entries[0]["correct"] is True and entries[2]["correct"] is True
        assert entries[2]["iters"] >= 3
    result = assemble(payloads, failures, 2, "gloo", "local")
    assert [row["bytes"] for row in result.details["allreduce"]] == [64 << 10, 1 << 20]
    warn = [f for f in result.findings if f.code == "allreduce_size_failed"]
    assert len(warn) == 1 and warn[0].status.value == "warn"
    assert warn[0].summary.startswith("all-reduce could not run at 256 KiB: rank 1: RuntimeError: CUDA out of memory")
    assert "rank 0" not in warn[0].summary and "skipped by every rank" in warn[0].summary
    assert result.status.value == "warn"
