"""TrainingMonitor's live summary, published every few seconds for `gpudoctor why`, the TUI's
Processes screen and the exporter (the files and the directory: :mod:`gpudoctor.system._published`).

A daemon thread reads the monitor's recent steps (it never stops the monitor's collection,
never synchronises the device) and replaces ``<runtime dir>/<pid>.json``; the file is removed
when the monitor closes or the process exits. Off with ``TrainingMonitor(publish=False)`` or
``GPUDOCTOR_PUBLISH=0``.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import sys
import threading
import weakref
import time
from typing import TYPE_CHECKING, Any

from gpudoctor.system import _published
from gpudoctor.core.stats import percentile

if TYPE_CHECKING:
    from gpudoctor.hooks.monitor import TrainingMonitor

log = logging.getLogger("gpudoctor.hooks")

INTERVAL_S = 3.0
WINDOW_STEPS = 500  # the figures describe the most recent steps, not the whole run


def live_record(monitor: TrainingMonitor) -> dict[str, Any]:
    """The monitor's recent figures and diagnosis codes, as published (JSON-safe)."""
    from gpudoctor.hooks.summary import Summary, diagnose

    raw = monitor.raw_timings()
    n_all = len(raw.ends)
    first = max(min(raw.warmup_steps, max(n_all - 1, 0)), n_all - WINDOW_STEPS)
    ends = list(raw.ends[first:n_all])
    starts = list(raw.iter_starts[first:first + len(ends)])
    waits = [w for w in raw.waits[first:first + len(ends)] if not math.isnan(w)]
    steps = [e - s for s, e in zip(starts, ends)]
    span = (ends[-1] - starts[0]) if ends else 0.0
    syncs = raw.host_syncs
    per_step = (syncs["total"] / n_all) if syncs and n_all else None
    counts = list(raw.samples[first:first + len(ends)])  # samples in each step, -1 unknown
    known = bool(counts) and min(counts) >= 0 and len(counts) == len(ends)
    steps_per_s = len(ends) / span if span > 0 else None
    live = Summary(steps=n_all, steps_measured=len(ends), device=raw.device,
                   rank=raw.rank, world_size=raw.world_size,
                   data_wait_share=(sum(waits) / span) if span > 0 and waits else None,
                   data_wait_p50_s=percentile(waits, 50), step_time_p50_s=percentile(steps, 50),
                   steps_per_s=steps_per_s,
                   host_syncs=dict(syncs, per_step=per_step) if syncs else None)
    items = diagnose(live)
    return {"format": _published.FORMAT, "format_version": _published.FORMAT_VERSION, "pid": os.getpid(),
            "command": " ".join(sys.argv)[:500], "t": time.time(), "rank": raw.rank,
            "world_size": raw.world_size, "device": raw.device, "steps": n_all,
            "step_time_p50_s": live.step_time_p50_s, "data_wait_share": live.data_wait_share,
            "steps_per_s": steps_per_s, "samples_per_s": sum(counts) / span if known and span > 0 else None,
            "host_syncs_per_step": per_step,
            "diagnosis": [{"code": i.code, "message": i.summary[:500]} for i in items],
            "verdict": items[0].code if items else "ok"}


class Publisher:
    """The thread that publishes one monitor's live record until :meth:`stop`.

    Its lifetime is the monitor's: the thread holds the monitor only weakly, and ends when the
    monitor is dropped (a ``weakref.finalize`` wakes it), when the monitor is summarised or
    closed (:func:`stop`), or at exit (one exit hook for all publishers, holding none of them).
    Following docs/hooks.md without ``close()`` leaves no thread behind."""

    def __init__(self, monitor: TrainingMonitor, directory: str, interval_s: float = INTERVAL_S) -> None:
        self._monitor = weakref.ref(monitor)
        self.directory = directory
        self.interval_s = interval_s
        self.pid = os.getpid()
        self._stop = threading.Event()
        # the thread's target holds the event and the weak reference, not this object
        self._thread = threading.Thread(target=_run, args=(self._monitor, self._stop, directory, interval_s, self.pid),
                                        name="gpudoctor-publish", daemon=True)
        weakref.finalize(monitor, _end, self._stop, directory, self.pid)
        _LIVE.add(self)

    @property
    def monitor(self) -> TrainingMonitor | None:
        return self._monitor()

    def start(self) -> "Publisher":
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive() and os.getpid() == self.pid

    def publish_once(self) -> None:
        monitor = self._monitor()
        if monitor is not None:
            _published.write(live_record(monitor), self.directory)

    def stop(self) -> None:
        _end(self._stop, self.directory, self.pid)
        _LIVE.discard(self)


_LIVE: weakref.WeakSet[Publisher] = weakref.WeakSet()


def _end(stop_event: threading.Event, directory: str, pid: int) -> None:
    stop_event.set()
    if os.getpid() == pid:
        _published.remove(pid, directory)


def _run(monitor_ref: weakref.ref[TrainingMonitor], stop_event: threading.Event, directory: str, interval_s: float,
         pid: int) -> None:
    while not stop_event.wait(interval_s):
        if os.getpid() != pid:  # a forked child (a DataLoader worker) publishes nothing
            return
        monitor = monitor_ref()
        if monitor is None:  # dropped without close(): the thread ends with it
            return
        try:
            if len(monitor.raw_timings().ends) > monitor.warmup_steps:
                _published.write(live_record(monitor), directory)
        except Exception as exc:  # publishing must never disturb training
            log.debug("gpudoctor: live summary not published: %s: %s", type(exc).__name__, exc)
        del monitor  # not held while waiting


@atexit.register
def _stop_all() -> None:
    for publisher in list(_LIVE):
        publisher.stop()


def start(monitor: TrainingMonitor, current: Publisher | None, enabled: bool | None) -> Publisher | None:
    """The monitor's publisher, started on its first step (None when off or no safe directory)."""
    if current is not None and current.alive():
        return current
    if not _published.publishing_enabled(enabled):
        return None
    directory = _published.runtime_dir(create=True)
    if directory is None:
        return None
    return Publisher(monitor, directory).start()


def stop(publisher: Publisher | None) -> None:
    if publisher is not None:
        publisher.stop()


__all__ = ["Publisher", "live_record", "start", "stop", "INTERVAL_S"]
