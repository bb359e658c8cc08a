"""The exporter gets NVML back after the driver loads late, is reloaded, or every GPU is lost.

A fake pynvml module goes through the real NvmlGate/NvmlBackend; the sampler's clock is a
variable, so the backoff (5 s doubling to 60 s) is checked without waiting for it.
"""

from __future__ import annotations

import threading
import time

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpudoctor.backends import NvmlBackend, NvmlGate
from gpudoctor.exporter import GpudoctorCollector, GpuSampler, build_registry, stop_sampler_then_close
from support.nvml_fake import FakePynvml, util


def fake_nvml(init_failures: int = 0) -> FakePynvml:
    """One GPU at 42 % and 51 C; the first ``init_failures`` nvmlInit calls find no driver."""
    return FakePynvml(init_failures=init_failures, driver="550.54.15",
                      readings={"nvmlDeviceGetUtilizationRates": util(42, 7), "nvmlDeviceGetTemperature": lambda sensor: 51})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scrape(sampler: GpuSampler) -> dict[tuple[str, tuple], float]:
    text = generate_latest(build_registry(GpudoctorCollector(sampler))).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def make(fake: FakePynvml) -> tuple[GpuSampler, Clock]:
    clock = Clock()
    return GpuSampler(NvmlBackend(NvmlGate(fake)), interval=1.0, clock=clock), clock


def test_driver_loaded_after_the_exporter_started():
    fake = fake_nvml(init_failures=2)
    sampler, clock = make(fake)
    snap = sampler.sample_once()
    assert snap.nvml_status.reason == "DriverNotLoaded" and snap.retry_in_s == 5.0
    assert scrape(sampler)[("gpudoctor_nvml_up", ())] == 0.0
    clock.now += 4.9
    sampler.sample_once()
    assert fake.init_calls == 1  # no new nvmlInit before the backoff is over
    clock.now += 0.1
    snap = sampler.sample_once()  # second try: still no driver; the wait doubles
    assert fake.init_calls == 2 and snap.nvml_status.reason == "DriverNotLoaded"
    assert snap.retry_in_s == 10.0
    clock.now += 9.0
    sampler.sample_once()
    assert fake.init_calls == 2
    clock.now += 1.0
    snap = sampler.sample_once()  # third try: the driver is there
    assert fake.init_calls == 3 and snap.nvml_status is None and snap.retry_in_s is None
    samples = scrape(sampler)
    assert samples[("gpudoctor_nvml_up", ())] == 1.0
    assert samples[("gpudoctor_gpu_count", ())] == 1.0
    assert samples[("gpudoctor_nvml_reinit_total", ())] == 2.0
    util = [v for (name, _), v in samples.items() if name == "gpudoctor_gpu_utilization_ratio"]
    assert util == [0.42]
    assert sampler.snapshot.devices[0].static["name"] == "Fake GPU"


def test_backoff_doubles_up_to_60_s():
    fake = fake_nvml(init_failures=10**6)
    sampler, clock = make(fake)
    waits = [sampler.sample_once().retry_in_s]
    for _ in range(6):
        clock.now += waits[-1]
        waits.append(sampler.sample_once().retry_in_s)
    assert waits == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0, 60.0]
    assert fake.init_calls == 7


def test_driver_reload_drops_stale_handles_and_reinitialises():
    fake = fake_nvml()
    sampler, clock = make(fake)
    assert sampler.sample_once().nvml_status is None
    assert fake.handle_calls == 1
    fake.mode = "unloaded"  # driver reloaded: every call answers Uninitialized
    snap = sampler.sample_once()
    assert snap.nvml_status.reason == "Uninitialized"
    assert scrape(sampler)[("gpudoctor_nvml_up", ())] == 0.0
    clock.now += 5.0
    snap = sampler.sample_once()
    assert fake.shutdown_calls == 1 and fake.init_calls == 2
    assert fake.handle_calls == 2  # a fresh handle: the old one belongs to the old session
    assert snap.nvml_status is None and snap.devices[0].sample["gpu_util_pct"] == 42
    samples = scrape(sampler)
    assert samples[("gpudoctor_nvml_up", ())] == 1.0
    assert samples[("gpudoctor_gpu_up", (("gpu", "0"),))] == 1.0


def test_every_gpu_lost_then_reset_recovers():
    fake = fake_nvml()
    sampler, clock = make(fake)
    sampler.sample_once()
    fake.mode = "lost"
    snap = sampler.sample_once()
    assert snap.nvml_status is None and snap.retry_in_s == 5.0
    assert scrape(sampler)[("gpudoctor_gpu_up", (("gpu", "0"),))] == 0.0
    fake.mode = "ok"  # the GPU was reset (nvidia-smi -r): old handles are stale
    clock.now += 5.0
    snap = sampler.sample_once()
    assert fake.init_calls == 2 and fake.handle_calls == 2
    assert snap.retry_in_s is None
    assert scrape(sampler)[("gpudoctor_gpu_up", (("gpu", "0"),))] == 1.0


def test_no_retry_for_a_missing_python_binding_or_a_replay():
    class NoReset:
        kind = "replay"  # a recording: its reset() has nothing to start again
        source = "nvml-missing.json"

        def status(self):
            from gpudoctor.backends import NA

            return NA("DriverNotLoaded")

    sampler = GpuSampler(NoReset(), interval=1.0)
    assert sampler.sample_once().retry_in_s is None  # a recording cannot be restarted


class BlockingBackend:
    """A backend whose sample() is stuck in the driver until released."""

    kind = "nvml"

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()
        self.closed = False

    def status(self):
        return None

    def device_count(self):
        return 1

    def driver_version(self):
        return "1"

    def static(self, index):
        return {"name": "stuck"}

    def sample(self, index):
        self.inside.set()
        self.release.wait(300)
        return {"gpu_util_pct": 1}

    def close(self):
        self.closed = True


def test_close_is_skipped_while_the_sampler_is_still_inside_nvml():
    gpu = BlockingBackend()
    sampler = GpuSampler(gpu, interval=0.05)
    sampler.start()
    assert gpu.inside.wait(10)
    t0 = time.monotonic()
    assert stop_sampler_then_close(sampler, gpu, join_s=0.2) is False
    assert time.monotonic() - t0 < 60  # waiting for the call inside NVML would take 300 s
    assert gpu.closed is False  # nvmlShutdown under a running NVML call is what we avoid
    gpu.release.set()
    sampler.core._thread.join(10)
    assert stop_sampler_then_close(sampler, gpu, join_s=5) is True
    assert gpu.closed is True
