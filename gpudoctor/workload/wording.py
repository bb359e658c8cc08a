"""The words of the sweep's advice (gpudoctor.workload.recommend), once each: what to use, whether
the input pipeline starves the GPU, memory headroom, told apart or not. ``str.format`` templates
filled by recommend.py; rewording the advice is one edit here. The thresholds they name are
recommend.py's constants, passed in as fields.
"""

from __future__ import annotations

from typing import Any

from gpudoctor.core.findings import Wording

#: The sweep's finding codes (registered in gpudoctor.core.findings._TABLES): none yet; its advice is
#: :data:`ADVICE`, sentences rather than findings.
WORDING: dict[str, Wording] = {}

#: Every sentence of the sweep's advice, by name.
ADVICE = {
    # -- the one-line summary
    "summary_nothing_learned": "nothing to recommend: no run reached the {floor:.0%} accuracy floor; fastest "
                               "(throughput only): {best} on {device}",
    "summary_not_told_apart": "nothing to recommend: {best} and {second} on {device} are not told apart",
    "summary_use": "use {best} on {device}",
    "summary_starves_gpu": "; the DataLoader pipeline starves the GPU",
    "summary_bottleneck": "; the DataLoader pipeline is the bottleneck",
    "summary_no_run": "no run finished; nothing to recommend",
    # -- starvation
    "no_pipeline_run": "no DataLoader run finished, so the input pipeline was not measured",
    "waits_for_gpu": "the GPU",
    "waits_for_loop": "the training loop (on the CPU both share the cores)",
    "keeps_up": "the input pipeline keeps up: no DataLoader run waits for data {threshold:.0%} of the time or more "
                "(most: {most:.0%})",
    "slower_not_starved": "{run} is {speed} than with the data already on the device while waiting {wait:.0%} of "
                          "the time: the cost is in the copies or per-step syncs, not in waiting for input",
    "starved": "{run}: {wait:.0%} of the loop's time is spent waiting for the next batch (starved: {threshold:.0%} "
               "or more)",
    "starved_gpu_busy": ", GPU busy {util:.0f}% on average",
    "starved_resident": "; with the data already on the device the same batch runs {speed}",
    "starved_waits": ": {where} waits for the input pipeline",
    "run_keeps_up": "{run} keeps up (waits {wait:.0%} of the time, below {threshold:.0%})",
    "starved_fix": "fix: keep the data on the device (resident) when it fits, or larger batches, DataLoader "
                   "workers, pin_memory=True with non_blocking copies; avoid loss.item() every step",
    # -- memory headroom
    "headroom_cpu": "not measured (CPU run: host memory is not tracked)",
    "headroom": "at batch {batch} the run peaked at {reserved:.2f} GiB reserved ({allocated:.2f} GiB allocated) of "
                "{total:.1f} GiB: {free:.0%} free",
    "headroom_low": "; close to the limit: a larger batch or another process on the GPU may run out of memory",
    "headroom_room": "; room for larger batches or a larger model",
    # -- told apart
    "not_told_apart": "not told apart: {best} leads {second} by {lead:.2f}x in samples/s, but {source} differed by "
                      "up to {spread:.2f}x; run again on a quiet machine, or with --repeat 3, before choosing "
                      "between them",
    "variation_unknown": "each configuration ran once for one epoch, so run-to-run variation is unknown: its "
                         "{lead:.2f}x lead over {second} may not repeat (--repeat 3 measures it)",
    # -- why the best run leads
    "lead": "{run} on {device} is the fastest{learned}: {figure:,.0f} samples/s, {epoch_s:.2f} s per epoch",
    "lead_learned": " of the runs that learned (held-out accuracy {floor:.0%} or more)",
    "unlearned_faster": "faster runs that did not learn (below the {floor:.0%} accuracy floor) are not recommended: "
                        "{named}",
    "named_accuracy": "{run} ({accuracy:.1%})",
    "tutorials_loop": "{ratio:.1f}x the tutorials' loop ({run}: {samples_per_s:,.0f} samples/s)",
    "oom": "out of memory at batch size {sizes}",
    "run_error": "{run} on {device}: {error}",
    # -- utilisation
    "util_busy": "GPU busy {util:.0f}% on average (max {util_max:.0f}%) during that run",
    "util_not_measured": "GPU utilisation not measured: {note}",
    "gpm": "GPM: {summary}",
    "gpm_fix": " ({fix})",
    # -- energy
    "efficient_fastest": "it is also the most energy-efficient run: {spj:,.1f} samples/J at {power:.0f} W",
    "efficient_other": "the most energy-efficient run is {run}: {spj:,.1f} samples/J at {samples_per_s:,.0f} "
                       "samples/s, against {fastest_energy} at {fastest_samples_per_s:,.0f} samples/s for the fastest",
    "energy": "{spj:,.1f} samples/J",
    "energy_unmeasured": "an unmeasured energy",
    # -- variation: where the run-to-run spread was seen
    "spread_repeats": "repeated runs of one configuration",
    "spread_epochs": "the epochs of one run",
    # -- a run and a speed, as the advice names them
    "run": "{mode} at batch {batch_size}",
    "run_workers": "{run} with {workers} worker{plural}",
    "faster": "{ratio:.1f}x faster",
    "slower": "{ratio:.1f}x slower",
    "not_comparable": "not comparable",
    # -- accuracy
    "quick_too_little": "a quick sweep trains too little; run without --quick",
    "train_longer": "train longer (--epochs N, more training samples) before choosing",
    "throughput_only": "throughput only: its held-out accuracy ({accuracy:.1%}) is below the {floor:.0%} accuracy "
                       "floor, as is every run's, so none is recommended ({advice})",
    "accuracy_gap": "but it ends at {accuracy:.1%} held-out accuracy against {top:.1%} for {accurate}: a larger "
                    "batch takes fewer optimiser steps per epoch, so raise the learning rate or train more epochs "
                    "before relying on it",
}


def advice(name: str, **fields: Any) -> str:
    """One of :data:`ADVICE`, filled."""
    return ADVICE[name].format(**fields)


#: NA reasons of a run's utilisation (gpudoctor.workload.run's ``gpu_util_reason``) and what they say.
UTIL_REASON_WORDS = {
    "RunShorterThanNvmlPeriod": ("the run lasted {run_ms:.0f} ms, shorter than NVML's utilisation sample period "
                                 "({period_ms:.0f} ms): every sample NVML has also averages time before or after "
                                 "the run, so no utilisation figure is given"),
    "NoSampleInsideRun": ("no NVML utilisation sample covers only the run ({run_ms:.0f} ms; NVML's sample period "
                          "{period_ms:.0f} ms), so no utilisation figure is given"),
    "NvmlClockMismatch": ("NVML's sample timestamps do not match this host's clock, so samples cannot be placed "
                          "inside the run"),
}
