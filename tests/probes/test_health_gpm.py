"""The standard report's health probe reads GPM over a window and gives the busy verdict beside
utilisation (issue #40 item 6); --quick waits for no GPM window."""

from __future__ import annotations

import io
import json

from gpudoctor.backends import NvmlBackend, NvmlGate
from gpudoctor.core.model import Report
from gpudoctor.probes import ProbeContext
from gpudoctor.probes import health
from gpudoctor.console.render import render_text
from support.nvml_fake import FakePynvml, hopper, util


def busy_hopper(**gpm) -> tuple[NvmlBackend, FakePynvml]:
    """An H100 at 100 % utilisation whose SMs are 6 % active: a loop of tiny kernels."""
    nvml = FakePynvml(readings={"nvmlDeviceGetUtilizationRates": util(100, 3), **hopper(**gpm)})
    return NvmlBackend(NvmlGate(nvml)), nvml


def text_of(report: Report) -> str:
    out = io.StringIO()
    render_text(report, out, color=False, width=100)
    return out.getvalue()


def test_the_standard_report_shows_sm_activity_and_warns_on_a_busy_gpu_doing_little():
    gpu, _ = busy_hopper(sm=6.0, tensor=0.0)
    result = health.run(ProbeContext(gpu=gpu, level="standard"))
    data = json.loads(json.dumps(Report(results=[result]).to_dict()))
    [probe] = data["results"]
    measured = {m["name"]: m for m in probe["measurements"]}
    assert measured["gpu_utilization"]["value"] == 100
    assert measured["sm_activity"]["value"] == 6.0 and measured["sm_activity"]["unit"] == "%"
    assert measured["tensor_activity"]["value"] == 0.0
    [warning] = [f for f in probe["findings"] if f["code"] == "busy_small_kernels"]
    assert warning["status"] == "warn" and "6%" in warning["summary"] and "100%" in warning["summary"]
    assert probe["status"] == "warn"
    assert probe["details"]["busy"]["0"]["code"] == "busy_small_kernels"
    assert probe["details"]["busy"]["0"]["gpm_window_s"] >= health.GPM_MIN_INTERVAL_S
    text = text_of(Report(results=[result]))
    assert "sm_activity" in text and "6%" in text and "small kernels" in text


def test_a_gpu_doing_real_work_passes_with_its_verdict():
    gpu, _ = busy_hopper(sm=92.0, tensor=71.0, hmma=71.0)
    result = health.run(ProbeContext(gpu=gpu, level="standard"))
    assert result.status.value == "pass"
    [verdict] = [f for f in result.findings if f.code == "busy_verdict"]
    assert "tensor cores 71% active" in verdict.summary
    assert {m.name: m.value for m in result.measurements}["sm_activity"] == 92.0


def test_quick_takes_no_gpm_window_and_says_so():
    gpu, nvml = busy_hopper(sm=6.0)
    samples = []
    real = nvml.nvmlGpmSampleGet

    def counted(handle, sample):
        samples.append(sample)
        return real(handle, sample)

    nvml.nvmlGpmSampleGet = counted
    result = health.run(ProbeContext(gpu=gpu, level="quick"))
    assert len(samples) == 1  # the sample's own opening read; no second read after a wait
    measured = {m.name: m for m in result.measurements}
    assert measured["sm_activity"].value is None and measured["sm_activity"].note == "QuickMode"
    assert not [f for f in result.findings if f.code in ("busy_small_kernels", "busy_verdict")]
    assert "sm_activity" not in text_of(Report(results=[result]))  # not a failed reading in the text


def test_a_gpu_without_gpm_gets_no_wait_and_a_verdict_that_says_what_cannot_be_told():
    nvml = FakePynvml(readings={"nvmlDeviceGetUtilizationRates": util(100)})  # no GPM: before Hopper
    result = health.run(ProbeContext(gpu=NvmlBackend(NvmlGate(nvml)), level="standard"))
    measured = {m.name: m for m in result.measurements}
    assert measured["sm_activity"].value is None and measured["sm_activity"].note == "needs Hopper or later"
    assert result.details["busy"]["0"]["code"] == "no_gpm" and result.details["busy"]["0"]["gpm_window_s"] is None


def test_the_window_is_cut_to_the_probes_deadline_and_skipped_when_too_short():
    import time

    gpu, _ = busy_hopper(sm=6.0)
    result = health.run(ProbeContext(gpu=gpu, level="standard", deadline=time.monotonic() + 2.05))
    assert result.details["busy"]["0"]["code"] == "warming"  # no window GPM could read: said, not guessed
    assert {m.name: m for m in result.measurements}["sm_activity"].note == "Warming"
