"""Each sampled process's main thread, counted by category: the views the verdicts are read from. Pure.

A sampled process gets a role: a DataLoader ``worker`` (its stacks run ``_worker_loop``),
torchrun's ``launcher`` (torch.distributed.elastic), a multiprocessing ``helper`` (the resource
tracker, the forkserver), a ``parent`` that waits for trainers it started (hogwild's, mp.spawn's),
or a ``trainer`` (any other Python process). The lines helpers name the user's lines behind a share of the time.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

from gpudoctor.why import rules
from gpudoctor.why.rules import SourceLine
from gpudoctor.why.stacks import CallStack
from gpudoctor.why.wording import phrase

MAX_LINES = 5               # user lines named per verdict

@dataclass
class ProcessView:
    pid: int
    role: str = "trainer"
    cmdline: str = ""
    parent: int | None = None
    main_samples: int = 0
    samples: int = 0
    counts: Counter = field(default_factory=Counter)                 # category -> main-thread samples
    details: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    lines: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))  # category -> Frame
    distributed: bool = False    # a torch.distributed frame was seen: it joined a process group

    def share(self, category: str) -> float:
        return self.counts[category] / self.main_samples if self.main_samples else 0.0

    def shares(self) -> dict[str, float]:
        return {c: round(self.share(c), 4) for c in rules.CATEGORIES}


def build_views(stacks: Sequence[CallStack], source: SourceLine, own: Sequence[str] = ()) -> dict[int, ProcessView]:
    """One :class:`ProcessView` per sampled process, its main thread's samples counted by category."""
    views: dict[int, ProcessView] = {}
    for stack in stacks:
        view = views.get(stack.pid)
        if view is None:
            view = views[stack.pid] = ProcessView(stack.pid, cmdline=stack.cmdline,
                                                  parent=stack.pids[-2] if len(stack.pids) > 1 else None)
        if rules.is_worker(stack):
            view.role = "worker"
        elif rules.is_launcher(stack) and view.role == "trainer":
            view.role = "launcher"
        elif rules.is_helper(stack) and view.role == "trainer":
            view.role = "helper"
        view.distributed = view.distributed or rules.in_distributed(stack)
    for stack in stacks:
        view = views[stack.pid]
        view.samples += stack.count
        if not stack.is_main_thread:
            continue
        verdict = rules.classify(stack, source, worker=view.role == "worker", own=own)
        view.main_samples += stack.count
        view.counts[verdict.category] += stack.count
        view.details[verdict.category][verdict.detail] += stack.count
        if verdict.user is not None:
            view.lines[verdict.category][verdict.user] += stack.count
    _mark_parents(views)
    return views


PARENT_IDLE_SHARE = 0.5     # a process that waits this much for trainer children of its own is their parent


def _mark_parents(views: dict[int, ProcessView]) -> None:
    """A trainer whose main thread mostly waits while trainers it started run (multiprocessing's
    ``p.join()``, ``torch.multiprocessing.spawn``'s join) is their ``parent``: the work, and the
    verdict, are its children's."""
    for view in views.values():
        if view.role != "trainer" or view.share(rules.IDLE) + view.share(rules.STARTUP) < PARENT_IDLE_SHARE:
            continue
        if any(other.role == "trainer" and other is not view and _descends(other, view.pid, views)
               for other in views.values()):
            view.role = "parent"


def _descends(view: ProcessView, ancestor: int, views: dict[int, ProcessView]) -> bool:
    seen: set[int] = set()
    parent = view.parent
    while parent is not None and parent not in seen:
        if parent == ancestor:
            return True
        seen.add(parent)
        parent = views[parent].parent if parent in views else None
    return False


def children_of(view: ProcessView, views: dict[int, ProcessView], role: str = "trainer") -> list[ProcessView]:
    """The processes of ``role`` below ``view`` (its trainers: hogwild's, mp.spawn's)."""
    return sorted((v for v in views.values() if v.role == role and v is not view and _descends(v, view.pid, views)),
                  key=lambda v: v.pid)


def line_records(counter: Counter, total: int, source: SourceLine) -> list[dict[str, Any]]:
    out = []
    for frame, count in counter.most_common(MAX_LINES):
        out.append({"file": frame.file, "line": frame.line, "function": frame.function,
                    "code": source(frame.file, frame.line)[:200] if frame.line else "",
                    "share": round(count / total, 4) if total else None})
    return out


def workers_of(view: ProcessView, views: dict[int, ProcessView]) -> list[ProcessView]:
    found, frontier = [], [view.pid]
    while frontier:
        parent = frontier.pop()
        for other in views.values():
            if other.parent == parent and other.pid != view.pid:
                frontier.append(other.pid)
                if other.role == "worker":
                    found.append(other)
    return found


def data_lines(view: ProcessView, workers: list[ProcessView], source: SourceLine) -> list[dict[str, Any]]:
    """The lines behind the data wait: the dataset's, from the workers or the main process."""
    merged: Counter = Counter()
    total = 0
    for worker in workers:
        merged.update(worker.lines[rules.DATA_LOADING])
        total += worker.counts[rules.DATA_LOADING]
    if not total and not workers:
        # no workers: the dataset's lines in the main process, never the loop's own `for` line
        inside = view.details[rules.DATA_WAIT][phrase("detail_loading_main")]
        merged = Counter({f: c for f, c in view.lines[rules.DATA_WAIT].items() if f.function != "<module>"
                          and not (f.line and source(f.file, f.line).startswith("for "))})
        total = inside or view.counts[rules.DATA_WAIT]
    return line_records(merged, total, source)


def where(lines: list[dict[str, Any]]) -> str:
    """The main line, and a second one when it holds a real part of the time too."""
    kept = [r for i, r in enumerate(lines[:2]) if i == 0 or (r.get("share") or 0) >= 0.10]
    return ", ".join(f"{r['file'].rsplit('/', 1)[-1]}:{r['line']} {r['function']}" for r in kept) or phrase("no_line_seen")


__all__ = ["ProcessView", "build_views", "children_of", "line_records", "workers_of", "data_lines", "where", "MAX_LINES"]
