"""Turn a sweep's runs into advice: the best configuration and why, whether the input
pipeline starves the GPU, memory headroom, and the CPU vs GPU speedup.

Plain data in, plain data out (no torch): the TUI and a saved JSON use it as they are.

Thresholds, and why (each defined once here and used everywhere the advice speaks):
- ``STARVED_WAIT_SHARE`` 0.10: the one starvation threshold. A DataLoader run is "starved"
  when it waits for its next batch (``next()`` plus the copy to the device) 10 % of its time
  or more, and "keeps up" below that. The wait share bounds what a perfect input pipeline
  could buy (1 / (1 - share): 1.11x at 10 %); below 10 % a faster pipeline cannot pay for
  the work of building it, at or above it the pipeline is the first thing to fix. How much
  slower a run is than data-on-device (``resident``) is reported beside it, never as a
  second test: a slow run that hardly waits is slower (copies, per-step syncs), not starved.
- ``LEARNED_ACCURACY`` 0.5: the accuracy floor. A run "learned" when its held-out accuracy
  is at least 50 % on the 10 MNIST classes (chance is 10 %). Only runs that learned are
  recommended, and accuracies are compared only between them; when no run learned (a
  ``--quick`` sweep, one epoch on 5,000 samples, usually ends near chance) the fastest run
  is reported as throughput only and nothing is recommended.
- ``ACCURACY_GAP`` 0.05: a faster configuration that ends five points or more below the
  best held-out accuracy is not a free win; the advice says so.
- Told apart: the fastest configuration is recommended only when its lead over the next one
  (the ratio of their samples/s) is larger than the run-to-run variation the sweep saw:
  the largest ratio between repeated runs of one configuration (``--repeat``), else between
  a run's own epochs after the first. Otherwise the two are "not told apart" and nothing is
  recommended. With one run per configuration and one epoch the variation is unknown, and
  the advice says so.
- ``LOW_HEADROOM`` 0.10: less than 10 % of device memory left at the peak is close to an
  out-of-memory on a slightly larger batch or another process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, Union

from gpudoctor.workload.wording import advice as _advice

if TYPE_CHECKING:
    from gpudoctor.workload.run import RunResult

STARVED_WAIT_SHARE = 0.10
LEARNED_ACCURACY = 0.5
ACCURACY_GAP = 0.05
LOW_HEADROOM = 0.10

GIB = 1024 ** 3

#: One run of a sweep: a :class:`RunResult`, or its ``to_dict()`` as read back from a saved document.
Run = Union["RunResult", Mapping[str, object]]


def _get(run: Run, name: str) -> Any:
    return run.get(name) if isinstance(run, Mapping) else getattr(run, name)


def _ok(runs: Iterable[Run], device: str | None = None) -> list[Run]:
    return [r for r in runs if _get(r, "status") == "ok" and _get(r, "samples_per_s")
            and (device is None or _get(r, "device") == device)]


def speed_phrase(ratio: float) -> str:
    """``2.5x faster`` or ``10.0x slower``: never "0.1x faster"."""
    if ratio >= 1.0:
        return _advice("faster", ratio=ratio)
    return _advice("slower", ratio=1 / ratio) if ratio > 0 else _advice("not_comparable")


def learned(run: Run) -> bool:
    """Held-out accuracy at least :data:`LEARNED_ACCURACY` (chance on MNIST is 10 %)."""
    acc = _get(run, "test_accuracy")
    return isinstance(acc, (int, float)) and acc >= LEARNED_ACCURACY


def starved_by_wait(wait_share: float | None) -> bool:
    """The one starvation test: waits for data :data:`STARVED_WAIT_SHARE` of its time or more."""
    return wait_share is not None and wait_share >= STARVED_WAIT_SHARE


def _spread(values: list[float]) -> float | None:
    """max / min of positive figures (1.0 = identical), or None with fewer than two."""
    values = [v for v in values if v and v > 0]
    return max(values) / min(values) if len(values) >= 2 else None


def variation(runs: list[Run]) -> tuple[float | None, str]:
    """The run-to-run variation the sweep saw, as a ratio (>= 1), and where it comes from:
    repeated runs of one configuration, else a run's own epochs after the first."""
    groups: dict[tuple[Any, ...], list[float]] = {}
    for run in runs:
        groups.setdefault((_get(run, "device"),) + _key(run), []).append(_get(run, "samples_per_s"))
    repeats = [s for s in (_spread(v) for v in groups.values()) if s is not None]
    if repeats:
        return max(repeats), _advice("spread_repeats")
    epochs = [s for s in (_spread(list(_get(r, "epoch_times_s") or [])[1:]) for r in runs) if s is not None]
    if epochs:
        return max(epochs), _advice("spread_epochs")
    return None, ""


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def describe(run: Run) -> str:
    workers = _get(run, "workers")
    text = _advice("run", mode=_get(run, "mode"), batch_size=_get(run, "batch_size"))
    if workers is not None:
        text = _advice("run_workers", run=text, workers=workers, plural="s" if workers != 1 else "")
    return text


def _key(run: Run) -> tuple[str, int, int | None]:
    return (_get(run, "mode"), _get(run, "batch_size"), _get(run, "workers"))


def speedups(runs: Iterable[Run]) -> dict[str, Any]:
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


def _really_busy(run: Run, util: float) -> list[str]:
    """What SM activity (GPM, Hopper and later) says of a run's utilisation, in the words of the one
    busy verdict (gpudoctor.backends.busy): "busy 100% of the time, but only 9% of SM cycles active..."."""
    from gpudoctor.backends.busy import verdict

    sm = _get(run, "gpu_sm_active_pct")
    if sm is None:
        return []
    found = verdict({"gpu_util_pct": util, "sm_active_pct": sm, "tensor_active_pct": _get(run, "gpu_tensor_active_pct")})
    return [_advice("gpm", summary=found.summary) + (_advice("gpm_fix", fix=found.fix) if found.fix else "")]


def _tutorial_baseline(ok: list[Run]) -> Run | None:
    """The tutorials' loop: dataloader mode, smallest batch, fewest workers."""
    plain = [r for r in ok if _get(r, "mode") == "dataloader"]
    if not plain:
        return None
    return min(plain, key=lambda r: (_get(r, "batch_size"), _get(r, "workers") or 0))


def _starvation(ok: list[Run], device: str) -> dict[str, Any]:
    """Is the input pipeline the bottleneck on ``device``? With the evidence."""
    pipeline = [r for r in ok if _get(r, "mode") != "resident"]
    resident = {_get(r, "batch_size"): r for r in ok if _get(r, "mode") == "resident"}
    if not pipeline:
        return {"starved": None, "reasons": [_advice("no_pipeline_run")]}
    # One verdict per configuration: with --repeat, the median of its runs (a configuration is
    # never called starved by one repeat and keeping up by another).
    resident_sps = {batch: _median([_get(r, "samples_per_s") for r in ok
                                    if _get(r, "mode") == "resident" and _get(r, "batch_size") == batch])
                    for batch in resident}
    groups: dict[tuple[Any, ...], list[Run]] = {}
    for run in pipeline:
        groups.setdefault(_key(run), []).append(run)
    evidence = []
    for group in groups.values():
        run = group[0]
        ratio = None
        ref = resident.get(_get(run, "batch_size"))
        if ref is not None:
            ratio = _median([_get(r, "samples_per_s") for r in group]) / resident_sps[_get(run, "batch_size")]
        wait = _median([_get(r, "data_wait_share") or 0.0 for r in group])
        evidence.append((starved_by_wait(wait), ratio, wait, run, ref))
    hits = [e for e in evidence if e[0]]
    where = _advice("waits_for_gpu") if device == "cuda" else _advice("waits_for_loop")
    if not hits:
        worst = min(evidence, key=lambda e: e[1] if e[1] is not None else 1.0)
        most_wait = max(e[2] for e in evidence)
        reasons = [_advice("keeps_up", threshold=STARVED_WAIT_SHARE, most=most_wait)]
        if worst[1] is not None and worst[1] < 1.0:
            reasons.append(_advice("slower_not_starved", run=describe(worst[3]), speed=speed_phrase(worst[1]),
                                 wait=worst[2]))
        return {"starved": False, "reasons": reasons}
    # Show the clearest case: the largest wait share.
    _, ratio, wait, run, ref = max(hits, key=lambda e: e[2])
    text = _advice("starved", run=describe(run), wait=wait, threshold=STARVED_WAIT_SHARE)
    util = _get(run, "gpu_util_mean_pct")
    if util is not None:
        text += _advice("starved_gpu_busy", util=util)
    if ratio is not None and ratio < 1.0:
        text += _advice("starved_resident", speed=speed_phrase(1 / ratio))
    text += _advice("starved_waits", where=where)
    reasons = [text]
    starved_configs = {(_get(e[3], "mode"), _get(e[3], "batch_size")) for e in hits}
    fed = [e for e in evidence if not e[0]]
    if fed:
        best_fed = max(fed, key=lambda e: _get(e[3], "samples_per_s"))
        reasons.append(_advice("run_keeps_up", run=describe(best_fed[3]), wait=best_fed[2], threshold=STARVED_WAIT_SHARE))
    reasons.append(_advice("starved_fix"))
    return {"starved": True, "reasons": reasons,
            "starved_runs": sorted(f"{m} batch {b}" for m, b in starved_configs)}


def _headroom(best: Run) -> dict[str, Any]:
    total = _get(best, "device_memory_total_bytes")
    reserved = _get(best, "peak_reserved_bytes")
    if _get(best, "device") != "cuda" or not total or reserved is None:
        return {"free_fraction": None, "text": _advice("headroom_cpu")}
    free = 1.0 - reserved / total
    text = _advice("headroom", batch=_get(best, "batch_size"), reserved=reserved / GIB,
                 allocated=(_get(best, "peak_allocated_bytes") or 0) / GIB, total=total / GIB, free=free)
    text += _advice("headroom_low") if free < LOW_HEADROOM else _advice("headroom_room")
    return {"free_fraction": round(free, 4), "peak_reserved_bytes": reserved,
            "total_bytes": total, "text": text}


def _most_efficient(on_device: list[Run], fastest: Run) -> dict[str, Any] | None:
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
        entry["text"] = _advice("efficient_fastest", spj=_get(best, "samples_per_joule"),
                                power=_get(best, "avg_power_w") or 0)
    else:
        entry["text"] = _advice("efficient_other", run=describe(best), spj=_get(best, "samples_per_joule"),
                                samples_per_s=_get(best, "samples_per_s"),
                                fastest_energy=_advice("energy", spj=fast_spj) if fast_spj
                                else _advice("energy_unmeasured"),
                                fastest_samples_per_s=_get(fastest, "samples_per_s"))
    return entry


def _ranked(pool: list[Run]) -> list[tuple[float, Run]]:
    """Configurations fastest first: (median samples/s of its runs, its median run)."""
    by_config: dict[tuple[Any, ...], list[Run]] = {}
    for run in pool:
        by_config.setdefault(_key(run), []).append(run)
    ranked = []
    for group in by_config.values():
        group = sorted(group, key=lambda r: _get(r, "samples_per_s"))
        ranked.append((_median([_get(r, "samples_per_s") for r in group]), group[(len(group) - 1) // 2]))
    return sorted(ranked, key=lambda entry: -entry[0])


def _lead_reasons(best: Run, figure: float, device: str, learners: list[Run], on_device: list[Run]) -> list[str]:
    """Why ``best`` leads: its figure, and the faster runs left out because they did not learn."""
    some_learned = learners and len(learners) < len(on_device)
    reasons = [_advice("lead", run=describe(best), device=device, figure=figure, epoch_s=_get(best, "epoch_s"),
                       learned=_advice("lead_learned", floor=LEARNED_ACCURACY) if some_learned else "")]
    unlearned_faster = [r for r in on_device if not learned(r) and _get(r, "samples_per_s") > figure]
    if learners and unlearned_faster:
        named = ", ".join(_advice("named_accuracy", run=describe(r), accuracy=_get(r, "test_accuracy"))
                          if _get(r, "test_accuracy") is not None else describe(r)
                          for r in sorted(unlearned_faster, key=lambda r: -_get(r, "samples_per_s")))
        reasons.append(_advice("unlearned_faster", floor=LEARNED_ACCURACY, named=named))
    return reasons


def _told_apart(ranked: list[tuple[float, Run]], spread: float | None, spread_source: str) -> tuple[bool, list[str]]:
    """Whether the fastest configuration's lead over the next one exceeds the run-to-run variation
    the sweep saw; with the words when it does not, or when the variation is unknown."""
    if len(ranked) < 2:
        return True, []
    (figure, best), (second_figure, second) = ranked[0], ranked[1]
    lead = figure / second_figure
    if spread is not None and spread >= lead:
        return False, [_advice("not_told_apart", best=describe(best), second=describe(second), lead=lead,
                             source=spread_source, spread=spread)]
    if spread is None:
        return True, [_advice("variation_unknown", lead=lead, second=describe(second))]
    return True, []


def _utilisation_reasons(best: Run, device: str) -> list[str]:
    """How busy the GPU was during the best run, or why that was not measured."""
    util = _get(best, "gpu_util_mean_pct")
    if util is not None:
        return [_advice("util_busy", util=util, util_max=_get(best, "gpu_util_max_pct"))] + _really_busy(best, util)
    if device == "cuda" and _get(best, "gpu_util_note"):
        return [_advice("util_not_measured", note=_get(best, "gpu_util_note"))]
    return []


def _accuracy_reasons(best: Run, learners: list[Run], quick: bool | None) -> list[str]:
    """What the best run's held-out accuracy says: throughput only (nothing learned), or a
    faster configuration that pays in accuracy (:data:`ACCURACY_GAP`)."""
    best_acc = _get(best, "test_accuracy")
    accurate = max(learners, key=lambda r: _get(r, "test_accuracy")) if learners else None
    top_acc = _get(accurate, "test_accuracy") if accurate is not None else None
    if not learners and best_acc is not None:
        # At chance a gap between two accuracies is noise: compare only runs that learned.
        advice = _advice("quick_too_little") if quick else _advice("train_longer")
        return [_advice("throughput_only", accuracy=best_acc, floor=LEARNED_ACCURACY, advice=advice)]
    if accurate is not None and top_acc is not None and best_acc < top_acc - ACCURACY_GAP:
        return [_advice("accuracy_gap", accuracy=best_acc, top=top_acc, accurate=describe(accurate))]
    return []


def _summary(ranked: list[tuple[float, Run]], device: str, learned_any: bool, told_apart: bool,
             starved: bool | None) -> str:
    """The one-line advice: what to use, or why nothing is recommended; and starvation."""
    best = ranked[0][1]
    if not learned_any:
        summary = _advice("summary_nothing_learned", floor=LEARNED_ACCURACY, best=describe(best), device=device)
    elif not told_apart:
        summary = _advice("summary_not_told_apart", best=describe(best), second=describe(ranked[1][1]), device=device)
    else:
        summary = _advice("summary_use", best=describe(best), device=device)
    if starved:
        summary += _advice("summary_starves_gpu") if device == "cuda" else _advice("summary_bottleneck")
    return summary


def recommend(runs: Iterable[Run], quick: bool | None = None) -> dict[str, Any]:
    """The best configuration, with reasons; plus starvation and headroom verdicts.

    ``quick``: whether the runs come from a ``--quick`` sweep (the advice for runs that did
    not learn differs); None when not known (a saved document without its config).
    """
    runs = list(runs)
    oom = sorted({_get(r, "batch_size") for r in runs if _get(r, "status") == "oom"})
    errors = [_advice("run_error", run=describe(r), device=_get(r, "device"), error=_get(r, "error"))
              for r in runs if _get(r, "status") == "error"]
    if not _ok(runs):
        return {"best": None, "summary": _advice("summary_no_run"),
                "reasons": errors, "starved": None, "starved_reasons": [], "headroom": None,
                "oom_batch_sizes": oom, "variation": None}
    device = "cuda" if _ok(runs, "cuda") else "cpu"
    on_device = _ok(runs, device)
    learners = [r for r in on_device if learned(r)]
    ranked = _ranked(learners or on_device)
    figure, best = ranked[0]
    reasons = _lead_reasons(best, figure, device, learners, on_device)
    spread, spread_source = variation(on_device)
    told_apart, words = _told_apart(ranked, spread, spread_source)
    reasons += words
    baseline = _tutorial_baseline(on_device)
    if baseline is not None and baseline is not best:
        ratio = figure / _get(baseline, "samples_per_s")
        reasons.append(_advice("tutorials_loop", ratio=ratio, run=describe(baseline),
                               samples_per_s=_get(baseline, "samples_per_s")))
    reasons += _utilisation_reasons(best, device)
    reasons += _accuracy_reasons(best, learners, quick)
    efficient = _most_efficient(on_device, best)
    if efficient is not None:
        reasons.append(efficient["text"])
    starvation = _starvation(on_device, device)
    if oom:
        reasons.append(_advice("oom", sizes=", ".join(map(str, oom))))
    reasons.extend(errors)
    return {
        "best": {"device": device, "mode": _get(best, "mode"), "batch_size": _get(best, "batch_size"),
                 "workers": _get(best, "workers"), "samples_per_s": figure,
                 "epoch_s": _get(best, "epoch_s"), "test_accuracy": _get(best, "test_accuracy"),
                 "recommended": bool(learners) and told_apart},
        "summary": _summary(ranked, device, bool(learners), told_apart, starvation["starved"]),
        "reasons": reasons,
        "starved": starvation["starved"],
        "starved_reasons": starvation["reasons"],
        "starved_runs": starvation.get("starved_runs", []),
        "headroom": _headroom(best),
        "oom_batch_sizes": oom,
        "most_efficient": efficient,
        "variation": {"ratio": round(spread, 3), "source": spread_source} if spread is not None else None,
    }
