"""TrainingMonitor's energy figures: joules per step, samples per joule and average power, from
counter readings taken at step boundaries (real CPU training loops with a powercap tree whose
counter rises at a known power, no RAPL at all, and NVML's counter through a replay)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from gpudoctor.backends import ReplayBackend
from gpudoctor.hooks import TrainingMonitor
from gpudoctor.hooks import energy as hooks_energy
from gpudoctor.hooks.energy import StepEnergy, energy_figures, energy_in_spans, nvml_step_energy
from gpudoctor.hooks.monitor import _batch_samples
from support._hooks_loops import fast_collate, make_loader, mnist_mlp, single_thread, validate_summary


def test_energy_in_spans_counts_only_the_steps_and_leaves_the_gap_out():
    # 100 W for 10 s, read every second: a cumulative counter rising 100 J a second.
    readings = [(float(t), 100.0 * t) for t in range(11)]
    spans = [(1.0, 2.5), (2.5, 4.0), (7.0, 9.0)]  # a gap from 4 s to 7 s (validation)
    joules, seconds, count = energy_in_spans(readings, spans)
    assert (joules, seconds, count) == (500.0, 5.0, 3)
    # spans before the first or after the last reading are left out, not guessed
    assert energy_in_spans(readings, [(-1.0, 0.5), (9.5, 11.0)]) == (0.0, 0.0, 0)
    assert energy_in_spans(readings[:1], spans) == (0.0, 0.0, 0)


def test_figures_per_step_and_per_sample_and_the_reasons_when_missing():
    meter = StepEnergy("nvml", lambda: 0.0)
    meter.readings = [(0.0, 1000.0), (2.0, 1400.0)]  # 200 W
    block, note = energy_figures(meter, [(0.0, 1.0), (1.0, 2.0)], [64, 64])
    assert note is None
    assert block["joules"] == 400.0 and block["joules_per_step"] == 200.0 and block["avg_power_w"] == 200.0
    assert block["samples"] == 128 and block["samples_per_joule"] == 128 / 400.0
    block, note = energy_figures(meter, [(0.0, 1.0), (1.0, 2.0)], [64, -1])
    assert block["joules_per_step"] == 200.0 and block["samples_per_joule"] is None
    assert "batch_size=" in note
    short = StepEnergy("rapl", lambda: 0.0)
    short.readings = [(0.0, 1.0)]
    assert "too short" in energy_figures(short, [(0.0, 1.0)], [1])[1]
    assert energy_figures(None, [], []) == (None, None)


def test_counter_that_goes_back_stops_the_readings_with_the_reason():
    values = iter([5.0, 7.0, 1.0, 9.0])
    meter = StepEnergy("nvml", lambda: next(values), interval_s=0.0)
    for t in range(4):
        meter.maybe_read(float(t))
    assert meter.reason == "CounterWentBack" and len(meter.readings) == 2
    assert "driver was reloaded" in meter.reason_words()


def test_readings_are_throttled_to_the_interval_unless_forced():
    reads = []
    meter = StepEnergy("rapl", lambda: float(len(reads.append(1) or reads)), interval_s=1.0)
    for t in (0.0, 0.2, 0.5, 1.1, 1.3):
        meter.maybe_read(t)
    meter.maybe_read(1.4, force=True)
    assert [t for t, _ in meter.readings] == [0.0, 1.1, 1.4]


@pytest.mark.parametrize("batch, expected", [
    (torch.zeros(32, 784), 32),
    ((torch.zeros(16, 1, 28, 28), torch.zeros(16)), 16),
    ({"image": torch.zeros(8, 3), "label": torch.zeros(8)}, 8),
    ([[torch.zeros(4, 2)]], 4),
    (torch.tensor(3.0), -1),
    ("text", -1),
    (None, -1),
])
def test_batch_samples_from_the_first_tensor(batch, expected):
    assert _batch_samples(batch) == expected


def _powercap(root: Path) -> Path:
    zone = root / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "energy_uj").write_text("0\n")
    (zone / "max_energy_range_uj").write_text("262143328850\n")
    return zone


def _train(monitor: TrainingMonitor, steps: int) -> None:
    model = mnist_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    with single_thread():
        for images, targets in monitor.wrap(make_loader(fast_collate, batch_size=128, n=128 * steps)):
            with monitor.step():
                opt.zero_grad()
                loss_fn(model(images), targets).backward()
                opt.step()
                time.sleep(0.004)  # steps long enough for several readings


def test_cpu_loop_with_rapl_gives_joules_per_step_and_samples_per_joule(monkeypatch, tmp_path):
    """A real CPU loop while the powercap counter rises at 25 W: the figures must agree.

    The counter is 25 W times the monitor's own time stamp of each reading (not the time the file
    happens to be read: on a busy machine the two drift apart by a preemption, and the power
    figure with them), so the figure is exact whatever the load."""
    zone = _powercap(tmp_path)
    t0 = time.perf_counter()
    real_read = hooks_energy.read_rapl_uj
    real_maybe_read = hooks_energy.StepEnergy.maybe_read
    stamp = [t0]

    def maybe_read(self, now, force=False):
        stamp[0] = now
        return real_maybe_read(self, now, force)

    def rising(root):
        (zone / "energy_uj").write_text(f"{round((stamp[0] - t0) * 25.0 * 1e6)}\n")
        return real_read(root)

    monkeypatch.setattr(hooks_energy.StepEnergy, "maybe_read", maybe_read)
    monkeypatch.setattr(hooks_energy, "read_rapl_uj", rising)
    monkeypatch.setattr(hooks_energy, "POWERCAP", str(tmp_path))
    monitor = TrainingMonitor("cpu", sample_interval_s=0.01)
    _train(monitor, 24)
    summary = monitor.summary()
    energy = summary.energy
    assert energy["source"] == "rapl" and energy["reason"] is None, summary.notes
    assert energy["avg_power_w"] == pytest.approx(25.0, rel=1e-3)
    assert energy["steps"] >= 10 and energy["samples"] == 128 * energy["steps"]
    assert energy["joules_per_step"] == pytest.approx(energy["joules"] / energy["steps"])
    assert energy["samples_per_joule"] == pytest.approx(energy["samples"] / energy["joules"])
    assert summary.samples_per_s == pytest.approx(128 * summary.steps_per_s)
    assert "samples per joule" in str(summary) and "CPU energy counter" in str(summary)
    validate_summary(summary.to_dict())


def test_cpu_loop_without_rapl_says_why(monkeypatch, tmp_path):
    monkeypatch.setattr(hooks_energy, "POWERCAP", str(tmp_path / "no-powercap"))
    monitor = TrainingMonitor("cpu", sample_interval_s=0.01)
    _train(monitor, 4)
    summary = monitor.summary()
    assert summary.energy["joules_per_step"] is None and summary.energy["samples_per_joule"] is None
    assert "no RAPL energy counters" in summary.energy["reason"]
    assert any(n.startswith("energy not measured: no RAPL") for n in summary.notes)
    assert summary.samples_per_s is not None  # throughput does not need the counter
    validate_summary(summary.to_dict())


def test_energy_can_be_switched_off():
    monitor = TrainingMonitor("cpu", measure_energy=False)
    _train(monitor, 3)
    summary = monitor.summary()
    assert summary.energy is None and not any("energy" in n for n in summary.notes)
    validate_summary(summary.to_dict())


def test_nvml_counter_from_a_replayed_recording_gives_joules_per_step():
    # Four recorded samples of a GPU's counter, 300 J apart: each read takes the next one.
    rec = {"format": "gpudoctor-recording", "format_version": 1, "meta": {},
           "nvml": {"status": None, "device_count": 1, "static": [{"name": "x"}],
                    "samples": [{"t": i, "devices": [{"gpu_util_pct": 95, "energy_mj": 1_000_000 + 300_000 * i}]}
                                for i in range(4)]}}
    meter = nvml_step_energy(ReplayBackend(rec), 0, interval_s=1.0)
    for t in (0.0, 1.0, 2.0, 3.0):
        meter.maybe_read(t)
    block, note = energy_figures(meter, [(0.0, 1.5), (1.5, 3.0)], [256, 256])
    assert note is None and block["source"] == "nvml"
    assert block["joules"] == pytest.approx(900.0) and block["joules_per_step"] == pytest.approx(450.0)
    assert block["avg_power_w"] == pytest.approx(300.0) and block["samples_per_joule"] == pytest.approx(512 / 900)


def test_batch_size_argument_is_checked():
    from gpudoctor.hooks import MonitorUsageError

    for bad in (0, -3, 2.5, True):
        with pytest.raises(MonitorUsageError, match="batch_size"):
            TrainingMonitor("cpu", batch_size=bad)
