"""TrainingMonitor on real CPU training loops: the diagnosis, the summary's forms, logging."""

from __future__ import annotations

import json
import logging
import math

import pytest

torch = pytest.importorskip("torch")

from support._hooks_loops import (LEAP_S, LeapingClock, fast_collate, make_loader, mnist_mlp, single_thread,  # noqa: E402
                          train_epoch, validate_summary)

from gpudoctor import Summary, TrainingMonitor  # noqa: E402
from gpudoctor.hooks import monitor as monitor_module  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with single_thread():
        yield


def _leaping_run(slow: bool, batches: int) -> tuple[Summary, float]:
    """One epoch read by a clock that leaps 1000 s per batch collated (slow data) or per step
    (fast data against the step): what the diagnosis tells apart is the leap, not how busy the
    machine is (50 ms sleeps against a step that a loaded CPU slowed did not)."""
    clock = LeapingClock()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(monitor_module, "_clock", clock)
        monitor = TrainingMonitor(device="cpu")
        torch.manual_seed(0)
        model = mnist_mlp() if slow else clock.leap_in_forward(mnist_mlp())
        accuracy, _ = train_epoch(monitor, make_loader(clock.collate if slow else fast_collate, batch_size=64,
                                                       n=64 * batches), model=model)
        return monitor.summary(), float(accuracy)


@pytest.fixture(scope="module")
def slow_run(one_thread):
    return _leaping_run(slow=True, batches=16)


@pytest.fixture(scope="module")
def fast_run(one_thread):
    return _leaping_run(slow=False, batches=32)


def test_slow_loader_is_input_bound(slow_run):
    summary, accuracy = slow_run
    assert summary.steps == 16 and summary.steps_measured == 15
    assert summary.data_wait_share > 0.99  # 1000 s of data wait (by the clock) per step
    assert "input_bound" in summary.codes
    item = summary.diagnosis[summary.codes.index("input_bound")]
    assert "num_workers" in item.fix and f"{summary.data_wait_share * 100:.0f}%" in item.summary
    assert accuracy > 0.25  # the loop really trained (chance is 0.1)


def test_same_loop_with_fast_data_is_not_input_bound(fast_run):
    summary, accuracy = fast_run
    validate_summary(summary.to_dict())
    assert summary.steps == 32
    assert summary.data_wait_share < 0.01  # 1000 s of step (by the clock) per batch
    assert summary.step_time_p50_s >= LEAP_S
    assert "input_bound" not in summary.codes
    assert summary.diagnosis == []
    assert "No problem found" in str(summary)
    assert accuracy > 0.25


def test_summary_dict_is_json_safe_and_has_the_contract_fields(slow_run):
    summary, _ = slow_run
    d = validate_summary(summary.to_dict())
    for key in ("steps", "data_wait_share", "step_time_p50_s", "diagnosis"):
        assert key in d
    assert 0.0 <= d["data_wait_share"] <= 1.0
    assert d["timing"] == "host_clock" and d["device"] == "cpu"
    assert d["host_syncs"] is None  # no device, nothing to sync with
    assert d["step_time_p50_s"] > 0 and d["step_time_p90_s"] >= d["step_time_p50_s"]
    entry = d["diagnosis"][0]
    assert set(entry) >= {"code", "message", "advice"} and entry["code"] == "input_bound"


def test_to_json_writes_atomically_and_round_trips(slow_run, tmp_path):
    summary, _ = slow_run
    target = tmp_path / "summary.json"
    target.write_text("old")
    text = summary.to_json(target)
    assert json.loads(target.read_text()) == json.loads(text)
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary left behind
    again = Summary.from_dict(json.loads(text))
    assert again.codes == summary.codes and again.steps == summary.steps


def test_text_names_the_problem_and_the_fix(slow_run):
    text = str(slow_run[0])
    assert "16 steps on cpu" in text
    assert "[input_bound]" in text and "What to do:" in text


def test_log_every_n_steps(caplog):
    monitor = TrainingMonitor(device="cpu", log_every=5)
    with caplog.at_level(logging.INFO, logger="gpudoctor.hooks"):
        train_epoch(monitor, make_loader(fast_collate, n=128 * 12))
    lines = [r.getMessage() for r in caplog.records if r.name == "gpudoctor.hooks"]
    assert len(lines) == 2  # steps 5 and 10 of 12
    assert lines[0].startswith("gpudoctor: step 5:") and "ms/step" in lines[0] and "data wait" in lines[0]


def test_no_log_lines_by_default(caplog):
    monitor = TrainingMonitor(device="cpu")
    with caplog.at_level(logging.DEBUG, logger="gpudoctor.hooks"):
        train_epoch(monitor, make_loader(fast_collate, n=128 * 6))
    assert not [r for r in caplog.records if r.name == "gpudoctor.hooks"]


def test_device_inferred_from_model_on_cpu():
    from support._hooks_loops import mnist_mlp

    monitor = TrainingMonitor(model=mnist_mlp())
    train_epoch(monitor, make_loader(fast_collate, n=128 * 3))
    assert monitor.device == "cpu" and monitor.summary().timing == "host_clock"


def test_several_epochs_accumulate():
    monitor = TrainingMonitor(device="cpu")
    loader = make_loader(fast_collate, n=128 * 4)
    for _ in range(3):
        train_epoch(monitor, loader)
    summary = monitor.summary()
    assert summary.steps == 12
    assert not math.isnan(summary.data_wait_share)
