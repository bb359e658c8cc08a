"""memory, transfer, compute and correctness probes on a machine without a GPU.

The measurement loops run for real on CPU tensors (copies, matmuls, the correctness
check); the probes themselves must answer ``skip`` with the reason, and compute must
still give its CPU figure.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpudoctor.probes._precision import MATMUL_FORMATS, NORMWISE_LIMIT, componentwise_tolerance  # noqa: E402
from gpudoctor.probes._timing import CpuClock, MiB, bandwidth_gbs  # noqa: E402
from gpudoctor.core.model import ProbeResult, Report, Status  # noqa: E402
from gpudoctor.probes import ProbeContext, registry  # noqa: E402
from gpudoctor.probes import _gpu, compute, correctness, memory, transfer  # noqa: E402
from support.nvml_fake import no_driver  # noqa: E402

MEASURING = ("memory", "transfer", "compute", "correctness")
SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "report.schema.json"
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU answers")


def validate(report_dict):
    if not SCHEMA.exists():
        return
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(report_dict, json.loads(SCHEMA.read_text()))


# --------------------------------------------------------------------------- registry
def test_probes_registered_at_full_level_with_time_limits():
    probes = registry()
    for name in MEASURING:
        p = probes[name]
        assert p.level == "full" and p.uses_torch
        assert 10 <= p.timeout_s <= 45
        assert not p.runs_at("standard") and p.runs_at("full")
    # the four together leave room for the rest of `report --full` inside a minute on an H100
    assert sum(probes[n].timeout_s for n in MEASURING) <= 150


def test_probe_modules_do_not_import_torch_at_top_level():
    import subprocess
    import sys

    code = ("import sys; import gpudoctor.probes as p; p.registry(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------- loops on CPU
class StepClock:
    """A clock the test controls: every timed sample lasts ``step_s`` per start/stop pair,
    whatever the machine's load."""

    kind = "step"

    def __init__(self, step_s: float) -> None:
        self.step_s, self.pairs = step_s, 0

    def start(self) -> int:
        return self.pairs

    def stop(self, token: int) -> float:
        self.pairs += 1
        return self.step_s


def test_copy_timing_on_cpu_buffers():
    """What copy_timing does, not how fast this machine copies: the copies are real and land in
    the right slots, the timing's figures agree with each other (quartiles in order, the median
    is the figure, bytes / seconds is the rate reported) and their units are seconds per copy."""
    src = torch.empty(8 * MiB, dtype=torch.uint8)
    dst = torch.zeros(8 * MiB, dtype=torch.uint8)
    transfer.fill_random(torch, src, torch.Generator().manual_seed(1))
    assert int((src == 0).sum()) == 0  # never zeros as data
    clock = CpuClock()
    timing = transfer.copy_timing(dst, src, 2 * MiB, clock, budget_s=1.0, repeats=5)
    # every slot of the rotation (4 of 2 MiB fit in 8 MiB) was copied, nothing beyond was touched
    assert torch.equal(dst, src)
    stats = timing.stats
    assert timing.clock == "perf_counter" and 1 <= timing.inner <= 64 and timing.warmup == 1
    assert 3 <= timing.repeats <= 5 and stats.count == timing.repeats  # min_repeats, even when the budget ran out
    assert 0 < stats.minimum <= stats.q1 <= stats.median <= stats.q3 <= stats.maximum
    assert timing.seconds == stats.median
    gbs = bandwidth_gbs(2 * MiB, timing.seconds)
    assert gbs > 0 and gbs * 1e9 * timing.seconds == pytest.approx(2 * MiB, rel=1e-9)
    row = transfer._row("h2d_pinned", 2 * MiB, timing, 2 * MiB)
    assert row["gb_per_s"] == round(gbs, 3) and row["bytes"] == 2 * MiB and row["median_s"] == timing.seconds
    assert {"minimum_s", "q1_s", "q3_s", "maximum_s", "repeats", "inner", "clock"} <= set(row)


def test_copy_timing_reports_seconds_per_copy_by_the_clock_it_was_given():
    """With a clock the test controls, the figures are exact: a timed sample covers ``inner``
    copies, so seconds per copy is the sample's time over ``inner``."""
    src = torch.ones(4 * MiB, dtype=torch.uint8)
    dst = torch.zeros(4 * MiB, dtype=torch.uint8)
    clock = StepClock(0.008)
    timing = transfer.copy_timing(dst, src, 1 * MiB, clock, budget_s=None, repeats=5)
    assert torch.equal(dst, src)
    # the untimed first copy took 8 ms by this clock: one copy per 2 ms sample window
    assert timing.inner == 1 and timing.repeats == 5 and timing.clock == "step"
    assert clock.pairs == 1 + 5  # the sizing copy, then one pair per timed sample
    assert timing.seconds == pytest.approx(0.008)
    assert bandwidth_gbs(1 * MiB, timing.seconds) == pytest.approx(MiB / 0.008 / 1e9)
    fast = transfer.copy_timing(dst, src, 1 * MiB, StepClock(0.0005), budget_s=None, repeats=3)
    assert fast.inner == 4 and fast.seconds == pytest.approx(0.0005 / 4)  # 4 copies per 2 ms window


def test_fill_random_odd_sizes():
    buf = torch.zeros(3 * MiB + 17, dtype=torch.uint8)
    transfer.fill_random(torch, buf)
    assert int((buf == 0).sum()) == 0


def test_matmul_timing_and_cpu_figure():
    timing = compute.matmul_timing(torch, "cpu", torch.float32, 128, CpuClock(), budget_s=0.5,
                                   generator=torch.Generator().manual_seed(3))
    assert timing.seconds > 0 and timing.repeats >= 3
    cpu = compute.cpu_matmul_tflops(torch, budget_s=0.5)
    assert cpu["tflops"] > 0 and cpu["n"] >= 256 and cpu["threads"] >= 1


def test_correctness_checks_pass_on_cpu():
    rows = correctness.run_checks(torch, "cpu", seed=11, m=96, n=80, k=64, elements=4096)
    assert [r["mode"] for r in rows] == ["fp32", "tf32", "fp16", "bf16", "fp32_elementwise"]
    for row in rows:
        assert row["ok"], row
        assert row["nonfinite"] == 0 and row["repeat_identical"]
        assert row["componentwise"] < row["componentwise_limit"]


def _corrupt_check(mutate):
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(64, 32, dtype=torch.float64, generator=gen).float()
    b = torch.randn(32, 48, dtype=torch.float64, generator=gen).float()
    reference = a.double() @ b.double()
    scale = torch.outer(a.double().norm(dim=1), b.double().norm(dim=0))
    result = (a @ b).double()
    mutate(result)
    return correctness._judge(torch, "fp32", 32, result, reference, scale, True)


def test_a_flipped_bit_fails():
    def flip(result):
        # flip an exponent bit of one fp32 value: what a memory or ALU fault does
        value = torch.tensor([result[3, 7].item()], dtype=torch.float32)
        bits = value.view(torch.int32)
        bits ^= 1 << 27
        result[3, 7] = value.double().item()

    row = _corrupt_check(flip)
    assert not row["ok"] and row["componentwise"] > row["componentwise_limit"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_or_inf_never_passes(bad):
    def poison(result):
        result[0, 0] = bad

    row = _corrupt_check(poison)
    assert not row["ok"] and row["nonfinite"] == 1
    assert row["normwise"] is None and row["componentwise"] is None  # JSON-safe


def test_different_bits_on_repeat_fail():
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(8, 8, dtype=torch.float64, generator=gen)
    reference = a @ a
    row = correctness._judge(torch, "fp32", 8, reference.clone(), reference, torch.ones(8, 8), False)
    assert not row["ok"] and row["componentwise"] == 0


def test_tolerances_per_dtype_are_ordered():
    k = 512
    tol = {m: componentwise_tolerance(m, k) for m in MATMUL_FORMATS}
    assert tol["fp32"] < tol["tf32"] <= tol["bf16"] and tol["fp16"] < tol["bf16"]
    assert NORMWISE_LIMIT["fp32"] < NORMWISE_LIMIT["fp16"] < NORMWISE_LIMIT["bf16"]


# --------------------------------------------------------------------------- no GPU
def _ctx(**kw):
    return ProbeContext(gpu=no_driver(), level="full", **kw)


@no_cuda
@pytest.mark.parametrize("name", ["memory", "transfer", "correctness"])
def test_gpu_probes_skip_with_reason(name):
    module = {"memory": memory, "transfer": transfer, "correctness": correctness}[name]
    result = module.run(_ctx())
    assert result.status is Status.SKIP
    assert result.findings and result.findings[0].code in ("no_cuda_device", "torch_without_cuda")
    assert "CUDA" in result.summary and result.summary.endswith(").")
    assert result.findings[0].fix


@no_cuda
def test_compute_skips_gpu_but_reports_cpu_figure():
    result = compute.run(_ctx())
    assert result.status is Status.SKIP
    cpu = [m for m in result.measurements if m.name == "cpu_fp32_matmul"]
    assert len(cpu) == 1 and cpu[0].value > 0 and cpu[0].unit == "TFLOP/s"
    assert "CPU fp32 matmul" in result.summary
    assert result.details["cpu"]["repeats"] >= 3


def test_replay_is_not_measured():
    from gpudoctor.backends.replay import ReplayBackend

    gpu = ReplayBackend({"nvml": {"status": None, "device_count": 1, "static": [{"index": 0, "name": "NVIDIA H100 PCIe"}],
                                  "samples": []}})
    for module in (memory, transfer, compute, correctness):
        result = module.run(ProbeContext(gpu=gpu, level="full", replay=True))
        assert result.status is Status.SKIP
        assert result.findings[0].code == "replay_no_device"


def test_torch_without_cuda_reason():
    fake = types.SimpleNamespace(version=types.SimpleNamespace(cuda=None), __version__="2.9.0+cpu")
    reason = _gpu.cuda_devices(_ctx(), fake)
    assert isinstance(reason, _gpu.NoDevice) and reason.code == "torch_without_cuda"
    assert "2.9.0+cpu" in reason.summary


def test_first_line_keeps_the_reason_short():
    exc = RuntimeError("Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU.")
    assert _gpu._first_line(exc) == "RuntimeError: Found no NVIDIA driver on your system"


@no_cuda
def test_full_report_through_runner_is_valid():
    from gpudoctor.report import runner

    probes = [p for p in runner.select_probes(list(MEASURING), "full")]
    report = runner.run_probes(probes, runner.RunSpec(level="full"), gpu=no_driver())
    assert [r.probe for r in report.results] == ["memory", "correctness", "transfer", "compute"]
    assert {r.status for r in report.results} == {Status.SKIP}
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    validate(data)
    compute_result = Report.from_dict(data).result("compute")
    assert any(m.name == "cpu_fp32_matmul" and m.value > 0 for m in compute_result.measurements)


def test_probe_results_round_trip():
    result = compute.run(_ctx()) if not torch.cuda.is_available() else ProbeResult("compute")
    again = ProbeResult.from_dict(json.loads(json.dumps(result.to_dict(), allow_nan=False)))
    assert again.to_dict() == result.to_dict()


def test_quick_level_skips_without_importing_torch():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from gpudoctor.backends.na import NA\n"
        "from gpudoctor.probes import ProbeContext, registry\n"
        "class G:\n"
        "    def status(self): return NA('LibraryNotFound')\n"
        "    def device_count(self): return self.status()\n"
        "probes = registry()\n"
        "for name in ('memory', 'transfer', 'compute', 'correctness'):\n"
        "    r = probes[name].run(ProbeContext(gpu=G(), level='quick'))\n"
        "    print(name, r.status.value, r.findings[0].code)\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.split("\n")
    assert lines[:4] == [f"{n} skip quick_mode" for n in ("memory", "transfer", "compute", "correctness")]
    assert lines[4] == "False"



def test_fp32_under_forced_tf32_is_judged_by_tf32_limits():
    import torch

    from gpudoctor.probes._precision import Tf32Environment

    forced = Tf32Environment(fp32_runs_as_tf32=True, tf32_disabled=False)
    rows = correctness.run_checks(torch, "cpu", seed=3, m=64, n=64, k=64, elements=256,
                                  modes=("fp32", "tf32"), environment=forced)
    fp32 = next(r for r in rows if r["mode"] == "fp32")
    assert fp32["judged_as"] == "tf32" and "NGC" in fp32["judged_as_why"] and fp32["ok"]
    tf32 = next(r for r in rows if r["mode"] == "tf32")
    assert "judged_as" not in tf32
    plain = correctness.run_checks(torch, "cpu", seed=3, m=64, n=64, k=64, elements=256, modes=("fp32",))
    assert "judged_as" not in plain[0] and plain[0]["componentwise_limit"] < fp32["componentwise_limit"]


def test_correctness_restores_every_matmul_precision_flag_exactly():
    """fp16 and bf16 reduced-precision reduction are (reduced, split-K) pairs; TF32 has three views."""
    from gpudoctor.probes.correctness import check_matmul

    m = torch.backends.cuda.matmul
    saved_precision = torch.get_float32_matmul_precision()
    saved = {name: getattr(m, name) for name in (
        "allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_fp16_reduced_precision_reduction_split_k",
        "allow_bf16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction_split_k")}
    try:
        torch.set_float32_matmul_precision("medium")
        m.allow_fp16_reduced_precision_reduction = (False, False)  # writing a bool would reset split-K
        m.allow_bf16_reduced_precision_reduction = (False, False)
        before = {name: getattr(m, name) for name in saved}
        before_fp32 = getattr(m, "fp32_precision", None)
        for mode in ("fp32", "tf32", "fp16", "bf16"):
            check_matmul(torch, "cpu", mode, 8, 8, 8, torch.Generator().manual_seed(1))
        assert {name: getattr(m, name) for name in saved} == before
        assert torch.get_float32_matmul_precision() == "medium"
        assert getattr(m, "fp32_precision", None) == before_fp32
    finally:
        torch.set_float32_matmul_precision(saved_precision)
        m.allow_fp16_reduced_precision_reduction = (saved["allow_fp16_reduced_precision_reduction"],
                                                    saved["allow_fp16_reduced_precision_reduction_split_k"])
        m.allow_bf16_reduced_precision_reduction = (saved["allow_bf16_reduced_precision_reduction"],
                                                    saved["allow_bf16_reduced_precision_reduction_split_k"])
        m.allow_tf32 = saved["allow_tf32"]
