"""The Lightning callback on a real Trainer (CPU): slow data is input_bound, fast data is not."""

from __future__ import annotations

import json
import logging

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from support._hooks_loops import LEAP_S, LeapingClock, fast_collate, make_loader, mnist_mlp, single_thread  # noqa: E402

from gpudoctor.hooks import lightning as callback_module  # noqa: E402
from gpudoctor.hooks import monitor as monitor_module  # noqa: E402
from gpudoctor.hooks.lightning import GpudoctorCallback  # noqa: E402


@pytest.fixture
def clock(monkeypatch) -> LeapingClock:
    leaping = LeapingClock()
    monkeypatch.setattr(callback_module, "_clock", leaping)  # the data wait
    monkeypatch.setattr(monitor_module, "_clock", leaping)  # the step times
    return leaping


class DigitsModule(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = mnist_mlp()

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        return torch.nn.functional.cross_entropy(self.net(inputs), targets)

    def validation_step(self, batch, batch_idx):
        inputs, targets = batch
        return torch.nn.functional.cross_entropy(self.net(inputs), targets)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.5)


def _fit(collate, tmp_path, epochs=1, val=None, val_every=None, step_clock=None, **callback_kwargs):
    """Fit DigitsModule on 12 batches a epoch. ``step_clock``: a LeapingClock that leaps in every
    forward pass, so each step lasts 1000 s by the callback's clock (fast data then has a data wait
    share under 0.01 whatever the load; by real time a fetch preempted on a busy machine outweighed
    the steps and the fast loop was called input_bound)."""
    callback = GpudoctorCallback(**callback_kwargs)
    module = DigitsModule()
    if step_clock is not None:
        step_clock.leap_in_forward(module.net)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=epochs, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, default_root_dir=str(tmp_path), callbacks=[callback],
                         val_check_interval=val_every)
    with single_thread():
        trainer.fit(module, make_loader(collate, batch_size=64, n=64 * 12), val)
    return callback


def test_slow_data_under_lightning_is_input_bound(tmp_path, caplog, clock):
    target = tmp_path / "summary.json"
    with caplog.at_level(logging.INFO, logger="gpudoctor.hooks"):
        callback = _fit(clock.collate, tmp_path, path=str(target))
    summary = callback.summary
    assert summary.steps == 12 and summary.device == "cpu"
    assert summary.data_wait_share > 0.5 and "input_bound" in summary.codes
    from support._hooks_loops import validate_summary

    assert validate_summary(json.loads(target.read_text()))["steps"] == 12
    assert any("[input_bound]" in r.getMessage() for r in caplog.records)


def test_fast_data_under_lightning_is_not_input_bound(tmp_path, clock):
    # a slow validation run in the middle of each epoch must not count as training data wait
    callback = _fit(fast_collate, tmp_path, epochs=2, val_every=6,
                    val=make_loader(clock.collate, batch_size=64, n=64 * 4), step_clock=clock)
    summary = callback.summary
    assert summary.steps == 24
    assert "input_bound" not in summary.codes and summary.data_wait_share < 0.01


def test_missing_lightning_says_how_to_install(monkeypatch):
    import importlib
    import sys

    for name in ("lightning", "lightning.pytorch", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)  # "not installed" for the import system
    monkeypatch.delitem(sys.modules, "gpudoctor.hooks.lightning")
    with pytest.raises(ImportError, match=r"pip install 'gpudoctor\[lightning\]'"):
        importlib.import_module("gpudoctor.hooks.lightning")


def test_mid_epoch_validation_restarts_the_data_wait_clock(tmp_path, clock):
    # validation after every 4th of 12 batches (each validation run leaps the clock 4 x 1000 s):
    # every training batch still gets a measured data wait, and none of it is validation time
    callback = _fit(fast_collate, tmp_path, epochs=1, val_every=4,
                    val=make_loader(clock.collate, batch_size=64, n=64 * 4), step_clock=clock)
    summary = callback.summary
    assert summary.steps == 12
    assert not [n for n in summary.notes if "data wait was not measured" in n], summary.notes
    waits = list(callback.monitor._waits)
    assert len(waits) == 12 and all(w == w for w in waits)  # no NaN: all measured
    assert max(waits) < LEAP_S  # a validation run (>= 4000 s by the clock) never counts as data wait
    assert "input_bound" not in summary.codes


def test_sanity_check_validation_does_not_start_the_clock(tmp_path, clock):
    callback = GpudoctorCallback()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=2,
                         default_root_dir=str(tmp_path), callbacks=[callback], limit_train_batches=4)
    with single_thread():
        trainer.fit(DigitsModule(), make_loader(fast_collate, batch_size=64, n=64 * 4),
                    make_loader(clock.collate, batch_size=64, n=64 * 2))
    waits = list(callback.monitor._waits)
    assert len(waits) == 4 and all(w == w for w in waits) and max(waits) < LEAP_S


class InterruptedModule(DigitsModule):
    """Ctrl-C arrives during the 6th training step."""

    def training_step(self, batch, batch_idx):
        if batch_idx == 5:
            raise KeyboardInterrupt
        return super().training_step(batch, batch_idx)


def test_ctrl_c_in_a_fit_keeps_the_summary(tmp_path, caplog):
    """Before: on_exception closed the monitor without summarising: Ctrl-C lost the summary."""
    target = tmp_path / "summary.json"
    callback = GpudoctorCallback(path=str(target))
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         default_root_dir=str(tmp_path), callbacks=[callback])
    with caplog.at_level(logging.INFO, logger="gpudoctor.hooks"), single_thread():
        try:
            trainer.fit(InterruptedModule(), make_loader(fast_collate, batch_size=64, n=64 * 12))
        except (KeyboardInterrupt, SystemExit):
            pass  # Lightning ends the fit itself (and exits, in some releases)
    assert callback.summary is not None and callback.summary.steps == 5
    assert json.loads(target.read_text())["steps"] == 5
    assert any("steps" in r.getMessage() or "gpudoctor" in r.getMessage() for r in caplog.records)
