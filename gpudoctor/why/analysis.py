"""From classified samples to one verdict: the shares, the user's lines, the fix. Pure.

Each sampled process gets a role: a DataLoader ``worker`` (its stacks run ``_worker_loop``),
torchrun's ``launcher`` (torch.distributed.elastic), or a ``trainer`` (any other Python
process). A trainer's *main thread* is what the verdict is about: the share of its samples
in each category (rules.py) is the share of its time. Workers' samples say what the data
pipeline spends its time on.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Sequence

from gpudoctor.core._num import is_number
from gpudoctor.hooks.summary import HOST_SYNC_BOUND, INPUT_BOUND, STRAGGLER, sync_pattern_words
from gpudoctor.core.model import Finding
from gpudoctor.why import hang, rules
from gpudoctor.why.rules import SourceLine
from gpudoctor.why.stacks import CallStack
from gpudoctor.why.views import ProcessView, build_views, children_of
from gpudoctor.why.views import data_lines as _data_lines
from gpudoctor.why.views import line_records as _line_records
from gpudoctor.why.views import where as _where
from gpudoctor.why.views import workers_of as _workers_of
from gpudoctor.why.wording import WORDS, extra_of, lines_of, phrase, said, words_of

FORMAT = "gpudoctor-why"
FORMAT_VERSION = 1

CPU_BOUND = "cpu_bound"
GPU_BOUND = "gpu_bound"
LAUNCH_BOUND = "launch_bound"
IO_BOUND = "io_bound"
IDLE = "idle"
UNKNOWN = "unknown"
BORDERLINE = "borderline"
WORKER = "dataloader_worker"
RANK_HANG = hang.RANK_HANG
CODES = (INPUT_BOUND, HOST_SYNC_BOUND, IO_BOUND, CPU_BOUND, GPU_BOUND, IDLE, STRAGGLER, RANK_HANG, BORDERLINE, WORKER,
         UNKNOWN)

MIN_SAMPLES = 10            # fewer main-thread samples than this: no verdict
IDLE_SHARE = 0.50           # the main thread waits on sleep/locks this much: idle
PROBLEM_SHARE = 0.20        # data wait, host syncs or I/O this much: that is the verdict
BORDERLINE_MARGIN = 0.05    # within this of PROBLEM_SHARE: "borderline", naming both causes (no flip-flop)
STARTUP_SHARE = 0.50        # start-up this much of the main thread's window: no steady-state verdict
OVERLOADED_SHARE = 0.50     # other processes use this share of the job's usable CPUs: the host is overloaded
WAITING_WORKER_CPU_PCT = 50.0  # a loading worker on less CPU than this waits for I/O, not computes
QUIET_CPU_PCT = 25.0        # a main thread "computing" on less CPU than this is waiting outside Python
QUIET_GPU_PCT = 10.0        # ... when it holds no GPU, or one busy less than this (or of unknown busy figure)
GPU_BUSY_PCT = 85.0         # NVML's busy figure at or above this: the GPU is the bottleneck
STRAGGLER_GAP = 0.15        # a rank waits this much less than the median rank: it is the straggler

#: A trainer's verdict is a :class:`~gpudoctor.core.model.Finding` in gpudoctor.why.wording's words (its
#: lines, its own few words and its other JSON fields in ``evidence``: :func:`~.wording.said`).
Decision = Finding


def _input_fix(workers: list[ProcessView], idle_cpus: float | None, lines: list[dict[str, Any]],
               cpu_by_pid: dict[int, float | None], view_pid: int | None = None) -> str:
    idle = (phrase("cpus_idle_unknown") if idle_cpus is None
            else phrase("cpus_idle", idle=idle_cpus) if idle_cpus >= 1 or idle_cpus == 0
            else phrase("cpus_idle_fraction", idle=idle_cpus))
    busy = [w for w in workers if w.share(rules.DATA_LOADING) >= 0.5]
    cheaper = phrase("cheaper", at=_where(lines) if lines else phrase("the_dataset"))
    main_cpu = cpu_by_pid.get(view_pid) if view_pid is not None else None
    if not workers and main_cpu is not None and main_cpu < WAITING_WORKER_CPU_PCT:
        return phrase("fix_parallel_waiting", cpu=main_cpu, idle=idle, cheaper=cheaper)
    if not workers and idle_cpus is not None and idle_cpus < 1:
        return phrase("fix_no_cpu_free", idle=idle, cheaper=cheaper)
    if not workers:
        return phrase("fix_parallel", idle=idle, cheaper=cheaper)
    cpus = [cpu_by_pid.get(w.pid) for w in busy]
    waiting = bool(cpus) and all(c is not None and c < WAITING_WORKER_CPU_PCT for c in cpus)
    state = phrase("workers_busy", busy=len(busy), workers=len(workers))
    kinds: Counter[str] = Counter()
    for w in busy:
        kinds.update(w.details[rules.DATA_LOADING])
    kind = kinds.most_common(1)[0][0] if kinds else ""
    if waiting and kind in ("decode", "transforms") and idle_cpus is not None and idle_cpus < 0.5:
        # in decode or augmentation code with no CPU idle: the workers compute but are starved of
        # CPU (a busy host), they do not wait on I/O; more of them would only share the same CPUs
        return phrase("fix_starved", state=state, kind=kind, most=max(c or 0.0 for c in cpus), idle=idle,
                      cheaper=cheaper)
    if waiting:  # the workers wait (disk, network, a sleep): more of them overlap the waits
        return phrase("fix_more_waiting", most=max(c or 0.0 for c in cpus), state=state, idle=idle, cheaper=cheaper)
    if idle_cpus is not None and idle_cpus < 1:
        return phrase("fix_no_idle_cpu", state=state, cheaper=cheaper)
    return phrase("fix_more_workers", state=state, idle=idle, cheaper=cheaper)


def _without_startup(view: ProcessView) -> ProcessView:
    """The same process with its start-up samples left out: the steady state the verdict judges."""
    steady = ProcessView(view.pid, view.role, view.cmdline, view.parent, view.main_samples - view.counts[rules.STARTUP],
                         view.samples, Counter(view.counts), view.details, view.lines)
    steady.counts[rules.STARTUP] = 0
    return steady


def startup_words(view: ProcessView) -> str:
    """"imports and building the model/optimizer" from the start-up details seen."""
    found = [d for d, _ in view.details[rules.STARTUP].most_common()]
    building = phrase("detail_building", what="")
    kinds = [phrase("detail_imports") if d == "import" else d for d in found if not d.startswith(building)]
    built = [d.removeprefix(building) for d in found if d.startswith(building)]
    if built:
        the = all(b.startswith("the ") for b in built)
        kinds.append(building + ("the " if the else "") + "/".join(b.removeprefix("the ") for b in built))
    return " and ".join(kinds) or phrase("start_up")


def decide(view: ProcessView, views: dict[int, ProcessView], source: SourceLine, *,
           gpu_util: float | None, on_gpu: bool | None, idle_cpus: float | None,
           main_cpu_pct: float | None = None, cpu_by_pid: dict[int, float | None] | None = None,
           gpu_unknown: str = "", window_s: float | None = None, gpm: dict[str, Any] | None = None) -> Decision:
    """The verdict for one trainer process (the thresholds are this module's constants).

    Start-up samples (imports, building the model, optimizer and dataset, torch.compile,
    torch.load) are left out: the verdict judges the steady state; a window mostly of start-up
    gives none. ``on_gpu``: True (NVML lists it, or it holds a GPU's device file or maps
    libcuda), False (its /proc shows neither), None (unknown: ``gpu_unknown`` says why); "no GPU"
    is said only for False. ``idle_cpus``: the CPUs free to the job (its affinity and cgroup,
    less what runs there)."""
    n = view.main_samples
    if n < MIN_SAMPLES:
        return said("unknown:few_samples", n=n)
    if view.counts[rules.STARTUP]:
        return _with_startup(view, views, source, gpu_util=gpu_util, on_gpu=on_gpu, idle_cpus=idle_cpus,
                             main_cpu_pct=main_cpu_pct, cpu_by_pid=cpu_by_pid, gpu_unknown=gpu_unknown,
                             window_s=window_s, gpm=gpm)
    waiting = _waiting(view, source, main_cpu_pct, on_gpu, gpu_util)
    if waiting is not None:
        return waiting
    return _steady(view, views, source, gpu_util=gpu_util, on_gpu=on_gpu, idle_cpus=idle_cpus,
                   cpu_by_pid=cpu_by_pid or {}, gpu_unknown=gpu_unknown, gpm=gpm or {})


def _with_startup(view: ProcessView, views: dict[int, ProcessView], source: SourceLine, *,
                  window_s: float | None, **figures: Any) -> Decision:
    """A window with start-up in it: no verdict when it is mostly start-up, else the verdict of
    the rest with the start-up named apart."""
    n, starting = view.main_samples, view.counts[rules.STARTUP]
    share = starting / n
    seconds = share * window_s if window_s else None
    what = startup_words(view)
    lines = _line_records(view.lines[rules.STARTUP], n, source)
    startup = {"share": round(share, 4), "seconds": round(seconds, 2) if seconds is not None else None,
               "what": what, "lines": lines}
    if share >= STARTUP_SHARE or n - starting < MIN_SAMPLES:
        again = max(5, math.ceil(seconds)) if seconds is not None else 10
        unknown = said("unknown:starting", lines=lines, share=share, what=what, at=_where(lines), again=again)
        unknown.evidence["startup"] = startup
        return unknown
    decision = decide(_without_startup(view), views, source, **figures)
    took = phrase("startup_took", seconds=seconds) if seconds is not None else ""
    decision.summary += phrase("startup_left_out", share=share, took=took, what=what)
    decision.evidence["startup"] = startup
    return decision


def _waiting(view: ProcessView, source: SourceLine, main_cpu_pct: float | None, on_gpu: bool | None,
             gpu_util: float | None = None) -> Decision | None:
    """Idle: the main thread waits (in a collective, a sleep, a lock), or uses next to no CPU on
    Python lines that then wait outside Python (with no GPU, or one that is not busy: a process
    asleep while it holds a GPU context is idle, not computing); None when it does not."""
    if view.share(rules.IDLE) + view.share(rules.COLLECTIVE) >= IDLE_SHARE:
        if view.share(rules.COLLECTIVE) >= view.share(rules.IDLE):
            lines = _line_records(view.lines[rules.COLLECTIVE], view.counts[rules.COLLECTIVE], source)
            what = view.details[rules.COLLECTIVE].most_common(1)[0][0]
            return said("idle:collective", lines=lines, share=view.share(rules.COLLECTIVE), what=what,
                        at=_where(lines))
        lines = _line_records(view.lines[rules.IDLE], view.counts[rules.IDLE], source)
        what = view.details[rules.IDLE].most_common(1)[0][0] or phrase("a_wait")
        return said("idle:waits", lines=lines, share=view.share(rules.IDLE), what=what, at=_where(lines))
    gpu_quiet = on_gpu is False or (on_gpu is True and (gpu_util is None or gpu_util < QUIET_GPU_PCT))
    quiet = main_cpu_pct is not None and main_cpu_pct < QUIET_CPU_PCT and gpu_quiet
    if not quiet or view.share(rules.OTHER) + view.share(rules.IDLE) < IDLE_SHARE:
        return None
    lines = _line_records(view.lines[rules.OTHER] + view.lines[rules.IDLE], view.main_samples, source)
    # the breakdown says what the verdict says: Python lines on a thread that uses no CPU wait
    moved = view.counts[rules.OTHER]
    view.counts[rules.IDLE] += moved
    view.counts[rules.OTHER] = 0
    view.details[rules.IDLE][phrase("detail_outside_python")] += moved
    view.lines[rules.IDLE].update(view.lines.pop(rules.OTHER, Counter()))
    held = "" if not on_gpu else (phrase("holds_gpu_unknown") if gpu_util is None
                                  else phrase("holds_gpu_busy", util=gpu_util))
    return said("idle:outside_python", lines=lines, cpu=main_cpu_pct, at=_where(lines), held=held)


def _steady(view: ProcessView, views: dict[int, ProcessView], source: SourceLine, *, gpu_util: float | None,
            on_gpu: bool | None, idle_cpus: float | None, cpu_by_pid: dict[int, float | None], gpu_unknown: str,
            gpm: dict[str, Any]) -> Decision:
    """A loop that runs: input-, host-sync- or I/O-bound past the margin, GPU-bound, CPU-bound,
    or borderline between a problem and computing."""
    candidates = [(view.share(rules.DATA_WAIT), INPUT_BOUND), (view.share(rules.HOST_SYNC), HOST_SYNC_BOUND),
                  (view.share(rules.CHECKPOINT_IO), IO_BOUND)]
    share, code = max(candidates)
    gpu_busy = gpu_util is not None and gpu_util >= GPU_BUSY_PCT
    gpu_words = phrase("gpu_busy", util=gpu_util) if gpu_util is not None else ""
    if share >= PROBLEM_SHARE + BORDERLINE_MARGIN and not gpu_busy:
        return _problem(code, share, view, views, source, gpu_words, idle_cpus, cpu_by_pid)
    if gpu_busy and gpu_util is not None:
        return _gpu_busy(gpu_util, gpm)
    base = _compute(view, source, on_gpu, gpu_words, gpu_unknown)
    if share >= PROBLEM_SHARE - BORDERLINE_MARGIN:  # near the threshold: name both, so windows do not flip
        problem = _problem(code, share, view, views, source, gpu_words, idle_cpus, cpu_by_pid)
        both = said("borderline:both", lines=lines_of(problem) + lines_of(base)[:2], problem=words_of(problem),
                    base=words_of(base), low=PROBLEM_SHARE - BORDERLINE_MARGIN, high=PROBLEM_SHARE + BORDERLINE_MARGIN,
                    problem_message=problem.summary, base_message=base.summary, problem_fix=problem.fix,
                    base_fix=base.fix)
        both.evidence["causes"] = [problem.code, base.code]
        return both
    return base


def _gpu_busy(gpu_util: float, gpm: dict[str, Any]) -> Decision:
    """Busy by NVML utilisation. GPU-bound only with SM evidence (GPM, Hopper and later): a loop of
    small kernels also reads busy, and autocast or channels_last would not help it. The words are
    gpudoctor's one busy verdict (gpudoctor.backends.busy)."""
    from gpudoctor.backends.busy import verdict

    sm = gpm.get("sm_active_mean_pct")
    if sm is None:
        note = gpm.get("gpm_note") or phrase("not_read")
        return said("gpu_bound:utilisation_only", util=gpu_util, note=note)
    found = verdict({"gpu_util_pct": gpu_util, "sm_active_pct": sm,
                     "tensor_active_pct": gpm.get("tensor_active_mean_pct")})
    if found.code == "busy_small_kernels":
        return said("launch_bound:small_kernels", words=found.summary, fix=found.fix)
    return said("gpu_bound:gpm" if found.fix else "gpu_bound:gpm_no_fix", words=found.summary, fix=found.fix)


_COMPUTING = (rules.FORWARD, rules.BACKWARD, rules.OPTIMIZER, rules.EVALUATION, rules.OTHER)


def _compute(view: ProcessView, source: SourceLine, on_gpu: bool | None, gpu_words: str,
             gpu_unknown: str) -> Decision:
    """CPU-bound: the main thread computes (forward, backward, optimizer, evaluation, Python)."""
    n = view.main_samples
    compute = sum(view.share(c) for c in _COMPUTING)
    lines = _line_records(sum((view.lines[c] for c in _COMPUTING), Counter()), n, source)
    split = ", ".join(f"{c} {view.share(c):.0%}" for c in _COMPUTING if view.share(c) >= 0.05) or phrase("no_one_part")
    if view.share(rules.COLLECTIVE) >= 0.05:
        split += phrase("in_collectives", share=view.share(rules.COLLECTIVE))
    if view.share(rules.EVALUATION) >= max(view.share(c) for c in _COMPUTING):
        split += phrase("mostly_evaluation")
    figures = {"compute": compute, "split": split, "gpu_words": gpu_words}
    if _own_python(view):  # the user's own Python outside the model: neither a GPU nor fewer launches speed it up
        where = phrase("own_python_at", file=lines[0]["file"], line=lines[0]["line"]) if lines else ""
        return said("cpu_bound:own_python", lines=lines, where=where, **figures)
    if on_gpu:
        return said("cpu_bound:on_gpu", lines=lines, **figures)
    if on_gpu is None:
        return said("cpu_bound:gpu_unknown", lines=lines, unknown=gpu_unknown or phrase("not_read"), **figures)
    return said("cpu_bound:no_gpu", lines=lines, **figures)


#: The share of the main thread's computing time in the user's own Python outside forward,
#: backward and the optimizer (rules.OTHER: tokenising, parsing, metrics in the loop) from which
#: the fix is that code, not the device.
OWN_PYTHON_SHARE = 0.5


def _own_python(view: ProcessView) -> bool:
    """Whether most of the computing is the script's own Python in the loop (a tokenizer run on
    each batch, record parsing): a GPU would not run it, so the fix says where it should go instead."""
    compute = sum(view.share(c) for c in _COMPUTING)
    return compute > 0 and view.share(rules.OTHER) >= OWN_PYTHON_SHARE * compute


def _problem(code: str, share: float, view: ProcessView, views: dict[int, ProcessView], source: SourceLine,
             gpu_words: str, idle_cpus: float | None, cpu_by_pid: dict[int, float | None]) -> Decision:
    if code == INPUT_BOUND:
        workers = _workers_of(view, views)
        lines = _data_lines(view, workers, source)
        how = phrase("workers", n=len(workers)) if workers else phrase("no_workers")
        detail: Counter[str] = Counter()
        for w in workers:
            detail.update(w.details[rules.DATA_LOADING])
        doing = (phrase("busy_in", at=_where(lines)) if lines else phrase("dataset_unseen")) + \
            (phrase("loading_kind", kind=detail.most_common(1)[0][0]) if detail else "")
        return said("input_bound:loader", lines=lines, share=share, how=how, doing=doing, gpu_words=gpu_words,
                    fix=_input_fix(workers, idle_cpus, lines, cpu_by_pid, view.pid))
    if code == HOST_SYNC_BOUND:
        lines = _line_records(view.lines[rules.HOST_SYNC], view.counts[rules.HOST_SYNC], source)
        pattern = view.details[rules.HOST_SYNC].most_common(1)[0][0]
        what, advice = sync_pattern_words(pattern)
        return said("host_sync_bound:sync", lines=lines, share=share, what=what, at=_where(lines), gpu_words=gpu_words,
                    fix=advice)
    lines = _line_records(view.lines[rules.CHECKPOINT_IO], view.counts[rules.CHECKPOINT_IO], source)
    return said("io_bound:checkpoint", lines=lines, share=share, at=_where(lines), gpu_words=gpu_words)


YES, NO, UNKNOWN_STATE = "yes", "no", "unknown"


def _gpu_for(pids: set[int], gpu: dict[str, Any], processes: dict[int, dict[str, Any]] | None = None
             ) -> tuple[float | None, bool | None, list[dict[str, Any]], str]:
    """(mean busy % of the GPUs these processes hold, whether they use a GPU: True, False or None
    for unknown, those devices, the evidence or why it is unknown).

    NVML's process list is one witness, but it is empty in another PID namespace, refused in MIG
    mode without root, blank on old drivers in containers; /proc is the other: a GPU's device file
    open (/dev/nvidiaN, /dev/nvidia-caps/...) or libcuda.so mapped. No is said only when /proc of
    every process could be read and shows neither."""
    held = [d for d in gpu.get("devices", []) if any(p["pid"] in pids for p in d.get("processes", []))]
    utils = [d["util_mean_pct"] for d in held if d.get("util_mean_pct") is not None]
    util = (sum(utils) / len(utils)) if utils else None
    if held:
        return util, True, held, phrase("gpu_evidence_nvml", gpus=", ".join(phrase("gpu_evidence_gpu", index=d["index"])
                                                                            for d in held))
    evidence = [(processes or {}).get(pid, {}).get("gpu_evidence") for pid in sorted(pids)]
    files = sorted({f for e in evidence if e for f in e.get("device_files", [])})
    if files:
        return util, True, held, phrase("gpu_evidence_files", files=", ".join(files[:4]))
    if any(e and e.get("libcuda") for e in evidence):
        return util, True, held, phrase("gpu_evidence_libcuda")
    if evidence and all(e and e.get("readable") for e in evidence):
        return util, False, held, phrase("gpu_evidence_none")
    nvml = gpu.get("process_list_reason") or gpu.get("reason") or phrase("gpu_evidence_nvml_unread")
    return util, None, held, phrase("gpu_evidence_unknown", nvml=nvml)


def _gpm_of(pids: set[int], gpu: dict[str, Any]) -> dict[str, Any]:
    """SM and tensor activity (GPM) of the GPUs these processes hold, or why there is none."""
    held = [d for d in gpu.get("devices", []) if any(p["pid"] in pids for p in d.get("processes", []))]
    out: dict[str, Any] = {}
    for key in ("sm_active_mean_pct", "tensor_active_mean_pct"):
        values = [d[key] for d in held if isinstance(d.get(key), (int, float))]
        out[key] = sum(values) / len(values) if values else None
    out["gpm_note"] = next((d["gpm_note"] for d in held if d.get("gpm_note")), None)
    return out


def _state(on_gpu: bool | None) -> str:
    return UNKNOWN_STATE if on_gpu is None else (YES if on_gpu else NO)


def _tree(view: ProcessView, views: dict[int, ProcessView]) -> set[int]:
    return {view.pid} | {w.pid for w in _workers_of(view, views)}


def _process_record(view: ProcessView, decision: Decision | None, readings: dict[str, Any]) -> dict[str, Any]:
    info = readings.get("processes", {}).get(view.pid, {})
    out = {"pid": view.pid, "role": view.role, "command": view.cmdline or info.get("cmdline", ""),
           "parent_pid": view.parent, "samples": view.samples, "main_thread_samples": view.main_samples,
           "shares": view.shares(), "cpu_pct": info.get("cpu_pct"), "rank": info.get("rank")}
    evidence = info.get("gpu_evidence")
    if evidence is not None:
        out["gpu_evidence"] = evidence
    if decision is not None:
        out["verdict"] = {"code": decision.code, "words": words_of(decision), "message": decision.summary,
                          "fix": decision.fix, "lines": lines_of(decision)}
    return out


# Where a fast rank waits for a slow one: in a collective (idle) or, under DDP, at the end of
# backward (the reducer waits for the gradients' all-reduce inside autograd). Backward is work,
# not waiting, for a rank whose main thread used the CPU much more than the others' (twice the
# median of the other ranks, and at least 5% of a core): a rank slow inside backward is named.
WAITING_FOR_RANKS = (rules.IDLE, rules.COLLECTIVE, rules.BACKWARD)
BACKWARD_WORK_CPU_RATIO = 2.0
BACKWARD_WORK_MIN_CPU_PCT = 5.0


def _work_share(view: ProcessView, backward_is_work: bool = False) -> float:
    outside = 1.0 - sum(view.share(c) for c in WAITING_FOR_RANKS)
    return outside + (view.share(rules.BACKWARD) if backward_is_work else 0.0)


def _busy_in_backward(pid: int, cpu: dict[int, float | None]) -> bool:
    """Whether this rank's main thread used twice the CPU of the other ranks' median (and 5% of a
    core or more): its time in backward is its own work, not a wait for the others."""
    mine = cpu.get(pid)
    others = sorted(c for p, c in cpu.items() if p != pid and c is not None)
    if mine is None or not others:
        return False
    mid = len(others) // 2
    median = others[mid] if len(others) % 2 else (others[mid - 1] + others[mid]) / 2
    return mine >= max(BACKWARD_WORK_MIN_CPU_PCT, BACKWARD_WORK_CPU_RATIO * median)


def straggler(ranks: list[tuple[ProcessView, Decision]],
              main_cpu: dict[int, float | None] | None = None) -> dict[str, Any] | None:
    """The rank the others wait for: its share of own work (everything but collectives, and
    backward unless its main thread was busy there: DDP's fast ranks wait in it) is
    ``STRAGGLER_GAP`` or more above the median rank's. The category where it spends the most time
    more than the others is named. ``main_cpu``: each rank's main-thread CPU % (100 = a core)."""
    if len(ranks) < 2:
        return None
    cpu = {v.pid: (main_cpu or {}).get(v.pid) for v, _ in ranks}
    busy = {v.pid for v, _ in ranks if _busy_in_backward(v.pid, cpu)}

    def work(view: ProcessView) -> float:
        return _work_share(view, view.pid in busy)

    shares = sorted(work(v) for v, _ in ranks)
    mid = len(shares) // 2
    median = shares[mid] if len(shares) % 2 else (shares[mid - 1] + shares[mid]) / 2
    view, decision = max(ranks, key=lambda r: work(r[0]))
    if work(view) - median < STRAGGLER_GAP:
        return None
    others = [v for v, _ in ranks if v is not view]
    waiting = (rules.IDLE, rules.COLLECTIVE) if view.pid in busy else WAITING_FOR_RANKS
    excess = {c: view.share(c) - sum(o.share(c) for o in others) / len(others)
              for c in rules.CATEGORIES if c not in waiting}
    where = max(excess, key=lambda c: excess[c])
    found = said("straggler:ranks", pid=view.pid, work=work(view), median=median, where=where, excess=excess[where],
                 words=words_of(decision), message=decision.summary, fix=decision.fix)
    return {"pid": view.pid, "code": STRAGGLER, "words": words_of(found), "category": where,
            "message": found.summary, "fix": found.fix}


def _across_ranks(decided: list[tuple[ProcessView, Decision]], views: dict[int, ProcessView],
                  readings: dict[str, Any], source: SourceLine, window_s: float | None
                  ) -> tuple[hang.Hang | None, dict[str, Any] | None]:
    """The verdicts that need every rank: a hang (most ranks in one collective, some elsewhere),
    else a straggler."""
    processes = readings.get("processes") or {}
    gpu = readings.get("gpu") or {}
    ranks = []
    decided = ranks_of(decided, views, processes)
    for view, _ in decided:
        info = processes.get(view.pid) or {}
        ranks.append(hang.Rank(view, info.get("rank"), main_thread_cpu(processes, view.pid),
                               info.get("age_s")))

    def gpu_of(pids: set[int]) -> dict[str, Any]:
        util, on_gpu, _, why_so = _gpu_for(pids, gpu, processes)
        gpm = _gpm_of(pids, gpu)
        return hang.gpu_state(util, gpm.get("sm_active_mean_pct"), gpm.get("gpm_note"), on_gpu,
                              gpu.get("reason") or why_so)

    found = hang.find(ranks, views, source, window_s=window_s, gpu_of=gpu_of, flight=readings.get("flight_recorder"))
    if found is not None:
        slow = None if found.code != STRAGGLER else {"pid": found.evidence["pid"], "code": STRAGGLER,
                                                     "words": words_of(found), "message": found.summary,
                                                     "fix": found.fix}
        return found, slow
    return None, straggler(decided, {r.view.pid: r.main_cpu_pct for r in ranks})


def ranks_of(decided: list[tuple[ProcessView, Decision]], views: dict[int, ProcessView],
             processes: dict[int, dict[str, Any]]) -> list[tuple[ProcessView, Decision]]:
    """The trainers that are ranks: they joined a process group (torchrun's RANK in their
    environment, a torch.distributed frame in their stacks), and the trainers one parent started
    beside such a rank (mp.spawn's, whose rank is an argument). Hogwild's trainers, which share a
    model and no process group, are none; two or more are needed for rank words."""
    joined = {v.pid for v, _ in decided if v.distributed or (processes.get(v.pid) or {}).get("rank") is not None}
    parents = {views[p].parent for p in joined}
    found = [(v, d) for v, d in decided if v.pid in joined or (v.parent is not None and v.parent in parents)]
    return found if len(found) > 1 else []


def diagnose(stacks: Sequence[CallStack], readings: dict[str, Any], source: SourceLine, *, pid: int,
             own: Sequence[str] = (), meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole diagnosis as a JSON-safe dict (docs/why.schema.json)."""
    views = build_views(stacks, source, own)
    gpu = readings.get("gpu") or {"available": False, "reason": phrase("not_read"), "devices": []}
    host = readings.get("host") or {}
    window_s = (meta or {}).get("sampled_s")
    processes = readings.get("processes") or {}
    decided = _decide_trainers(views, readings, gpu, source, window_s)
    hung, lagging = _across_ranks(decided, views, readings, source, window_s)
    main = next((d for d in decided if d[0].pid == pid), None) or (max(decided, key=lambda d: d[0].main_samples)
                                                                    if decided else None)
    named = hung.evidence["pid"] if hung is not None else lagging["pid"] if lagging is not None else None
    if named is not None and (main is None or main[0].pid != pid or hung is not None):  # the launcher was asked
        main = next(d for d in decided if d[0].pid == named)
    asked = views.get(pid)
    details: dict[str, str] = {}
    if main is None and asked is not None and asked.role == "worker":
        verdict = _worker_verdict(asked, readings, source)
        shares: dict[str, float] = asked.shares()
    elif main is None:
        nothing = said("unknown:nothing_sampled")
        verdict = {"code": UNKNOWN, "words": WORDS[UNKNOWN], "message": nothing.summary, "fix": nothing.fix, "lines": []}
        shares = {c: 0.0 for c in rules.CATEGORIES}
    else:
        view, decision = main
        verdict = {"code": decision.code, "words": words_of(decision), "message": decision.summary,
                   "fix": decision.fix, "lines": lines_of(decision), "pid": view.pid, **extra_of(decision)}
        details = {c: d.most_common(1)[0][0] for c, d in view.details.items() if d and d.most_common(1)[0][0]}
        if hung is not None:
            verdict.update(code=hung.code, words=words_of(hung), message=hung.summary, fix=hung.fix,
                           lines=lines_of(hung))
        elif lagging is not None and lagging["pid"] == view.pid:
            # its lines are where its extra time is (a slow rank also waits in backward's all-reduce
            # for a rank the machine delayed: those lines are not why the others wait for it)
            extra = _line_records(view.lines[lagging["category"]], view.main_samples, source)
            verdict.update(code=STRAGGLER, words=WORDS[STRAGGLER], message=lagging["message"],
                           lines=extra or lines_of(decision))
        shares = view.shares()
        if asked is not None and asked.role == "parent" and view.pid != pid:
            verdict["message"] = _parent_words(asked, views, view) + verdict["message"]
    util, on_gpu, held, why_so = _gpu_for(set(views), gpu, processes)
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "pid": pid, **(meta or {}),
            "verdict": verdict, "shares": shares, "details": details,
            "samples": sum(v.samples for v in views.values()),
            "processes": [_process_record(v, next((d for w, d in decided if w is v), None), readings)
                          for v in sorted(views.values(), key=lambda v: v.pid)],
            "ranks": [v.pid for v, _ in ranks_of(decided, views, processes)],
            "straggler": lagging, "hang": hung.evidence["record"] if hung is not None else None,
            "gpu": {"available": bool(gpu.get("available")), "reason": gpu.get("reason"),
                    "in_use": _state(on_gpu), "evidence": why_so,
                    "util_mean_pct": util, "devices": held or gpu.get("devices", [])},
            "host": host}


_TRAINING_WORK = (rules.FORWARD, rules.BACKWARD, rules.OPTIMIZER, rules.EVALUATION, rules.DATA_WAIT,
                  rules.DATA_LOADING, rules.HOST_SYNC, rules.COLLECTIVE, rules.CHECKPOINT_IO)


SAW_TRAINING_SHARE = 0.25  # a process that ended having spent less than this in training work never ran its loop


def saw_training(shares: dict[str, float]) -> bool:
    """Whether the main thread was seen in training work (a model, the data, a sync, a collective)
    for a real part of the window: a few samples of an interpreter's teardown are not a loop."""
    return sum(shares.get(c, 0.0) for c in _TRAINING_WORK) >= SAW_TRAINING_SHARE


#: The share of the main thread's samples without a Python frame from which its process is ending.
ENDING_SHARE = 0.5


def interpreter_ending(stacks: Sequence[CallStack], pid: int) -> bool:
    """Whether ``pid``'s interpreter is ending: most of its main thread's samples show no Python frame
    at all. While a script runs, its main thread always has one (the script's ``<module>`` at
    least); with the script's last line done (or an exception out of it) the interpreter tears down
    its modules (torch's teardown took seconds on a busy machine) and py-spy sees the main thread
    with none. Such a process is said to be ending, never judged: its CPU is not a loop's."""
    main = [s for s in stacks if s.pid == pid and s.is_main_thread]
    total = sum(s.count for s in main)
    return total > 0 and sum(s.count for s in main if not s.frames) >= ENDING_SHARE * total


def ended_during_startup(verdict: dict[str, Any], sampled_s: float | None) -> dict[str, Any]:
    """The verdict of a process that ended before its loop ran: no steady-state words (its last
    samples are its exit: a traceback printed, the interpreter ending), the start-up lines kept."""
    startup = verdict.get("startup") or {}
    lines = startup.get("lines") or []
    at = phrase("last_seen_at", at=_where(lines)) if lines else ""
    ended = said("unknown:ended", lines=lines, at=at, sampled=sampled_s or 0)
    return {"code": UNKNOWN, "words": words_of(ended), **({"pid": verdict["pid"]} if "pid" in verdict else {}),
            "message": ended.summary, "fix": ended.fix, "lines": lines}


def _parent_words(parent: ProcessView, views: dict[int, ProcessView], chosen: ProcessView) -> str:
    """pid P waits for the N trainers it started: whose verdict follows."""
    trainers = children_of(parent, views)
    pids = ", ".join(str(v.pid) for v in trainers[:8]) + (", ..." if len(trainers) > 8 else "")
    which = phrase("parent_busiest") if len(trainers) > 1 else phrase("parent_it")
    return phrase("parent", pid=parent.pid, n=len(trainers), plural="es" if len(trainers) != 1 else "", pids=pids,
                  which=which, chosen=chosen.pid)


def _decide_trainers(views: dict[int, ProcessView], readings: dict[str, Any], gpu: dict[str, Any],
                     source: SourceLine, window_s: float | None) -> list[tuple[ProcessView, Decision]]:
    """Each training process's own verdict, from its tree's GPU, CPU and the host's free CPUs."""
    host = readings.get("host") or {}
    processes = readings.get("processes") or {}
    cpu_by_pid = {pid: info.get("cpu_pct") for pid, info in processes.items()}
    decided: list[tuple[ProcessView, Decision]] = []
    for view in (v for v in views.values() if v.role == "trainer"):
        util, on_gpu, _, why_so = _gpu_for(_tree(view, views), gpu, processes)
        job_cpu = sum(cpu_by_pid.get(p) or 0.0 for p in _tree(view, views))
        decision = decide(view, views, source, gpu_util=util, on_gpu=on_gpu,
                          idle_cpus=free_cpus(host, job_cpu), main_cpu_pct=main_thread_cpu(processes, view.pid),
                          cpu_by_pid=cpu_by_pid, gpu_unknown=why_so, window_s=window_s,
                          gpm=_gpm_of(_tree(view, views), gpu))
        decided.append((view, overloaded(decision, host)))
    return decided


def main_thread_cpu(processes: dict[int, Any], pid: int) -> float | None:
    """The main thread's CPU over the window (100 = one core) as the rules weigh it: what it used,
    plus the time it was ready to run and waited for a CPU other work held. On a busy machine a
    thread computing in Python used 19% of a CPU and was called idle ("waits outside Python")."""
    info = processes.get(pid) or {}
    used = (info.get("threads_cpu_pct") or {}).get(pid)
    wanted = (info.get("threads_wanted_pct") or {}).get(pid)
    return wanted if is_number(wanted) and (used is None or wanted >= used) else used


def free_cpus(host: dict[str, Any], job_cpu_pct: float) -> float | None:
    """CPUs free to the job for more work (more DataLoader workers): the host's idle CPUs, capped
    by what its own affinity and cgroup allow beyond what its tree uses now."""
    idle = host.get("idle_cpus")
    usable = host.get("usable_cpus")
    if idle is None:
        return None
    if usable is None:
        return idle
    return round(max(0.0, min(idle, usable - job_cpu_pct / 100.0)), 1)


def overloaded(decision: Decision, host: dict[str, Any]) -> Decision:
    """Qualify a CPU-bound (or borderline, or input-bound) verdict when the machine, not the job,
    is the cause: other processes take ``OVERLOADED_SHARE`` or more of the CPUs the job may use,
    and no CPU is idle."""
    others = host.get("others_cpu_pct") or 0.0
    steal = 100.0 * (host.get("steal_cpus") or 0.0)
    cpus = host.get("usable_cpus") or host.get("cpus")
    idle = host.get("idle_cpus")
    if decision.code not in (CPU_BOUND, INPUT_BOUND, BORDERLINE) or not cpus or idle is None:
        return decision
    if others + steal < 100.0 * OVERLOADED_SHARE * cpus or idle >= 0.5:
        return decision
    count = host.get("others_count") or len(host.get("others") or [])
    top = ", ".join(f"{e['name']} (pid {e['pid']}) {e['cpu_pct']:.0f}%" for e in (host.get("others") or [])[:3])
    load = phrase("load_1m", load=host["load_1m"]) if host.get("load_1m") is not None else ""
    words = phrase("overloaded_load", count=count, plural="es" if count != 1 else "", others=others, cpus=cpus,
                   cores="s" if cpus != 1 else "", load=load)
    if steal >= 10.0:
        words += phrase("steal", steal=steal)
    decision.evidence["words"] = phrase("overloaded_words", words=words_of(decision))
    decision.summary = phrase("overloaded_message", message=decision.summary, load=words, top=top)
    first = (host.get("others") or [None])[0]
    busiest = f"{first['name']} (pid {first['pid']})" if first else phrase("other_processes")
    decision.fix = phrase("overloaded_fix", busiest=busiest, fix=decision.fix)
    decision.evidence["host_overloaded"] = {"others_cpu_pct": others, "cpus": cpus, "others": host.get("others") or [],
                                         "steal_cpus": host.get("steal_cpus")}
    return decision


def _worker_verdict(view: ProcessView, readings: dict[str, Any], source: SourceLine) -> dict[str, Any]:
    """`why` was asked about a DataLoader worker: what it loads, and the parent to ask about."""
    parent = view.parent or ((readings.get("processes") or {}).get(view.pid) or {}).get("ppid")
    lines = _line_records(view.lines[rules.DATA_LOADING], view.counts[rules.DATA_LOADING], source)
    ask = phrase("worker_ask", parent=parent) if parent else phrase("worker_ask_unknown")
    doing = phrase("worker_doing", share=view.share(rules.DATA_LOADING)) + \
        (phrase("worker_at", at=_where(lines)) if lines else "")
    worker = said("dataloader_worker:asked", pid=view.pid, parent=parent or "unknown", doing=doing, ask=ask)
    return {"code": WORKER, "words": WORDS[WORKER], "pid": view.pid, "message": worker.summary,
            "fix": worker.fix, "lines": lines, "parent_pid": parent}
