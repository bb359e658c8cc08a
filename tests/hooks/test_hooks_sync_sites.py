"""Where a counted host sync is charged: the user's line, a framework's line (Lightning, DDP),
past standard-library frames; only the training thread's syncs count. CPU: torch's warning is
raised the way torch raises it (from the Python line that made the synchronising call)."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import threading
import warnings

import pytest

torch = pytest.importorskip("torch")

from gpudoctor.hooks import torch_support as torch_hooks  # noqa: E402
from support._hooks_loops import FakeCudaScalar, counting_syncs  # noqa: E402

from gpudoctor.hooks.torch_support import SYNC_WARNING_TEXT  # noqa: E402

HERE = os.path.basename(__file__)


def _package(tmp_path, monkeypatch, name, text):
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)


def test_a_frameworks_own_sync_is_charged_to_the_framework_line(tmp_path, monkeypatch):
    framework = _package(tmp_path, monkeypatch, "fakeframework", (
        "import warnings\n"
        "def log_metric(value):\n"
        "    warnings.warn('called a synchronizing CUDA operation', UserWarning)  # the framework's own sync\n"
        "    return value\n"
        "def fit(training_step, steps):\n"
        "    for i in range(steps):\n"
        "        log_metric(training_step(i))\n"))
    monkeypatch.setattr(torch_hooks, "FRAMEWORK_PACKAGES", torch_hooks.FRAMEWORK_PACKAGES + ("fakeframework",))
    loss = FakeCudaScalar()

    def training_step(i):
        return loss.item()  # the user's own sync, called by the framework

    with counting_syncs() as counter:
        framework.fit(training_step, 5)  # the user's fit line: neither sync is made here
    sites = {s["origin"]: s for s in counter.snapshot()["sites"]}
    assert set(sites) == {"user", "framework"}
    user, fw = sites["user"], sites["framework"]
    assert user["file"].endswith(HERE) and user["code"] == "return loss.item()  # the user's own sync, called by the framework"
    assert fw["file"] == framework.__file__ and fw["line"] == 3 and fw["count"] == 5
    assert fw["code"].startswith("warnings.warn(") and user["count"] == 5


def test_real_lightning_lines_are_framework_and_training_step_lines_are_the_users(tmp_path, monkeypatch):
    pl = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loops.optimization import automatic

    from support._hooks_loops import fast_collate, make_loader, single_thread
    from test_hooks_lightning import DigitsModule

    loss_scalar = FakeCudaScalar()

    class Module(DigitsModule):
        def training_step(self, batch, batch_idx):
            loss_scalar.item()  # a user sync inside training_step
            return super().training_step(batch, batch_idx)

    # Lightning's own loop code syncs once per step (as `.item()` on a CUDA tensor would,
    # from the calling line: a warning with stacklevel=2 names Lightning's line)
    real = automatic.ClosureResult.from_training_step_output.__func__

    def syncing(cls, *args, **kwargs):
        warnings.warn(SYNC_WARNING_TEXT, UserWarning, stacklevel=2)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(automatic.ClosureResult, "from_training_step_output", classmethod(syncing))
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         default_root_dir=str(tmp_path))
    with counting_syncs() as counter, single_thread():
        trainer.fit(Module(), make_loader(fast_collate, batch_size=64, n=64 * 6))
    sites = counter.snapshot()["sites"]
    user = [s for s in sites if s["origin"] == "user"]
    fw = [s for s in sites if s["origin"] == "framework"]
    assert len(user) == 1 and user[0]["file"].endswith(HERE) and user[0]["count"] == 6
    assert user[0]["code"].startswith("loss_scalar.item()")
    assert len(fw) == 1 and fw[0]["count"] == 6
    assert fw[0]["file"] == automatic.__file__  # not the test's trainer.fit(...) line
    assert "trainer.fit" not in fw[0]["code"]


def test_standard_library_frames_are_passed_on_the_way_to_the_users_line(tmp_path, monkeypatch):
    # a sync raised (like a C++ op's) from a line of the standard library: contextlib calls it
    fakeop = _package(tmp_path, monkeypatch, "fakeop", (
        "import warnings\n"
        "def synchronize():\n"
        "    warnings.warn('called a synchronizing CUDA operation', UserWarning, stacklevel=2)\n"))
    real = torch_hooks._library_prefixes
    monkeypatch.setattr(torch_hooks, "_library_prefixes", lambda: real() + (os.path.dirname(fakeop.__file__) + os.sep,))
    with counting_syncs() as counter:
        for _ in range(3):
            with contextlib.ExitStack() as stack:
                stack.callback(fakeop.synchronize)
    (site,) = counter.snapshot()["sites"]
    assert site["file"].endswith(HERE) and site["count"] == 3 and site["origin"] == "user"
    assert site["raised_in"].startswith(contextlib.__file__)


def test_syncs_on_other_threads_are_not_counted(caplog):
    loss = FakeCudaScalar()
    with counting_syncs() as counter:
        loss.item()
        worker = threading.Thread(target=lambda: [loss.item() for _ in range(4)])
        worker.start()
        worker.join()
    snap = counter.snapshot()
    assert snap["total"] == 1 and snap["other_threads"] == 4 and snap["sites"][0]["count"] == 1


def test_syncs_on_threads_python_did_not_start_are_counted():
    # autograd's device threads (C++) run Python backward hooks while the training thread waits in
    # backward(); _thread.start_new_thread makes a thread Python knows only as a dummy, the same way
    import _thread

    loss = FakeCudaScalar()
    done = threading.Event()

    def hook():
        try:
            for _ in range(3):
                loss.item()
        finally:
            done.set()

    with counting_syncs() as counter:
        _thread.start_new_thread(hook, ())
        assert done.wait(10)
    snap = counter.snapshot()
    assert snap["total"] == 3 and snap["other_threads"] == 0


# -- which GPU a device=None monitor watches under torch.distributed ------------------------------

@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.distributed, "is_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    return monkeypatch


def test_distributed_rank_without_set_device_watches_its_local_rank_gpu(fake_cuda, caplog):
    fake_cuda.setenv("LOCAL_RANK", "2")
    with caplog.at_level(logging.INFO, logger="gpudoctor.hooks"):
        assert torch_hooks.resolve_device(None) == ("cuda", 2)
    assert any("LOCAL_RANK=2" in r.getMessage() and "watching cuda:2" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("local_rank, initialised, expected", [
    ("0", True, 0),      # set_device was called (or rank 0): the current device is right
    ("2", False, 0),     # no process group: LOCAL_RANK alone is not trusted
    ("7", True, 0),      # names no GPU of this process
    (None, True, 0),
])
def test_current_device_is_kept_otherwise(fake_cuda, caplog, local_rank, initialised, expected):
    if local_rank is None:
        fake_cuda.delenv("LOCAL_RANK", raising=False)
    else:
        fake_cuda.setenv("LOCAL_RANK", local_rank)
    fake_cuda.setattr(torch.distributed, "is_initialized", lambda: initialised)
    with caplog.at_level(logging.INFO, logger="gpudoctor.hooks"):
        assert torch_hooks.resolve_device(None) == ("cuda", expected)
    assert not [r for r in caplog.records if "LOCAL_RANK" in r.getMessage()]
