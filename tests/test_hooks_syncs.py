"""Host-sync counting: the mechanism on CPU (torch's warning, raised the way torch raises it),
and on a real GPU (marked ``gpu``): a `.item()` every step is named, the monitor adds no sync."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from _hooks_loops import fast_collate, make_loader, train_epoch  # noqa: E402

from gpudoctor import TrainingMonitor  # noqa: E402
from gpudoctor.backends.torch_hooks import SYNC_WARNING_TEXT, SyncCounter, classify_sync_line  # noqa: E402
from gpudoctor.hooks.summary import RawTimings, build_summary  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class FakeCudaScalar:
    """Warns like torch does in sync debug mode "warn": from the Python line that synced."""

    def item(self) -> float:
        warnings.warn(SYNC_WARNING_TEXT, UserWarning, stacklevel=2)
        return 0.0


@pytest.mark.parametrize("line, pattern", [
    ("running_loss += loss.item()", "item"),
    ("print(f'loss {loss}')", "print"),
    ("preds = out.argmax(1).cpu()", "cpu"),
    ("x = x.to(device)", "blocking_copy"),
    ("x = x.to(device, non_blocking=True)", "other"),
    ("torch.cuda.synchronize()", "synchronize"),
    ("idx = mask.nonzero()", "nonzero"),
    ("vals = out.tolist()", "tolist"),
])
def test_patterns_are_named_from_the_line(line, pattern):
    assert classify_sync_line(line) == pattern


def test_counter_counts_every_sync_by_user_line_and_restores_warnings():
    before_filters = list(warnings.filters)
    before_show = warnings.showwarning
    counter = SyncCounter(torch=None)  # no torch.cuda here: count the warnings only
    assert counter.install()
    loss = FakeCudaScalar()
    total = 0.0
    for _ in range(7):
        total += loss.item()
    counter.uninstall()
    snap = counter.snapshot()
    assert snap["total"] == 7
    (site,) = snap["sites"]
    assert site["file"].endswith("test_hooks_syncs.py") and site["count"] == 7
    assert site["code"] == "total += loss.item()" and site["pattern"] == "item"
    assert warnings.filters == before_filters and warnings.showwarning is before_show


def test_other_warnings_still_reach_the_user():
    counter = SyncCounter(torch=None)
    counter.install()
    try:
        with pytest.warns(DeprecationWarning, match="something else"):
            warnings.warn("something else", DeprecationWarning)
    finally:
        counter.uninstall()
    assert counter.total == 0


def test_a_sync_every_step_is_diagnosed_with_its_line():
    counter = SyncCounter(torch=None)
    counter.install()
    loss = FakeCudaScalar()
    for _ in range(20):
        loss.item()
    counter.uninstall()
    n = 20
    raw = RawTimings(waits=[0.0001] * n, host_steps=[0.002] * n, iter_starts=[i * 0.0021 for i in range(n)],
                     ends=[i * 0.0021 + 0.0021 for i in range(n)], passes=[1] * n,
                     device_steps=[0.0015] * n, device="cuda:0", host_syncs=counter.snapshot())
    summary = build_summary(raw)
    assert summary.codes[0] == "host_sync_bound"
    message = summary.diagnosis[0].message
    assert "`.item()`" in message and "test_hooks_syncs.py:" in message and "1.0 times per step" in message
    assert "loss.detach()" in summary.diagnosis[0].advice
    assert summary.host_syncs["per_step"] == 1.0


# -- on a real GPU ------------------------------------------------------------------------------

@pytest.mark.gpu
@needs_cuda
def test_item_every_step_is_named_host_sync_bound_on_gpu():
    monitor = TrainingMonitor(device="cuda")
    train_epoch(monitor, make_loader(fast_collate, n=128 * 30, pin_memory=True), device="cuda",
                sync_every_step=True)
    summary = monitor.summary()
    assert summary.timing == "cuda_events" and summary.step_time_p50_s > 0
    assert "host_sync_bound" in summary.codes
    site = summary.host_syncs["sites"][0]
    assert site["pattern"] == "item" and site["file"].endswith("_hooks_loops.py")
    assert site["count"] >= 30
    assert torch.cuda.get_sync_debug_mode() == 0  # restored


@pytest.mark.gpu
@needs_cuda
def test_monitor_adds_no_device_sync():
    # With sync debug mode "error", any synchronising call inside the loop raises.
    from _hooks_loops import mnist_mlp

    monitor = TrainingMonitor(device="cuda", log_every=5)
    loader = make_loader(fast_collate, n=128 * 12, pin_memory=True)
    model = mnist_mlp().to("cuda")  # a blocking copy: done before the check starts
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        train_epoch(monitor, loader, model=model, device="cuda", sync_every_step=False)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    summary = monitor.summary()
    assert summary.steps == 12 and summary.timing == "cuda_events"
    assert any("sync debug mode is 'error'" in note for note in summary.notes)
    assert "host_sync_bound" not in summary.codes


@pytest.mark.gpu
@needs_cuda
def test_clean_gpu_loop_counts_no_sync_inside_steps():
    monitor = TrainingMonitor(device="cuda")
    train_epoch(monitor, make_loader(fast_collate, n=128 * 20, pin_memory=True), device="cuda",
                sync_every_step=False)
    summary = monitor.summary()
    assert "host_sync_bound" not in summary.codes
    assert summary.host_syncs is not None and summary.host_syncs["status"].startswith("counted")
    nvml_missing = any("NVML unavailable" in note for note in summary.notes)
    assert nvml_missing or summary.gpu["samples"] >= 1  # the sampler reads once at the start
    assert summary.memory["peak_allocated_bytes"] > 0
    assert summary.step_time_p50_s > 0 and summary.device_busy_share is not None
