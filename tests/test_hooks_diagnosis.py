"""The diagnosis rules on measured figures, the NVML sampler, stragglers, and the import contract."""

from __future__ import annotations

import json
import subprocess
import sys
import time


from gpudoctor.backends import NA
from gpudoctor.hooks.sampler import GpuSampler, nvml_index_for
from gpudoctor.hooks.summary import (
    GPU_UNDERUTILISED_PCT, INPUT_BOUND_SHARE, RawTimings, Summary, build_summary, find_stragglers,
)

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
    assert "40% of the time" in summary.diagnosis[0].message
    assert summary.gpu["util_mean_pct"] == 40 and summary.gpu["samples"] == 3


def test_no_gpu_diagnosis_when_the_watched_gpu_held_nothing():
    memory = {"total_bytes": 80 * GiB, "peak_reserved_bytes": 0, "peak_allocated_bytes": 0,
              "reserved_bytes": 0, "allocated_bytes": 0, "inactive_split_bytes": 0, "alloc_retries": 0}
    summary = build_summary(_raw(gpu_samples=[_sample(0)] * 5, memory=memory))
    assert "gpu_underutilised" not in summary.codes


def test_busy_gpu_is_fine():
    summary = build_summary(_raw(gpu_samples=[_sample(97)] * 5))
    assert summary.codes == [] and summary.gpu["util_mean_pct"] == 97 > GPU_UNDERUTILISED_PCT


def test_underused_from_cuda_events_when_nvml_is_missing():
    # device time 3 ms of an 11 ms iteration: 27% busy
    raw = _raw(device_steps=False)
    raw.device_steps = [0.003] * 50
    summary = build_summary(raw)
    assert "gpu_underutilised" in summary.codes
    assert "CUDA events" in summary.diagnosis[summary.codes.index("gpu_underutilised")].message


def test_memory_near_limit_from_the_allocator():
    memory = {"total_bytes": 80 * GiB, "peak_reserved_bytes": 76 * GiB, "peak_allocated_bytes": 70 * GiB,
              "reserved_bytes": 70 * GiB, "allocated_bytes": 60 * GiB, "inactive_split_bytes": 0,
              "alloc_retries": 0}
    summary = build_summary(_raw(memory=memory))
    assert summary.codes == ["memory_near_limit"]
    assert "76.0 GiB of the GPU's 80.0 GiB (95%)" in summary.diagnosis[0].message


def test_memory_near_limit_from_nvml_whole_device():
    summary = build_summary(_raw(gpu_samples=[_sample(95, used=78 * GiB)] * 3))
    assert summary.codes == ["memory_near_limit"] and "all processes" in summary.diagnosis[0].message


def test_fragmentation_from_alloc_retries_and_split_blocks():
    memory = {"total_bytes": 80 * GiB, "peak_reserved_bytes": 40 * GiB, "reserved_bytes": 30 * GiB,
              "allocated_bytes": 12 * GiB, "inactive_split_bytes": 12 * GiB, "alloc_retries": 3}
    summary = build_summary(_raw(memory=memory))
    assert summary.codes == ["fragmentation"]
    message = summary.diagnosis[0].message
    assert "retry 3 time(s)" in message and "12.0 GiB of the 30.0 GiB" in message
    assert "expandable_segments:True" in summary.diagnosis[0].advice


def test_input_bound_needs_an_idle_gpu_on_cuda():
    # the host waits 30% of the time but the GPU stays busy through it: not input-bound
    raw = _raw(n=40, step=0.007, wait=0.003)
    raw.device_steps = [0.0098] * 40
    assert build_summary(raw).data_wait_share >= INPUT_BOUND_SHARE
    assert "input_bound" not in build_summary(raw).codes
    raw.device_steps = [0.005] * 40
    assert "input_bound" in build_summary(raw).codes


def test_stragglers_are_named():
    # lockstep DDP: rank 1 is slow to get data, the others wait for it inside their steps
    ranks = [{"rank": 0, "data_wait_p50_s": 0.002, "step_time_p50_s": 0.088},
             {"rank": 1, "data_wait_p50_s": 0.040, "step_time_p50_s": 0.050},
             {"rank": 2, "data_wait_p50_s": 0.002, "step_time_p50_s": 0.088},
             {"rank": 3, "data_wait_p50_s": 0.003, "step_time_p50_s": 0.087}]
    items = find_stragglers(ranks)
    assert [(i.code, i.evidence["rank"]) for i in items] == [("straggler", 1)]
    assert "Rank 1 is a straggler: it waits for data 40.0 ms" in items[0].message
    assert find_stragglers(ranks[:1]) == []


def test_slow_steps_name_a_rank_only_when_its_iteration_is_longer():
    # ranks not in lockstep (no collective per step): rank 2's steps really are slower
    ranks = [{"rank": 0, "data_wait_p50_s": 0.001, "step_time_p50_s": 0.050},
             {"rank": 1, "data_wait_p50_s": 0.001, "step_time_p50_s": 0.051},
             {"rank": 2, "data_wait_p50_s": 0.001, "step_time_p50_s": 0.090}]
    items = find_stragglers(ranks)
    assert [(i.evidence["rank"], "steps take 90.0 ms" in i.message) for i in items] == [(2, True)]


def test_summary_round_trip_keeps_everything():
    from _hooks_loops import validate_summary

    memory = {"total_bytes": 80 * GiB, "peak_reserved_bytes": 76 * GiB, "peak_allocated_bytes": 70 * GiB,
              "reserved_bytes": 30 * GiB, "allocated_bytes": 12 * GiB, "inactive_split_bytes": 12 * GiB,
              "alloc_retries": 2, "ooms": 0}
    summary = build_summary(_raw(gpu_samples=[_sample(30)] * 4, memory=memory))
    assert summary.codes == ["gpu_underutilised", "memory_near_limit", "fragmentation"]
    validate_summary(summary.to_dict())
    again = Summary.from_dict(json.loads(summary.to_json()))
    assert again.to_dict() == summary.to_dict()


class FakeNvml:
    """Two GPUs as NvmlBackend describes them; the second is torch's device 0 by bus id."""

    def __init__(self):
        self.calls = 0

    def status(self):
        return None

    def device_count(self):
        return 2

    def static(self, index):
        return {"pci_bus_id": ["0000:17:00.0", "0000:65:00.0"][index], "uuid": f"GPU-{index}"}

    def sample(self, index):
        self.calls += 1
        return {"t": time.time(), "gpu_util_pct": 50 + index, "memory_used_bytes": GiB,
                "memory_total_bytes": 80 * GiB, "power_w": NA("NotSupported"), "power_limit_w": 700.0,
                "clock_sm_mhz": 1500, "temperature_c": 50, "throttle_reasons": 0x4 | 0x20,
                "ecc_volatile_corrected": 0}


def test_nvml_index_found_by_pci_bus_id():
    assert nvml_index_for(FakeNvml(), 0, "00000000:65:00.0") == 1
    assert nvml_index_for(FakeNvml(), 0, None) == 0  # no bus id: CUDA_VISIBLE_DEVICES order


def test_sampler_thread_keeps_the_diagnosis_fields():
    backend = FakeNvml()
    sampler = GpuSampler(backend, 1, interval_s=0.01)
    sampler.start()
    deadline = time.time() + 5
    while backend.calls < 3 and time.time() < deadline:
        time.sleep(0.01)
    sampler.stop()
    samples = sampler.snapshot()
    assert len(samples) >= 3 and not sampler._thread.is_alive()
    first = samples[0]
    assert first["gpu_util_pct"] == 51 and first["power_w"] is None  # NA becomes None
    assert first["throttle_reason_names"] == ["sw_power_cap", "sw_thermal_slowdown"]
    assert "ecc_volatile_corrected" not in first


def test_importing_gpudoctor_and_hooks_loads_no_torch():
    code = ("import sys, gpudoctor, gpudoctor.hooks; gpudoctor.TrainingMonitor; gpudoctor.check_devices; "
            "m = gpudoctor.TrainingMonitor(); print(sorted(k for k in ('torch', 'pynvml', 'textual') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
