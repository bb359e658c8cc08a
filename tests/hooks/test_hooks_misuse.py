"""Bad use of TrainingMonitor: clear words or an empty summary, never a crash of the training."""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")

from support._hooks_loops import fast_collate, make_loader, mnist_mlp, validate_summary  # noqa: E402

from gpudoctor import TrainingMonitor  # noqa: E402
from gpudoctor.hooks import MonitorUsageError, MonitorUsageWarning  # noqa: E402


def _step(model, inputs, targets):
    loss = torch.nn.functional.cross_entropy(model(inputs), targets)
    loss.backward()


def test_summary_with_zero_steps_is_empty_and_says_so():
    monitor = TrainingMonitor(device="cpu")
    summary = monitor.summary()
    assert summary.steps == 0 and summary.diagnosis == []
    assert summary.data_wait_share is None and summary.step_time_p50_s is None
    assert "no training steps were recorded" in str(summary)
    validate_summary(summary.to_dict())


def test_wrap_without_step_is_noted():
    monitor = TrainingMonitor(device="cpu")
    for _ in monitor.wrap(make_loader(fast_collate, n=128 * 2)):
        pass
    summary = monitor.summary()
    assert summary.steps == 0
    assert any("monitor.step() was never used" in note for note in summary.notes)


def test_steps_outside_wrap_are_timed_without_data_wait():
    monitor = TrainingMonitor(device="cpu")
    model = mnist_mlp()
    for inputs, targets in make_loader(fast_collate, n=128 * 4):
        with monitor.step():
            _step(model, inputs, targets)
    summary = monitor.summary()
    validate_summary(summary.to_dict())
    assert summary.steps == 4 and summary.step_time_p50_s > 0
    assert summary.data_wait_share is None
    assert any("outside monitor.wrap(loader)" in note for note in summary.notes)


def test_nested_step_is_ignored_with_one_warning():
    monitor = TrainingMonitor(device="cpu")
    model = mnist_mlp()
    with pytest.warns(MonitorUsageWarning, match="inside another monitor.step"):
        for inputs, targets in monitor.wrap(make_loader(fast_collate, n=128 * 3)):
            with monitor.step():
                with monitor.step():
                    _step(model, inputs, targets)
    summary = monitor.summary()
    assert summary.steps == 3  # the outer steps, each once
    assert any("3 nested monitor.step() call(s) were ignored" in note for note in summary.notes)


def test_strict_mode_raises_on_nested_step():
    monitor = TrainingMonitor(device="cpu", strict=True)
    with pytest.raises(MonitorUsageError, match="inside another"):
        with monitor.step():
            with monitor.step():
                pass
    with monitor.step():  # the monitor is not left thinking a step is still open
        pass
    summary = monitor.summary()
    assert summary.steps == 1 and any("ended with an exception" in n for n in summary.notes)


def test_bad_arguments_are_usage_errors():
    with pytest.raises(MonitorUsageError):
        TrainingMonitor(log_every=0)
    with pytest.raises(MonitorUsageError):
        TrainingMonitor(warmup_steps=-1)


def test_exception_in_step_passes_through_and_is_not_counted():
    monitor = TrainingMonitor(device="cpu")
    loader = make_loader(fast_collate, n=128 * 4)
    with pytest.raises(ZeroDivisionError):
        for i, _batch in enumerate(monitor.wrap(loader)):
            with monitor.step():
                if i == 2:
                    1 / 0  # noqa: B018 (raises on purpose)
    summary = monitor.summary()
    assert summary.steps == 2
    assert any("ended with an exception" in note for note in summary.notes)
    # the monitor is still usable afterwards
    for _ in monitor.wrap(loader):
        with monitor.step():
            pass
    assert monitor.summary().steps == 6


def test_internal_fault_switches_the_monitor_off_not_the_training(caplog):
    class BrokenTimer:
        def begin(self):
            raise OSError("device timer exploded")

        def cancel(self):
            pass

    monitor = TrainingMonitor(device="cpu")
    model = mnist_mlp()
    loader = make_loader(fast_collate, n=128 * 4)
    done = 0
    with caplog.at_level(logging.WARNING, logger="gpudoctor.hooks"):
        for i, (inputs, targets) in enumerate(monitor.wrap(loader)):
            if i == 2:
                monitor._timer = BrokenTimer()  # a fault inside gpudoctor from step 3 on
            with monitor.step():
                _step(model, inputs, targets)
            done += 1
    assert done == 4  # every step of the user's loop ran
    assert any("stopped measuring" in r.getMessage() for r in caplog.records)
    summary = monitor.summary()
    assert summary.steps == 2
    assert any("device timer exploded" in note for note in summary.notes)


def test_breaking_out_of_the_loop_and_len():
    monitor = TrainingMonitor(device="cpu")
    loader = make_loader(fast_collate, n=128 * 5)
    wrapped = monitor.wrap(loader)
    assert len(wrapped) == 5
    for i, _ in enumerate(wrapped):
        with monitor.step():
            pass
        if i == 1:
            break
    for _ in monitor.wrap(loader):
        with monitor.step():
            pass
    assert monitor.summary().steps == 7
