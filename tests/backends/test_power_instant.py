"""Instant power (issue #40 item 3): nvml.h says nvmlDeviceGetPowerUsage averages over 1 s on Ampere
(except GA100) and later; the field NVML_FI_DEV_POWER_INSTANT (186) of nvmlDeviceGetFieldValues is
the power at that instant. The catalogue reads it, the measuring probes keep their power spikes from
it, and the health probe says which power draw is an average."""

from __future__ import annotations

from types import SimpleNamespace

from gpudoctor.backends import NvmlBackend, NvmlGate
from gpudoctor.backends import catalogue
from gpudoctor.backends.na import NA
from gpudoctor.probes import ProbeContext, health
from gpudoctor.probes._gpu import LoadSampler
from support.nvml_fake import FakePynvml, field_values, nvml_error

POWER_INSTANT = 186  # nvml.h NVML_FI_DEV_POWER_INSTANT
POWER_AVERAGE = 185  # nvml.h NVML_FI_DEV_POWER_AVERAGE


def test_instant_power_is_a_catalogue_reading_read_through_the_field_values_call():
    reading = catalogue.by_key()["power_instant_w"]
    assert reading.nvml.functions == ("nvmlDeviceGetFieldValues",)
    assert reading.nvml.args == (("NVML_FI_DEV_POWER_INSTANT", POWER_INSTANT),) and reading.read == "fast"
    asked = []

    def fields(ids):
        asked.append(list(ids))
        return field_values({POWER_INSTANT: 612_345, POWER_AVERAGE: 300_000})(ids)

    nvml = FakePynvml(readings={"nvmlDeviceGetPowerUsage": 300_000, "nvmlDeviceGetFieldValues": fields})
    sample = NvmlBackend(NvmlGate(nvml)).fast_sample(0)
    assert sample["power_instant_w"] == 612.345 and sample["power_w"] == 300.0
    assert asked == [[POWER_INSTANT]]  # the field ids as one list, as pynvml takes them
    # a GPU or driver without the field: its own return code; a binding without the call: NA
    lacking = FakePynvml(readings={"nvmlDeviceGetFieldValues": field_values({POWER_INSTANT: nvml_error("NotSupported")})})
    assert NvmlBackend(NvmlGate(lacking)).fast_sample(0)["power_instant_w"] == NA("NotSupported")
    assert NvmlBackend(NvmlGate(FakePynvml())).fast_sample(0)["power_instant_w"] == NA("FunctionNotFound")


def _snapshot(**sample):
    return SimpleNamespace(devices=[SimpleNamespace(sample={"throttle_reasons": 0x4, "clock_sm_mhz": 1755, **sample})])


def test_the_load_samplers_power_peak_is_the_instant_one_where_the_driver_gives_it():
    """A load whose 1-second average stays at 300 W while the instant power spikes to 690 W."""
    dev = SimpleNamespace(nvml_index=0)
    ctx = SimpleNamespace(gpu=NvmlBackend(NvmlGate(FakePynvml())))
    load = LoadSampler(ctx, dev)
    for instant in (310.0, 690.0, 305.0):
        load._keep(_snapshot(power_w=300.0, power_instant_w=instant))
    assert load.max_power_w == 690.0 and load.max_power_source == "instant"
    older = LoadSampler(ctx, dev)  # a driver without the field: the power usage, said so
    for _ in range(3):
        older._keep(_snapshot(power_w=300.0, power_instant_w=NA("NotSupported")))
    assert older.max_power_w == 300.0 and older.max_power_source == "power usage"


def test_power_draw_says_where_it_is_a_one_second_average():
    def measured(name, architecture, cc):
        nvml = FakePynvml(readings={"nvmlDeviceGetName": name, "nvmlDeviceGetArchitecture": architecture,
                                    "nvmlDeviceGetCudaComputeCapability": cc, "nvmlDeviceGetPowerUsage": 300_000,
                                    "nvmlDeviceGetFieldValues": field_values({POWER_INSTANT: 655_000})})
        result = health.run(ProbeContext(gpu=NvmlBackend(NvmlGate(nvml)), level="quick"))
        return {m.name: m for m in result.measurements}

    h100 = measured("NVIDIA H100 80GB HBM3", 9, (9, 0))
    assert h100["power_draw"].value == 300.0 and "1 s average" in h100["power_draw"].note
    assert h100["power_instant"].value == 655.0
    a100 = measured("NVIDIA A100-SXM4-80GB", 7, (8, 0))  # GA100: NVML gives the instant power
    assert a100["power_draw"].note == "instantaneous"
    a10 = measured("NVIDIA A10", 7, (8, 6))  # GA102: Ampere, not GA100: averaged
    assert "1 s average" in a10["power_draw"].note
