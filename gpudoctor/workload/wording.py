"""The words of the sweep's advice (gpudoctor.workload.recommend), once each: what to use, whether
the input pipeline starves the GPU, memory headroom, told apart or not. ``str.format`` templates
filled by recommend.py; rewording the advice is one edit here. The thresholds they name are
recommend.py's constants, passed in as fields.
"""

from __future__ import annotations

from typing import Any

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
