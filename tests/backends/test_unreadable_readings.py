"""Readings that could not be read, or that no GPU can have, are never shown as facts.

* nothing read is no pass: a GPU that answers NotSupported to everything is a warning that
  says so, not "1 GPU(s) healthy" with every value n/a;
* readings denied for lack of permission are named in the default output, with how to get them;
* impossible readings (a 4000 C temperature, ECC counters of 2**64 - 1, clocks of 2**40 MHz)
  become NA("implausible value <v>") at the backend, for live NVML and replays alike, and the
  health probe warns that the driver returned an impossible value.
"""

from __future__ import annotations

import io
import json

from support.nvml_fake import FakePynvml, nvml_error

from gpudoctor.report import runner
from gpudoctor.backends import NvmlBackend, NvmlGate, ReplayBackend
from gpudoctor.backends.na import NA, is_na
from gpudoctor.core.model import ProbeResult, Report, Status
from gpudoctor.probes import ProbeContext
from gpudoctor.console.render import render_text

NOT_SUPPORTED = nvml_error("NotSupported")
NO_PERMISSION = nvml_error("NoPermission")
U64_MAX = 2**64 - 1


def _run(gpu, *names):
    probes = runner.all_probes()
    return [runner.call_probe(probes[name], ProbeContext(gpu=gpu, level="quick")) for name in names]


def _text(results) -> str:
    out = io.StringIO()
    render_text(Report(results=list(results)), out, width=0, color=False)
    return out.getvalue()


def _everything_unsupported() -> NvmlBackend:
    # The fake answers NotSupported for every device function without a reading; take away its defaults.
    fake = FakePynvml(readings={name: NOT_SUPPORTED for name in (
        "nvmlDeviceGetName", "nvmlDeviceGetPciInfo", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTemperature")})
    return NvmlBackend(NvmlGate(fake))


# ---------------------------------------------------------------- nothing read is no pass
def test_a_gpu_that_answers_nothing_is_not_healthy():
    devices, health = _run(_everything_unsupported(), "devices", "health")
    assert health.status == Status.WARN
    assert health.summary == "nothing could be read: NotSupported"
    finding = next(f for f in health.findings if f.code == "nothing_read")
    assert finding.status == Status.WARN and "nothing could be read: NotSupported" in finding.summary
    assert devices.status == Status.WARN
    assert [f.code for f in devices.findings] == ["device_unreadable"]
    assert "N/A (NotSupported)" not in devices.summary and "unreadable (NotSupported)" in devices.summary
    text = _text([devices, health])
    assert "[PASS]" not in text and "healthy" not in text
    # NotSupported for what a board lacks (fan, ECC) is normal: only *nothing read* is a warning.
    (health,) = _run(NvmlBackend(NvmlGate(FakePynvml())), "health")
    assert health.status == Status.PASS and "nothing_read" not in {f.code for f in health.findings}


def test_readings_denied_for_lack_of_permission_are_named_without_verbose():
    fake = FakePynvml(readings={"nvmlDeviceGetTotalEccErrors": NO_PERMISSION, "nvmlDeviceGetEccMode": (1, 1),
                                "nvmlDeviceGetTemperatureThreshold": lambda kind: 90})
    (health,) = _run(NvmlBackend(NvmlGate(fake)), "health")
    assert health.status == Status.PASS  # what could be read is fine; the denied part is a skip beside it
    denied = next(f for f in health.findings if f.code == "readings_need_permission")
    assert denied.status == Status.SKIP
    assert "ecc_volatile_uncorrected" in denied.summary and "NoPermission" in denied.summary
    assert "root" in denied.fix
    text = _text([health])  # the default output, not -v
    assert "ecc_volatile_uncorrected" in text and "sudo gpudoctor report" in text


# ---------------------------------------------------------------- impossible readings
def _impossible() -> FakePynvml:
    return FakePynvml(readings={
        "nvmlDeviceGetTemperature": lambda sensor: 4000,
        "nvmlDeviceGetTemperatureThreshold": lambda kind: 0,
        "nvmlDeviceGetTotalEccErrors": lambda kind, counter: U64_MAX,
        "nvmlDeviceGetClockInfo": lambda clock: 1099511627776,
        "nvmlDeviceGetEccMode": (1, 1),
    })


def test_impossible_nvml_readings_become_na_at_the_backend():
    gpu = NvmlBackend(NvmlGate(_impossible()))
    sample, static = gpu.sample(0), gpu.static(0)
    assert sample["temperature_c"] == NA("implausible value 4000")
    assert sample["clock_sm_mhz"] == NA("implausible value 1099511627776")
    assert sample["ecc_volatile_uncorrected"] == NA(f"implausible value {U64_MAX}")
    assert static["temperature_shutdown_c"] == NA("implausible value 0")
    assert gpu.fast_sample(0)["temperature_c"] == NA("implausible value 4000")


def test_health_warns_of_impossible_values_instead_of_judging_them():
    (health,) = _run(NvmlBackend(NvmlGate(_impossible())), "health")
    found = {f.code: f for f in health.findings}
    assert "temperature_critical" not in found and "ecc_uncorrected_volatile" not in found
    assert found["implausible_reading"].status == Status.WARN
    assert "the driver returned an impossible value" in found["implausible_reading"].summary
    text = _text([health])
    assert str(U64_MAX) in text  # the exact integer the driver gave, never rounded through a float
    assert "18446744073709551616" not in text and "shutdown threshold (0 C)" not in text


def test_impossible_values_in_a_recording_are_na_on_replay(data_dir, tmp_path):
    recording = json.loads((data_dir / "handmade_hardware_faults.json").read_text())
    recording["nvml"]["samples"][0]["devices"][0].update(temperature_c=4000, ecc_volatile_uncorrected=U64_MAX)
    path = tmp_path / "impossible_handmade.json"
    path.write_text(json.dumps(recording))
    gpu = ReplayBackend.from_file(path)
    sample = gpu.sample(0)
    assert sample["temperature_c"] == NA("implausible value 4000")
    assert sample["ecc_volatile_uncorrected"] == NA(f"implausible value {U64_MAX}")
    assert not is_na(sample["ecc_volatile_corrected"])  # the plausible ones are left as recorded


def test_integer_counters_stay_ints_in_the_health_findings():
    """A count is written from the int the driver gave: through a float (53 bits) 2**53 + 1 would
    print as ...992. (No ECC count is that large, so this drives the judgement directly.)"""
    from gpudoctor.core.model import ProbeResult
    from gpudoctor.probes.health import check_device

    big = 2**53 + 1
    r = ProbeResult("health")
    check_device(r, 0, {"name": "GPU"}, {"gpu_util_pct": 10, "ecc_volatile_uncorrected": big})
    finding = next(f for f in r.findings if f.code == "ecc_uncorrected_volatile")
    assert f"had {big} uncorrectable" in finding.summary
    value = next(m.value for m in r.measurements if m.name == "ecc_volatile_uncorrected")
    assert value == big and isinstance(value, int)


def test_unknown_error_for_the_identity_is_a_gpu_that_does_not_answer():
    from gpudoctor.probes.health import check_device

    unknown = NA("Unknown")
    r = ProbeResult("health")
    check_device(r, 0, {"name": unknown, "uuid": unknown, "pci_bus_id": unknown}, {"temperature_c": unknown})
    assert [(f.status, f.code) for f in r.findings] == [(Status.FAIL, "gpu_unreachable")]
    # one reading answering Unknown (the name still reads) is not a GPU that is gone
    r = ProbeResult("health")
    check_device(r, 0, {"name": "NVIDIA H100", "uuid": unknown, "pci_bus_id": "0000:65:00.0"},
                 {"temperature_c": 40})
    assert "gpu_unreachable" not in {f.code for f in r.findings}
