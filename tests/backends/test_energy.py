"""Energy counters: RAPL through a powercap tree (present, wrapping, absent) and NVML's total
energy through the backend seam (live gate with a stand-in module, and a replay)."""

from __future__ import annotations

from itertools import count
from pathlib import Path
from types import SimpleNamespace

from gpudoctor.backends import NvmlBackend, NvmlGate
from gpudoctor.backends.energy import EnergyUse, cpu_meter, gpu_meter, read_rapl_uj, rapl_reason_words
from gpudoctor.backends.na import NA, is_na
from support.nvml_fake import FakePynvml, nvml_error


def _zone(root: Path, name: str, energy: int, wrap: int = 262143328850) -> Path:
    zone = root / name
    zone.mkdir(parents=True, exist_ok=True)
    (zone / "name").write_text("package-0\n")
    (zone / "energy_uj").write_text(f"{energy}\n")
    (zone / "max_energy_range_uj").write_text(f"{wrap}\n")
    return zone


def _clock(*times):
    it = iter(times)
    return lambda: next(it)


def test_rapl_joules_over_two_packages_and_a_wrap(tmp_path):
    a = _zone(tmp_path, "intel-rapl:0", 1_000_000)
    b = _zone(tmp_path, "intel-rapl:1", 999_000_000, wrap=1_000_000_000)
    _zone(tmp_path, "intel-rapl:0:0", 5)  # a sub-zone (core): not counted twice
    meter = cpu_meter(str(tmp_path), clock=_clock(10.0, 12.0))
    meter.start()
    (a / "energy_uj").write_text("31000000\n")  # +30 J
    (b / "energy_uj").write_text("9000000\n")  # wrapped: +10 J
    use = meter.stop()
    assert use.source == "rapl" and use.reason == ""
    assert use.joules == 40.0 and use.seconds == 2.0 and use.watts == 20.0
    assert use.per(800) == 20.0


def test_no_rapl_is_na_with_the_reason(tmp_path):
    assert read_rapl_uj(str(tmp_path / "none")) == NA("NoRaplInterface")
    use = cpu_meter(str(tmp_path / "none"), clock=_clock(0.0, 1.0))
    use.start()
    result = use.stop()
    assert result.joules is None and result.reason == "NoRaplInterface" and result.watts is None
    assert "virtual machines" in rapl_reason_words(result.reason)


def energy_nvml(supported=True) -> FakePynvml:
    """One GPU whose total-energy counter advances 250 J a read (or that has none)."""
    reads = count(1)
    return FakePynvml(readings={"nvmlDeviceGetTotalEnergyConsumption":
                                (lambda: 5_000_000 + 250_000 * next(reads)) if supported else nvml_error("NotSupported")})


def test_gpu_energy_from_nvml_counter():
    backend = NvmlBackend(NvmlGate(energy_nvml()))
    meter = gpu_meter(backend, 0, clock=_clock(0.0, 5.0))
    meter.start()
    use = meter.stop()
    assert use == EnergyUse(250.0, 5.0, "nvml") and use.watts == 50.0


def test_gpu_without_the_counter_is_na():
    backend = NvmlBackend(NvmlGate(energy_nvml(supported=False)))
    assert is_na(backend.total_energy_mj(0))
    meter = gpu_meter(backend, 0, clock=_clock(0.0, 5.0))
    meter.start()
    assert meter.stop().reason == "NotSupported"


def test_replayed_counter_and_a_recording_without_one():
    from gpudoctor.backends import ReplayBackend

    rec = {"format": "gpudoctor-recording", "format_version": 1, "meta": {},
           "nvml": {"status": None, "device_count": 1, "static": [{"name": "x"}],
                    "samples": [{"t": 0, "devices": [{"gpu_util_pct": 90, "energy_mj": 1_000_000}]},
                                {"t": 1, "devices": [{"gpu_util_pct": 90, "energy_mj": 1_400_000}]}]}}
    meter = gpu_meter(ReplayBackend(rec), 0, clock=_clock(0.0, 1.0))
    meter.start()
    assert meter.stop().joules == 400.0
    bare = {"nvml": {"status": None, "device_count": 1, "static": [{"name": "x"}],
                     "samples": [{"t": 0, "devices": [{"gpu_util_pct": 1}]}]}}
    assert ReplayBackend(bare).total_energy_mj(0) == NA("NotRecorded")


def test_exporter_serves_the_energy_counter_in_joules():
    import json

    from prometheus_client import generate_latest

    from gpudoctor.backends import ReplayBackend
    from gpudoctor.exporter import GpudoctorCollector, GpuSampler, build_registry

    rec = json.loads((Path(__file__).parents[1] / "data" / "handmade_two_gpu_training_standin.json").read_text())
    for sample in rec["nvml"]["samples"]:
        sample["devices"][0]["energy_mj"] = 2_500_000  # GPU 1 has no counter: absent, not 0
        sample["devices"][1].pop("energy_mj", None)
    sampler = GpuSampler(ReplayBackend(rec), 1.0)
    sampler.sample_once()
    text = generate_latest(build_registry(GpudoctorCollector(sampler))).decode()
    lines = [line for line in text.splitlines() if line.startswith("gpudoctor_gpu_energy_joules_total{")]
    assert len(lines) == 1 and 'gpu="0"' in lines[0] and lines[0].endswith(" 2500.0")
    assert "# TYPE gpudoctor_gpu_energy_joules_total counter" in text


# --------------------------------------------------------------------------- bench mnist runs
def _cpu_run():
    from gpudoctor.workload.config import RunConfig
    from gpudoctor.workload.data import synthetic_mnist
    from gpudoctor.workload.run import run_one

    return run_one(RunConfig("cpu", "resident", 512, None), synthetic_mnist(4096, 512), epochs=1)


def test_cpu_run_without_rapl_says_why(monkeypatch, tmp_path):
    from gpudoctor.workload import energy

    monkeypatch.setattr(energy, "cpu_meter", lambda: cpu_meter(str(tmp_path / "no-powercap")))
    result = _cpu_run()
    assert result.status == "ok" and result.samples_per_s
    assert result.energy_j is None and result.samples_per_joule is None
    assert result.energy_source == "rapl" and "no RAPL energy counters" in result.energy_note


def _advancing_rapl(monkeypatch, tmp_path: Path) -> list[str]:
    """One RAPL package under ``tmp_path`` whose counter advances 1 J at every read; the roots read."""
    from gpudoctor.backends import energy as backend_energy

    zone = _zone(tmp_path, "intel-rapl:0", 0)
    reads: list[str] = []
    real_read = backend_energy.read_rapl_uj

    def advancing(root):
        reads.append(root)
        (zone / "energy_uj").write_text(f"{len(reads) * 1_000_000}\n")
        return real_read(root)

    monkeypatch.setattr(backend_energy, "read_rapl_uj", advancing)
    return reads


def test_cpu_run_with_rapl_counts_the_energy_of_the_timed_epochs(monkeypatch, tmp_path):
    """A real training run while a powercap tree's counter advances (1 J every read)."""
    from gpudoctor.workload import energy

    reads = _advancing_rapl(monkeypatch, tmp_path)
    monkeypatch.setattr(energy, "cpu_meter", lambda: cpu_meter(str(tmp_path)))
    result = _cpu_run()
    assert result.status == "ok" and len(reads) == 2  # one read before, one after the timed epochs
    assert result.energy_j == 1.0 and result.energy_per_epoch_j == 1.0
    assert result.samples_per_joule == 4096.0
    assert result.avg_power_w is not None and result.avg_power_w > 0
    assert result.energy_source == "rapl" and result.energy_note is None


def test_recommendation_names_the_most_efficient_run_when_it_is_not_the_fastest():
    from gpudoctor.workload.recommend import recommend

    def run(mode, batch, sps, spj):
        return {"device": "cuda", "mode": mode, "batch_size": batch, "workers": None, "status": "ok",
                "samples_per_s": sps, "epoch_s": 60000 / sps, "samples_per_joule": spj, "avg_power_w": sps / spj if spj else None,
                "test_accuracy": 0.95, "data_wait_share": 0.01, "gpu_util_mean_pct": 80, "gpu_util_max_pct": 95}

    rec = recommend([run("resident", 20000, 900_000, 3_000.0), run("resident", 4096, 700_000, 4_500.0)])
    assert rec["best"]["batch_size"] == 20000
    efficient = rec["most_efficient"]
    assert efficient["batch_size"] == 4096 and not efficient["same_as_fastest"]
    assert "4,500.0 samples/J" in efficient["text"] and "3,000.0 samples/J" in efficient["text"]
    assert any("most energy-efficient" in r for r in rec["reasons"])
    same = recommend([run("resident", 20000, 900_000, 5_000.0), run("resident", 4096, 700_000, 4_500.0)])
    assert same["most_efficient"]["same_as_fastest"] and "also the most energy-efficient" in same["most_efficient"]["text"]
    none = recommend([run("resident", 64, 1000, None)])
    assert none["most_efficient"] is None


def test_sweep_outputs_carry_the_energy_columns():
    from gpudoctor.workload.output import CSV_COLUMNS, runs_csv

    assert {"energy_j", "samples_per_joule", "avg_power_w", "energy_note"} <= set(CSV_COLUMNS)
    text = runs_csv([{"device": "cpu", "mode": "resident", "batch_size": 64, "samples_per_joule": 12.5,
                      "energy_note": None}])
    header, row = text.splitlines()
    assert row.split(",")[header.split(",").index("samples_per_joule")] == "12.5"


# --------------------------------------------------------------------------- windows and limits
def _run_energy(counter_mj, clock, limit_mw=300_000):
    """A CUDA run's energy over a stand-in NVML whose counter reads ``counter_mj()``."""
    from gpudoctor.workload.energy import RunEnergy

    nvml = FakePynvml(readings={"nvmlDeviceGetTotalEnergyConsumption": counter_mj,
                                "nvmlDeviceGetEnforcedPowerLimit": limit_mw})
    return RunEnergy(SimpleNamespace(type="cuda", index=0), backend=NvmlBackend(NvmlGate(nvml)), clock=clock).start()


def test_a_millisecond_gpu_window_is_too_short_to_measure_not_absurd_watts():
    """The counter advances at the driver's power-sampling cadence: over 4 ms it reads 0 J or
    one whole step (here 250 J, 62,500 W)."""
    reads = count(0)
    use = _run_energy(lambda: 5_000_000 + 250_000 * next(reads), _clock(0.0, 0.004)).stop()
    assert use.joules is None and use.watts is None
    assert use.reason.startswith("too short to measure") and "4 ms" in use.reason and "5 s" in use.reason


def test_average_power_above_the_power_limit_is_a_measurement_error():
    reads = count(0)
    over = _run_energy(lambda: 2_000_000 * next(reads), _clock(0.0, 5.0)).stop()  # 2000 J in 5 s: 400 W
    assert over.joules is None and "measurement error" in over.reason and "300 W power limit" in over.reason
    reads = count(0)
    fine = _run_energy(lambda: 1_000_000 * next(reads), _clock(0.0, 5.0)).stop()  # 200 W
    assert fine.joules == 1000.0 and fine.watts == 200.0 and fine.reason == ""


def test_a_counter_that_did_not_advance_is_no_figure():
    use = _run_energy(lambda: 7_000_000, _clock(0.0, 6.0)).stop()
    assert use.joules is None and "did not advance" in use.reason


def test_a_short_cpu_run_is_topped_up_on_a_spare_network_until_the_window_is_long_enough(monkeypatch, tmp_path):
    """The timed epochs end before the RAPL window's minimum: more epochs of the same
    configuration run on a copy of the network inside the window; the run's accuracy is that
    of the real network (the same as a run without energy counters)."""
    from gpudoctor.workload import energy

    baseline = _cpu_run()  # no counters on this machine: no top-up
    reads = _advancing_rapl(monkeypatch, tmp_path)
    ticks = count(0)
    monkeypatch.setattr(energy, "cpu_meter", lambda: cpu_meter(str(tmp_path), clock=lambda: next(ticks) * 0.001))
    result = _cpu_run()
    assert result.status == "ok" and len(reads) == 2
    assert result.energy_epochs > 1 and result.energy_window_s >= energy.MIN_ENERGY_WINDOW_S["rapl"]
    assert result.energy_j == 1.0 and result.energy_per_epoch_j == round(1.0 / result.energy_epochs, 3)
    assert result.samples_per_joule == 4096.0 * result.energy_epochs
    assert result.epochs == 1 and result.test_accuracy == baseline.test_accuracy
