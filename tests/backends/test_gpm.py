"""NVML GPM (Hopper and later) through the gate, on the fake NVML: SM activity and the other GPM
readings, their first read (warming), devices without GPM, per-metric errors, MIG, and the
sample buffers freed before NVML shuts down or restarts."""

from __future__ import annotations

from gpudoctor.backends import NA, NvmlBackend, NvmlGate, catalogue
from gpudoctor.backends.nvml import GPM_MIN_INTERVAL_S
from support.nvml_fake import GPM_NVLINK_RX, GPM_SM, FakePynvml, gpm_table, hopper, nvml_error


def _backend(nvml: FakePynvml) -> tuple[NvmlBackend, list[float]]:
    clock = [100.0]
    backend = NvmlBackend(NvmlGate(nvml))
    backend._clock = lambda: clock[0]
    return backend, clock


def test_the_first_read_is_warming_then_two_samples_give_the_readings():
    nvml = FakePynvml(readings=hopper(sm=9.0, tensor=0.0))
    backend, clock = _backend(nvml)
    first = backend.sample(0)
    assert all(first[r.key] == NA("Warming") for r in catalogue.gpm_readings())  # never 0
    clock[0] += 1.0
    second = backend.sample(0)
    assert second["sm_active_pct"] == 9.0 and second["tensor_active_pct"] == 0.0
    assert second["gpm_pcie_rx_mibps"] == 830.0
    # a metric the board lacks (NVLink on a PCIe card) is NA with its own error; the others stand
    assert second["nvlink_rx_mibps"] == NA("NotSupported")
    # a full read sooner than 100 ms after the last gives the last reading, not a new sample
    nvml.devices[0]["gpm"] = gpm_table(sm=80.0)
    clock[0] += GPM_MIN_INTERVAL_S / 2
    assert backend.sample(0)["sm_active_pct"] == 9.0
    clock[0] += GPM_MIN_INTERVAL_S
    assert backend.sample(0)["sm_active_pct"] == 80.0
    # the fast read beside a training loop never reads GPM
    assert "sm_active_pct" not in backend.fast_sample(0)


def test_devices_without_gpm_say_why_and_never_raise():
    nvml = FakePynvml(count=3)
    nvml.devices[1]["nvmlGpmQueryDeviceSupport"] = nvml_error("FunctionNotFound")  # an old driver
    nvml.devices[2]["nvmlGpmQueryDeviceSupport"] = nvml_error("NotSupported")  # a vGPU without it
    backend, clock = _backend(nvml)
    for _ in range(2):
        readings = [backend.gpm(i) for i in range(3)]
        clock[0] += 1
    assert readings[0]["sm_active_pct"] == NA("needs Hopper or later")
    assert readings[1]["tensor_active_pct"] == NA("needs a driver with GPM (R520 or later)")
    assert readings[2]["dram_active_pct"] == NA("needs Hopper or later")
    assert nvml.calls["nvmlGpmQueryDeviceSupport"] == 2  # asked once per device, not per read
    assert not nvml.gpm_buffers


def test_a_metric_error_and_an_impossible_value_stay_with_their_metric():
    table = gpm_table(sm=250.0)
    table[GPM_NVLINK_RX] = 4096.0
    nvml = FakePynvml(readings={"gpm": table})
    backend, clock = _backend(nvml)
    backend.gpm(0)
    clock[0] += 1
    readings = backend.gpm(0)
    assert readings["sm_active_pct"] == NA("implausible value 250")
    assert readings["nvlink_rx_mibps"] == 4096.0 and readings["nvlink_tx_mibps"] == NA("NotSupported")
    del table[GPM_SM]  # a metric id this driver does not know
    clock[0] += 1
    assert backend.gpm(0)["sm_active_pct"] == NA("InvalidArgument")


def test_mig_instances_are_read_per_gpu_instance():
    nvml = FakePynvml(readings={"nvmlDeviceGetMigMode": (1, 1), "gpm": gpm_table(),
                                "gpm_mig": {3: gpm_table(sm=55.0, tensor=40.0), 5: gpm_table(sm=2.0)}})
    backend, clock = _backend(nvml)
    assert backend.gpm(0)["sm_active_pct"] == NA("MIG mode: GPM is read per GPU instance")
    assert backend.gpm_mig(0, 3)["sm_active_pct"] == NA("Warming")
    backend.gpm_mig(0, 5)
    clock[0] += 1
    assert backend.gpm_mig(0, 3)["tensor_active_pct"] == 40.0
    assert backend.gpm_mig(0, 5)["sm_active_pct"] == 2.0
    assert backend.gpm_mig(0, 9)["sm_active_pct"] == NA("InvalidArgument")  # no such instance


def test_sample_buffers_are_freed_before_nvml_shuts_down_or_restarts():
    nvml = FakePynvml(count=2, readings=hopper())
    backend, clock = _backend(nvml)
    backend.sample(0), backend.sample(1)
    assert len(nvml.gpm_buffers) == 4  # two per device, allocated once
    clock[0] += 1
    backend.sample(0), backend.sample(1)
    assert len(nvml.gpm_buffers) == 4
    shutdowns = nvml.shutdown_calls
    backend.reset()
    assert not nvml.gpm_buffers and nvml.shutdown_calls == shutdowns + 1
    assert backend.sample(0)["sm_active_pct"] == NA("Warming")  # a restart starts again
    backend.close()
    assert not nvml.gpm_buffers


def test_a_lost_gpu_reads_as_lost_not_as_a_traceback():
    nvml = FakePynvml(readings=hopper())
    backend, clock = _backend(nvml)
    backend.gpm(0)
    nvml.lost.add(0)
    clock[0] += 1
    assert backend.gpm(0)["sm_active_pct"] == NA("GpuIsLost")


# --------------------------------------------------------------------------- the verdict
def test_the_verdict_in_words():
    from gpudoctor.backends.busy import basis as busy_basis, text as busy_text, verdict

    small = verdict({"gpu_util_pct": 100, "sm_active_pct": 9.0, "tensor_active_pct": 0.0})
    assert small.code == "busy_small_kernels"
    assert busy_text(small) == ("busy 100% of the time, but only 9% of SM cycles active and no tensor work: small "
                            "kernels or fp32 math; try larger batches, bf16/TF32 autocast or CUDA graphs")
    tensor = verdict({"gpu_util_pct": 99, "sm_active_pct": 88.0, "tensor_active_pct": 70.0})
    assert tensor.code == "tensor_bound" and tensor.summary.startswith("tensor cores 70% active")
    assert "bottleneck" in tensor.summary and not tensor.fix
    assert verdict({"gpu_util_pct": 0, "sm_active_pct": 0.0}).code == "idle"
    memory = verdict({"gpu_util_pct": 95, "sm_active_pct": 45.0, "tensor_active_pct": 3.0, "dram_active_pct": 82.0})
    assert memory.code == "memory_bound" and "DRAM bandwidth 82%" in memory.summary
    assert verdict({"gpu_util_pct": 97, "sm_active_pct": 90.0, "tensor_active_pct": 0.0}).code == "sm_bound"
    assert verdict({"gpu_util_pct": 45, "sm_active_pct": 35.0}).code == "waiting"
    assert verdict({"gpu_util_pct": 90, "sm_active_pct": 50.0, "tensor_active_pct": 10.0}).code == "partly_busy"
    # not enough to judge: the first GPM read
    warming = verdict({"gpu_util_pct": 100, "sm_active_pct": NA("Warming")})
    assert warming.code == "warming" and "not enough to judge" in warming.summary
    # without GPM: what cannot be told, and power as the weaker evidence, labelled so
    old = verdict({"gpu_util_pct": 100, "sm_active_pct": NA("needs Hopper or later"), "power_w": 90.0,
                   "power_limit_w": 400.0})
    assert old.code == "no_gpm" and busy_basis(old) == "power"
    assert "cannot be told (SM activity: needs Hopper or later)" in old.summary
    assert "weaker evidence: power 90/400 W (22% of the limit), low for a busy GPU" in old.summary
    assert verdict({"gpu_util_pct": 0, "sm_active_pct": NA("NotRecorded")}).code == "idle"  # util bounds it
    assert verdict({}).code == "no_reading"


def test_the_thresholds_are_the_documented_ones():
    from pathlib import Path

    from gpudoctor.backends import busy

    doc = (Path(__file__).resolve().parents[2] / "docs" / "utilisation.md").read_text()
    for name in ("BUSY_UTIL_PCT", "IDLE_PCT", "SM_LOW_PCT", "SM_HIGH_PCT", "TENSOR_BUSY_PCT", "DRAM_BOUND_PCT",
                 "LOW_POWER_SHARE"):
        value = getattr(busy, name)
        shown = f"{value:.0%}" if name == "LOW_POWER_SHARE" else f"{value:.0f}%"
        assert f"`{name}` ({shown})" in doc, name
    for code in busy.CODES:
        assert f"`{code}`" in doc, code


def test_a_lost_gpu_without_gpm_reads_as_lost_too():
    nvml = FakePynvml()
    backend, clock = _backend(nvml)
    assert backend.gpm(0)["sm_active_pct"] == NA("needs Hopper or later")
    nvml.lost.add(0)
    assert backend.gpm(0)["sm_active_pct"] == NA("GpuIsLost")  # the device's fault, not its generation


def test_one_failed_support_query_is_asked_again_after_a_back_off():
    """Before: one failed GPM support query (a driver hiccup: Unknown) was cached as the answer for
    the process's life; an exporter running for weeks said SM activity Unknown after it. A transient
    failure is asked again after a back-off (5 s, then doubling); NotSupported stays cached."""
    from gpudoctor.backends import nvml as nvml_module

    nvml = FakePynvml(readings=hopper(sm=9.0, tensor=0.0))
    nvml.devices[0]["nvmlGpmQueryDeviceSupport"] = nvml_error("Unknown")
    backend, clock = _backend(nvml)
    assert backend.gpm(0)["sm_active_pct"] == NA("Unknown")
    clock[0] += 1.0
    assert backend.gpm(0)["sm_active_pct"] == NA("Unknown")
    assert nvml.calls["nvmlGpmQueryDeviceSupport"] == 1  # within the back-off: not asked again
    clock[0] += nvml_module.GPM_RETRY_FIRST_S
    backend.gpm(0)
    assert nvml.calls["nvmlGpmQueryDeviceSupport"] == 2  # asked again, failed again: the wait doubles
    clock[0] += nvml_module.GPM_RETRY_FIRST_S + 0.5
    backend.gpm(0)
    assert nvml.calls["nvmlGpmQueryDeviceSupport"] == 2
    del nvml.devices[0]["nvmlGpmQueryDeviceSupport"]  # the driver answers again
    clock[0] += nvml_module.GPM_RETRY_FIRST_S
    assert backend.gpm(0)["sm_active_pct"] == NA("Warming")
    clock[0] += 1.0
    assert backend.gpm(0)["sm_active_pct"] == 9.0


def test_tensor_activity_above_sm_activity_is_said_not_judged():
    """Before: tensor 60% with SM activity 10% (a tensor-core cycle is an SM cycle: impossible) got
    a confident tensor_bound. Now both readings are NA with the two numbers, and no verdict is
    drawn from them."""
    from gpudoctor.backends import busy
    from gpudoctor.backends.plausible import is_implausible

    nvml = FakePynvml(readings=hopper(sm=10.0, tensor=60.0))
    backend, clock = _backend(nvml)
    backend.sample(0)
    clock[0] += 1.0
    sample = backend.sample(0)
    assert is_implausible(sample["tensor_active_pct"]) and is_implausible(sample["sm_active_pct"])
    assert "tensor activity 60% above SM activity 10%" in sample["sm_active_pct"].reason
    assert busy.verdict(sample).code != "tensor_bound"
    assert busy.verdict({"gpu_util_pct": 100.0, "sm_active_pct": 10.0, "tensor_active_pct": 60.0}).code \
        == "tensor_bound"  # the judgement alone would still say it: the check comes first


def test_memory_and_power_are_checked_against_their_totals():
    from gpudoctor.backends.plausible import cross_check, is_implausible

    read = cross_check({"memory_used_bytes": 90 << 30, "memory_free_bytes": 0, "memory_total_bytes": 80 << 30,
                        "power_w": 2500.0, "power_limit_w": 700.0})
    assert is_implausible(read["memory_used_bytes"]) and is_implausible(read["memory_free_bytes"])
    assert read["memory_total_bytes"] == 80 << 30 and is_implausible(read["power_w"])
    fine = cross_check({"memory_used_bytes": 1 << 30, "memory_total_bytes": 80 << 30, "power_w": 900.0,
                        "power_limit_w": 700.0, "tensor_active_pct": 12.0, "sm_active_pct": 10.0})
    assert fine["power_w"] == 900.0 and fine["tensor_active_pct"] == 12.0  # a spike, rounding: kept
