"""A PyTorch Lightning callback that runs a :class:`TrainingMonitor` over ``trainer.fit``.

    from gpudoctor.hooks.lightning import GpudoctorCallback
    trainer = Trainer(callbacks=[GpudoctorCallback()])

Lightning is an optional dependency (``pip install gpudoctor[lightning]``); this module
imports ``lightning.pytorch`` (or the older ``pytorch_lightning``) when it is imported,
and says how to install it when neither is there.

Data wait is the time from the end of one training batch to the start of the next (the
fetch and the copy to the device), with validation runs and epoch boundaries left out;
step time is ``on_train_batch_start`` to ``on_train_batch_end`` (forward, backward,
optimizer step).
"""

from __future__ import annotations

import logging
import time
from typing import Any

try:
    import lightning.pytorch as _pl
except ImportError:  # pragma: no cover - depends on what is installed
    try:
        import pytorch_lightning as _pl  # type: ignore[no-redef]
    except ImportError:
        raise ImportError(
            "gpudoctor's Lightning callback needs PyTorch Lightning: pip install 'gpudoctor[lightning]' "
            "(or pip install lightning)") from None

from .devices import explain_device_error
from .monitor import TrainingMonitor
from .summary import Summary

log = logging.getLogger("gpudoctor.hooks")
_clock = time.perf_counter


class GpudoctorCallback(_pl.Callback):
    """Measure ``trainer.fit`` and log gpudoctor's diagnosis at the end.

    Parameters: ``path`` writes the summary as JSON there (on rank 0; ``{rank}`` in the
    path writes one per rank); ``gather`` collects every rank's figures on multi-process
    runs (default: when the world size is above 1); ``print_summary`` logs the summary
    text at INFO on rank 0. Other keyword arguments go to :class:`TrainingMonitor`.
    After fitting, ``callback.summary`` holds the :class:`Summary`.
    """

    def __init__(self, path: str | None = None, gather: bool | None = None, print_summary: bool = True,
                 **monitor_kwargs: Any) -> None:
        super().__init__()
        self.path = path
        self.gather = gather
        self.print_summary = print_summary
        self.monitor_kwargs = monitor_kwargs
        self.monitor: TrainingMonitor | None = None
        self.summary: Summary | None = None
        self._step: Any = None
        self._last_end: float | None = None

    def on_train_start(self, trainer: _pl.Trainer, pl_module: _pl.LightningModule) -> None:
        kwargs = dict(self.monitor_kwargs)
        kwargs.setdefault("device", pl_module.device)
        kwargs.setdefault("model", pl_module)
        self.summary = None
        self.monitor = TrainingMonitor(**kwargs)

    def on_train_epoch_start(self, trainer: _pl.Trainer, pl_module: _pl.LightningModule) -> None:
        if self.monitor is not None:
            self.monitor.mark_gap()
        self._last_end = _clock()  # the first fetch of the epoch (workers start) counts as wait

    def on_validation_start(self, trainer: _pl.Trainer, pl_module: _pl.LightningModule) -> None:
        if self.monitor is not None:
            self.monitor.mark_gap()
        self._last_end = None

    def on_validation_end(self, trainer: _pl.Trainer, pl_module: _pl.LightningModule) -> None:
        # Restart the data-wait clock after a validation run inside fit. (Lightning 2.x runs it
        # with trainer.validating set and sets trainer.training again only after the run, so
        # trainer.training is always False here; the sanity check before training is the only
        # validation inside fit that is not followed by a training batch of the same pass.)
        if not getattr(trainer, "sanity_checking", False):
            self._last_end = _clock()

    def on_train_batch_start(self, trainer: _pl.Trainer, pl_module: _pl.LightningModule, batch: object,
                             batch_idx: int) -> None:
        if self.monitor is None:
            return
        if self._last_end is not None:
            self.monitor.batch_ready(_clock() - self._last_end)
        self.monitor._last_batch = batch  # samples per step, for samples per second and per joule
        self._step = self.monitor.step()
        self._step.__enter__()

    def on_train_batch_end(self, trainer: _pl.Trainer, pl_module: _pl.LightningModule, outputs: object, batch: object,
                           batch_idx: int) -> None:
        if self._step is not None:
            step, self._step = self._step, None
            step.__exit__(None, None, None)
        self._last_end = _clock()

    def on_exception(self, trainer: _pl.Trainer, pl_module: _pl.LightningModule, exception: BaseException) -> None:
        if self._step is not None:
            step, self._step = self._step, None
            try:
                step.__exit__(type(exception), exception, None)
            except Exception:
                pass  # Lightning re-raises the original; the words are logged below
        words = explain_device_error(exception, pl_module)
        if words:
            log.error("gpudoctor: %s", words)
        # Ctrl-C (Lightning ends the fit gracefully) or an error: what was measured up to it is
        # summarised, written and logged as at the end of a fit; this rank's own figures only,
        # since the other ranks may never reach a gather.
        if self.monitor is not None and self.summary is None:
            try:
                self._summarise(trainer, gather=False)
            except Exception as exc:  # the run's own exception is the one Lightning reports
                log.warning("gpudoctor: no summary after the interruption: %s", exc)
                self.monitor.close()

    def on_train_end(self, trainer: _pl.Trainer, pl_module: _pl.LightningModule) -> None:
        if self.monitor is None or self.summary is not None:  # summarised already (on_exception)
            return
        world = int(getattr(trainer, "world_size", 1) or 1)
        self._summarise(trainer, gather=self.gather if self.gather is not None else world > 1)

    def _summarise(self, trainer: _pl.Trainer, gather: bool) -> None:
        assert self.monitor is not None
        self.summary = self.monitor.summary(gather=gather)
        self.monitor.close()
        rank = int(getattr(trainer, "global_rank", 0) or 0)
        if self.path and (rank == 0 or "{rank}" in self.path):
            self.summary.to_json(self.path.format(rank=rank))
        if self.print_summary and rank == 0:
            log.info("%s", self.summary)
