"""The words of `gpudoctor why`'s verdicts, once per code and way: registered in
gpudoctor.core.findings' index of wording tables (``findings._TABLES``), so ``findings.wording(key)``
finds them and rewording a verdict is one edit here.

Keys are ``code:way`` (the verdict's code, then which of its wordings): ``why`` verdicts share
their codes with the training hooks' findings (``input_bound``...), worded apart in
gpudoctor.core.findings. ``short`` is the verdict's few words (the JSON's ``words``, the TUI's
column). :data:`PHRASES` holds the parts the sentences are built from.

A verdict is a :class:`~gpudoctor.core.model.Finding` (:func:`said`): its summary is the JSON's
``message``; its ``evidence`` holds the user's ``lines``, its ``words`` where they differ from
the code's own (:data:`WORDS`), and the verdict's other JSON fields (``startup``, ``causes``,
``host_overloaded``; a hang's ``pid`` and ``record``).
"""

from __future__ import annotations

from typing import Any, Sequence

from gpudoctor.core import findings
from gpudoctor.core.findings import Wording
from gpudoctor.core.model import Finding, Status

#: The few words of each verdict code (a verdict whose ``short`` is set says its own instead).
WORDS = {"input_bound": "input-bound", "host_sync_bound": "host-sync-bound", "io_bound": "I/O-bound",
         "cpu_bound": "CPU-bound", "gpu_bound": "GPU-bound", "launch_bound": "launch-bound", "idle": "idle",
         "straggler": "straggler", "rank_hang": "a rank holds the others in a collective",
         "borderline": "borderline", "dataloader_worker": "a DataLoader worker", "unknown": "not enough samples"}

_WAIT_FIX = ("nothing runs: if it should be training, see what it waits for (a sleep, a lock, "
             "another rank at a barrier, a file)")
_HANG = "{waiting} of {ranks} ranks ({names}) wait in torch.distributed {op} at {at} {waited}; {doing}"

WORDING: dict[str, Wording] = {
    "unknown:few_samples": Wording(Status.SKIP, "only {n} samples of the main thread: sample longer (--seconds)",
                                   fix="sample longer"),
    "unknown:starting": Wording(
        Status.SKIP, "starting up: {share:.0%} of the window was {what} (at {at}); sample again in {again} s",
        fix="sample again in {again} s, once the loop runs (gpudoctor why -- CMD waits for it)", short="starting up"),
    "unknown:nothing_sampled": Wording(Status.SKIP, "no training process was sampled",
                                       fix="sample longer, or give the PID of the training process"),
    "unknown:ended": Wording(
        Status.SKIP, "the process ended before its loop was seen running (start-up, or a loop with no model, data or "
        "collective in it){at}; its last {sampled:.1f} s sampled are its start-up and its exit",
        fix="see its own error output (a missing dataset, a failed download, a bad argument), fix that, and run "
        "gpudoctor why again", short="ended during start-up"),
    "idle:collective": Wording(
        Status.WARN, "waiting in a collective: {share:.0%} of the main thread's time is in torch.distributed {what} "
        "at {at}, waiting for the other ranks",
        fix="a slower rank holds the others: run gpudoctor why on the torchrun launcher's PID to sample every rank "
        "and name the straggler (or a rank that hangs)", short="waiting in a collective"),
    "idle:waits": Wording(Status.WARN, "{share:.0%} of the main thread's time waits ({what}) at {at}", fix=_WAIT_FIX),
    "idle:outside_python": Wording(
        Status.WARN, "the main thread used {cpu:.0f}% of a CPU: it sleeps or waits outside Python (a sleep, a lock, "
        "a socket) at {at}{held}", fix=_WAIT_FIX),
    "borderline:both": Wording(
        Status.WARN, "on the line between {problem} and {base} ({low:.0%}-{high:.0%} is the margin): "
        "{problem_message}; and {base_message}", fix="{problem_fix}; and {base_fix}",
        short="borderline: {problem} / {base}"),
    "gpu_bound:utilisation_only": Wording(
        Status.PASS, "the GPU is busy {util:.0f}% of the time by NVML utilisation; whether its kernels fill it "
        "cannot be told without SM activity (GPM: {note})",
        fix="if the loop runs many small operations, larger batches or CUDA graphs (torch.compile "
        "mode='reduce-overhead'); if its kernels are large, mixed precision (torch.autocast), channels_last, "
        "torch.compile", short="GPU-bound (by utilisation alone)"),
    "gpu_bound:gpm": Wording(Status.PASS, "{words}: the GPU is the bottleneck", fix="{fix}"),
    "gpu_bound:gpm_no_fix": Wording(
        Status.PASS, "{words}: the GPU is the bottleneck",
        fix="faster GPU work: mixed precision (torch.autocast), channels_last, torch.compile, larger batches if "
        "memory allows"),
    "launch_bound:small_kernels": Wording(Status.WARN, "{words}", fix="{fix}; fewer, larger operations (torch.compile)",
                                          short="launch-bound"),
    "cpu_bound:own_python": Wording(
        Status.WARN, "{compute:.0%} of the main thread's time is computing on the CPU ({split}), most of it the "
        "script's own Python outside the model{gpu_words}",
        fix="make the per-batch Python{where} cheaper or take it out of the loop: do per-sample work (tokenising, "
        "parsing, augmenting) in the Dataset's __getitem__ so DataLoader workers run it in parallel, or do it once "
        "before training and keep the result; moving the model to a GPU would not speed this part up"),
    "cpu_bound:on_gpu": Wording(
        Status.WARN, "{compute:.0%} of the main thread's time is Python and kernel launches ({split}){gpu_words}: "
        "the host cannot keep the GPU busy",
        fix="less Python per step: larger batches, torch.compile or CUDA graphs, fused optimizers "
        "(foreach/fused=True), fewer small tensor ops"),
    "cpu_bound:gpu_unknown": Wording(
        Status.WARN, "{compute:.0%} of the main thread's time is Python, CPU work and kernel launches ({split})"
        "{gpu_words}; whether it uses a GPU is unknown ({unknown})",
        fix="on a GPU: less Python per step (larger batches, torch.compile or CUDA graphs, fused optimizers); on "
        "the CPU: train on a GPU, or torch.set_num_threads to the cores left free by the loader"),
    "cpu_bound:no_gpu": Wording(
        Status.WARN, "{compute:.0%} of the main thread's time is computing on the CPU ({split}); no GPU in use"
        "{gpu_words}",
        fix="train on a GPU (model.to('cuda') and each batch .to('cuda')); on the CPU, torch.set_num_threads to "
        "the cores left free by the loader"),
    "input_bound:loader": Wording(
        Status.WARN, "{share:.0%} of the main thread's time waits for the next batch (torch DataLoader, {how}"
        "{doing}){gpu_words}", fix="{fix}"),
    "host_sync_bound:sync": Wording(
        Status.WARN, "{share:.0%} of the main thread's time waits for the GPU in {what} at {at}{gpu_words}", fix="{fix}"),
    "io_bound:checkpoint": Wording(
        Status.WARN, "{share:.0%} of the main thread's time saves or loads (torch.save/load, pickle) at {at}{gpu_words}",
        fix="checkpoint less often, or in a background thread/process (torch.distributed.checkpoint async_save); "
        "write to local disk, not a network share"),
    "straggler:ranks": Wording(
        Status.WARN, "pid {pid} works {work:.0%} of its time where the median rank works {median:.0%} and waits for "
        "it (in collectives, or in backward with its CPU idle); the extra time is in {where} (+{excess:.0%}); on its "
        "own it is {words}: {message}", fix="{fix}"),
    "straggler:hang_slow": Wording(
        Status.WARN, _HANG, fix="{who} computes while the others wait: give it no more work than the others (an "
        "uneven batch, a model part or a loop only it runs, at {at_first}), or look at its CPU and GPU (another job "
        "there, throttling)", short="straggler: {who} {first_doing}"),
    "rank_hang:other_collective": Wording(
        Status.FAIL, _HANG, fix="the ranks call collectives in different orders ({other} on one, {op} on the "
        "others): every rank must issue the same collectives in the same order; see the branch around {at_first}"
        "{more}", short="{who} holds the others in {op}"),
    "rank_hang:data_wait": Wording(
        Status.FAIL, _HANG, fix="its DataLoader never delivers: see what the dataset waits for at {at_first} (a "
        "file, a socket, a lock, a dead worker){more}", short="{who} holds the others in {op}"),
    "rank_hang:waiting": Wording(
        Status.FAIL, _HANG, fix="it waits at {at_first} instead of joining {op}: see what it waits for (a sleep, a "
        "lock, a file){more}", short="{who} holds the others in {op}"),
    "rank_hang:starting": Wording(
        Status.FAIL, _HANG, fix="it has not finished starting up (at {at_first}) while the others are in {op}{more}",
        short="{who} holds the others in {op}"),
    "rank_hang:elsewhere": Wording(
        Status.FAIL, _HANG, fix="it runs at {at_first} and does not reach {op}: a loop that does not end, or a "
        "branch only this rank takes{more}", short="{who} holds the others in {op}"),
    "dataloader_worker:asked": Wording(
        Status.SKIP, "pid {pid} is a DataLoader worker of pid {parent}: {doing}; whether the training is "
        "input-bound is told by the training process, pid {parent}", fix="ask about the training process: {ask}"),
}

#: The parts of the sentences above, filled in by gpudoctor.why.analysis and .hang.
PHRASES = {
    "startup_left_out": "; start-up left out: {share:.0%} of the window{took} was {what}",
    "startup_took": " ({seconds:.1f} s)",
    "a_wait": "a wait",
    "holds_gpu_unknown": "; it holds a GPU, whose busy figure is unknown",
    "holds_gpu_busy": "; the GPU it holds is busy {util:.0f}% of the time",
    "gpu_busy": "; the GPU is busy {util:.0f}% of the time",
    "no_one_part": "no one part",
    "in_collectives": "; {share:.0%} waits in collectives",
    "mostly_evaluation": "; most of it evaluation (no_grad/inference_mode or an eval function): sample during "
                         "training for the training verdict",
    "own_python_at": " at {file}:{line}",
    "not_read": "not read",
    "workers": "{n} workers",
    "no_workers": "no workers: loading in the main process",
    "busy_in": ", busy in {at}",
    "dataset_unseen": ", the dataset's line was not seen",
    "loading_kind": " -> {kind}",
    "cpus_idle": "{idle:.0f} CPUs idle",
    "cpus_idle_fraction": "{idle:.1f} CPUs idle",
    "cpus_idle_unknown": "idle CPUs unknown",
    "cheaper": "make the per-sample work at {at} cheaper (decode once, cache, move augmentation to the GPU)",
    "the_dataset": "the dataset",
    "workers_busy": "{busy} of {workers} workers busy loading",
    "fix_parallel_waiting": "load in parallel: DataLoader(num_workers=N, persistent_workers=True, pin_memory=True): "
                            "the loading waits (the process used {cpu:.0f}% of a CPU), so workers overlap the waits "
                            "even with no CPU free ({idle}); or {cheaper}",
    "fix_no_cpu_free": "no CPU is free for DataLoader workers ({idle}): {cheaper}",
    "fix_parallel": "load in parallel: DataLoader(num_workers=N, persistent_workers=True, pin_memory=True) ({idle}); "
                    "or {cheaper}",
    "fix_starved": "no CPU is idle for more workers ({state}: they compute ({kind}) but get {most:.0f}% of a core at "
                   "most, the CPUs being taken; {idle}): {cheaper}",
    "fix_more_waiting": "more DataLoader workers: they load but use little CPU ({most:.0f}% of a core at most), so "
                        "they wait on disk or network and more of them overlap the waits ({state}; {idle}); or "
                        "{cheaper}",
    "fix_no_idle_cpu": "no CPU is idle for more workers ({state}): {cheaper}",
    "fix_more_workers": "more DataLoader workers ({state}; {idle}), prefetch_factor 2-4; or {cheaper}",
    "parent": "pid {pid} waits for the {n} trainer process{plural} it started (pids {pids}); {which}, pid {chosen}: ",
    "parent_busiest": "the busiest",
    "parent_it": "it",
    "overloaded_words": "{words}, but the host is overloaded",
    "overloaded_message": "{message}; but the host is overloaded: {load} ({top})",
    "overloaded_fix": "free the CPUs first (stop or move {busiest}, or run on a quieter node), then judge again; {fix}",
    "overloaded_load": "{count} other process{plural} use {others:.0f}% of {cpus:g} core{cores}{load}",
    "load_1m": ", load {load:.1f}",
    "steal": ", and the hypervisor gives {steal:.0f}% of a core to other machines (steal)",
    "other_processes": "the other processes",
    "worker_doing": "{share:.0%} of its time loads samples",
    "worker_at": " at {at}",
    "worker_ask": "gpudoctor why {parent}",
    "worker_ask_unknown": "gpudoctor why <the training process's PID>",
    "last_seen_at": ", last seen at {at}",
    "flight_advice": "; to see more next time: {advice}",
    # -- a rank away from the collective the others wait in (hang.py)
    "away_other_collective": "in another collective, {other}",
    "another_collective": "another collective",
    "away_data_wait": "waiting for data (DataLoader, {detail})",
    "waiting_for_workers": "waiting for workers",
    "away_sleeping": "sleeping",
    "away_waiting": "waiting ({what})",
    "away_slow": "slow in {category}",
    "away_outside_python": "waiting outside Python",
    "away_starting": "still starting up ({detail})",
    "start_up": "start-up",
    "away_computing": "computing ({category})",
    "cpu_unknown": "unknown",
    "away_rank": "{rank} is {words} at {at} (main thread {cpu} of a CPU)",
    # -- the waiting ranks' GPUs
    "gpu_no_gpu": "no GPU in use (a CPU job: gloo waits on the host)",
    "gpu_unknown": "GPU state not read ({reason})",
    "gpu_unlisted": "NVML lists none of the ranks",
    "gpu_idle": "GPU idle (utilisation {util:.0f}%): nothing runs on it; the ranks wait on the host",
    "gpu_spinning": "GPU spinning (utilisation {util:.0f}%, SM activity {sm:.0f}%): NCCL kernels wait on the GPU for "
                    "the rank that is missing",
    "gpu_busy_unknown": "GPU busy {util:.0f}% by utilisation; NCCL kernels that spin and real work read the same "
                        "there, and without SM activity (GPM: {note}) they cannot be told apart",
    "gpu_working": "GPU working (utilisation {util:.0f}%{sm}): kernels run while ranks wait",
    "gpu_sm": ", SM activity {sm:.0f}%",
    # -- how long the others waited
    "waited_window": "for the sampled window",
    "waited_since": "; the ranks started {age:.0f} s ago",
    "waited": "for at least {waited:.1f} s (all of the sampled window they were seen{since})",
    # -- the flight recorder
    "flight_no_gpu": "flight recorder: none (the ranks use no GPU: NCCL's flight recorder does not apply)",
    "flight_no_dump": "flight recorder: no dump found{refused}; for the next run set {settings} (and a shorter "
                      "timeout)",
    "flight_agree": "flight recorder dumps of ranks {ranks} agree: last {what}",
    "flight_no_collective": "no collective",
    "flight_behind": "flight recorder (process group {pg}): {behind}; {ahead} at {at}",
    "flight_rank_behind_at": "rank {rank} is behind at #{seq} {op} ({state})",
    "flight_rank_behind": "rank {rank} is behind",
    "flight_later": "a later collective",
    "flight_enqueued": ", enqueued {seconds:.0f} s before its dump was written",
    "flight_rank_ahead": "rank {rank} is",
    "flight_ranks_ahead": "ranks {ranks} are",
    # -- what a sampled stack was doing (rules.Verdict.detail): the breakdown's words, the verdicts' {what}
    "detail_disk_read": "disk read",
    "detail_worker_idle": "worker waiting for work",
    "detail_loading_main": "loading in the main process",
    "detail_loading_checkpoint": "loading a checkpoint",
    "detail_building": "building {what}",
    "detail_the_model": "the model",
    "detail_the_optimizer": "the optimizer",
    "detail_the_dataset": "the dataset",
    "detail_an_object": "an object",
    "detail_imports": "imports",
    "detail_outside_python": "waiting outside Python",
    "no_line_seen": "no line seen",
    # -- whether a process uses a GPU: the evidence, or why it is unknown (cpu_bound:gpu_unknown's {unknown})
    "gpu_evidence_nvml": "NVML lists it on {gpus}",
    "gpu_evidence_gpu": "GPU {index}",
    "gpu_evidence_files": "holds {files} open",
    "gpu_evidence_libcuda": "libcuda.so is loaded",
    "gpu_evidence_none": "no GPU device file open, libcuda.so not loaded",
    "gpu_evidence_nvml_unread": "NVML not read",
    "gpu_evidence_unknown": "/proc of the process could not be read, and {nvml}",
    # -- the text report's lines (text.py: render_text, headline)
    "text_headline": "{process} ({where}): {words}",
    "text_process": "process",
    "text_pid": "pid {pid}",
    "text_gpu": "GPU {index}",
    "text_fix": "fix: ",
    "text_at": "at {file}:{line} {function}{code}{share}",
    "text_share": "{category} {share:.0%}",
    "text_detail": " ({detail})",
    "text_main_thread": "main thread: {shares}",
    "text_no_samples": "no samples",
    "text_startup": "start-up: {share:.0%} of the window{took}, {what}; left out of the verdict",
    "text_host": "host: {idle:g} of {cpus} CPUs idle{usable}{load}{others}",
    "text_usable": ", {usable:g} usable by the job",
    "text_others": "; others: {others}",
    "text_other": "{process} (pid {pid}) {cpu:.0f}%",
    "text_gpu_in_use": "in use",
    "text_gpu_not_in_use": "not in use",
    "text_gpu_use_unknown": "use unknown",
    "text_nvml_not_read": "not read ({reason})",
    "text_gpu_not_read": "GPU: not read ({reason})",
    "text_no_gpu": "no GPU",
    "text_gpu_use": "GPU: {use} ({evidence}); NVML: {read}",
    "text_no_figures": "no figures",
    "text_gpu_device": "GPU {index} {model}: busy {util}, {held} held",
    "text_monitor": "TrainingMonitor (pid {pid}): ",
    "text_no_verdict": "no verdict yet",
    "text_step": "step {ms:.1f} ms (median)",
    "text_no_step": "no step timed yet (warming up)",
    "text_data_wait": "data wait {pct:.0f}%",
    "text_samples_per_s": "{rate:.0f} samples/s",
    "text_syncs": "{syncs:.1f} host syncs/step",
    "text_syncs_uncounted": "host syncs not counted (no CUDA device)",
    "text_gpu_while_waiting": "GPU while they wait: ",
    "text_straggler": "straggler: ",
    "text_process_line": "pid {pid}{rank} {role} (CPU {cpu}): {doing}{verdict}",
    "text_rank": " rank {rank}",
    "text_process_verdict": " -> {words}",
    "text_no_main_thread": "no main-thread samples",
    "text_sampled": "sampled {seconds:.1f} s at {rate} Hz, {samples} samples{ended}{interrupted}",
    "text_ended": "; the process ended while sampled",
    "text_interrupted": "; interrupted",
}


def phrase(name: str, **fields: Any) -> str:
    """One of :data:`PHRASES`, filled."""
    return PHRASES[name].format(**fields)


def said(key: str, *, lines: Sequence[dict[str, Any]] = (), **fields: Any) -> Finding:
    """The verdict ``key`` (``code:way``) in this table's words, filled from ``fields``, with the
    user's ``lines`` (and its own few words where the wording has them) in its evidence."""
    worded = findings.wording(key)
    summary, _why, fix = findings.words(key, **fields)
    evidence: dict[str, Any] = {"lines": list(lines)}
    if worded.short:
        evidence["words"] = worded.short.format(**fields)
    return Finding(worded.status, key.partition(":")[0], summary, "", fix, evidence=evidence)


def words_of(verdict: Finding) -> str:
    """A verdict's few words: its own, else its code's (:data:`WORDS`)."""
    return str(verdict.evidence.get("words") or WORDS.get(verdict.code, verdict.code))


def lines_of(verdict: Finding) -> list[dict[str, Any]]:
    """The user's lines behind a verdict."""
    return list(verdict.evidence.get("lines") or [])


#: The evidence keys that are not a verdict's own JSON fields (the rest are: startup, causes...).
_OWN = ("lines", "words")


def extra_of(verdict: Finding) -> dict[str, Any]:
    """The verdict's JSON fields besides code, words, message, fix and lines (startup, causes,
    host_overloaded)."""
    return {k: v for k, v in verdict.evidence.items() if k not in _OWN}
