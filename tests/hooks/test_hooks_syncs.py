"""Host-sync counting: the mechanism on CPU (torch's warning, raised the way torch raises it),
and on a real GPU (marked ``gpu``): a `.item()` every step is named, the monitor adds no sync."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from support._hooks_loops import FakeCudaScalar, counting_syncs, fast_collate, make_loader, train_epoch  # noqa: E402

from gpudoctor import TrainingMonitor  # noqa: E402
from gpudoctor.hooks.torch_support import SYNC_WARNING_TEXT, SyncCounter, classify_sync_line  # noqa: E402
from gpudoctor.hooks.summary import RawTimings, build_summary  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


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


def test_a_sync_inside_a_library_is_charged_to_the_users_line(tmp_path, monkeypatch):
    import importlib
    import os

    from gpudoctor.hooks import torch_support as torch_hooks

    lib = tmp_path / "fakelib"
    lib.mkdir()
    (lib / "__init__.py").write_text(
        "import warnings\n"
        "def clip(x):\n"
        "    warnings.warn('called a synchronizing CUDA operation', UserWarning)  # inside the library\n"
        "    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fakelib = importlib.import_module("fakelib")
    real = torch_hooks._library_prefixes
    monkeypatch.setattr(torch_hooks, "_library_prefixes", lambda: real() + (str(lib) + os.sep,))
    with counting_syncs() as counter:
        for _ in range(4):
            fakelib.clip(1.0)
    (site,) = counter.snapshot()["sites"]
    assert site["file"].endswith("test_hooks_syncs.py") and site["code"] == "fakelib.clip(1.0)"
    assert site["raised_in"].startswith(str(lib)) and site["count"] == 4


def test_syncs_outside_the_training_loop_are_not_counted_as_sites():
    in_loop = {"now": True}
    loss = FakeCudaScalar()
    with counting_syncs(counting=lambda: in_loop["now"]) as counter:
        for _ in range(3):
            loss.item()
        in_loop["now"] = False  # e.g. an evaluation loop after training
        for _ in range(5):
            loss.item()
    snap = counter.snapshot()
    assert snap["total"] == 3 and snap["outside_loop"] == 5 and snap["sites"][0]["count"] == 3


def test_other_warnings_still_reach_the_user():
    with counting_syncs() as counter, pytest.warns(DeprecationWarning, match="something else"):
        warnings.warn("something else", DeprecationWarning, stacklevel=1)
    assert counter.total == 0


def test_a_sync_every_step_is_diagnosed_with_its_line():
    loss = FakeCudaScalar()
    with counting_syncs() as counter:
        for _ in range(20):
            loss.item()
    n = 20
    raw = RawTimings(waits=[0.0001] * n, host_steps=[0.002] * n, iter_starts=[i * 0.0021 for i in range(n)],
                     ends=[i * 0.0021 + 0.0021 for i in range(n)], passes=[1] * n,
                     device_steps=[0.0015] * n, device="cuda:0", host_syncs=counter.snapshot())
    summary = build_summary(raw)
    from support._hooks_loops import validate_summary

    validate_summary(summary.to_dict())
    assert summary.codes[0] == "host_sync_bound"
    message = summary.diagnosis[0].summary
    assert "`.item()`" in message and "test_hooks_syncs.py:" in message and "1.0 times per step" in message
    assert "loss.detach()" in summary.diagnosis[0].fix
    assert summary.host_syncs["per_step"] == 1.0


# -- on a real GPU ------------------------------------------------------------------------------

def _gpu_epoch_summary(batches: int, sync_every_step: bool):
    """One epoch of ``batches`` batches of 128 on the GPU under a fresh monitor; its summary."""
    monitor = TrainingMonitor(device="cuda")
    train_epoch(monitor, make_loader(fast_collate, n=128 * batches, pin_memory=True), device="cuda",
                sync_every_step=sync_every_step)
    return monitor.summary()


@pytest.mark.gpu
@needs_cuda
def test_item_every_step_is_named_host_sync_bound_on_gpu():
    summary = _gpu_epoch_summary(30, sync_every_step=True)
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
    from support._hooks_loops import mnist_mlp

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
    summary = _gpu_epoch_summary(20, sync_every_step=False)
    assert "host_sync_bound" not in summary.codes
    assert summary.host_syncs is not None and summary.host_syncs["status"].startswith("counted")
    nvml_missing = any("NVML unavailable" in note for note in summary.notes)
    assert nvml_missing or summary.gpu["samples"] >= 1  # the sampler reads once at the start
    assert summary.memory["peak_allocated_bytes"] > 0
    assert summary.step_time_p50_s > 0 and summary.device_span_share is not None


# -- the CUDA-event timer's bookkeeping, with events that finish when the test says so ------------

class FakeEvent:
    """Stands in for torch.cuda.Event: finishes when the fake device clock passes it."""

    device_time_ms = 0.0
    syncs = 0
    created = 0

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        FakeEvent.created += 1
        self.at_ms: float | None = None

    def record(self, stream=None) -> None:
        self.at_ms = FakeEvent.device_time_ms

    def query(self) -> bool:
        return self.at_ms is not None and self.at_ms <= FakeEvent.done_up_to_ms

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert self.query() and end.query(), "elapsed_time on an unfinished event"
        return end.at_ms - self.at_ms

    def synchronize(self) -> None:
        FakeEvent.syncs += 1
        FakeEvent.done_up_to_ms = float("inf")


class FakeTorch:
    class cuda:  # noqa: N801 - mirrors torch.cuda
        Event = FakeEvent

        @staticmethod
        def current_stream(index=None):
            return None

        @staticmethod
        def get_sync_debug_mode():
            return 0


def test_event_timer_reads_finished_steps_without_waiting():
    from gpudoctor.hooks.torch_support import CudaEventTimer

    FakeEvent.device_time_ms, FakeEvent.done_up_to_ms, FakeEvent.syncs, FakeEvent.created = 0.0, -1.0, 0, 0
    timer = CudaEventTimer(0, torch=FakeTorch)
    for step in range(10):
        timer.begin()
        FakeEvent.device_time_ms += 2.0 + step  # the device will take 2, 3, 4... ms
        timer.end()
        FakeEvent.done_up_to_ms = FakeEvent.device_time_ms - 8.0  # the device lags a few steps behind
    assert FakeEvent.syncs == 0
    assert 0 < len(timer.times_s) < 10  # finished steps were read as the loop went on
    timer.drain()  # the end of training: one wait
    assert FakeEvent.syncs == 1
    assert [round(t * 1000) for t in timer.times_s] == list(range(2, 12))
    # finished events were reused: fewer than two per step were made, and all are back in the pool
    assert FakeEvent.created < 20 and len(timer._free) == FakeEvent.created


def test_event_timer_forgets_oldest_rather_than_wait():
    from gpudoctor.hooks.torch_support import CudaEventTimer

    FakeEvent.device_time_ms, FakeEvent.done_up_to_ms, FakeEvent.syncs = 0.0, -1.0, 0
    timer = CudaEventTimer(0, max_pending=4, torch=FakeTorch)
    for _ in range(10):
        timer.begin()
        FakeEvent.device_time_ms += 1.0
        timer.end()
    assert FakeEvent.syncs == 0 and timer.dropped == 6 and len(timer._pending) == 4


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU fallback")
def test_cuda_asked_for_without_a_gpu_falls_back_to_the_host_clock():
    from support._hooks_loops import mnist_mlp

    monitor = TrainingMonitor(device="cuda")
    model = mnist_mlp()
    for inputs, _targets in monitor.wrap(make_loader(fast_collate, n=128 * 3)):
        with monitor.step():
            model(inputs).sum().backward()
    summary = monitor.summary()
    assert summary.steps == 3 and summary.timing == "host_clock" and summary.device == "cpu"
    assert any("CUDA is not usable here" in note for note in summary.notes)


@pytest.mark.gpu
@needs_cuda
def test_nvml_samples_between_epochs_are_left_out_of_utilisation_on_gpu():
    import time as _time

    monitor = TrainingMonitor(device="cuda", sample_interval_s=0.1)
    model = None
    for _ in range(2):
        train_epoch(monitor, make_loader(fast_collate, n=128 * 20, pin_memory=True), model=model,
                    device="cuda")
        _time.sleep(1.0)  # "validation": the GPU idles, outside any measured step
    summary = monitor.summary()
    if any("NVML unavailable" in note for note in summary.notes):
        pytest.skip("NVML is not readable here")
    gpu = summary.gpu
    assert gpu["samples"] >= 10 and gpu["samples_in_steps"] < gpu["samples"]
    assert any("fell outside the measured steps" in note for note in summary.notes)


# -- explicit waits: torch.cuda.synchronize() raises no sync-debug warning -------------------------

def _fake_torch(stream_warns=False):
    """torch's seam for the counter (a module ``cuda`` with sync debug mode and the three
    explicit waits); ``waits`` counts the waits that reached the "device"."""
    import types

    state = {"waits": 0, "mode": 0}

    def wait(*args, **kwargs):
        state["waits"] += 1

    class StreamBase:
        def synchronize(self):
            wait()
            if stream_warns:  # torch's Stream.synchronize does warn in sync debug mode
                warnings.warn(SYNC_WARNING_TEXT, UserWarning, stacklevel=2)

    class Stream(StreamBase):  # inherits synchronize, as torch.cuda.Stream from its C base
        pass

    class Event:
        def synchronize(self):
            wait()

    cuda = types.ModuleType("fake_cuda")
    cuda.Stream, cuda.Event, cuda.synchronize = Stream, Event, wait
    cuda.get_sync_debug_mode = lambda: state["mode"]
    cuda.set_sync_debug_mode = lambda mode: state.update(mode=mode)
    return types.SimpleNamespace(cuda=cuda), state


def test_explicit_synchronize_every_step_is_counted_and_diagnosed():
    fake, state = _fake_torch()
    originals = (fake.cuda.synchronize, fake.cuda.Event.__dict__["synchronize"])
    inside = {"loop": False}
    counter = SyncCounter(fake, counting=lambda: inside["loop"])
    assert counter.install()
    fake.cuda.synchronize()  # before the loop: not counted as the loop's
    inside["loop"] = True
    for _ in range(6):
        fake.cuda.synchronize()
    fake.cuda.Stream().synchronize()
    fake.cuda.Event().synchronize()
    counter.uninstall()
    fake.cuda.synchronize()  # after: the originals are back, nothing counts
    assert state["waits"] == 10  # every call still reached the real wait
    snap = counter.snapshot()
    assert snap["total"] == 8 and snap["outside_loop"] == 1
    top = snap["sites"][0]
    assert top["count"] == 6 and top["pattern"] == "synchronize" and top["file"].endswith("test_hooks_syncs.py")
    assert (fake.cuda.synchronize, fake.cuda.Event.__dict__["synchronize"]) == originals
    assert "synchronize" not in vars(fake.cuda.Stream)  # the inherited method is uncovered again
    assert state["mode"] == 0

    n = 6
    summary = build_summary(RawTimings(
        waits=[0.0] * n, host_steps=[0.01] * n, iter_starts=[i * 0.01 for i in range(n)],
        ends=[(i + 1) * 0.01 for i in range(n)], passes=[1] * n, device_steps=None, device="cuda:0",
        warmup_steps=0, host_syncs=snap))
    assert "host_sync_bound" in summary.codes
    assert "torch.cuda.synchronize()" in next(d for d in summary.diagnosis if d.code == "host_sync_bound").summary


def test_a_warning_raised_inside_an_explicit_wait_counts_once():
    fake, state = _fake_torch(stream_warns=True)
    counter = SyncCounter(fake)
    assert counter.install()
    for _ in range(3):
        fake.cuda.Stream().synchronize()
    counter.uninstall()
    assert counter.snapshot()["total"] == 3 and state["waits"] == 3


@pytest.mark.gpu
@needs_cuda
def test_explicit_synchronize_every_step_is_host_sync_bound_on_gpu():
    monitor = TrainingMonitor(device="cuda")
    x = torch.randn(256, 256, device="cuda")
    for _batch in monitor.wrap(range(20)):
        with monitor.step():
            _ = x @ x
            torch.cuda.synchronize()
    summary = monitor.summary()
    assert "host_sync_bound" in summary.codes, summary.to_dict()
    assert torch.cuda.synchronize.__module__ == "torch.cuda"  # restored after the monitor stopped
