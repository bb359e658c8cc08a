"""What a live read costs: PCIe throughput counters (20 ms each in NVML) at most once a
second per GPU, fresh cheap readings every interval; PCIe units as NVML means them (KiB/s)."""

from __future__ import annotations

from pathlib import Path

from gpudoctor.backends import NA, NvmlBackend, NvmlGate, ReplayBackend
from gpudoctor.sampling.presentation import fmt_rate_kbps, watch_line
from gpudoctor.sampling.sampler import Sampler as LiveSampler
from support.nvml_fake import FakePynvml, util

STANDIN = Path(__file__).parents[1] / "data" / "handmade_two_gpu_training_standin.json"


class CountingNvml(FakePynvml):
    """``n`` GPUs; counts the calls that cost (PCIe counters) and the cheap ones."""

    def __init__(self, n: int) -> None:
        super().__init__(n, driver="550.54.15", readings={
            "nvmlDeviceGetPcieThroughput": lambda counter: 2048 if counter == self.NVML_PCIE_UTIL_RX_BYTES else 1024,
            "nvmlDeviceGetUtilizationRates": lambda: util(self.util, 1)})
        self.util = 10

    @property
    def pcie_calls(self) -> int:
        return self.calls["nvmlDeviceGetPcieThroughput"]  # NVML sleeps 20 ms in each

    @property
    def util_calls(self) -> int:
        return self.calls["nvmlDeviceGetUtilizationRates"]


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_pcie_counters_are_read_at_most_once_a_second_per_gpu():
    fake, clock = CountingNvml(8), Clock()
    sampler = LiveSampler(NvmlBackend(NvmlGate(fake)), with_processes=False, clock=clock)
    snap = sampler.read()
    assert fake.pcie_calls == 16  # 8 GPUs x (rx, tx): 320 ms of NVML windows
    assert snap.devices[3].sample["pcie_rx_kbps"] == 2048
    for step in (0.25, 0.5, 0.75):  # the TUI's fastest refresh
        clock.now = step
        fake.util += 1
        snap = sampler.read()
        assert fake.pcie_calls == 16, step  # no 20 ms counters between full reads
        assert snap.devices[3].sample["gpu_util_pct"] == fake.util  # cheap readings are fresh
        assert snap.devices[3].sample["pcie_rx_kbps"] == 2048  # the last full read's value
    assert fake.util_calls == 8 * 4
    clock.now = 1.0
    sampler.read()
    assert fake.pcie_calls == 32
    # at a 1 s refresh, a read a few ms early is still a full one (no stale second every other read)
    clock.now = 1.97
    sampler.read()
    assert fake.pcie_calls == 48


def test_a_gpu_lost_between_full_reads_shows_as_a_fault_at_once():
    fake, clock = CountingNvml(2), Clock()
    sampler = LiveSampler(NvmlBackend(NvmlGate(fake)), with_processes=False, clock=clock)
    assert sampler.read().devices[1].fault is None
    fake.lost.add(1)
    clock.now = 0.25
    snap = sampler.read()
    assert snap.devices[1].fault == NA("GpuIsLost")  # not hidden by cached PCIe readings
    assert snap.devices[0].fault is None
    assert "FAULT GpuIsLost" in watch_line(snap, snap.devices[1])


def test_recordings_are_read_in_full_every_time():
    sampler = LiveSampler(ReplayBackend.from_file(STANDIN), with_processes=False, clock=Clock())
    first, second = sampler.read(), sampler.read()
    for snap in (first, second):
        assert "pcie_rx_kbps" in snap.devices[0].sample and "ecc_volatile_corrected" in snap.devices[0].sample


def test_pcie_rate_is_kib_per_second_like_the_exporter():
    from gpudoctor.exporter import gpu_metrics

    scale = {m.key: m.scale for m in gpu_metrics()}
    assert scale["pcie_rx_kbps"] == scale["pcie_tx_kbps"] == 1024.0
    assert fmt_rate_kbps(512) == "512 KiB/s"
    assert fmt_rate_kbps(1024) == "1.0 MiB/s"           # 1024 KiB/s, not 1.0 MB/s (1.024 MB/s)
    assert fmt_rate_kbps(1258291) == "1.2 GiB/s"
    assert fmt_rate_kbps(NA("NotSupported")) == "n/a (not supported)"
