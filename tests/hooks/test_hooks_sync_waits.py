"""Explicit waits that torch's sync debug mode does not report, counted on the real torch module:
``torch.cuda.synchronize()`` and ``torch.accelerator.synchronize()`` (also when imported by name
before the counter started) and the device-generic ``torch.Event``/``torch.Stream``
``synchronize()``. No GPU here: the CUDA-only parts under the device-wide waits (the C entry points,
lazy init, the device guard, sync debug mode) are stood in for; torch's own Python functions and the
generic CPU events and streams are the real ones."""

from __future__ import annotations

import contextlib
import os
import types
import warnings

import pytest

torch = pytest.importorskip("torch")

from torch.accelerator import synchronize as accelerator_synchronize  # noqa: E402  (by name, before any counter)
from torch.cuda import synchronize as cuda_synchronize  # noqa: E402

from gpudoctor.hooks import torch_support as torch_hooks  # noqa: E402
from gpudoctor.hooks.summary import RawTimings, build_summary  # noqa: E402
from gpudoctor.hooks.torch_support import SyncCounter  # noqa: E402

HERE = os.path.basename(__file__)


@pytest.fixture
def device(monkeypatch):
    """CUDA stood in for below torch's Python functions; ``waits`` lists the waits that reached it."""
    state = types.SimpleNamespace(mode=0, waits=[])
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: state.mode)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: setattr(state, "mode", mode))
    monkeypatch.setattr(torch.cuda, "_lazy_init", lambda: None)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch.accelerator, "_get_device_index", lambda device, optional=False: 0)
    monkeypatch.setattr(torch._C, "_cuda_synchronize", lambda: state.waits.append("cuda"))
    monkeypatch.setattr(torch._C, "_accelerator_synchronizeDevice", lambda index: state.waits.append("accelerator"))
    return state


def _patched_attributes():
    return (torch._C._cuda_synchronize, torch._C._accelerator_synchronizeDevice, torch.cuda.synchronize,
            torch.cuda.Event.__dict__["synchronize"], torch.cuda.Stream.__dict__["synchronize"],
            torch.Event, torch.Stream)


def _sites_by_code(snapshot):
    return {site["code"]: site for site in snapshot["sites"]}


def test_device_wide_waits_are_counted_however_they_were_imported(device):
    before = _patched_attributes()
    counter = SyncCounter(torch)
    assert counter.install()
    try:
        for _ in range(5):
            torch.cuda.synchronize()
        for _ in range(4):
            cuda_synchronize()
        for _ in range(3):
            torch.accelerator.synchronize()
        for _ in range(2):
            accelerator_synchronize()
    finally:
        counter.uninstall()
    assert device.waits == ["cuda"] * 9 + ["accelerator"] * 5  # every wait still reached the device
    snap = counter.snapshot()
    assert snap["total"] == 14
    sites = _sites_by_code(snap)
    assert {code: site["count"] for code, site in sites.items()} == {
        "torch.cuda.synchronize()": 5, "cuda_synchronize()": 4,
        "torch.accelerator.synchronize()": 3, "accelerator_synchronize()": 2}
    for site in sites.values():  # charged to this file's lines, not to torch's
        assert site["file"].endswith(HERE) and site["pattern"] == "synchronize" and site["origin"] == "user"
    assert _patched_attributes() == before and device.mode == 0
    cuda_synchronize()  # after: restored, nothing counts
    assert counter.snapshot()["total"] == 14


def test_generic_event_and_stream_synchronize_are_counted_not_wait_or_query(device):
    original_event, original_stream = torch.Event, torch.Stream
    counter = SyncCounter(torch)
    assert counter.install()
    try:
        event = torch.Event(device="cpu")
        stream = torch.Stream(device="cpu")
        for _ in range(3):
            event.synchronize()
        for _ in range(2):
            stream.synchronize()
        # these block no host thread: not host syncs
        assert event.query() and stream.query()
        event.wait(stream)
        stream.wait_event(event)
        # the swapped-in names still answer for the C types, both ways
        assert isinstance(event, original_event) and isinstance(original_event(device="cpu"), torch.Event)
        assert isinstance(stream, original_stream) and isinstance(original_stream(device="cpu"), torch.Stream)
        assert issubclass(torch.cuda.Event, torch.Event) and issubclass(torch.cuda.Stream, torch.Stream)
    finally:
        counter.uninstall()
    assert torch.Event is original_event and torch.Stream is original_stream
    snap = counter.snapshot()
    assert snap["total"] == 5
    assert {code: site["count"] for code, site in _sites_by_code(snap).items()} == {
        "event.synchronize()": 3, "stream.synchronize()": 2}


@pytest.mark.parametrize("wait", ["cuda_by_name", "accelerator", "event", "stream"])
def test_a_loop_that_waits_every_step_is_host_sync_bound(device, wait):
    in_loop = {"now": False}
    counter = SyncCounter(torch, counting=lambda: in_loop["now"])
    assert counter.install()
    steps = 8
    try:
        event, stream = torch.Event(device="cpu"), torch.Stream(device="cpu")
        calls = {"cuda_by_name": cuda_synchronize, "accelerator": accelerator_synchronize,
                 "event": event.synchronize, "stream": stream.synchronize}
        in_loop["now"] = True
        for _ in range(steps):
            calls[wait]()
    finally:
        counter.uninstall()
    snap = counter.snapshot()
    assert snap["total"] == steps
    summary = build_summary(RawTimings(
        waits=[0.0] * steps, host_steps=[0.01] * steps, iter_starts=[i * 0.01 for i in range(steps)],
        ends=[(i + 1) * 0.01 for i in range(steps)], passes=[1] * steps, device_steps=None, device="cuda:0",
        warmup_steps=0, host_syncs=snap))
    assert "host_sync_bound" in summary.codes
    message = next(d for d in summary.diagnosis if d.code == "host_sync_bound").summary
    assert "calls[wait]()" in message and HERE in message


def test_two_counters_share_one_layer_of_wrapping_and_installing_twice_is_harmless(device):
    before = _patched_attributes()
    before_filters = list(warnings.filters)
    first, second = SyncCounter(torch), SyncCounter(torch)
    assert first.install() and first.install()  # the second call changes nothing
    try:
        wrapped = torch._C._cuda_synchronize
        assert wrapped is not before[0] and wrapped.__wrapped__ is before[0]
        assert second.install()
        try:
            assert torch._C._cuda_synchronize is wrapped  # not a wrapper of a wrapper
            cuda_synchronize()  # seen by both
        finally:
            second.uninstall()
        assert torch._C._cuda_synchronize is wrapped  # the first is still counting
        cuda_synchronize()
    finally:
        first.uninstall()
    first.uninstall()  # a second stop changes nothing either
    assert (first.total, second.total) == (2, 1) and device.waits == ["cuda"] * 2
    assert _patched_attributes() == before and warnings.filters == before_filters and device.mode == 0


def test_a_failure_while_patching_puts_everything_back(device, monkeypatch):
    before = _patched_attributes()

    class Locked:
        __name__ = "Locked"
        synchronize = staticmethod(lambda: None)

        def __setattr__(self, name, value):
            raise AttributeError("read-only")

    real_targets = torch_hooks._SyncEntryPoints._targets

    def targets(entry):  # the last target cannot be patched
        return real_targets(entry) + [(Locked(), "synchronize", lambda: None)]

    monkeypatch.setattr(torch_hooks._SyncEntryPoints, "_targets", targets)
    counter = SyncCounter(torch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert counter.install()  # the warnings are still counted; the waits are not
    try:
        assert "explicit synchronize() calls not counted" in counter.status
        assert _patched_attributes() == before
        cuda_synchronize()
    finally:
        counter.uninstall()
    assert counter.total == 0 and _patched_attributes() == before and device.mode == 0


# -- on a real GPU (not run on the machine this was written on: no GPU there) ---------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("wait", ["accelerator", "cuda_by_name", "generic_event"])
def test_explicit_waits_every_step_are_host_sync_bound_on_gpu(wait):
    from gpudoctor import TrainingMonitor

    original_event, original_entry = torch.Event, torch._C._cuda_synchronize
    monitor = TrainingMonitor(device="cuda")
    x = torch.randn(256, 256, device="cuda")
    for _batch in monitor.wrap(range(20)):
        with monitor.step():
            y = x @ x
            if wait == "accelerator":
                torch.accelerator.synchronize()
            elif wait == "cuda_by_name":
                cuda_synchronize()
            else:
                done = torch.Event()
                done.record()
                done.synchronize()
    del y
    summary = monitor.summary()
    assert "host_sync_bound" in summary.codes, summary.to_dict()
    assert summary.host_syncs["sites"][0]["pattern"] == "synchronize"
    assert torch.Event is original_event and torch._C._cuda_synchronize is original_entry  # restored
