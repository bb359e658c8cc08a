"""MNIST reference workload (``report --full``): one short training run on the GPU.

Trains the tutorials' network for one epoch at batch size 64 with the data resident on
the device (no input pipeline in the way), and reports samples/s, GPU utilisation and
held-out accuracy. On the built-in synthetic set the network reaches >= 90 % after that
epoch on a correct device (a unit test checks it on the CPU), so a lower figure, or a
loss that does not fall, says the device's arithmetic is wrong.

Samples/s is compared with :data:`EXPECTED_SAMPLES_PER_S` for the GPU by name when one
is known. Only measured figures go in that table, each with its source; it is empty
until the H100/H200 entries are filled from a real ``gpudoctor bench mnist`` run
(docs/workload.md lists what remains to measure). Without an entry the probe reports
the figure and says there is nothing to compare it with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.core import findings
from gpudoctor.core.model import ProbeResult

from . import Probe, ProbeContext, _wording

if TYPE_CHECKING:
    from gpudoctor.workload.run import RunResult

PROBE_BATCH_SIZE = 64
PROBE_MODE = "resident"
MIN_ACCURACY = 0.90        # what the synthetic set reaches after one epoch at batch 64
SLOW_FRACTION = 0.5        # below half the expected samples/s is a warning

#: GPU name (as torch reports it, matched by substring) -> (samples/s, source).
#: Resident mode, batch 64, one epoch of the synthetic set. Measured figures only.
EXPECTED_SAMPLES_PER_S: dict[str, tuple[float, str]] = {}


def expected_for(name: str | None) -> tuple[float, str] | None:
    if not name:
        return None
    for key, value in EXPECTED_SAMPLES_PER_S.items():
        if key.lower() in name.lower():
            return value
    return None


def measure(result: ProbeResult, device: str, cuda_index: int = 0, data_dir: str | None = None,
            train_samples: int | None = None) -> ProbeResult:
    """Run the workload once on ``device`` and fill ``result`` (the probe's body)."""
    from gpudoctor.workload.config import RunConfig
    from gpudoctor.workload.data import load_data
    from gpudoctor.workload.run import run_one

    data = load_data(data_dir, train_limit=train_samples)
    run = RunConfig(device, PROBE_MODE, PROBE_BATCH_SIZE, None)
    outcome = run_one(run, data, cuda_index=cuda_index)
    dev = cuda_index if device == "cuda" else None
    result.details["run"] = outcome.to_dict()
    result.details["dataset"] = data.info()
    if outcome.status != "ok" and outcome.samples_per_s is None:
        code = "workload_oom" if outcome.status == "oom" else "workload_failed"
        result.findings.append(findings.finding(code, device=dev, error=outcome.error))
        return result.settle(f"workload failed ({outcome.status})")
    result.measure("workload_samples_per_s", outcome.samples_per_s, "samples/s", device=dev)
    result.measure("workload_samples_per_joule", outcome.samples_per_joule, "samples/J", device=dev,
                   note=outcome.energy_note or "")
    result.measure("workload_epoch", outcome.epoch_s, "s", device=dev)
    result.measure("workload_step_p50", outcome.step_p50_ms, "ms", device=dev)
    result.measure("workload_test_accuracy", outcome.test_accuracy, "fraction", device=dev,
                   reference=MIN_ACCURACY if data.source == "synthetic" else None)
    if outcome.gpu_util_mean_pct is not None:
        result.measure("workload_gpu_util_mean", outcome.gpu_util_mean_pct, "%", device=dev)
    elif device == "cuda":
        result.measure("workload_gpu_util_mean", None, "%", device=dev, note=outcome.gpu_util_note or "")
    if outcome.status == "error":
        result.findings.append(findings.finding("workload_diverged", device=dev,
                                                error=outcome.error or _wording.DIVERGED))
    elif data.source == "synthetic" and (outcome.test_accuracy or 0.0) < MIN_ACCURACY:
        result.findings.append(findings.finding("workload_low_accuracy", device=dev, accuracy=outcome.test_accuracy,
                                                expected=MIN_ACCURACY))
    sps = outcome.samples_per_s or 0.0
    _comparison(result, outcome, dev, expected_for(outcome.device_name) if device == "cuda" else None)
    return result.settle(f"{sps:,.0f} samples/s, accuracy {outcome.test_accuracy:.1%}")


def _comparison(result: ProbeResult, outcome: RunResult, dev: int | None, expected: tuple[float, str] | None) -> None:
    """Samples/s against the figure measured on this GPU model, when there is one."""
    name = outcome.device_name
    sps = outcome.samples_per_s or 0.0
    if expected is None:
        result.details["comparison"] = None
        result.findings.append(findings.finding("workload_measured", sps=sps, mode=PROBE_MODE, batch=PROBE_BATCH_SIZE,
                                                name=name))
    else:
        figure, source = expected
        result.measure("workload_expected_samples_per_s", figure, "samples/s", device=dev)
        result.details["comparison"] = {"expected_samples_per_s": figure, "source": source,
                                        "ratio": round(sps / figure, 3)}
        result.findings.append(findings.finding("workload_slow" if sps < SLOW_FRACTION * figure else
                                                "workload_as_expected", device=dev, sps=sps, share=sps / figure,
                                                figure=figure, source=source))


def run(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult(probe="workload")
    if ctx.replay:
        return findings.skipped("workload", "replay")
    facts = ctx.torch_facts()
    if not isinstance(facts, dict) or facts.get("cuda_available") is not True:
        reason = _wording.NO_CUDA_FOR_WORKLOAD
        if isinstance(facts, dict) and facts.get("cuda_init_error"):
            reason += f" ({facts['cuda_init_error']})"
        elif not isinstance(facts, dict):
            reason += _wording.NO_TORCH_FACTS
        return findings.skipped("workload", "no_cuda_device:workload", reason=reason)
    index = ctx.device if ctx.device is not None else 0
    return measure(result, "cuda", index, ctx.options.get("data_dir"))


PROBE = Probe.define(__name__, run, "MNIST reference workload (one short training run)",
                     level="full", uses_torch=True, timeout_s=180.0, order=900,
                     description="Train the tutorials' MNIST network for one epoch on the GPU; samples/s and accuracy.")
