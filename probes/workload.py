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

from gpudoctor.model import ProbeResult, Status

from . import Probe, ProbeContext

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
        result.find(Status.FAIL, code, f"the MNIST workload did not complete: {outcome.error}",
                    why="A 0.5M-parameter network at batch 64 needs a few MiB; failing it means the "
                        "device cannot train at all in this state.",
                    fix="Check `nvidia-smi` for other processes holding the memory; run "
                        "`gpudoctor report --probe workload -v` again.", device=dev)
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
        result.find(Status.FAIL, "workload_diverged", outcome.error or "training diverged",
                    why="The reference network does not diverge at lr 0.1 on a working device: "
                        "its arithmetic gives wrong numbers.",
                    fix="Run `gpudoctor report --full` again; if it repeats, check the device's ECC "
                        "errors and clocks, and try another driver.", device=dev)
    elif data.source == "synthetic" and (outcome.test_accuracy or 0.0) < MIN_ACCURACY:
        result.find(Status.WARN, "workload_low_accuracy",
                    f"held-out accuracy {outcome.test_accuracy:.1%} after one epoch, expected >= {MIN_ACCURACY:.0%}",
                    why="On the built-in set this network reaches 90 % or more on a correct device.",
                    fix="Re-run; if it stays low, the device computes wrong results (check ECC errors, "
                        "clocks, and the driver/torch versions).", device=dev)
    sps = outcome.samples_per_s or 0.0
    _comparison(result, outcome, dev, expected_for(outcome.device_name) if device == "cuda" else None)
    return result.settle(f"{sps:,.0f} samples/s, accuracy {outcome.test_accuracy:.1%}")


def _comparison(result: ProbeResult, outcome: RunResult, dev: int | None, expected: tuple[float, str] | None) -> None:
    """Samples/s against the figure measured on this GPU model, when there is one."""
    name = outcome.device_name
    sps = outcome.samples_per_s or 0.0
    if expected is None:
        result.details["comparison"] = None
        result.find(Status.PASS, "workload_measured",
                    f"{sps:,.0f} samples/s ({PROBE_MODE}, batch {PROBE_BATCH_SIZE}) on {name}; no "
                    f"reference figure for this device yet, so there is nothing to compare with")
    else:
        figure, source = expected
        result.measure("workload_expected_samples_per_s", figure, "samples/s", device=dev)
        result.details["comparison"] = {"expected_samples_per_s": figure, "source": source,
                                        "ratio": round(sps / figure, 3)}
        if sps < SLOW_FRACTION * figure:
            result.find(Status.WARN, "workload_slow",
                        f"{sps:,.0f} samples/s, {sps / figure:.0%} of the {figure:,.0f} measured on "
                        f"this GPU model ({source})",
                        why="The same run on the same GPU model was at least twice as fast: clocks, "
                            "power cap, another process or a slow host may be holding it back.",
                        fix="Check `gpudoctor` (live view) for throttling and other processes.",
                        device=dev)
        else:
            result.find(Status.PASS, "workload_as_expected",
                        f"{sps:,.0f} samples/s, {sps / figure:.0%} of the {figure:,.0f} expected "
                        f"({source})", device=dev)


def run(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult(probe="workload")
    if ctx.replay:
        return ProbeResult.skip("workload", "skipped: replaying a recording (the workload needs the live device)",
                                code="replay")
    facts = ctx.torch_facts()
    if not isinstance(facts, dict) or facts.get("cuda_available") is not True:
        reason = "no CUDA device is usable by torch"
        if isinstance(facts, dict) and facts.get("cuda_init_error"):
            reason += f" ({facts['cuda_init_error']})"
        elif not isinstance(facts, dict):
            reason += " (torch facts not available at this level)"
        return ProbeResult.skip("workload", f"skipped: {reason}", code="no_cuda_device",
                                why="The workload probe measures a GPU.",
                                fix="Run `gpudoctor bench mnist --device cpu` for a CPU figure.")
    index = ctx.device if ctx.device is not None else 0
    return measure(result, "cuda", index, ctx.options.get("data_dir"))


PROBE = Probe.define(__name__, run, "MNIST reference workload (one short training run)",
                     level="full", uses_torch=True, timeout_s=180.0, order=900,
                     description="Train the tutorials' MNIST network for one epoch on the GPU; samples/s and accuracy.")
