"""A distributed job that hangs or crawls: the rank the others wait for, where it is, and for how
long they have waited. Pure: the samples, the readings and the flight recorder's summaries in,
one verdict out.

The rule: most ranks spend the whole window (``WHOLE_WINDOW`` of their main thread's samples)
in the same torch.distributed collective, and one or more ranks are elsewhere (under
``AWAY_SHARE`` in it). Each rank elsewhere is named with its RANK, its PID, the user's line it
is on and what it does there. A rank that computes in forward, backward or the optimizer is
*slow* (a straggler: the others will go on once it arrives); a rank that sleeps, waits for data
or sits in another collective *holds* them (a hang, or one in the making). How long the others
have waited is said as "at least" the part of the window they spent in the collective: py-spy
samples show where a thread is, not since when.
"""

from __future__ import annotations

import math

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from gpudoctor.core.model import Finding
from gpudoctor.why import flightrec, rules
from gpudoctor.why.rules import SourceLine
from gpudoctor.why.views import ProcessView, data_lines, line_records, where, workers_of
from gpudoctor.why.wording import phrase, said

RANK_HANG = "rank_hang"
WHOLE_WINDOW = 0.90      # a rank in one collective this share of its samples waits in it all the window
AWAY_SHARE = 0.50        # a rank in that collective less than this is elsewhere
MIN_SAMPLES = 10         # main-thread samples a rank needs to count (analysis.MIN_SAMPLES)
QUIET_CPU_PCT = 25.0     # a main thread on less CPU than this waits, whatever Python line it shows
STILL_CPU_PCT = 5.0      # in forward/backward/optimizer on less than this: it waits there (DDP's reducer), since
                         # a thread that computes gets more than this even on an overloaded host (31% at load 8.6)
SPIN_UTIL_PCT = 80.0     # NVML utilisation this high while every rank waits: kernels are resident
SPIN_SM_PCT = 30.0       # ...with SM activity under this: they spin (NCCL's kernels hold a few SMs each)
IDLE_UTIL_PCT = 10.0     # at or under this the GPU is idle: nothing was launched on it
_COMPUTE = (rules.BACKWARD, rules.FORWARD, rules.OPTIMIZER)


@dataclass
class Rank:
    """One training process as the hang rule sees it."""

    view: ProcessView
    rank: int | None = None
    main_cpu_pct: float | None = None       # its main thread's CPU over the window, 100 = one core
    age_s: float | None = None              # how long the process has run

    def name(self) -> str:
        return f"rank {self.rank} (pid {self.view.pid})" if self.rank is not None else f"pid {self.view.pid}"


#: The hang (or slow-rank) verdict is a :class:`~gpudoctor.core.model.Finding` in gpudoctor.why.wording's
#: words; its ``evidence`` holds the user's ``lines``, its ``words``, the ``pid`` of the rank named
#: and the JSON's ``hang`` object (``record``).
Hang = Finding


def _collective(view: ProcessView) -> tuple[str, float]:
    """The collective the main thread is most in, and its share of the samples."""
    ops = view.details[rules.COLLECTIVE]
    if not ops or not view.main_samples:
        return "", 0.0
    op, count = ops.most_common(1)[0]
    return op, count / view.main_samples


def _in_op(view: ProcessView, op: str) -> float:
    return view.details[rules.COLLECTIVE][op] / view.main_samples if view.main_samples else 0.0


def _doing(rank: Rank, op: str, views: dict[int, ProcessView], source: SourceLine) -> dict[str, Any]:
    """What a rank that is not in ``op`` does: its main category, the words, the line."""
    view = rank.view
    counts = Counter({c: n for c, n in view.counts.items() if n})
    if rules.COLLECTIVE in counts:  # a collective other than the one the others wait in
        counts[rules.COLLECTIVE] -= view.details[rules.COLLECTIVE][op]
    category = counts.most_common(1)[0][0] if counts else rules.OTHER
    lines = line_records(view.lines[category], view.counts[category], source)
    detail = view.details[category].most_common(1)[0][0] if view.details[category] else ""
    quiet = rank.main_cpu_pct is not None and rank.main_cpu_pct < QUIET_CPU_PCT
    if category == rules.COLLECTIVE:
        other = next((d for d, _ in view.details[rules.COLLECTIVE].most_common() if d != op),
                     phrase("another_collective"))
        words, kind = phrase("away_other_collective", other=other), "other_collective"
    elif category == rules.DATA_WAIT:
        found = data_lines(view, workers_of(view, views), source)
        lines = found or lines
        words, kind = phrase("away_data_wait", detail=detail or phrase("waiting_for_workers")), "data_wait"
    elif category == rules.IDLE:
        text = lines[0]["code"] if lines else ""
        asleep = detail == "sleep" or "sleep(" in text.replace(" ", "")
        what = detail if detail and not detail.startswith("<") else phrase("a_wait")
        words, kind = (phrase("away_sleeping") if asleep else phrase("away_waiting", what=what)), "waiting"
    elif category in _COMPUTE and not (rank.main_cpu_pct is not None and rank.main_cpu_pct < STILL_CPU_PCT):
        words, kind = phrase("away_slow", category=category), "slow"
    elif category == rules.OTHER and quiet:
        words, kind = phrase("away_outside_python"), "waiting"
    elif category == rules.STARTUP:
        words, kind = phrase("away_starting", detail=detail or phrase("start_up")), "starting"
    else:
        words, kind = phrase("away_computing", category=category.replace("_", " ")), "computing"
    cpu = f"{rank.main_cpu_pct:.0f}%" if rank.main_cpu_pct is not None else phrase("cpu_unknown")
    return {"pid": view.pid, "rank": rank.rank, "category": category, "kind": kind, "doing": words,
            "share": round(view.share(category), 4), "main_thread_cpu_pct": rank.main_cpu_pct,
            "lines": lines, "words": phrase("away_rank", rank=rank.name(), words=words, at=where(lines), cpu=cpu)}


def gpu_state(util: float | None, sm: float | None, gpm_note: str | None, on_gpu: bool | None,
              reason: str | None) -> dict[str, Any]:
    """What the GPUs of the waiting ranks do while they wait: NCCL's kernels spinning (busy by
    utilisation, little SM activity), idle (the collective never reached the GPU), or what
    cannot be told."""
    out: dict[str, Any] = {"util_pct": util, "sm_active_pct": sm}
    if on_gpu is False:
        out.update(state="no_gpu", words=phrase("gpu_no_gpu"))
    elif util is None:
        out.update(state="unknown", words=phrase("gpu_unknown", reason=reason or phrase("gpu_unlisted")))
    elif util <= IDLE_UTIL_PCT:
        out.update(state="idle", words=phrase("gpu_idle", util=util))
    elif util >= SPIN_UTIL_PCT and sm is not None and sm < SPIN_SM_PCT:
        out.update(state="spinning", words=phrase("gpu_spinning", util=util, sm=sm))
    elif util >= SPIN_UTIL_PCT and sm is None:
        out.update(state="busy_unknown", words=phrase("gpu_busy_unknown", util=util, note=gpm_note or phrase("not_read")))
    else:
        smw = phrase("gpu_sm", sm=sm) if sm is not None else ""
        out.update(state="busy", words=phrase("gpu_working", util=util, sm=smw))
    return out


def _waited(waiters: list[Rank], op: str, window_s: float | None) -> tuple[float | None, str]:
    if not window_s:
        return None, phrase("waited_window")
    waited = min(_in_op(r.view, op) for r in waiters) * window_s
    ages = [r.age_s for r in waiters if r.age_s is not None]
    if ages:  # a window that began before the ranks did: they cannot have waited longer than they ran
        waited = min(waited, min(ages))
    since = phrase("waited_since", age=math.ceil(min(ages))) if ages else ""
    return round(waited, 2), phrase("waited", waited=waited, since=since)


def _flight_words(found: dict[str, Any] | None, on_gpu: bool | None = None) -> tuple[str, dict[str, Any]]:
    """The flight recorder's part: what the dumps say, or the settings that give dumps next time.
    NCCL keeps the flight recorder: ranks that use no GPU (gloo on the host) get no NCCL advice."""
    looked = found is not None  # the ranks' environments were read (flightrec.find)
    found = found or {}
    dumps = found.get("dumps") or []
    record: dict[str, Any] = {"dumps": dumps, "errors": found.get("errors") or [],
                              "settings": found.get("settings") or {}, "behind": None, "advice": []}
    refused = "; ".join(f"rank {e['rank']}'s dump {e['path']}: {e['error']}" for e in record["errors"][:4])
    if not dumps and looked and on_gpu is False and not any(record["settings"].values()):
        # no GPU and none of its variables set in any rank: a gloo job on the host, no flight recorder
        return phrase("flight_no_gpu"), record
    if not dumps:
        record["advice"] = list(flightrec.ADVICE)
        return phrase("flight_no_dump", refused=f" ({refused})" if refused else "",
                      settings=", ".join(flightrec.ADVICE[:3])), record
    late = flightrec.behind(dumps)
    record["behind"] = late
    if late is None:
        last = dumps[0]["groups"][0]["last"] if dumps[0]["groups"] and dumps[0]["groups"][0]["last"] else None
        what = f"#{last['seq']} {last['op']} ({last['state']})" if last else phrase("flight_no_collective")
        return phrase("flight_agree", ranks=", ".join(str(d["rank"]) for d in dumps), what=what), record
    waiting = late["waiting_in"] or {}
    behind = "; ".join(phrase("flight_rank_behind_at", rank=r, seq=e["seq"], op=e["op"], state=e["state"]) if e
                       else phrase("flight_rank_behind", rank=r) for r, e in late["last_of"].items())
    at = (f"#{waiting.get('seq')} {waiting.get('op')} ({waiting.get('state')})" if waiting
          else phrase("flight_later"))
    written = next((d.get("written") for d in dumps if d["rank"] == late["ahead"][0]), None)
    created = waiting.get("created_ns")
    if isinstance(written, (int, float)) and isinstance(created, int) and 0 < created / 1e9 <= written + 1:
        late["waited_at_dump_s"] = round(max(0.0, written - created / 1e9), 1)  # the clocks: wall time, both
        at += phrase("flight_enqueued", seconds=late["waited_at_dump_s"])
    ahead = (phrase("flight_rank_ahead", rank=late["ahead"][0]) if len(late["ahead"]) == 1
             else phrase("flight_ranks_ahead", ranks=", ".join(map(str, late["ahead"]))))
    return phrase("flight_behind", pg=late["pg_id"], behind=behind, ahead=ahead, at=at), record


def find(ranks: list[Rank], views: dict[int, ProcessView], source: SourceLine, *, window_s: float | None,
         gpu_of: Callable[[set[int]], dict[str, Any]], flight: dict[str, Any] | None) -> Hang | None:
    """The hang (or slow-rank) verdict across ``ranks``, or None when the ranks do not sit in one
    collective. ``gpu_of``: the PIDs of the waiting ranks -> :func:`gpu_state` of their GPUs."""
    ranks = [r for r in ranks if r.view.main_samples >= MIN_SAMPLES]  # a rank barely seen tells nothing
    if len(ranks) < 2:
        return None
    ops = Counter(op for op, share in map(lambda r: _collective(r.view), ranks) if op and share >= WHOLE_WINDOW)
    if not ops:
        return None
    op = ops.most_common(1)[0][0]
    ranks = sorted(ranks, key=lambda r: (r.rank is None, r.rank or 0, r.view.pid))
    waiters = [r for r in ranks if _in_op(r.view, op) >= WHOLE_WINDOW]
    away = [r for r in ranks if _in_op(r.view, op) < AWAY_SHARE]
    if not away or len(waiters) < len(away):
        return None
    doing = [_doing(r, op, views, source) for r in away]
    wait_lines = line_records(sum((r.view.lines[rules.COLLECTIVE] for r in waiters), Counter()),
                              sum(r.view.counts[rules.COLLECTIVE] for r in waiters), source)
    waited, waited_words = _waited(waiters, op, window_s)
    gpu = gpu_of({r.view.pid for r in waiters})
    names = ", ".join(r.name() for r in waiters)
    flight_words, flight_record = _flight_words(flight, False if gpu.get("state") == "no_gpu" else None)
    flight_record["words"] = flight_words
    slow = all(d["kind"] == "slow" for d in doing)
    first = doing[0]
    who = ", ".join(f"rank {d['rank']}" if d["rank"] is not None else f"pid {d['pid']}" for d in doing)
    more = phrase("flight_advice", advice=", ".join(flight_record["advice"])) if flight_record["advice"] else ""
    way = "straggler:hang_slow" if slow else f"rank_hang:{_HANG_WAYS.get(first['kind'], 'elsewhere')}"
    found = said(way, lines=first["lines"] + wait_lines[:1], waiting=len(waiters), ranks=len(ranks), names=names,
                 op=op, at=where(wait_lines), waited=waited_words, doing="; ".join(d["words"] for d in doing),
                 who=who, first_doing=first["doing"], at_first=where(first["lines"]), more=more,
                 other=first["doing"].removeprefix("in another collective, "))
    found.evidence.update(pid=first["pid"], record={
        "collective": op, "waiting": [r.view.pid for r in waiters], "waiting_lines": wait_lines, "waited_s": waited,
        "waited_words": waited_words, "away": doing, "gpu": gpu, "flight_recorder": flight_record, "slow": slow})
    return found


#: How a rank away from the collective holds the others: the ``rank_hang:<way>`` its fix is worded by.
_HANG_WAYS = {"other_collective": "other_collective", "data_wait": "data_wait", "waiting": "waiting",
              "starting": "starting"}


__all__ = ["Rank", "Hang", "find", "gpu_state", "RANK_HANG", "WHOLE_WINDOW", "AWAY_SHARE"]
