"""The diagnosis rules on measured figures, the NVML sampler, stragglers, and the import contract."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

from gpudoctor.backends import NvmlBackend, NvmlGate
from gpudoctor.hooks.sampler import TrainingSampler, nvml_index_for
from gpudoctor.hooks.summary import (
    GPU_UNDERUTILISED_PCT, INPUT_BOUND_SHARE, RawTimings, Summary, build_summary, find_stragglers,
)
from support.fresh_interpreter import modules_loaded
from support.nvml_fake import FakePynvml, util

GiB = 1 << 30


def _raw(n=50, step=0.010, wait=0.001, device="cuda:0", device_steps=True, **extra):
    starts = [i * (step + wait) for i in range(n)]
    return RawTimings(waits=[wait] * n, host_steps=[step] * n, iter_starts=starts,
                      ends=[s + wait + step for s in starts], passes=[1] * n,
                      device_steps=[step] * n if device_steps else None, device=device, **extra)


def _sample(util, used=10 * GiB, total=80 * GiB):
    return {"t": time.time(), "gpu_util_pct": util, "memory_used_bytes": used, "memory_total_bytes": total,
            "power_w": 250.0, "power_limit_w": 700.0, "clock_sm_mhz": 1980, "temperature_c": 60,
            "throttle_reason_names": []}


def test_underused_gpu_from_nvml_samples():
    summary = build_summary(_raw(gpu_samples=[_sample(35), _sample(40), _sample(45)]))
    assert summary.codes == ["gpu_underutilised"]
    assert "40% of the training time" in summary.diagnosis[0].summary
    assert summary.gpu["util_mean_pct"] == 40 and summary.gpu["samples"] == 3


def test_no_gpu_diagnosis_when_the_watched_gpu_held_nothing():
    memory = {"total_bytes": 80 * GiB, "peak_reserved_bytes": 0, "peak_allocated_bytes": 0,
              "reserved_bytes": 0, "allocated_bytes": 0, "inactive_split_bytes": 0, "alloc_retries": 0}
    summary = build_summary(_raw(gpu_samples=[_sample(0)] * 5, memory=memory))
    assert "gpu_underutilised" not in summary.codes


def test_busy_gpu_is_fine():
    summary = build_summary(_raw(gpu_samples=[_sample(97)] * 5))
    assert summary.codes == [] and summary.gpu["util_mean_pct"] == 97 > GPU_UNDERUTILISED_PCT


def test_event_spans_are_not_gpu_busy_evidence_without_nvml():
    # each step's events span 3 ms of an 11 ms iteration; the span says nothing about how
    # busy the GPU was inside it, so without NVML there is no utilisation diagnosis
    raw = _raw(device_steps=False)
    raw.device_steps = [0.003] * 50
    summary = build_summary(raw)
    assert summary.device_span_share == summary.to_dict()["device_busy_share"]
    assert abs(summary.device_span_share - 3 / 11) < 1e-9
    assert "gpu_underutilised" not in summary.codes
    text = str(summary)
    assert "GPU busy with" not in text and "device span 27% of the wall time (not GPU busy time)" in text


def test_old_summaries_with_device_busy_share_still_load():
    from support._hooks_loops import validate_summary

    data = build_summary(_raw()).to_dict()
    data.pop("device_span_share")
    data["device_busy_share"] = 0.5
    again = Summary.from_dict(data)
    assert again.device_span_share == 0.5 and again.device_busy_share == 0.5
    out = again.to_dict()
    assert out["device_span_share"] == out["device_busy_share"] == 0.5
    validate_summary(out)


def test_memory_near_limit_from_the_allocator():
    memory = {"total_bytes": 80 * GiB, "peak_reserved_bytes": 76 * GiB, "peak_allocated_bytes": 70 * GiB,
              "reserved_bytes": 70 * GiB, "allocated_bytes": 60 * GiB, "inactive_split_bytes": 0,
              "alloc_retries": 0}
    summary = build_summary(_raw(memory=memory))
    assert summary.codes == ["memory_near_limit"]
    assert "76.0 GiB of the GPU's 80.0 GiB (95%)" in summary.diagnosis[0].summary


def test_memory_near_limit_from_nvml_whole_device():
    summary = build_summary(_raw(gpu_samples=[_sample(95, used=78 * GiB)] * 3))
    assert summary.codes == ["memory_near_limit"] and "all processes" in summary.diagnosis[0].summary


def test_fragmentation_from_alloc_retries_and_split_blocks():
    memory = {"total_bytes": 80 * GiB, "peak_reserved_bytes": 40 * GiB, "reserved_bytes": 30 * GiB,
              "allocated_bytes": 12 * GiB, "inactive_split_bytes": 12 * GiB, "alloc_retries": 3}
    summary = build_summary(_raw(memory=memory))
    assert summary.codes == ["fragmentation"]
    message = summary.diagnosis[0].summary
    assert "retry 3 time(s)" in message and "12.0 GiB of the 30.0 GiB" in message
    assert "expandable_segments:True" in summary.diagnosis[0].fix


def test_input_bound_needs_an_idle_gpu_on_cuda():
    # the host waits 30% of the time but the GPU stays busy through it: not input-bound
    raw = _raw(n=40, step=0.007, wait=0.003)
    raw.device_steps = [0.0098] * 40
    assert build_summary(raw).data_wait_share >= INPUT_BOUND_SHARE
    assert "input_bound" not in build_summary(raw).codes
    raw.device_steps = [0.005] * 40
    assert "input_bound" in build_summary(raw).codes


def test_input_bound_on_cuda_judges_gpu_activity_by_nvml_not_event_spans():
    # spans cover the whole wall time (the GPU sat inside the steps' spans waiting on the host)
    # but NVML saw kernels only half the time: the waits did starve the GPU
    raw = _raw(n=40, step=0.007, wait=0.003, gpu_samples=[_sample(50)] * 4)
    raw.device_steps = [0.0098] * 40
    summary = build_summary(raw)
    assert "input_bound" in summary.codes
    item = summary.diagnosis[summary.codes.index("input_bound")]
    assert "NVML saw a kernel running 50% of the training time" in item.summary
    assert "busy" not in item.summary and item.evidence["gpu_util_mean_pct"] == 50
    # short spans, but NVML saw the GPU busy through the waits: not input-bound
    raw = _raw(n=40, step=0.007, wait=0.003, gpu_samples=[_sample(95)] * 4)
    raw.device_steps = [0.004] * 40
    assert "input_bound" not in build_summary(raw).codes


def test_host_sync_text_quotes_nvml_not_event_spans():
    syncs = {"total": 50, "status": "counted", "outside_loop": 0, "other_threads": 0,
             "sites": [{"file": "train.py", "line": 7, "code": "total += loss.item()", "pattern": "item",
                        "origin": "user", "count": 50, "raised_in": None}]}
    summary = build_summary(_raw(host_syncs=syncs, gpu_samples=[_sample(92)] * 3))
    item = summary.diagnosis[summary.codes.index("host_sync_bound")]
    assert "NVML saw a kernel running 92% of the training time" in item.summary
    assert "busy" not in item.summary
    summary = build_summary(_raw(host_syncs=syncs))
    assert "busy" not in summary.diagnosis[summary.codes.index("host_sync_bound")].summary


def test_framework_sync_sites_get_framework_advice():
    site = {"file": "/site-packages/lightning/pytorch/loops/x.py", "line": 3, "code": "v = value.item()",
            "pattern": "item", "origin": "framework", "count": 50, "raised_in": None}
    syncs = {"total": 50, "status": "counted", "outside_loop": 0, "sites": [site]}
    item = build_summary(_raw(host_syncs=syncs)).diagnosis[0]
    assert item.code == "host_sync_bound" and "inside framework code" in item.summary
    assert "log_every_n_steps" in item.fix and "running_loss" not in item.fix


def test_nvml_samples_outside_the_steps_do_not_count_as_idle_training():
    # 50 steps of 11 ms from t=100 s; a 10 s validation run after step 25 (GPU idle, 0%)
    starts = [100 + i * 0.011 for i in range(25)] + [100 + 10.275 + i * 0.011 for i in range(25)]
    raw = RawTimings(waits=[0.001] * 50, host_steps=[0.010] * 50, iter_starts=starts,
                     ends=[s + 0.011 for s in starts], passes=[1] * 25 + [2] * 25,
                     device_steps=[0.010] * 50, device="cuda:0")
    inside = [dict(_sample(96), t_mono=100 + 0.05 + 0.05 * k) for k in range(4)] + \
             [dict(_sample(94), t_mono=110.3 + 0.05 * k) for k in range(4)]
    outside = [dict(_sample(0), t_mono=100.5 + 0.5 * k) for k in range(18)]
    raw.gpu_samples = inside + outside
    summary = build_summary(raw)
    assert summary.gpu["samples"] == 26 and summary.gpu["samples_in_steps"] == 8
    assert summary.gpu["util_mean_pct"] == 95 and "gpu_underutilised" not in summary.codes
    assert any("18 of 26 GPU samples fell outside the measured steps" in n for n in summary.notes)
    # the same idle samples taken during steps are underuse
    raw.gpu_samples = [dict(_sample(0), t_mono=100.02 + 0.011 * k) for k in range(10)]
    assert "gpu_underutilised" in build_summary(raw).codes


def test_stragglers_are_named():
    # lockstep DDP: rank 1 is slow to get data, the others wait for it inside their steps
    ranks = [{"rank": 0, "data_wait_p50_s": 0.002, "step_time_p50_s": 0.088},
             {"rank": 1, "data_wait_p50_s": 0.040, "step_time_p50_s": 0.050},
             {"rank": 2, "data_wait_p50_s": 0.002, "step_time_p50_s": 0.088},
             {"rank": 3, "data_wait_p50_s": 0.003, "step_time_p50_s": 0.087}]
    items = find_stragglers(ranks)
    assert [(i.code, i.evidence["rank"]) for i in items] == [("straggler", 1)]
    assert "Rank 1 is a straggler: it waits for data 40.0 ms" in items[0].summary
    assert find_stragglers(ranks[:1]) == []


def test_slow_steps_name_a_rank_only_when_its_iteration_is_longer():
    # ranks not in lockstep (no collective per step): rank 2's steps really are slower
    ranks = [{"rank": 0, "data_wait_p50_s": 0.001, "step_time_p50_s": 0.050},
             {"rank": 1, "data_wait_p50_s": 0.001, "step_time_p50_s": 0.051},
             {"rank": 2, "data_wait_p50_s": 0.001, "step_time_p50_s": 0.090}]
    items = find_stragglers(ranks)
    assert [(i.evidence["rank"], "steps take 90.0 ms" in i.summary) for i in items] == [(2, True)]


def test_summary_round_trip_keeps_everything():
    from support._hooks_loops import validate_summary

    memory = {"total_bytes": 80 * GiB, "peak_reserved_bytes": 76 * GiB, "peak_allocated_bytes": 70 * GiB,
              "reserved_bytes": 30 * GiB, "allocated_bytes": 12 * GiB, "inactive_split_bytes": 12 * GiB,
              "alloc_retries": 2, "ooms": 0}
    summary = build_summary(_raw(gpu_samples=[_sample(30)] * 4, memory=memory))
    assert summary.codes == ["gpu_underutilised", "memory_near_limit", "fragmentation"]
    validate_summary(summary.to_dict())
    again = Summary.from_dict(json.loads(summary.to_json()))
    assert again.to_dict() == summary.to_dict()


def two_gpus() -> FakePynvml:
    """Two GPUs at the gate; the second is torch's device 0 by bus id. No power reading."""
    nvml = FakePynvml(2, readings={
        "nvmlDeviceGetMemoryInfo": SimpleNamespace(used=GiB, free=79 * GiB, total=80 * GiB),
        "nvmlDeviceGetEnforcedPowerLimit": 700_000, "nvmlDeviceGetClockInfo": lambda clock: 1500,
        "nvmlDeviceGetTemperature": lambda sensor: 50, "nvmlDeviceGetCurrentClocksEventReasons": 0x4 | 0x20,
        "nvmlDeviceGetTotalEccErrors": lambda kind, counter: 0})
    for index, bus_id in enumerate((b"00000000:17:00.0", b"00000000:65:00.0")):
        nvml.devices[index].update({"nvmlDeviceGetPciInfo": SimpleNamespace(busId=bus_id),
                                    "nvmlDeviceGetUUID": f"GPU-{index}",
                                    "nvmlDeviceGetUtilizationRates": util(50 + index)})
    return nvml


def test_nvml_index_found_by_pci_bus_id():
    assert nvml_index_for(NvmlBackend(NvmlGate(two_gpus())), 0, "00000000:65:00.0") == 1
    assert nvml_index_for(NvmlBackend(NvmlGate(two_gpus())), 0, None) == 0  # no bus id: CUDA_VISIBLE_DEVICES order


def test_sampler_thread_keeps_the_diagnosis_fields():
    nvml = two_gpus()
    sampler = TrainingSampler(NvmlBackend(NvmlGate(nvml)), 1, interval_s=0.01)
    sampler.start()
    deadline = time.monotonic() + 60
    while nvml.calls["nvmlDeviceGetUtilizationRates"] < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    samples = sampler.snapshot()
    assert len(samples) >= 3 and not sampler._thread.is_alive()
    first = samples[0]
    assert first["gpu_util_pct"] == 51 and first["power_w"] is None  # NA becomes None
    assert first["throttle_reason_names"] == ["sw_power_cap", "sw_thermal_slowdown"]
    assert "ecc_volatile_corrected" not in first
    assert sampler.error is None and isinstance(first["t_mono"], float)
    assert nvml.calls["nvmlDeviceGetPcieThroughput"] == 0  # fast_sample(): no 20 ms PCIe counters
    assert samples[0]["t_mono"] <= samples[-1]["t_mono"] <= time.perf_counter()


def test_sampler_is_the_one_sampling_core_reading_one_device():
    from gpudoctor.sampling.sampler import Sampler

    nvml = two_gpus()
    sampler = TrainingSampler(NvmlBackend(NvmlGate(nvml)), 1)
    assert isinstance(sampler.core, Sampler)
    sampler.sample_once()
    (kept,) = sampler.snapshot()
    assert kept["gpu_util_pct"] == 51  # device 1 only
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == 1 and nvml.calls["nvmlDeviceGetPcieThroughput"] == 0


def test_importing_gpudoctor_and_hooks_loads_no_torch():
    assert modules_loaded("import gpudoctor, gpudoctor.hooks; gpudoctor.TrainingMonitor; gpudoctor.check_devices; "
                          "m = gpudoctor.TrainingMonitor()", ("torch", "pynvml", "textual")) == []


def test_busy_by_utilisation_idle_by_sm_activity_is_launch_bound():
    """GPM (Hopper and later) during the steps: NVML utilisation 98% but SM activity 7% and no tensor
    work is a launch-bound loop (it passed as a busy GPU), judged by the one busy verdict."""
    gpm = [dict(_sample(98), sm_active_pct=7.0, tensor_active_pct=0.0) for _ in range(5)]
    summary = build_summary(_raw(gpu_samples=gpm))
    assert summary.codes == ["launch_bound"]
    item = summary.diagnosis[0]
    assert "only 7% of SM cycles active" in item.summary and "CUDA graphs" in item.fix
    assert summary.gpu["sm_active_p50_pct"] == 7.0 and summary.gpu["gpm_samples"] == 5
    saturated = [dict(_sample(98), sm_active_pct=85.0, tensor_active_pct=60.0) for _ in range(5)]
    assert build_summary(_raw(gpu_samples=saturated)).codes == []  # the GPU is the bottleneck: fine
    assert build_summary(_raw(gpu_samples=[_sample(98)] * 5)).codes == []  # no GPM: nothing claimed


def test_sampler_reads_gpm_once_a_second_beside_the_fast_readings(monkeypatch):
    from gpudoctor.backends import nvml as nvml_backend
    from support.nvml_fake import hopper

    monkeypatch.setattr(nvml_backend, "GPM_MIN_INTERVAL_S", 0.0)  # NVML's 100 ms between GPM samples

    nvml = FakePynvml(readings=hopper(sm=12.0, tensor=0.0))
    sampler = TrainingSampler(NvmlBackend(NvmlGate(nvml)), 0)
    sampler.sample_once()   # arms GPM (Warming): nothing kept
    sampler._gpm_at -= 2.0  # as if a second and more had passed
    sampler.sample_once()
    sampler.sample_once()   # within the second: no GPM read
    first, second, third = sampler.snapshot()
    assert "sm_active_pct" not in first and second["sm_active_pct"] == 12.0 and "sm_active_pct" not in third
    plain = TrainingSampler(NvmlBackend(NvmlGate(FakePynvml())), 0)  # no GPM: asked once, then never
    plain.sample_once()
    plain._gpm_at = None
    plain.sample_once()
    assert plain._gpm_ok is False and all("sm_active_pct" not in s for s in plain.snapshot())
