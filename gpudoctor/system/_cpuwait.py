"""Time limits that a busy machine does not shorten.

A probe's time limit is there to catch a hang: a call that never returns. On a machine whose CPUs
other work holds, a probe that is making progress takes longer too, because it waits for a CPU:
importing torch took 2.3 s on a quiet 2-core machine and 8.9 s with a CPU hog on each core, of
which 7.6 s were spent runnable and waiting (its own CPU time was 1.2 s and 1.3 s). Linux counts
that wait for each thread: the second field of ``/proc/PID/task/TID/schedstat``, nanoseconds
spent on a run queue, not running. A :class:`Limit` charges the clock's time less that wait, so a
limit of 60 s means 60 s of the watched work running or blocked (in a driver call, on a lock, on
I/O), however busy the machine is. A hang that blocks waits for no CPU and is cut at its limit as
before. The stretch has a hard cap on the clock (:data:`CAP_FACTOR` times the limit), so a hang
that spins on a busy machine also ends. Where schedstat cannot be read (not Linux, a kernel
without ``CONFIG_SCHED_INFO``), the limit is the clock's time alone.

The wait credited is the longest any one watched thread waited since the limit began (not the
sum: two threads starved over the same second are one second late, not two), and never more
than the time that passed.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Mapping

#: The most a limit stretches while its work waits for a CPU: this many times the limit, on the clock.
CAP_FACTOR = 4.0

# A thread's identity in the readings: (process id, thread id).
Task = tuple[int, int]


def _thread_wait_s(pid: int, tid: int) -> float | None:
    """Seconds thread ``tid`` of ``pid`` has spent runnable, waiting for a CPU; None if unreadable."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
            fields = fh.read(256).split()
        return int(fields[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def _threads(pid: int) -> list[int]:
    try:
        return [int(name) for name in os.listdir(f"/proc/{pid}/task") if name.isdigit()]
    except OSError:
        return []


def process_waits(pid: int, *, below: bool = True) -> dict[Task, float]:
    """Each thread of ``pid`` (and, with ``below``, of every process it started, at any depth: a probe
    that waits on a child it starved waits with it) -> seconds it has waited for a CPU."""
    from gpudoctor.system._proc import descendants

    found: dict[Task, float] = {}
    for process in [pid, *(descendants(pid) if below else [])]:
        for tid in _threads(process):
            waited = _thread_wait_s(process, tid)
            if waited is not None:
                found[(process, tid)] = waited
    return found


def thread_waits(tid: int | None) -> Callable[[], dict[Task, float]]:
    """The reader for one thread of this process (a probe run in a thread), by its native id."""
    pid = os.getpid()

    def read() -> dict[Task, float]:
        waited = _thread_wait_s(pid, tid) if tid is not None else None
        return {} if waited is None else {(pid, tid): waited}  # type: ignore[dict-item]
    return read


class Limit:
    """``limit_s`` seconds of the clock, less the time the watched threads waited for a CPU, and at
    most ``cap_factor`` times ``limit_s`` on the clock. ``waits`` reads the watched threads' waits
    (:func:`process_waits`, :func:`thread_waits`); ``clock`` is the monotonic clock."""

    def __init__(self, limit_s: float, waits: Callable[[], Mapping[Task, float]], *,
                 cap_factor: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit_s = limit_s
        self.cap_s = max(limit_s, limit_s * (CAP_FACTOR if cap_factor is None else cap_factor))
        self._waits = waits
        self._clock = clock
        self.began = clock()
        self._base = dict(waits())  # a thread first seen later began after this: its whole wait counts
        self.credit_s = 0.0

    def elapsed(self) -> float:
        return self._clock() - self.began

    def left(self) -> float:
        """Seconds until the limit as it stands now (<= 0: it is over). Reads the waits."""
        elapsed = self.elapsed()
        waited = max((w - self._base.setdefault(task, 0.0) for task, w in self._waits().items()), default=0.0)
        self.credit_s = min(elapsed, max(self.credit_s, waited))
        return min(self.limit_s - (elapsed - self.credit_s), self.cap_s - elapsed)

    def describe(self) -> str:
        """'60 s' when the limit was not stretched, else '60 s of its own time (150 s on the clock,
        while it waited for a busy CPU)'."""
        if self.credit_s < 1.0:
            return f"{self.limit_s:.0f} s"
        return (f"{self.limit_s:.0f} s of its own time ({self.elapsed():.0f} s on the clock, while it waited for a "
                f"busy CPU)")


def of_process(limit_s: float, pid: int | None) -> Limit:
    """A :class:`Limit` of ``limit_s`` over process ``pid`` and everything it started; the clock's
    time alone where there is no process (it could not be started)."""
    return Limit(limit_s, (lambda: process_waits(pid)) if pid is not None else dict)
