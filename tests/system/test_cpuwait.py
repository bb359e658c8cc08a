"""A probe's time limit does not count the time its work waited for a CPU (gpudoctor.system._cpuwait).

On a busy machine a probe that makes progress was cut off at its limit: importing torch under two
CPU hogs took four times as long, and `report` exited 5 (a probe timed out) where it should have
said 4 (the failure it found). The limits here are driven by a clock and by CPU waits the test
sets, so no test depends on how busy the machine running it is."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from support import fault_probes as fp
from gpudoctor.system import _cpuwait
from gpudoctor.report import runner
from gpudoctor.core.model import Status


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _limit(limit_s: float, waits: dict, clock: Clock, **kw) -> _cpuwait.Limit:
    return _cpuwait.Limit(limit_s, lambda: dict(waits), clock=clock, **kw)


def test_without_waiting_the_limit_is_the_clocks_time():
    clock, waits = Clock(), {(1, 1): 5.0}
    limit = _limit(60, waits, clock)
    clock.now += 59.5
    assert limit.left() == pytest.approx(0.5)
    clock.now += 0.5
    assert limit.left() <= 0 and limit.describe() == "60 s"


def test_time_spent_waiting_for_a_cpu_is_not_charged():
    clock, waits = Clock(), {(1, 1): 5.0}
    limit = _limit(20, waits, clock)
    clock.now += 40
    waits[(1, 1)] = 35.0  # 30 of the 40 s it was runnable and waited: 10 s charged
    assert limit.left() == pytest.approx(10)
    clock.now += 10
    assert limit.left() <= 0
    assert limit.describe() == "20 s of its own time (50 s on the clock, while it waited for a busy CPU)"


def test_the_stretch_has_a_hard_cap_on_the_clock():
    clock, waits = Clock(), {(1, 1): 0.0}
    limit = _limit(10, waits, clock, cap_factor=4)
    for _ in range(39):
        clock.now += 1
        waits[(1, 1)] += 1  # waited all the time (a spinning hang on a busy machine)
        assert limit.left() > 0
    clock.now += 1
    waits[(1, 1)] += 1
    assert limit.left() <= 0  # 40 s: four times the limit


def test_the_longest_wait_counts_once_and_an_ended_thread_keeps_its_credit():
    clock, waits = Clock(), {(1, 1): 0.0, (1, 2): 0.0}
    limit = _limit(10, waits, clock)
    clock.now += 30
    waits.update({(1, 1): 25.0, (1, 2): 25.0, (2, 7): 3.0})  # two threads starved over the same 25 s; a new child
    assert limit.left() == pytest.approx(10 - 5)  # 25 s credited, not 50
    del waits[(1, 1)], waits[(1, 2)]  # the threads ended
    assert limit.left() == pytest.approx(5)
    waits[(3, 3)] = 500.0  # a new task's wait never credits more than the time that passed
    assert limit.left() == pytest.approx(10)
    assert limit.credit_s == 30


def test_unreadable_waits_leave_the_clocks_limit():
    clock = Clock()
    limit = _limit(5, {}, clock)
    clock.now += 5
    assert limit.left() <= 0


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat"),
                    reason="needs /proc/PID/task/TID/schedstat (Linux with CONFIG_SCHED_INFO)")
def test_the_waits_are_read_for_every_thread_of_a_process_and_its_children():
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        waits = _cpuwait.process_waits(os.getpid())
        assert (os.getpid(), os.getpid()) in waits and (child.pid, child.pid) in waits
        assert all(isinstance(w, float) and w >= 0 for w in waits.values())
        mine = _cpuwait.thread_waits(threading.get_native_id())()
        assert list(mine) == [(os.getpid(), threading.get_native_id())]
        assert _cpuwait.process_waits(os.getpid(), below=False).keys() <= {(os.getpid(), t) for t in
                                                                             _cpuwait._threads(os.getpid())}
    finally:
        child.kill()
        child.wait()


def _always_waiting(monkeypatch) -> None:
    """Every watched thread is said to have waited for a CPU all the time (a machine with its CPUs
    taken), and the cap is far off: only a limit that charges that wait ends the probe."""
    began = time.monotonic()
    monkeypatch.setattr(_cpuwait, "CAP_FACTOR", 1000.0)
    monkeypatch.setattr(_cpuwait, "process_waits", lambda pid, below=True: {(pid, pid): time.monotonic() - began})
    monkeypatch.setattr(_cpuwait, "thread_waits", lambda tid: lambda: {(0, tid): time.monotonic() - began})


def test_a_probe_child_that_waits_for_a_cpu_is_not_cut_off(monkeypatch):
    """Before: the 1 s limit stopped the child of a probe that works 3 s, however much of it was spent
    waiting for a CPU."""
    _always_waiting(monkeypatch)
    report = runner.run_probes([fp.SLOW, fp.SLOW_INPROC], runner.RunSpec(level="standard"))
    assert [r.status for r in report.results] == [Status.PASS, Status.PASS], [r.summary for r in report.results]
    assert report.results[0].measurements[0].value != os.getpid()  # the first ran in the child


def test_a_probe_that_does_not_wait_for_a_cpu_is_still_cut_at_its_limit(monkeypatch):
    monkeypatch.setattr(_cpuwait, "process_waits", lambda pid, below=True: {})
    monkeypatch.setattr(_cpuwait, "thread_waits", lambda tid: dict)
    report = runner.run_probes([fp.SLOW, fp.SLOW_INPROC], runner.RunSpec(level="standard"))
    assert [r.status for r in report.results] == [Status.ERROR, Status.ERROR]
    assert "timed out after 1 s (the probe process was stopped)" in report.results[0].summary
    assert report.results[1].summary == "timed out after 1 s"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the CUDA start is asked on Linux only")
def test_the_cuda_start_child_is_not_timed_out_while_it_waits_for_a_cpu(monkeypatch):
    """Before: the child that asks cuInit had 5 s on the clock, its interpreter's start included; on a
    busy node it was "not answered in 5 s". Here its limit is 1 ms, which no interpreter starts in:
    only a limit that leaves out its wait for a CPU lets it answer."""
    from gpudoctor.backends import cuda_driver

    _always_waiting(monkeypatch)
    answer = cuda_driver._Spawned(0.001).answer()
    assert not isinstance(answer, cuda_driver.CudaTimeout), answer
    monkeypatch.setattr(_cpuwait, "process_waits", lambda pid, below=True: {})
    assert isinstance(cuda_driver._Spawned(0.001).answer(), cuda_driver.CudaTimeout)
