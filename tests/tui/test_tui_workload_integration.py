"""The TUI's workload adapter runs the real MNIST sweep (gpudoctor.workload) in a spawned child."""

from __future__ import annotations

import pytest

from gpudoctor.tui.workload_runner import DEFAULT_TARGET, WorkloadProcess, field_of, workload_available

SMALL = {"quick": True, "devices": ["cpu"], "modes": ["resident", "dataloader"], "batch_sizes": [128],
         "workers": [0, 1], "train_samples": 1024, "test_samples": 256}


def test_default_target_is_the_real_workload():
    assert workload_available(DEFAULT_TARGET) is None


def test_real_sweep_streams_runs_and_finishes():
    proc = WorkloadProcess(DEFAULT_TARGET, SMALL)
    proc.start()
    events = list(proc.events())
    kinds = [k for k, _ in events]
    assert kinds[0] == "started" and kinds[-1] == "done", events[-1]
    assert events[0][1]["dropped_options"] == []
    runs = [p for k, p in events if k == "progress" and field_of(p, "samples_per_s") is not None]
    # resident ignores workers; dataloader runs once per worker count
    assert sorted((r["mode"], r["workers"]) for r in runs) == [("dataloader", 0), ("dataloader", 1), ("resident", None)]
    assert all(r["status"] == "ok" and r["samples_per_s"] > 0 and 0 <= r["fraction"] <= 1 for r in runs)
    starts = [p for k, p in events if k == "progress" and "message" in p]
    assert starts and starts[0]["message"].startswith("run 1/3: cpu")
    done = events[-1][1]
    assert len(done["runs"]) == 3 and done["interrupted"] is False
    proc.process.join(60)  # "done" is sent before the child's interpreter has finished exiting
    assert proc.process.exitcode == 0


def test_unknown_option_is_an_error_event_not_a_crash():
    proc = WorkloadProcess(DEFAULT_TARGET, {"quick": True, "no_such_option": 1})
    proc.start()
    kind, payload = list(proc.events())[-1]
    assert kind == "error" and "no_such_option" in payload["message"]


@pytest.mark.parametrize("bad", [{"batch_sizes": [0]}, {"modes": ["warp"]}])
def test_bad_sweep_config_is_reported(bad):
    proc = WorkloadProcess(DEFAULT_TARGET, {"quick": True, "devices": ["cpu"], **bad})
    proc.start()
    kind, payload = list(proc.events())[-1]
    assert kind == "error" and "UsageError" in payload["message"]
