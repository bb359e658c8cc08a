"""The real CUDA path of the workload (needs a GPU; skips cleanly without one)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def data():
    from gpudoctor.workload.data import synthetic_mnist

    return synthetic_mnist(20_000, 2_000, seed=0)


@pytest.mark.parametrize("mode,workers", [("dataloader", 0), ("tuned", 2), ("resident", None)])
def test_cuda_run_measures_memory_and_utilisation(data, mode, workers):
    from gpudoctor.backends import NvmlBackend
    from gpudoctor.workload.config import RunConfig
    from gpudoctor.workload.run import run_one

    # Batch 128, two epochs of 20000: the same run on the CPU reaches 89-91 % held-out accuracy.
    result = run_one(RunConfig("cuda", mode, 128, workers), data, epochs=2)
    assert result.status == "ok", result.error
    assert result.device_name == torch.cuda.get_device_name(0)
    assert 0 < result.peak_allocated_bytes <= result.peak_reserved_bytes < result.device_memory_total_bytes
    assert result.test_accuracy > 0.8 and result.final_loss < result.first_loss / 2
    if NvmlBackend().status() is None:
        # NVML's own samples inside the run (1 to 6 a second), or a stated reason when the
        # run is shorter than NVML's sample period: never a number from outside the run.
        if result.gpu_util_samples == 0:
            assert result.gpu_util_reason in ("RunShorterThanNvmlPeriod", "NoSampleInsideRun"), result.gpu_util_note
            assert result.gpu_util_mean_pct is None
        else:
            assert 1 <= result.gpu_util_hz <= 6.5 and result.gpu_util_reason is None
            assert 0 <= result.gpu_util_mean_pct <= result.gpu_util_max_pct <= 100


def test_cuda_out_of_memory_is_released(data):
    """A real allocation far beyond the device: recorded as oom, memory back, next run fine."""
    from gpudoctor.workload.config import SweepConfig
    from gpudoctor.workload.sweep import run_sweep

    total = torch.cuda.get_device_properties(0).total_memory
    hog = {}

    def hook(phase, run):
        if phase == "step" and run.batch_size == 2000:
            hog["x"] = torch.empty(int(total * 2), dtype=torch.uint8, device="cuda")

    before = torch.cuda.memory_allocated(0)
    result = run_sweep(SweepConfig(batch_sizes=[1000, 2000, 500], workers=[0], modes=["resident"],
                                   devices=["cuda"]), data=data, fault_hook=hook)
    assert [r.status for r in result.runs] == ["ok", "oom", "ok"]
    assert torch.cuda.memory_allocated(0) <= before + 1024 ** 2


def test_cuda_sweep_gives_speedup_and_headroom(data):
    from gpudoctor.workload.config import SweepConfig
    from gpudoctor.workload.sweep import run_sweep

    doc = run_sweep(SweepConfig(batch_sizes=[1000], workers=[0], devices=["cpu", "cuda"]), data=data).to_dict()
    assert doc["speedups"]["same_config"] and doc["speedups"]["best_vs_best"]["speedup"] > 0
    assert doc["recommendation"]["best"]["device"] == "cuda"
    assert doc["recommendation"]["headroom"]["free_fraction"] is not None
