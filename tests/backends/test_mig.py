"""MIG per slice (issue #26, must-have 4): the MIG devices of a GPU in MIG mode read on their own
MIG handles (the fake NVML's H100 with two 3g.40gb slices, and the hand-made MIG recording), shown
by watch (lines and JSON), the report's devices probe and the exporter, and CUDA_VISIBLE_DEVICES=MIG-...
resolved to its slice's GPU. Energy is never split between slices (NVML gives it for the whole GPU
only) and utilisation never made up (NVML has no utilisation rates in MIG mode): the front ends say
so. Not yet measured on a GPU with real MIG slices."""

from __future__ import annotations

import json
import types

import pytest

from gpudoctor.core import exitcodes
from gpudoctor.backends import NA, NvmlBackend, NvmlGate, ReplayBackend, is_na
from gpudoctor.backends import nvml as nvml_backend
from gpudoctor.backends.base import MigDeviceReading
from gpudoctor.backends.catalogue import MIG_NO_UTILISATION
from gpudoctor.backends.visibility import parse_visible, visible_mig_devices, visible_nvml_indices
from gpudoctor.cli import main
from support.nvml_fake import FakePynvml, h100_mig, nvml_error
from support.tui_support import DATA

MIG = DATA / "handmade_h100_mig_two_slices.json"
FIRST_UUID = "MIG-00000001-5c1e-5b0e-9a39-012345678900"

pytestmark = pytest.mark.timeout(120)


def _backend(**kw):
    return NvmlBackend(NvmlGate(FakePynvml(readings=h100_mig(**kw))))


def test_the_backend_reads_each_mig_device_on_its_own_handle(monkeypatch):
    monkeypatch.setattr(nvml_backend, "GPM_MIN_INTERVAL_S", 0.0)
    backend = _backend()
    slices = backend.mig_devices(0)
    assert [type(m) for m in slices] == [MigDeviceReading, MigDeviceReading]
    first, second = slices
    assert (first.parent, first.slot, first.gpu_instance_id, first.compute_instance_id) == (0, 0, 1, 0)
    assert (second.slot, second.gpu_instance_id) == (2, 2)  # slot 1 is empty (NotFound): skipped
    assert first.uuid == FIRST_UUID  # "MIG-" kept as NVML gives it
    assert first.profile == "3g.40gb" and first.name == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    assert first.sm_count == 60 and first.memory_size_bytes == 40448 << 20
    assert first.memory_used_bytes == 12 << 30 and first.memory_total_bytes == 40448 << 20
    assert [(p.pid, p.gpu_memory_bytes) for p in first.processes] == [(4242, 8 << 30), (4243, 4 << 30)]
    assert second.processes == [] and second.memory_used_bytes == 0
    # NVML has no utilisation rates in MIG mode and energy for the whole GPU only: kept as its answer
    assert first.gpu_util_pct == NA("NotSupported") and first.energy_mj == NA("NotSupported")
    assert first.sm_active_pct == NA("Warming")  # GPM per GPU instance: the first read has no previous sample
    first, second = backend.mig_devices(0)
    assert first.sm_active_pct == 41.5 and second.sm_active_pct == 0.0
    assert first.to_dict()["processes"][0] == {"pid": 4242, "type": "compute", "gpu_memory_bytes": 8 << 30,
                                              "sm_util_pct": None}
    backend.close()


def test_not_in_mig_mode_no_mig_no_privileges_and_a_lost_gpu_each_say_why():
    plain = NvmlBackend(NvmlGate(FakePynvml()))  # no nvmlDeviceGetMigMode answer: NotSupported
    assert plain.mig_devices(0) == NA("MigNotSupported")
    disabled = NvmlBackend(NvmlGate(FakePynvml(readings={"nvmlDeviceGetMigMode": (0, 0)})))
    assert disabled.mig_devices(0) == NA("MigDisabled")
    refused = _backend(processes=nvml_error("NoPermission"))
    assert [m.processes for m in refused.mig_devices(0)] == [NA("NoPermission")] * 2
    assert refused.mig_devices(0)[0].memory_used_bytes == 12 << 30  # the rest still reads
    fake = FakePynvml(readings=h100_mig())
    fake.lost = {0}
    assert NvmlBackend(NvmlGate(fake)).mig_devices(0) == NA("GpuIsLost")
    fake = FakePynvml(readings=h100_mig())
    fake.devices[0]["mig"][0]["nvmlDeviceGetAttributes"] = nvml_error("NotSupported")
    first = NvmlBackend(NvmlGate(fake)).mig_devices(0)[0]
    assert first.sm_count == NA("NotSupported") and first.memory_total_bytes == 40448 << 20


def test_the_sampler_reads_mig_devices_only_for_a_gpu_in_mig_mode():
    from gpudoctor.sampling.sampler import Sampler

    fake = FakePynvml(count=2, readings=h100_mig())
    fake.devices[1] = dict(fake.devices[1], nvmlDeviceGetMigMode=(0, 0))
    fake.devices[1].pop("mig")
    snap = Sampler(NvmlBackend(NvmlGate(fake)), with_processes=False).read()
    assert len(snap.devices[0].mig) == 2 and snap.devices[1].mig is None


def test_watch_prints_one_line_per_mig_device_under_its_gpu(capsys):
    assert main(["watch", "-n", "2", "-i", "0.25", "--replay", str(MIG)]) == exitcodes.OK
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6  # per interval: the GPU, then its two MIG devices
    gpu, first, second = lines[3:6]
    assert gpu.split()[1] == "gpu0" and "mig" not in gpu.split()[1:3]
    assert first.split()[1:4] == ["gpu0", "mig1.0", "3g.40gb"]
    assert first.endswith(" mem 12.0/39.5 GiB smact 42% procs 2 power/energy: whole GPU")
    assert "util n/a" in gpu  # no utilisation rates for the whole GPU in MIG mode either
    assert second.split()[2] == "mig2.0" and " procs 0 " in second
    assert all(len(line) <= 100 for line in lines)
    assert "smact" not in lines[1]  # warming: no SM activity yet
    assert main(["watch", "-n", "2", "-i", "0.25", "-v", "--replay", str(MIG)]) == exitcodes.OK
    first = capsys.readouterr().out.splitlines()[4]
    assert f"| uuid {FIRST_UUID} | sms 60 | mem 12.0/39.5 GiB | sm_active 42.0 % |" in first
    assert "| procs 2 (4242 8.0 GiB, 4243 4.0 GiB) |" in first
    assert first.endswith("| util n/a: not given in MIG mode (no NVML utilisation rates, per slice or whole GPU); "
                          "see SM activity | energy n/a: whole-GPU figure only")


def test_watch_json_gives_one_record_per_mig_device():
    from gpudoctor.sampling.presentation import mig_records
    from gpudoctor.sampling.sampler import Sampler

    snap = Sampler(ReplayBackend.from_file(MIG), with_processes=False).read()
    records = mig_records(snap, snap.devices[0])
    assert [r["mig"]["gpu_instance_id"] for r in records] == [1, 2]
    first = records[0]
    assert first["gpu"] == 0 and first["mig"]["uuid"] == FIRST_UUID and first["mig"]["profile"] == "3g.40gb"
    assert first["mig"]["memory_used_bytes"] == 12 << 30 and first["mig"]["sm_count"] == 60
    assert first["mig"]["processes"] == [{"pid": 4242, "gpu_memory_bytes": 8 << 30},
                                         {"pid": 4243, "gpu_memory_bytes": 4 << 30}]
    assert first["mig"]["gpu_util_pct"] is None and first["mig"]["energy_mj"] is None
    assert first["notes"] == {"gpu_util_pct": MIG_NO_UTILISATION, "energy_mj": "whole-GPU figure only"}
    assert first["na"]["sm_active_pct"] == "Warming" and first["na"]["gpu_util_pct"] == "NotSupported"
    json.dumps(records, allow_nan=False)


def test_watch_json_end_to_end_on_the_live_fake(monkeypatch, capsys):
    import gpudoctor.backends as backends

    fake = FakePynvml(readings=h100_mig(processes=nvml_error("NoPermission")))
    monkeypatch.setattr(backends, "NvmlBackend", lambda: NvmlBackend(NvmlGate(fake)))
    assert main(["watch", "-n", "1", "--json"]) == exitcodes.OK
    gpu, *slices = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "mig" not in gpu and gpu["gpu"] == 0
    assert [s["mig"]["uuid"][:4] for s in slices] == ["MIG-", "MIG-"]
    assert slices[0]["mig"]["processes"] is None and slices[0]["na"]["processes"] == "NoPermission"


def test_the_devices_probe_lists_each_slice_with_notes_where_nvml_gives_no_slice_figure():
    from gpudoctor.probes import ProbeContext, devices

    result = devices.run(ProbeContext(_backend(), level="quick"))
    by_name = {m.name: m for m in result.measurements}
    assert by_name["mig_devices"].value == 2
    assert by_name["mig1.0_uuid"].value == FIRST_UUID and by_name["mig1.0_uuid"].note == "3g.40gb"
    assert by_name["mig1.0_memory_used"].value == 12 << 30 and by_name["mig1.0_memory_used"].unit == "B"
    assert by_name["mig1.0_sm_count"].value == 60 and by_name["mig1.0_processes"].value == 2
    assert by_name["mig2.0_processes"].value == 0
    # GPM per GPU instance needs two samples: the probe reads again after NVML's 100 ms
    assert by_name["mig1.0_sm_active"].value == 41.5 and by_name["mig2.0_sm_active"].value == 0.0
    util = by_name["mig1.0_gpu_util"]
    assert util.value is None and util.note == f"{MIG_NO_UTILISATION} (NotSupported on a MIG device)"
    assert by_name["mig1.0_energy"].value is None and "whole-GPU figure only" in by_name["mig1.0_energy"].note
    assert [s["uuid"] for s in result.details["mig_devices"]["0"]] == [FIRST_UUID,
                                                                       "MIG-00000002-5c1e-5b0e-9a39-012345678900"]
    assert any(f.code == "mig_enabled" for f in result.findings)
    refused = devices.run(ProbeContext(_backend(processes=nvml_error("NoPermission")), level="quick"))
    procs = next(m for m in refused.measurements if m.name == "mig1.0_processes")
    assert procs.value is None and procs.note.startswith("NoPermission")


def test_a_replayed_report_reads_the_recorded_slices(capsys):
    assert main(["report", "--quick", "--json", "--replay", str(MIG)]) in (exitcodes.OK, exitcodes.WARN)
    report = json.loads(capsys.readouterr().out)
    probe = next(p for p in report["results"] if p["probe"] == "devices")
    names = {m["name"]: m for m in probe["measurements"]}
    assert names["mig_devices"]["value"] == 2 and names["mig1.0_uuid"]["value"] == FIRST_UUID


def test_cuda_visible_devices_mig_uuid_resolves_to_its_gpu():
    uuids = ["GPU-aaaa", "GPU-5c1e0000-1111-2222-3333-444455556666"]
    table = [(FIRST_UUID, 1, 1, 0), ("MIG-00000002-5c1e-5b0e-9a39-012345678900", 1, 2, 0)]
    assert parse_visible(FIRST_UUID, uuids, table) == [1]
    assert parse_visible("MIG-00000002", uuids, table) == [1]  # a unique prefix, as CUDA takes it
    assert parse_visible("MIG-0000000", uuids, table) == []  # not unique: CUDA stops there
    assert parse_visible(f"{FIRST_UUID},{FIRST_UUID}", uuids, table) == [1]  # a repeat ends the list
    assert parse_visible("MIG-GPU-5c1e0000-1111-2222-3333-444455556666/2/0", uuids, table) == [1]  # R450's form
    assert parse_visible(FIRST_UUID, uuids) == NA("MigInstancesSelected")  # NVML could not enumerate them
    # a CUDA process enumerates one MIG device at most: two named, or a MIG device then a GPU, give one
    assert parse_visible(f"{FIRST_UUID},MIG-00000002", uuids, table) == [1]
    assert parse_visible(f"{FIRST_UUID},0", uuids, table) == [1]
    # the older form when NVML could not read a slice's UUID: no crash, the slice is still found
    odd = [(NA("Unknown"), 1, 1, 0), ("MIG-00000002-5c1e-5b0e-9a39-012345678900", 1, 2, 0)]
    assert parse_visible("MIG-GPU-5c1e0000-1111-2222-3333-444455556666/1/0", uuids, odd) == [1]
    backend = _backend()
    assert visible_nvml_indices(backend, {"CUDA_VISIBLE_DEVICES": FIRST_UUID}) == [0]
    chosen = visible_mig_devices(backend, {"CUDA_VISIBLE_DEVICES": FIRST_UUID})
    assert [(m.parent, m.gpu_instance_id) for m in chosen] == [(0, 1)]
    both = visible_mig_devices(backend, {"CUDA_VISIBLE_DEVICES": f"{FIRST_UUID},MIG-00000002"})
    assert [(m.parent, m.gpu_instance_id) for m in both] == [(0, 1)]  # CUDA takes the first alone
    assert visible_mig_devices(backend, {"CUDA_VISIBLE_DEVICES": "0"}) == NA("NoMigSelected")
    plain = NvmlBackend(NvmlGate(FakePynvml()))
    assert visible_nvml_indices(plain, {"CUDA_VISIBLE_DEVICES": FIRST_UUID}) == NA("MigInstancesSelected")


def test_a_live_recording_keeps_the_slices_and_replays_them(tmp_path):
    from gpudoctor.backends.recording import load_recording
    from support.recorded import record_file

    backend = _backend()
    path = tmp_path / "mig.json"
    record_file(backend, path, seconds=0.3, interval=0.15)
    backend.close()
    load_recording(path)  # within the schema
    replay = ReplayBackend.from_file(path)
    replay.sample(0)
    first, second = replay.mig_devices(0)
    assert type(first) is MigDeviceReading  # the same record as live NVML gives
    assert first.uuid.startswith("MIG-") and first.processes[0].pid == 4242 and second.gpu_instance_id == 2
    assert is_na(first.gpu_util_pct) and first.gpu_util_pct.reason == "NotSupported"
    old = ReplayBackend.from_file(DATA / "handmade_h100_gpm_small_kernels.json")
    assert old.mig_devices(0) == NA("MigDisabled")


def test_a_mig_handle_answers_what_nvml_gives_per_slice_only():
    """The fake answers like NVML on a MIG handle: utilisation rates and power NotSupported, the
    parent's handle from the MIG handle, and no MIG devices of its own."""
    fake = FakePynvml(readings=h100_mig())
    fake.nvmlInit()
    parent = fake.nvmlDeviceGetHandleByIndex(0)
    mig = fake.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    assert fake.nvmlDeviceIsMigDeviceHandle(mig) and not fake.nvmlDeviceIsMigDeviceHandle(parent)
    assert fake.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig).index == 0
    for name in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption"):
        with pytest.raises(nvml_error("NotSupported")):
            getattr(fake, name)(mig)
    with pytest.raises(nvml_error("NotFound")):
        fake.nvmlDeviceGetMigDeviceHandleByIndex(parent, 1)
    assert isinstance(fake.nvmlDeviceGetMemoryInfo(mig), types.SimpleNamespace)


def test_the_exporter_serves_per_slice_memory_and_gpm_with_mig_labels(monkeypatch):
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from gpudoctor.exporter import GpudoctorCollector, GpuSampler, build_registry

    monkeypatch.setattr(nvml_backend, "GPM_MIN_INTERVAL_S", 0.0)
    sampler = GpuSampler(_backend(), interval=1.0)
    registry = build_registry(GpudoctorCollector(sampler, None, source="nvml"))
    sampler.sample_once()  # GPM warming
    sampler.sample_once()
    samples = {(s.name, s.labels.get("gpu_instance")): s for f in text_string_to_metric_families(
        generate_latest(registry).decode()) for s in f.samples if s.name.startswith("gpudoctor_mig_")}
    used = samples[("gpudoctor_mig_memory_used_bytes", "1")]
    assert used.value == 12 << 30
    assert used.labels == {"gpu": "0", "gpu_instance": "1", "compute_instance": "0", "uuid": FIRST_UUID}
    assert samples[("gpudoctor_mig_memory_total_bytes", "2")].value == 40448 << 20
    assert samples[("gpudoctor_mig_info", "1")].labels["profile"] == "3g.40gb"
    assert samples[("gpudoctor_mig_sm_active_ratio", "1")].value == pytest.approx(0.415)
    assert samples[("gpudoctor_mig_processes", "1")].value == 2 and samples[("gpudoctor_mig_sm_count", "2")].value == 60
    # no per-slice utilisation or energy series: none in MIG mode, and the whole GPU's only
    assert not any("util" in name or "energy" in name for name, _ in samples)


def test_the_exporter_serves_no_mig_series_without_a_gpu_in_mig_mode():
    from prometheus_client import generate_latest

    from gpudoctor.exporter import GpudoctorCollector, GpuSampler, build_registry

    sampler = GpuSampler(NvmlBackend(NvmlGate(FakePynvml())), interval=1.0)
    registry = build_registry(GpudoctorCollector(sampler, None, source="nvml"))
    sampler.sample_once()
    assert "gpudoctor_mig_" not in generate_latest(registry).decode()


def test_the_ctypes_fake_nvml_gives_mig_devices_through_the_real_binding():
    """watch --json against benchmarks/fake_nvml (pynvml's own ctypes calls: MIG handles, attributes
    struct, process info v3 structs): the slices, then the NoPermission variant."""
    from test_gpm_front_ends import _watch_json_on_the_ctypes_fake

    gpu, first, second = _watch_json_on_the_ctypes_fake({"FAKE_NVML_MIG": "1"}, count=1)
    assert gpu["na"]["gpu_util_pct"] == "NotSupported"  # no utilisation rates in MIG mode
    assert (first["mig"]["gpu_instance_id"], second["mig"]["gpu_instance_id"]) == (1, 2)
    assert first["mig"]["uuid"].startswith("MIG-") and first["mig"]["profile"] == "3g.40gb"
    assert first["mig"]["sm_count"] == 60 and first["mig"]["memory_used_bytes"] == 12 << 30
    assert first["mig"]["processes"] == [{"pid": 4242, "gpu_memory_bytes": 8 << 30},
                                         {"pid": 4243, "gpu_memory_bytes": 4 << 30}]
    assert second["mig"]["processes"] == [] and first["na"]["energy_mj"] == "NotSupported"
    refused = _watch_json_on_the_ctypes_fake({"FAKE_NVML_MIG": "1", "FAKE_NVML_MIG_NOPERM": "1"}, count=1)[1]
    assert refused["mig"]["processes"] is None and refused["na"]["processes"] == "NoPermission"


def test_the_devices_probe_names_the_slice_cuda_visible_devices_selects(monkeypatch):
    from gpudoctor.probes import ProbeContext, devices

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-00000002")
    result = devices.run(ProbeContext(_backend(), level="quick"))
    chosen = [m for m in result.measurements if m.name == "visible_mig_device"]
    assert [(m.value, m.note) for m in chosen] == [("MIG-00000002-5c1e-5b0e-9a39-012345678900",
                                                    "GPU 0, GPU instance 2, compute instance 0, 3g.40gb")]
    assert next(m for m in result.measurements if m.name == "visible_to_cuda").value == 1
    assert not any(f.code.startswith("cuda_visible_devices_") for f in result.findings)


def test_the_tui_gpu_panel_lists_the_slices_under_the_readings():
    from gpudoctor.sampling.sampler import Sampler
    from gpudoctor.tui.widgets import GpuPanel

    core = Sampler(ReplayBackend.from_file(MIG), None, with_processes=True, reads="full")
    core.read()
    snap = core.read()
    panel = GpuPanel(0)
    panel.show(snap.devices[0], core.history)
    lines = [getattr(line, "plain", str(line)) for line in panel.lines(100)]
    first = lines.index("MIG    mig1.0 3g.40gb 12.0/39.5 GiB smact 42% 2 procs")
    assert lines[first + 1] == "       mig2.0 3g.40gb 0.0/39.5 GiB smact 0% 0 procs"
    assert lines[first + 2] == "       util n/a in MIG mode; power and energy are the whole GPU's"
    assert all(len(line) <= 60 for line in panel.lines(60))  # narrow: cut, never wrapped
    plain = Sampler(ReplayBackend.from_file(DATA / "handmade_h100_gpm_small_kernels.json"), None).read()
    other = GpuPanel(0)
    other.show(plain.devices[0], core.history)
    assert not any("MIG" in getattr(line, "plain", str(line)) for line in other.lines(100))


def test_processes_are_attributed_to_their_slice_where_the_gpu_list_is_refused():
    from gpudoctor.sampling.presentation import process_rows, recorded_process_info
    from gpudoctor.sampling.sampler import Sampler

    snap = Sampler(ReplayBackend.from_file(MIG), None, with_processes=True).read()
    assert snap.devices[0].processes == NA("NoPermission")  # the whole GPU's list needs root in MIG mode
    rows, notes = process_rows(snap, recorded_process_info)
    assert [(r.pid, r.gpu_text, r.gpu_memory_bytes) for r in rows] == [(4242, "0 mig1.0", 8 << 30),
                                                                       (4243, "0 mig1.0", 4 << 30)]
    assert notes == [] and rows[0].matches("mig1.0") and not rows[0].matches("mig2.0")
    live = Sampler(NvmlBackend(NvmlGate(FakePynvml(readings=h100_mig(processes=nvml_error("NoPermission"))))),
                   None).read()
    assert process_rows(live, recorded_process_info) == ([], ["GPU 0: process list n/a (no permission)"])


@pytest.mark.timeout(120)
def test_the_tui_process_table_shows_the_slice_of_each_process():
    from support.tui_support import make_test_app, open_processes, run_async

    @run_async
    async def run() -> None:
        app = make_test_app(MIG)
        async with app.run_test(size=(110, 24)) as pilot:
            _, table = await open_processes(pilot, app)
            cells = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
            assert [(row[0], row[2]) for row in cells] == [("4242", "0 mig1.0"), ("4243", "0 mig1.0")]
            await pilot.press("q")

    run()


def test_a_run_on_a_mig_slice_gets_no_energy_figure_from_the_whole_gpus_counter():
    from types import SimpleNamespace

    from gpudoctor.workload.energy import RunEnergy

    run = RunEnergy(SimpleNamespace(type="cuda", index=0), backend=_backend()).start()
    use = run.stop()
    assert use.joules is None and use.reason.startswith("the GPU is in MIG mode: NVML counts energy for the whole GPU")


def test_a_slices_memory_in_use_comes_from_the_v2_call_where_the_driver_has_it():
    fake = FakePynvml(readings=h100_mig())
    fake.nvmlMemory_v2 = 0x2000028
    asked = []

    def memory(version=None):
        asked.append(version)
        used = (11 << 30) if version else (12 << 30)  # v1's used includes the driver's reserved memory
        return types.SimpleNamespace(used=used, free=(40448 << 20) - used, total=40448 << 20)

    fake.devices[0]["mig"][0]["nvmlDeviceGetMemoryInfo"] = memory
    assert NvmlBackend(NvmlGate(fake)).mig_devices(0)[0].memory_used_bytes == 11 << 30 and asked == [0x2000028]
    fake.devices[0]["mig"][0]["nvmlDeviceGetMemoryInfo"] = lambda version=None: (
        (_ for _ in ()).throw(nvml_error("ArgumentVersionMismatch")()) if version else memory())
    asked.clear()
    assert NvmlBackend(NvmlGate(fake)).mig_devices(0)[0].memory_used_bytes == 12 << 30  # v1 where v2 is refused


def test_resolving_cuda_visible_devices_reads_only_the_slices_names():
    """Which GPU a MIG-<uuid> names needs the slices' ids and UUIDs: no memory, process or GPM read
    (a training process's monitor resolves its device this way)."""
    gate_fake = FakePynvml(readings=h100_mig())
    backend = NvmlBackend(NvmlGate(gate_fake))
    named = backend.mig_devices(0, readings=False)
    full = backend.mig_devices(0)
    assert [(m.uuid, m.gpu_instance_id, m.compute_instance_id, m.profile) for m in named] == \
        [(m.uuid, m.gpu_instance_id, m.compute_instance_id, m.profile) for m in full]
    assert all(m.memory_used_bytes == NA("NotRead") and m.processes == NA("NotRead") for m in named)
    gate_fake.calls.clear()
    assert visible_nvml_indices(backend, {"CUDA_VISIBLE_DEVICES": FIRST_UUID}) == [0]
    read = set(gate_fake.calls)
    assert read and not read & {"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetAttributes",
                                "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v3",
                                "nvmlGpmMigSampleGet"}, read


@pytest.mark.timeout(120)
def test_one_pid_on_two_slices_is_two_rows_not_a_crash(tmp_path):
    """Before: the process table keyed rows by GPU and PID, and one PID listed on two MIG slices
    of the same GPU ended the TUI with Textual's DuplicateKey."""
    from support.tui_support import make_test_app, open_processes, run_async

    data = json.loads(MIG.read_text())
    for sample in data["nvml"]["samples"]:
        slices = sample["mig"][0]
        slices[1]["processes"] = [dict(p) for p in slices[0]["processes"]]
    both = tmp_path / "same_pid_two_slices.json"
    both.write_text(json.dumps(data))

    @run_async
    async def run() -> None:
        app = make_test_app(both)
        async with app.run_test(size=(110, 24)) as pilot:
            _, table = await open_processes(pilot, app)
            cells = sorted((str(table.get_row_at(i)[0]), str(table.get_row_at(i)[2])) for i in range(table.row_count))
            pids = sorted({pid for pid, _ in cells})
            assert pids and all(sorted(where for p, where in cells if p == pid) == ["0 mig1.0", "0 mig2.0"]
                                for pid in pids), cells
            await pilot.press("q")

    run()
