"""The measuring helpers (probes/_timing, _pcie, _datasheet, _precision): statistics, the timing loop, arithmetic, PCIe ceilings, the datasheet table."""

from __future__ import annotations

import math
import re

import pytest

from gpudoctor.probes._datasheet import DATASHEET, lookup_gpu_spec
from gpudoctor.probes._pcie import pcie_ceiling_gbs
from gpudoctor.probes._precision import Tf32Environment
from gpudoctor.probes._timing import CpuClock, bandwidth_gbs, inner_count, matmul_tflops, percent_of, summarise, time_op
from gpudoctor.probes._timing import MiB


class ScriptedClock:
    """A clock whose samples are given in advance: the timing loop's logic without noise."""

    kind = "scripted"

    def __init__(self, durations):
        self.durations = list(durations)
        self.starts = 0

    def start(self):
        self.starts += 1
        return None

    def stop(self, token):
        return self.durations.pop(0)


# --------------------------------------------------------------------------- statistics
def test_summarise_median_and_quartiles():
    s = summarise([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s.median, s.minimum, s.maximum, s.count) == (3.0, 1.0, 5.0, 5)
    assert (s.q1, s.q3) == (2.0, 4.0)
    assert s.spread == pytest.approx(2.0 / 3.0)


def test_summarise_one_sample_and_none():
    assert summarise([0.25]).median == 0.25
    with pytest.raises(ValueError):
        summarise([])


def test_median_ignores_one_outlier():
    # a preempted repeat must not move the figure
    s = summarise([1.0, 1.01, 0.99, 1.0, 50.0])
    assert s.median == 1.0


# --------------------------------------------------------------------------- timing
def test_time_op_warmup_untimed_and_rotation_indices():
    seen = []
    clock = ScriptedClock([0.4, 0.2, 0.3])
    timing = time_op(seen.append, clock, warmup=2, repeats=3, inner=1)
    assert seen == [0, 1, 2, 3, 4]          # a running index: op rotates its inputs with it
    assert clock.starts == 3                 # warm-up calls are not timed
    assert timing.seconds == 0.3
    assert timing.repeats == 3 and timing.warmup == 2 and timing.clock == "scripted"


def test_time_op_divides_by_inner():
    calls = []
    timing = time_op(calls.append, ScriptedClock([1.0, 1.0, 1.0]), warmup=0, repeats=3, inner=4)
    assert len(calls) == 12
    assert timing.seconds == pytest.approx(0.25)


def test_time_op_budget_stops_early_after_min_repeats():
    import time

    timing = time_op(lambda i: time.sleep(0.02), CpuClock(), warmup=1, repeats=50,
                             budget_s=0.1, min_repeats=3)
    assert timing.stopped_early
    assert 3 <= timing.repeats < 50


def test_time_op_rejects_bad_arguments():
    with pytest.raises(ValueError):
        time_op(lambda i: None, CpuClock(), repeats=0)


def test_cpu_clock_measures_real_work():
    import time

    began = time.perf_counter()
    timing = time_op(lambda i: time.sleep(0.005), CpuClock(), warmup=1, repeats=3)
    outside = time.perf_counter() - began
    # a sleep lasts at least what it asks; a sample lies inside the whole call (no upper bound
    # of our own choosing: a busy machine may stretch a 5 ms sleep as far as it likes)
    assert 0.004 < timing.stats.minimum <= timing.seconds <= timing.stats.maximum
    assert timing.stats.minimum + timing.seconds + timing.stats.maximum <= outside  # the three samples
    assert timing.to_dict()["clock"] == "perf_counter"


def test_inner_count():
    assert inner_count(0.001, window_s=0.002) == 2
    assert inner_count(1e-6, window_s=0.002, cap=64) == 64
    assert inner_count(0.5) == 1
    assert inner_count(0.0, cap=16) == 16


# --------------------------------------------------------------------------- arithmetic
def test_bandwidth_and_flops():
    assert bandwidth_gbs(2e9, 1.0) == 2.0
    assert bandwidth_gbs(256 * MiB, 0.01) == pytest.approx(26.8435456)
    assert math.isnan(bandwidth_gbs(1, 0.0))
    # 8192^3 matmul in 1.1 ms: about 1000 TFLOP/s
    assert matmul_tflops(8192, 8192, 8192, 1.1e-3) == pytest.approx(999.5, rel=1e-3)
    assert percent_of(50.0, 63.0) == pytest.approx(79.365, rel=1e-4)
    assert percent_of(50.0, None) is None
    assert percent_of(float("nan"), 10.0) is None


# --------------------------------------------------------------------------- PCIe
@pytest.mark.parametrize("gen,width,expected", [
    (1, 16, 4.0), (2, 16, 8.0), (3, 16, 15.754), (4, 16, 31.508), (5, 16, 63.015), (4, 8, 15.754),
    (3, 1, 0.985), (6, 16, 121.0),
])
def test_pcie_ceiling(gen, width, expected):
    assert pcie_ceiling_gbs(gen, width) == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize("gen,width", [(None, 16), (4, None), (7, 16), (4, 0), (True, 16), ("4", 16)])
def test_pcie_ceiling_unknown(gen, width):
    from gpudoctor.backends.na import NA

    assert pcie_ceiling_gbs(gen, width) is None
    assert pcie_ceiling_gbs(NA("NotSupported"), 16) is None


# --------------------------------------------------------------------------- datasheet
#: The exact name NVML (nvidia-smi --query-gpu=name) and torch.cuda.get_device_name report for
#: the boards of each datasheet row. Every row must appear here (test below).
NVML_NAMES = [
    ("NVIDIA GH200 480GB", "GH200 96GB HBM3"),
    ("NVIDIA GH200 120GB", "GH200 96GB HBM3"),
    ("NVIDIA GH200 144G HBM3e", "GH200 144GB HBM3e"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 SXM5 80GB", "H100 SXM"),
    ("NVIDIA H100 80GB HBM3e", "H100 SXM"),
    ("NVIDIA H100", "H100 SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA A10", "A10"),
    ("NVIDIA L4", "L4"),
    ("Tesla T4", "T4"),
    ("Tesla V100-SXM2-32GB", "V100 SXM2"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("Tesla V100-PCIE-16GB", "V100 PCIe"),
    ("Tesla V100-PCIE-32GB", "V100 PCIe"),
    ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
    ("NVIDIA GeForce RTX 4080 SUPER", "GeForce RTX 4080 SUPER"),
    ("NVIDIA GeForce RTX 4080", "GeForce RTX 4080"),
    ("NVIDIA GeForce RTX 4070 Ti", "GeForce RTX 4070 Ti"),
    ("NVIDIA GeForce RTX 4070", "GeForce RTX 4070"),
    ("NVIDIA GeForce RTX 3090 Ti", "GeForce RTX 3090 Ti"),
    ("NVIDIA GeForce RTX 3090", "GeForce RTX 3090"),
    ("NVIDIA GeForce RTX 3080 Ti", "GeForce RTX 3080 Ti"),
    ("NVIDIA GeForce RTX 3080", "GeForce RTX 3080"),
    ("NVIDIA GeForce RTX 3070", "GeForce RTX 3070"),
    ("NVIDIA GeForce RTX 3060", "GeForce RTX 3060"),
]


def test_every_datasheet_row_has_its_nvml_names():
    assert {spec.model for _, spec in DATASHEET} == {model for _, model in NVML_NAMES}


@pytest.mark.parametrize("name,model", NVML_NAMES)
def test_lookup_known_names(name, model):
    spec = lookup_gpu_spec(name)
    assert spec is not None and spec.model == model


@pytest.mark.parametrize("name", [
    "NVIDIA A10G", "NVIDIA H20", "NVIDIA H800", "NVIDIA GeForce RTX 4070 Ti SUPER", "NVIDIA GeForce RTX 3060 Ti",
    "NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA L40S", "", None, 42,
])
def test_lookup_unknown_or_ambiguous_names(name):
    # an unknown variant must not borrow a neighbour's figures
    assert lookup_gpu_spec(name) is None


def test_datasheet_entries_are_consistent():
    for pattern, spec in DATASHEET:
        re.compile(pattern)
        assert spec.source and "NVIDIA" in spec.source
        assert spec.memory_bandwidth_gbs > 100
        assert spec.fp32 and spec.fp32 > 1
        for dtype in ("tf32", "fp16", "bf16"):
            peak = spec.peak_tflops(dtype)
            assert peak is None or peak >= spec.fp32
        if spec.bf16 is not None:
            assert spec.bf16 == spec.fp16
        if spec.tf32 is not None:
            assert spec.fp16 >= spec.tf32
        if spec.fp8 is not None:  # dense FP8 is twice dense BF16 (datasheets round each figure: 1 TFLOP/s)
            assert abs(spec.fp8 - 2 * spec.bf16) <= 1
    h100 = lookup_gpu_spec("NVIDIA H100 80GB HBM3")
    assert (h100.memory_bandwidth_gbs, h100.bf16) == (3350, 989.5)
    # the reviewer's figure: H100 SXM and H200 dense FP8, 1979 TFLOP/s (3958 with sparsity)
    assert h100.fp8 == lookup_gpu_spec("NVIDIA H200").fp8 == 1979
    assert lookup_gpu_spec("NVIDIA A100-SXM4-80GB").fp8 is None  # Ampere has no FP8 tensor cores



def test_tf32_environment_variables():
    from gpudoctor.probes._precision import tf32_environment

    assert tf32_environment({}) == Tf32Environment(False, False)
    ngc = tf32_environment({"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"})
    assert ngc.fp32_runs_as_tf32 and "NGC" in ngc.note
    off = tf32_environment({"NVIDIA_TF32_OVERRIDE": "0", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"})
    assert off.tf32_disabled and not off.fp32_runs_as_tf32  # 0 wins: cuBLAS uses no TF32 at all


def test_mig_slices_get_no_whole_gpu_datasheet():
    from gpudoctor.probes._datasheet import lookup_gpu_spec

    assert lookup_gpu_spec("NVIDIA H100 80GB HBM3") is not None
    assert lookup_gpu_spec("NVIDIA H100 80GB HBM3 MIG 1g.10gb") is None


def test_one_percentile_for_the_project():
    from gpudoctor.core.stats import percentile

    # linear interpolation between closest ranks (numpy's default, statistics.quantiles "inclusive")
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    assert percentile([1.0, 2.0], 0) == 1.0 and percentile([1.0, 2.0], 100) == 2.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)
    s = summarise([1.0, 2.0, 3.0, 4.0])
    assert (s.q1, s.median, s.q3) == (percentile([1, 2, 3, 4], 25), 2.5, percentile([1, 2, 3, 4], 75))


def test_link_ceiling_cross_checks_maximum_and_current():
    from gpudoctor.probes._pcie import host_link_is_c2c, link_ceiling

    plain = link_ceiling(4, 16, 1, 16)  # an idle link trains down: the maximum is the ceiling
    assert (plain.generation, plain.width, plain.note) == (4, 16, "")
    assert plain.gb_per_s == pytest.approx(31.508, rel=1e-3)
    vm = link_ceiling(1, 16, 4, 16)  # running above the "maximum": the maximum is misreported
    assert (vm.generation, vm.width) == (4, 16) and "virtual root port" in vm.note
    assert link_ceiling(None, 16, 4, 16).gb_per_s is None
    assert link_ceiling(4, 16).label == "PCIe gen 4 x16"
    assert host_link_is_c2c("NVIDIA GH200 480GB") and host_link_is_c2c("NVIDIA GB200")
    assert not host_link_is_c2c("NVIDIA H200") and not host_link_is_c2c("NVIDIA H100 80GB HBM3")
