"""The workload adapter: a sweep in a spawned child, progress streamed over a Pipe.

The targets are test doubles (tests/support/tui_workload_double.py) standing in for
gpudoctor.workload's sweep, which another change provides.
"""

from __future__ import annotations

import time

import pytest

from gpudoctor.tui.workload_runner import WorkloadProcess, field_of, plain, workload_available

pytestmark = pytest.mark.timeout(120)


def run_all(target: str, options=None, **kw):
    proc = WorkloadProcess(target, options, **kw)
    proc.start()
    events = list(proc.events())
    return proc, events


def test_progress_and_result_stream_from_a_child_process():
    import os

    proc, events = run_all("support.tui_workload_double:fake_sweep", {"quick": True})
    kinds = [k for k, _ in events]
    assert kinds[0] == "started" and kinds[-1] == "done" and kinds.count("progress") == 12
    started = events[0][1]
    assert started["pid"] != os.getpid() and started["options"] == {"quick": True}
    runs = [p for k, p in events if k == "progress" and "batch_size" in p]
    assert [(r["mode"], r["batch_size"]) for r in runs][:2] == [("dataloader", 64), ("dataloader", 1000)]
    assert runs[-1]["done"] == 6 and runs[-1]["total"] == 6  # keyword fields merged into the event
    result = events[-1][1]
    assert result["quick"] is True and len(result["runs"]) == 6 and result["pid"] == started["pid"]
    assert not proc.process.is_alive()


def test_options_the_sweep_does_not_take_are_dropped_and_reported():
    _, events = run_all("support.tui_workload_double:fake_sweep", {"quick": True, "device": "cuda"})
    assert events[0][1]["options"] == {"quick": True} and events[0][1]["dropped_options"] == ["device"]


def test_kwargs_target_gets_the_callback_as_progress():
    _, events = run_all("support.tui_workload_double:kwargs_sweep", {"quick": True})
    assert events[1] == ("progress", {"message": "kwargs"})
    assert events[-1] == ("done", {"options": ["progress", "quick"]})


def test_missing_module_is_unavailable_not_a_crash():
    _, events = run_all("gpudoctor_no_such_module_xyz:sweep")
    assert events[-1][0] == "unavailable" and "workload module not available" in events[-1][1]["message"]
    assert workload_available("gpudoctor_no_such_module_xyz:sweep")
    assert workload_available("json:dumps") is None


def test_errors_deaths_and_missing_callback_are_reported():
    _, events = run_all("support.tui_workload_double:failing_sweep")
    assert events[-1][0] == "error" and "RuntimeError: CUDA out of memory in the double" in events[-1][1]["message"]
    assert "Traceback" in events[-1][1]["traceback"]

    _, events = run_all("support.tui_workload_double:dying_sweep")
    assert events[-2] == ("progress", {"message": "about to die"})
    assert events[-1][0] == "exited" and "exited with code 7" in events[-1][1]["message"]

    _, events = run_all("support.tui_workload_double:no_callback_sweep")
    assert events[-1][0] == "error" and "takes no progress callback" in events[-1][1]["message"]


def test_cancel_terminates_the_child():
    proc = WorkloadProcess("support.tui_workload_double:slow_sweep")
    proc.start()
    seen = []
    deadline = time.monotonic() + 60
    for kind, _payload in proc.events(stop=lambda: len(seen) >= 3 or time.monotonic() > deadline):
        seen.append(kind)
    assert seen[-1] == "cancelled" and seen.count("progress") >= 2
    assert not proc.process.is_alive()


def test_cancel_ends_what_the_child_started():
    """Before: cancel() terminated the child alone; the processes it had started (DataLoader
    workers) lived on after the TUI's Workload screen was left or the TUI quit."""
    from gpudoctor.system import _proc

    proc = WorkloadProcess("support.tui_workload_double:tree_sweep")
    proc.start()
    workers = []
    deadline = time.monotonic() + 90
    for kind, payload in proc.events(stop=lambda: bool(workers) or time.monotonic() > deadline):
        if kind == "progress" and payload.get("worker"):
            workers.append(payload["worker"])
    assert workers, "the sweep never reported the process it started"
    gone_by = time.monotonic() + 30  # a generous bound for the SIGTERM sent to the group to land
    while _proc._alive(workers[0]) and time.monotonic() < gone_by:
        time.sleep(0.1)
    alive = _proc._alive(workers[0])
    if alive:
        import os
        import signal

        os.kill(workers[0], signal.SIGKILL)
    assert not alive, "the process the sweep started outlived cancel()"
    assert not proc.process.is_alive()


def test_plain_makes_events_json_safe():
    import json
    from dataclasses import dataclass

    from gpudoctor.backends import NA

    @dataclass
    class Run:
        batch_size: int
        rate: float

    class WithToDict:
        def to_dict(self):
            return {"x": float("nan"), "na": NA("NotSupported")}

    out = plain({"run": Run(64, 1.5), "obj": WithToDict(), "t": (1, 2), "other": object})
    json.dumps(out, allow_nan=False)
    assert out["run"] == {"batch_size": 64, "rate": 1.5} and out["obj"] == {"x": None, "na": None}
    assert field_of({"run": {"batch_size": 64}}, "batch_size") == 64
    assert field_of({"samples_per_sec": 10.0}, "samples_per_s") == 10.0
    assert field_of({"gpu_util_mean_pct": 55}, "gpu_util") == 55
