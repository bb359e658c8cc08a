"""Real CPU runs of every pipeline mode, out-of-memory handling, the sweep and its advice."""

from __future__ import annotations


import pytest

torch = pytest.importorskip("torch")

from gpudoctor.core.errors import UsageError  # noqa: E402
from gpudoctor.workload import recommend as rec  # noqa: E402
from gpudoctor.workload.config import RunConfig, SweepConfig, cpu_count  # noqa: E402
from gpudoctor.workload.data import synthetic_mnist  # noqa: E402
from gpudoctor.core.stats import percentile  # noqa: E402
from gpudoctor.workload.run import RunResult, run_one  # noqa: E402
from gpudoctor.workload.sweep import SweepResult, run_sweep, sorted_runs  # noqa: E402
from support.nvml_fake import FakePynvml, nvml_error, util  # noqa: E402


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _validate(doc):
    import json
    from pathlib import Path

    jsonschema = pytest.importorskip("jsonschema")
    schema = Path(__file__).resolve().parents[2] / "docs" / "bench-mnist.schema.json"
    jsonschema.validate(json.loads(json.dumps(doc, allow_nan=False)), json.loads(schema.read_text()))


@pytest.fixture(scope="module")
def small_data():
    return synthetic_mnist(2048, 512, seed=0)


@pytest.mark.parametrize("mode,workers", [("dataloader", 0), ("dataloader", 1), ("tuned", 0),
                                          ("tuned", 1), ("resident", None)])
def test_each_mode_trains_for_real_on_cpu(small_data, mode, workers):
    result = run_one(RunConfig("cpu", mode, 256, workers), small_data, epochs=2)
    assert result.status == "ok", result.error
    assert result.steps == 2 * 8 and result.train_samples == 2048
    assert len(result.epoch_times_s) == 2 and result.epoch_s > 0
    assert result.samples_per_s == pytest.approx(2 * 2048 / sum(result.epoch_times_s), rel=0.01)
    assert 0 <= result.data_wait_share < 1
    assert 0 < result.step_p50_ms <= result.step_p95_ms
    assert result.final_loss < result.first_loss  # it learned something in 16 steps
    assert 0.0 <= result.test_accuracy <= 1.0
    # CPU runs have no GPU readings: None, not zero.
    assert result.gpu_util_mean_pct is None and result.peak_allocated_bytes is None
    assert result.device_name


def test_same_seed_same_numbers_across_modes(small_data):
    """Modes differ in how batches arrive, not in what the network computes from the seed."""
    a = run_one(RunConfig("cpu", "dataloader", 512, 0), small_data)
    b = run_one(RunConfig("cpu", "tuned", 512, 0), small_data)
    assert a.first_loss == pytest.approx(b.first_loss)
    assert a.final_loss == pytest.approx(b.final_loss, rel=1e-4)


def _oom_at(batch_size: int, phase: str = "step"):
    def hook(where: str, run: RunConfig) -> None:
        if where == phase and run.batch_size == batch_size:
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate 2.00 GiB (injected at batch {batch_size})")
    return hook


@pytest.mark.parametrize("phase", ["warmup", "step"])
def test_out_of_memory_is_a_result_and_the_sweep_goes_on(small_data, phase):
    config = SweepConfig(batch_sizes=[128, 1024, 256], workers=[0], modes=["resident"], devices=["cpu"])
    seen = []
    result = run_sweep(config, data=small_data, fault_hook=_oom_at(1024, phase),
                       on_run=lambda r, f: seen.append((r.batch_size, r.status, f)))
    assert [(b, s) for b, s, _ in seen] == [(128, "ok"), (1024, "oom"), (256, "ok")]
    assert [round(f, 3) for _, _, f in seen] == [0.333, 0.667, 1.0]
    oom = [r for r in result.runs if r.status == "oom"][0]
    assert "out of memory" in oom.error and oom.samples_per_s is None and oom.epoch_times_s == []
    doc = result.to_dict()
    _validate(doc)
    assert doc["complete"] and doc["recommendation"]["oom_batch_sizes"] == [1024]
    assert doc["runs"][-1]["status"] == "oom"  # untimed runs sort last
    assert doc["recommendation"]["best"]["batch_size"] in (128, 256)


def test_other_failures_are_error_results(small_data):
    def hook(where, run):
        if where == "setup":
            raise ValueError("disk on fire")
    result = run_one(RunConfig("cpu", "tuned", 128, 0), small_data, fault_hook=hook)
    assert result.status == "error" and result.error == "ValueError: disk on fire"


def test_stop_request_keeps_finished_runs(small_data):
    calls = {"n": 0}

    def should_stop():
        calls["n"] += 1
        return len(finished) >= 1

    finished = []
    config = SweepConfig(batch_sizes=[512, 256, 128], workers=[0], modes=["resident"], devices=["cpu"])
    result = run_sweep(config, data=small_data, should_stop=should_stop,
                       on_run=lambda r, f: finished.append(r))
    assert result.interrupted and len(result.runs) == 1 and result.planned == 3
    doc = result.to_dict()
    assert doc["interrupted"] and not doc["complete"]
    assert SweepResult.from_dict(doc).runs[0].batch_size == 512


def test_workers_are_capped_by_cpu_count(small_data):
    cpus = cpu_count()
    config = SweepConfig(batch_sizes=[512], workers=[0, cpus + 3], modes=["dataloader"], devices=["cpu"])
    assert config.effective_workers() == ([0, cpus], [cpus + 3])
    result = run_sweep(config, data=small_data)
    assert [r.workers for r in result.runs] == [0, cpus]
    assert "capped" in result.notes[0]


@pytest.mark.parametrize("kwargs,message", [
    ({"batch_sizes": [0]}, "--batch-sizes"), ({"batch_sizes": [-5]}, "--batch-sizes"),
    ({"batch_sizes": [1.5]}, "--batch-sizes"), ({"workers": [-1]}, "--workers"),
    ({"modes": ["fast"]}, "unknown mode"), ({"devices": ["tpu"]}, "unknown device"),
    ({"epochs": 0}, "--epochs"), ({"util_interval_s": 0.5}, "10 Hz"),
])
def test_bad_configuration_is_a_usage_error(kwargs, message):
    with pytest.raises(UsageError, match=message):
        run_sweep(SweepConfig(**kwargs))


# --------------------------------------------------------------------------- advice
def _run(device, mode, batch, workers, sps, wait=0.05, acc=0.95, util=None, **kw):
    return RunResult(device=device, mode=mode, batch_size=batch, workers=workers, samples_per_s=sps,
                     epoch_s=60000 / sps, data_wait_share=wait, test_accuracy=acc,
                     gpu_util_mean_pct=util, gpu_util_max_pct=util, **kw)


def test_recommendation_sees_a_starved_gpu_and_reports_speedup():
    gib = 1024 ** 3
    runs = [
        _run("cuda", "dataloader", 64, 0, 9000, wait=0.55, util=18),
        _run("cuda", "tuned", 64, 2, 20000, wait=0.35, util=40),
        _run("cuda", "resident", 64, None, 60000, wait=0.01, util=70),
        _run("cuda", "resident", 20000, None, 900000, wait=0.0, util=95, acc=0.62,
             peak_reserved_bytes=2 * gib, peak_allocated_bytes=gib, device_memory_total_bytes=80 * gib),
        _run("cpu", "dataloader", 64, 0, 3000, wait=0.2),
        _run("cpu", "resident", 20000, None, 30000),
        RunResult(device="cuda", mode="resident", batch_size=50000, workers=None, status="oom", error="x"),
    ]
    advice = rec.recommend(runs)
    assert advice["best"]["mode"] == "resident" and advice["best"]["batch_size"] == 20000
    assert advice["starved"] is True
    assert "dataloader at batch 64 with 0 workers" in advice["starved_reasons"][0]
    assert "6.7x faster" in advice["starved_reasons"][0]
    text = " ".join(advice["reasons"])
    assert "100.0x the tutorials' loop" in text
    assert "62.0% held-out accuracy" in text  # the fast config's accuracy caveat
    assert "out of memory at batch size 50000" in text
    assert advice["headroom"]["free_fraction"] == pytest.approx(1 - 2 / 80)
    speed = rec.speedups(runs)
    assert speed["best_vs_best"]["speedup"] == 30.0
    assert [(p["mode"], p["batch_size"], p["speedup"]) for p in speed["same_config"]] == [
        ("dataloader", 64, 3.0), ("resident", 20000, 30.0)]


def test_recommendation_when_the_pipeline_keeps_up():
    runs = [_run("cuda", "dataloader", 1000, 4, 95000, wait=0.05),
            _run("cuda", "resident", 1000, None, 100000, wait=0.0)]
    advice = rec.recommend(runs)
    assert advice["starved"] is False and "keeps up" in advice["starved_reasons"][0]


def test_recommendation_with_nothing_finished():
    advice = rec.recommend([RunResult(device="cpu", mode="tuned", batch_size=64, workers=0,
                                      status="error", error="boom")])
    assert advice["best"] is None and "no run finished" in advice["summary"]


def test_sorting_and_percentile():
    runs = [_run("cpu", "tuned", 64, 0, 1000), RunResult("cpu", "tuned", 128, 0, status="oom"),
            _run("cpu", "tuned", 256, 0, 4000)]
    assert [r.batch_size for r in sorted_runs(runs)] == [256, 64, 128]
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 95) == 5.0
    assert percentile(list(map(float, range(101))), 95) == 95.0


def _utilisation_nvml(readings):
    """One GPU whose utilisation reads ``readings`` in turn, then the last one (None: NotSupported)."""
    answers = iter(readings)
    last = [None]

    def read():
        last[0] = next(answers, last[0])
        if last[0] is None:
            raise nvml_error("NotSupported")()
        return util(last[0])

    return FakePynvml(readings={"nvmlDeviceGetUtilizationRates": read})


def _nvml_with_samples(stamps_and_values):
    """One GPU whose driver buffer holds these (timestamp_us, percent) utilisation samples;
    ``nvmlDeviceGetSamples`` answers those newer than the timestamp asked for, as NVML does
    (NotFound when there are none)."""
    from types import SimpleNamespace

    def get_samples(kind, since):
        assert kind == 1  # NVML_GPU_UTILIZATION_SAMPLES
        newer = [SimpleNamespace(timeStamp=t, sampleValue=SimpleNamespace(uiVal=v))
                 for t, v in stamps_and_values if t > since]
        if not newer:
            raise nvml_error("NotFound")()
        return (1, newer)  # NVML_VALUE_TYPE_UNSIGNED_INT

    return FakePynvml(readings={"nvmlDeviceGetSamples": get_samples,
                                "nvmlDeviceGetUtilizationRates": util(97)})


def _sampled_run(buffer, start_us, stop_us):
    from gpudoctor.backends import NvmlBackend, NvmlGate
    from gpudoctor.workload.run import UtilSampler

    clock = iter([start_us, stop_us])
    sampler = UtilSampler(0, 30.0, backend=NvmlBackend(NvmlGate(_nvml_with_samples(buffer))),
                          clock_us=lambda: next(clock)).start()
    return sampler.stop()


PERIOD_US = 166_667  # NVML's shortest utilisation sample period, 1/6 s


def test_util_keeps_only_nvml_samples_whose_period_lies_inside_the_run():
    """Samples before the run (idle, 0 %) and the first one in it, which still averages time
    before the start, are left out; the utilisation polled at 20 Hz (97 %) is not used."""
    t0 = 50_000_000
    buffer = [(t0 + k * PERIOD_US, 0 if k <= 0 else 80 if k % 2 else 60) for k in range(-6, 13)]
    out = _sampled_run(buffer, t0 + 1000, t0 + 12 * PERIOD_US + 500)
    assert out["gpu_util_reason"] is None and out["gpu_util_note"] is None
    assert out["gpu_util_samples"] == 11  # k = 2..12: k = 1 ends 166 ms after a start 1 ms in
    assert out["gpu_util_mean_pct"] == pytest.approx(round((6 * 60 + 5 * 80) / 11, 1))
    assert out["gpu_util_max_pct"] == 80
    assert out["gpu_util_period_ms"] == pytest.approx(166.7) and out["gpu_util_hz"] == pytest.approx(6.0)


def test_a_run_shorter_than_nvmls_period_gets_a_reason_not_a_number():
    """A GPU-resident run of a few milliseconds: NVML's samples around it average mostly other
    time, so no "GPU busy X %" is quoted."""
    t0 = 50_000_000
    buffer = [(t0 + k * PERIOD_US, 100 if k == 1 else 3) for k in range(-6, 2)]
    out = _sampled_run(buffer, t0 + 20_000, t0 + 24_000)  # a 4 ms run
    assert out["gpu_util_mean_pct"] is None and out["gpu_util_samples"] == 0
    assert out["gpu_util_reason"] == "RunShorterThanNvmlPeriod"
    assert "4 ms" in out["gpu_util_note"] and "167 ms" in out["gpu_util_note"]


def test_a_long_run_that_no_sample_covers_says_so():
    t0 = 50_000_000
    buffer = [(t0 - k * PERIOD_US, 5) for k in range(1, 7)]  # the driver's buffer ends before the run
    out = _sampled_run(buffer, t0, t0 + 3_000_000)
    assert out["gpu_util_mean_pct"] is None and out["gpu_util_reason"] == "NoSampleInsideRun"


def test_replay_serves_recorded_utilisation_as_timestamped_samples():
    from gpudoctor.backends.replay import ReplayBackend

    recording = {"nvml": {"status": None, "device_count": 1, "static": [{"name": "GPU"}],
                          "samples": [{"t": 0.5, "devices": [{"gpu_util_pct": 10}]},
                                      {"t": 1.0, "devices": [{"gpu_util_pct": 90}]}]}}
    replay = ReplayBackend(recording)
    assert replay.utilization_samples(0, 0) == [(500_000, 10.0), (1_000_000, 90.0)]
    assert replay.utilization_samples(0, 500_000) == [(1_000_000, 90.0)]
    assert replay.utilization_samples(3, 0).reason == "InvalidArgument"


def test_recommendation_does_not_quote_utilisation_a_run_could_not_have():
    note = "the run lasted 4 ms, shorter than NVML's utilisation sample period (167 ms)"
    runs = [_run("cuda", "resident", 1000, None, 2_000_000, util=None, gpu_util_reason="RunShorterThanNvmlPeriod",
                 gpu_util_note=note)]
    text = " ".join(rec.recommend(runs)["reasons"])
    assert "GPU busy" not in text and "not measured: the run lasted 4 ms" in text


def test_util_sampler_reports_why_there_are_no_readings():
    import time

    from gpudoctor.backends import NvmlBackend, NvmlGate
    from gpudoctor.workload.run import UtilSampler

    sampler = UtilSampler(0, 0.05, backend=NvmlBackend(NvmlGate(_utilisation_nvml([None])))).start()
    time.sleep(0.2)
    out = sampler.stop()
    assert out["gpu_util_samples"] == 0 and out["gpu_util_mean_pct"] is None
    assert "NotSupported" in out["gpu_util_note"]
    # No NVML library at all (this machine, or a CPU-only container): a note, not an exception.
    missing = UtilSampler(0, 0.05, backend=NvmlBackend(NvmlGate(FakePynvml(init_error="LibraryNotFound")))).start()
    assert "NVML not available" in missing.stop()["gpu_util_note"]


def test_allocator_failures_count_as_out_of_memory():
    from gpudoctor.workload.run import _is_oom

    assert _is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB"))
    assert _is_oom(RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"))
    assert _is_oom(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"))
    assert not _is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied (64x100 and 784x512)"))
    assert not _is_oom(ValueError("out of memory"))  # only the library's own error types


def test_each_run_gets_sm_and_tensor_activity_from_gpm_over_its_window(monkeypatch):
    """GPM's two samples open and close at the run's start and end: SM and tensor activity over
    exactly the run beside its utilisation; without GPM, the reason instead of a number."""
    from gpudoctor.backends import NvmlBackend, NvmlGate
    from gpudoctor.backends import nvml as nvml_backend
    from gpudoctor.workload.run import UtilSampler
    from support.nvml_fake import gpm_table

    monkeypatch.setattr(nvml_backend, "GPM_MIN_INTERVAL_S", 0.0)  # NVML's 100 ms between the two samples
    t0 = 50_000_000
    buffer = [(t0 + k * PERIOD_US, 90) for k in range(-6, 13)]
    fake = _nvml_with_samples(buffer)
    fake.devices[0]["gpm"] = gpm_table(sm=11.0, tensor=0.0)
    clock = iter([t0 + 1000, t0 + 12 * PERIOD_US])
    out = UtilSampler(0, 30.0, backend=NvmlBackend(NvmlGate(fake)), clock_us=lambda: next(clock)).start().stop()
    assert (out["gpu_sm_active_pct"], out["gpu_tensor_active_pct"], out["gpu_gpm_note"]) == (11.0, 0.0, None)
    assert out["gpu_util_mean_pct"] == 90
    clock = iter([t0 + 1000, t0 + 12 * PERIOD_US])
    older = UtilSampler(0, 30.0, backend=NvmlBackend(NvmlGate(_nvml_with_samples(buffer))),
                        clock_us=lambda: next(clock)).start().stop()
    assert older["gpu_sm_active_pct"] is None and older["gpu_gpm_note"] == "needs Hopper or later"


def test_recommendation_says_when_a_busy_gpu_is_not_really_working():
    """The recommended run read busy 98%, but GPM saw 8% of SM cycles active: the reasons say so
    in the busy verdict's words, with its fix; without GPM nothing is added."""
    runs = [_run("cuda", "resident", 64, None, 60000, wait=0.0, util=98,
                 gpu_sm_active_pct=8.0, gpu_tensor_active_pct=0.0)]
    text = " ".join(rec.recommend(runs)["reasons"])
    assert "GPM: busy 98% of the time, but only 8% of SM cycles active" in text and "CUDA graphs" in text
    plain = " ".join(rec.recommend([_run("cuda", "resident", 64, None, 60000, wait=0.0, util=98)])["reasons"])
    assert "GPM" not in plain
