"""Turn a sweep's runs into advice: the best configuration and why, whether the input
pipeline starves the GPU, memory headroom, and the CPU vs GPU speedup.

Plain data in, plain data out (no torch): the TUI and a saved JSON use it as they are.

Thresholds, and why:
- ``STARVED_THROUGHPUT_RATIO`` 0.5: if a DataLoader pipeline reaches less than half the
  samples/s that the same network reaches with the data already on the device, at the
  same batch size, more than half of the device's time goes to waiting for input.
- ``STARVED_WAIT_SHARE`` 0.3: a loop that spends 30 % or more of its wall time waiting
  for the next batch is input-bound whatever the device reports.
- ``MIN_STARVED_WAIT_SHARE`` 0.1: "starved" is said only of a loop that waits for data at
  least 10 % of its time. A DataLoader run that is slower than data-on-device while it
  hardly waits (copies, per-step syncs) is slower, not starved, and is said so.
- ``LEARNED_ACCURACY`` 0.5: a run "learned" when its held-out accuracy is at least 50 %
  on the 10 MNIST classes (chance is 10 %). Accuracies are compared only between runs
  that learned; a quick sweep (one epoch on 5,000 samples) usually ends near chance and
  measures throughput only.
- ``ACCURACY_GAP`` 0.05: a faster configuration that ends five points or more below the
  best held-out accuracy is not a free win; the advice says so.
- ``LOW_HEADROOM`` 0.10: less than 10 % of device memory left at the peak is close to an
  out-of-memory on a slightly larger batch or another process.
"""

from __future__ import annotations

from typing import Any, Iterable

STARVED_THROUGHPUT_RATIO = 0.5
STARVED_WAIT_SHARE = 0.3
MIN_STARVED_WAIT_SHARE = 0.1
LEARNED_ACCURACY = 0.5
ACCURACY_GAP = 0.05
LOW_HEADROOM = 0.10

GIB = 1024 ** 3


def _get(run: Any, name: str) -> Any:
    return run.get(name) if isinstance(run, dict) else getattr(run, name)


def _ok(runs: Iterable[Any], device: str | None = None) -> list[Any]:
    return [r for r in runs if _get(r, "status") == "ok" and _get(r, "samples_per_s")
            and (device is None or _get(r, "device") == device)]


def speed_phrase(ratio: float) -> str:
    """``2.5x faster`` or ``10.0x slower``: never "0.1x faster"."""
    if ratio >= 1.0:
        return f"{ratio:.1f}x faster"
    return f"{1 / ratio:.1f}x slower" if ratio > 0 else "not comparable"


def learned(run: Any) -> bool:
    """Held-out accuracy at least :data:`LEARNED_ACCURACY` (chance on MNIST is 10 %)."""
    acc = _get(run, "test_accuracy")
    return isinstance(acc, (int, float)) and acc >= LEARNED_ACCURACY


def describe(run: Any) -> str:
    workers = _get(run, "workers")
    text = f"{_get(run, 'mode')} at batch {_get(run, 'batch_size')}"
    if workers is not None:
        text += f" with {workers} worker{'s' if workers != 1 else ''}"
    return text


def _key(run: Any) -> tuple[str, int, int | None]:
    return (_get(run, "mode"), _get(run, "batch_size"), _get(run, "workers"))


def speedups(runs: Iterable[Any]) -> dict[str, Any]:
    """CUDA vs CPU samples/s: per configuration run on both, and best against best."""
    runs = list(runs)
    cpu = {_key(r): r for r in _ok(runs, "cpu")}
    cuda = {_key(r): r for r in _ok(runs, "cuda")}
    pairs = []
    for key in sorted(set(cpu) & set(cuda), key=lambda k: (k[0], k[1], -1 if k[2] is None else k[2])):
        pairs.append({"mode": key[0], "batch_size": key[1], "workers": key[2],
                      "cpu_samples_per_s": _get(cpu[key], "samples_per_s"),
                      "cuda_samples_per_s": _get(cuda[key], "samples_per_s"),
                      "speedup": round(_get(cuda[key], "samples_per_s") / _get(cpu[key], "samples_per_s"), 2)})
    best = None
    if cpu and cuda:
        best_cpu = max(cpu.values(), key=lambda r: _get(r, "samples_per_s"))
        best_cuda = max(cuda.values(), key=lambda r: _get(r, "samples_per_s"))
        best = {"cpu": describe(best_cpu), "cuda": describe(best_cuda),
                "cpu_samples_per_s": _get(best_cpu, "samples_per_s"),
                "cuda_samples_per_s": _get(best_cuda, "samples_per_s"),
                "speedup": round(_get(best_cuda, "samples_per_s") / _get(best_cpu, "samples_per_s"), 2)}
    return {"same_config": pairs, "best_vs_best": best}


def _tutorial_baseline(ok: list[Any]) -> Any:
    """The tutorials' loop: dataloader mode, smallest batch, fewest workers."""
    plain = [r for r in ok if _get(r, "mode") == "dataloader"]
    if not plain:
        return None
    return min(plain, key=lambda r: (_get(r, "batch_size"), _get(r, "workers") or 0))


def _starvation(ok: list[Any], device: str) -> dict[str, Any]:
    """Is the input pipeline the bottleneck on ``device``? With the evidence."""
    pipeline = [r for r in ok if _get(r, "mode") != "resident"]
    resident = {_get(r, "batch_size"): r for r in ok if _get(r, "mode") == "resident"}
    if not pipeline:
        return {"starved": None, "reasons": ["no DataLoader run finished, so the input pipeline was not measured"]}
    evidence = []
    for run in pipeline:
        ratio = None
        ref = resident.get(_get(run, "batch_size"))
        if ref is not None:
            ratio = _get(run, "samples_per_s") / _get(ref, "samples_per_s")
        wait = _get(run, "data_wait_share") or 0.0
        starved = wait >= STARVED_WAIT_SHARE or (
            ratio is not None and ratio < STARVED_THROUGHPUT_RATIO and wait >= MIN_STARVED_WAIT_SHARE)
        evidence.append((starved, ratio, wait, run, ref))
    hits = [e for e in evidence if e[0]]
    where = "the GPU" if device == "cuda" else "the training loop (on the CPU both share the cores)"
    if not hits:
        worst = min(evidence, key=lambda e: e[1] if e[1] is not None else 1.0)
        most_wait = max(e[2] for e in evidence)
        text = (f"the input pipeline keeps up: no DataLoader run waits for data {MIN_STARVED_WAIT_SHARE:.0%} "
                f"of the time or more with a slow pipeline, nor {STARVED_WAIT_SHARE:.0%} in any case "
                f"(most: {most_wait:.0%})")
        reasons = [text]
        if worst[1] is not None and worst[1] < STARVED_THROUGHPUT_RATIO:
            reasons.append(f"{describe(worst[3])} is {speed_phrase(worst[1])} than with the data already "
                           f"on the device while waiting {worst[2]:.0%} of the time: the cost is in the "
                           f"copies or per-step syncs, not in waiting for input")
        return {"starved": False, "reasons": reasons}
    # Show the clearest case: the lowest throughput ratio, else the largest wait share.
    _, ratio, wait, run, ref = min(hits, key=lambda e: (e[1] if e[1] is not None else 1.0, -e[2]))
    text = f"{describe(run)}: {wait:.0%} of the loop's time is spent waiting for the next batch"
    util = _get(run, "gpu_util_mean_pct")
    if util is not None:
        text += f", GPU busy {util:.0f}% on average"
    if ratio is not None:
        text += f"; with the data already on the device the same batch runs {speed_phrase(1 / ratio)}"
    text += f": {where} waits for the input pipeline"
    reasons = [text]
    starved_configs = {(_get(e[3], "mode"), _get(e[3], "batch_size")) for e in hits}
    fed = [e for e in evidence if not e[0]]
    if fed:
        best_fed = max(fed, key=lambda e: _get(e[3], "samples_per_s"))
        reasons.append(f"{describe(best_fed[3])} keeps up (waits {best_fed[2]:.0%} of the time)")
    reasons.append("fix: keep the data on the device (resident) when it fits, or larger batches, "
                   "DataLoader workers, pin_memory=True with non_blocking copies; avoid loss.item() every step")
    return {"starved": True, "reasons": reasons,
            "starved_runs": sorted(f"{m} batch {b}" for m, b in starved_configs)}


def _headroom(best: Any) -> dict[str, Any]:
    total = _get(best, "device_memory_total_bytes")
    reserved = _get(best, "peak_reserved_bytes")
    if _get(best, "device") != "cuda" or not total or reserved is None:
        return {"free_fraction": None, "text": "not measured (CPU run: host memory is not tracked)"}
    free = 1.0 - reserved / total
    text = (f"at batch {_get(best, 'batch_size')} the run peaked at {reserved / GIB:.2f} GiB reserved "
            f"({(_get(best, 'peak_allocated_bytes') or 0) / GIB:.2f} GiB allocated) of "
            f"{total / GIB:.1f} GiB: {free:.0%} free")
    if free < LOW_HEADROOM:
        text += "; close to the limit: a larger batch or another process on the GPU may run out of memory"
    else:
        text += "; room for larger batches or a larger model"
    return {"free_fraction": round(free, 4), "peak_reserved_bytes": reserved,
            "total_bytes": total, "text": text}


def _most_efficient(on_device: list[Any], fastest: Any) -> dict[str, Any] | None:
    """The run with the most samples per joule, named when it is not the fastest one."""
    measured = [r for r in on_device if _get(r, "samples_per_joule")]
    if not measured:
        return None
    best = max(measured, key=lambda r: _get(r, "samples_per_joule"))
    fast_spj = _get(fastest, "samples_per_joule")
    entry = {"mode": _get(best, "mode"), "batch_size": _get(best, "batch_size"), "workers": _get(best, "workers"),
             "samples_per_joule": _get(best, "samples_per_joule"), "samples_per_s": _get(best, "samples_per_s"),
             "same_as_fastest": best is fastest}
    if best is fastest:
        entry["text"] = (f"it is also the most energy-efficient run: {_get(best, 'samples_per_joule'):,.1f} samples/J "
                         f"at {_get(best, 'avg_power_w') or 0:.0f} W")
    else:
        entry["text"] = (f"the most energy-efficient run is {describe(best)}: {_get(best, 'samples_per_joule'):,.1f} "
                         f"samples/J at {_get(best, 'samples_per_s'):,.0f} samples/s, against "
                         + (f"{fast_spj:,.1f} samples/J" if fast_spj else "an unmeasured energy")
                         + f" at {_get(fastest, 'samples_per_s'):,.0f} samples/s for the fastest")
    return entry


def recommend(runs: Iterable[Any]) -> dict[str, Any]:
    """The best configuration, with reasons; plus starvation and headroom verdicts."""
    runs = list(runs)
    oom = sorted({_get(r, "batch_size") for r in runs if _get(r, "status") == "oom"})
    errors = [f"{describe(r)} on {_get(r, 'device')}: {_get(r, 'error')}"
              for r in runs if _get(r, "status") == "error"]
    ok = _ok(runs)
    if not ok:
        return {"best": None, "summary": "no run finished; nothing to recommend",
                "reasons": errors, "starved": None, "starved_reasons": [], "headroom": None,
                "oom_batch_sizes": oom}
    device = "cuda" if _ok(runs, "cuda") else "cpu"
    on_device = _ok(runs, device)
    best = max(on_device, key=lambda r: _get(r, "samples_per_s"))
    reasons = [f"{describe(best)} on {device} is the fastest: {_get(best, 'samples_per_s'):,.0f} samples/s, "
               f"{_get(best, 'epoch_s'):.2f} s per epoch"]
    baseline = _tutorial_baseline(on_device)
    if baseline is not None and baseline is not best:
        ratio = _get(best, "samples_per_s") / _get(baseline, "samples_per_s")
        reasons.append(f"{ratio:.1f}x the tutorials' loop ({describe(baseline)}: "
                       f"{_get(baseline, 'samples_per_s'):,.0f} samples/s)")
    util = _get(best, "gpu_util_mean_pct")
    if util is not None:
        reasons.append(f"GPU busy {util:.0f}% on average (max {_get(best, 'gpu_util_max_pct'):.0f}%) during that run")
    elif device == "cuda" and _get(best, "gpu_util_note"):
        reasons.append(f"GPU utilisation not measured: {_get(best, 'gpu_util_note')}")
    best_acc = _get(best, "test_accuracy")
    learners = [r for r in on_device if learned(r)]
    accurate = max(learners, key=lambda r: _get(r, "test_accuracy")) if learners else None
    top_acc = _get(accurate, "test_accuracy") if accurate is not None else None
    if not learned(best) and best_acc is not None:
        # At chance a gap between two accuracies is noise: compare only runs that learned.
        reasons.append(
            f"throughput only: its held-out accuracy ({best_acc:.1%}) is below {LEARNED_ACCURACY:.0%}, so it did "
            f"not learn enough to compare accuracies (a quick sweep trains too little; run without --quick)")
    elif top_acc is not None and best_acc < top_acc - ACCURACY_GAP:
        reasons.append(
            f"but it ends at {best_acc:.1%} held-out accuracy against {top_acc:.1%} for "
            f"{describe(accurate)}: a larger batch takes fewer optimiser steps per epoch, so raise "
            f"the learning rate or train more epochs before relying on it")
    efficient = _most_efficient(on_device, best)
    if efficient is not None:
        reasons.append(efficient["text"])
    starvation = _starvation(on_device, device)
    headroom = _headroom(best)
    if oom:
        reasons.append(f"out of memory at batch size {', '.join(map(str, oom))}")
    reasons.extend(errors)
    summary = f"use {describe(best)} on {device}"
    if starvation["starved"]:
        summary += ("; the DataLoader pipeline starves the GPU" if device == "cuda"
                    else "; the DataLoader pipeline is the bottleneck")
    return {
        "best": {"device": device, "mode": _get(best, "mode"), "batch_size": _get(best, "batch_size"),
                 "workers": _get(best, "workers"), "samples_per_s": _get(best, "samples_per_s"),
                 "epoch_s": _get(best, "epoch_s"), "test_accuracy": best_acc},
        "summary": summary,
        "reasons": reasons,
        "starved": starvation["starved"],
        "starved_reasons": starvation["reasons"],
        "headroom": headroom,
        "oom_batch_sizes": oom,
        "most_efficient": efficient,
    }
