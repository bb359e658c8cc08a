"""NVML gate, replay backend and CUDA_VISIBLE_DEVICES rules."""

from __future__ import annotations

import json
import types

import pytest

from gpudoctor.backends import NA, NvmlBackend, NvmlGate, RecordingError, ReplayBackend, catalogue, is_na, load_recording
from gpudoctor.backends.na import decode, encode
from gpudoctor.backends.nvml import normalise_bus_id, throttle_reason_names, throttle_reason_words
from gpudoctor.backends.visibility import parse_visible
from support.nvml_fake import FakePynvml, nvml_error
from support.nvml_stand_ins import fake_pynvml, v2_answer, v2_memory_nvml


def test_gate_turns_nvml_errors_into_na_values():
    gate = NvmlGate(fake_pynvml())
    assert gate.query("nvmlSystemGetDriverVersion") == "580.95.05"  # bytes decoded
    handle = gate.query("nvmlDeviceGetHandleByIndex", 0)
    assert gate.query("nvmlDeviceGetFanSpeed", handle) == NA("NotSupported")
    assert gate.query("nvmlDeviceGetSerial", handle) == NA("NoPermission")
    assert gate.query("nvmlDeviceGetNoSuchThing", handle) == NA("FunctionNotFound")


def test_missing_library_is_one_na_for_everything():
    backend = NvmlBackend(NvmlGate(fake_pynvml(init_error="LibraryNotFound")))
    assert backend.status() == NA("LibraryNotFound")
    assert backend.device_count() == NA("LibraryNotFound")
    assert backend.static(0)["name"] == NA("LibraryNotFound")
    assert all(is_na(v) for k, v in backend.sample(0).items() if k != "t")


def test_live_backend_fields_and_lost_gpu():
    backend = NvmlBackend(NvmlGate(fake_pynvml()))
    assert backend.cuda_driver_version() == "13.0"
    static = backend.static(0)
    assert static["name"] == "Fake GPU" and static["pci_bus_id"] == "0000:65:00.0"
    assert static["serial"] == NA("NoPermission")
    sample = backend.sample(0)
    assert sample["gpu_util_pct"] == 55 and sample["temperature_c"] == 41
    assert sample["fan_pct"] == NA("NotSupported")
    assert backend.processes(0) == [{"pid": 7, "type": "compute", "gpu_memory_bytes": 2**20, "sm_util_pct": None}]
    lost = NvmlBackend(NvmlGate(fake_pynvml(lost=True)))
    assert lost.sample(0)["temperature_c"] == NA("GpuIsLost")
    assert lost.processes(0) == NA("GpuIsLost")


def test_real_nvml_on_this_machine_never_raises():
    backend = NvmlBackend()
    status = backend.status()
    count = backend.device_count()
    if status is not None:  # CI: no driver
        assert is_na(count) and count.reason == status.reason
    assert isinstance(backend.sample(0), dict)
    backend.close()


def test_na_semantics_and_json_round_trip():
    value = NA("NotSupported")
    assert not value and str(value) == "N/A (NotSupported)" and value != NA("GpuIsLost")
    data = {"a": [1, NA("GpuIsLost")], "b": {"c": NA("NotSupported")}}
    assert decode(json.loads(json.dumps(encode(data)))) == data


def test_bus_ids_and_throttle_words():
    assert normalise_bus_id("00000000:65:00.0") == normalise_bus_id("0000:65:00.0") == "0000:65:00.0"
    assert normalise_bus_id("0000:1A:00.0") == "0000:1a:00.0"
    assert throttle_reason_names(0x1 | 0x40) == ["gpu_idle", "hw_thermal_slowdown"]
    assert "power" in throttle_reason_words(0x4)[0]


UUIDS = ["GPU-aaaa1111-0000-0000-0000-000000000000", "GPU-bbbb2222-0000-0000-0000-000000000000",
         "GPU-cccc3333-0000-0000-0000-000000000000"]


@pytest.mark.parametrize("value, expected", [
    (None, [0, 1, 2]),
    ("", []),
    ("2,0", [2, 0]),
    ("1,7,0", [1]),            # CUDA stops at the first invalid entry
    ("0,0,1", [0]),            # a repeated entry is invalid too
    ("-1", []),
    ("GPU-bbbb", [1]),         # UUID prefix
    ("GPU-cccc3333-0000-0000-0000-000000000000,0", [2, 0]),
    ("GPU-", []),              # ambiguous prefix
])
def test_cuda_visible_devices_rules(value, expected):
    assert parse_visible(value, UUIDS) == expected


def test_mig_uuids_defer_to_cuda():
    assert is_na(parse_visible("MIG-1234", UUIDS))


def test_replay_loads_and_serves_samples(data_dir):
    backend = ReplayBackend.from_file(data_dir / "handmade_hardware_faults.json")
    assert backend.device_count() == 1 and backend.driver_version() == "580.95.05"
    assert backend.sample(0)["throttle_reasons"] == 0xC
    assert backend.sample(0)["throttle_reasons"] == 0xC  # holds the last sample
    assert backend.sample(3)["gpu_util_pct"] == NA("InvalidArgument")
    assert backend.processes(0)[0]["pid"] == 4242
    assert backend.meta["hand_made"] is True


def test_replay_gpu_lost_and_nvml_missing(data_dir):
    lost = ReplayBackend.from_file(data_dir / "handmade_gpu_lost.json")
    assert lost.static(0)["name"].startswith("NVIDIA H100")
    assert lost.sample(0)["temperature_c"] == NA("GpuIsLost")
    missing = ReplayBackend.from_file(data_dir / "handmade_torchvision_mismatch.json")
    assert missing.status() == NA("LibraryNotFound")
    assert missing.device_count() == NA("LibraryNotFound")


@pytest.mark.parametrize("content, message", [
    ("{not json", "not JSON"),
    ('{"format": "something-else"}', "not a gpudoctor recording"),
    ('{"format": "gpudoctor-recording", "format_version": 99}', "format version 99"),
    ('{"format": "gpudoctor-recording", "format_version": 1, "nvml": 5}', r"no valid .nvml. section"),
])
def test_bad_recordings_give_one_line_errors(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(RecordingError, match=message) as info:
        load_recording(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)
    with pytest.raises(RecordingError, match="no such file"):
        load_recording(tmp_path / "missing.json")


def test_every_committed_recording_says_what_it_is(data_dir):
    for path in sorted(data_dir.glob("*.json")):
        raw = json.loads(path.read_text())
        if raw.get("format") != "gpudoctor-recording":
            continue
        meta = raw["meta"]
        assert meta.get("driver_version") and meta.get("created") and "device_names" in meta, path.name
        if meta.get("hand_made"):
            assert "handmade" in path.name and meta.get("scenario"), path.name
        else:
            assert "handmade" not in path.name, path.name


def test_torch_to_nvml_matching_by_bus_id_then_uuid():
    from gpudoctor.backends.visibility import match_torch_to_nvml

    nvml = [{"index": 0, "pci_bus_id": "00000000:18:00.0", "uuid": "GPU-a"},
            {"index": 1, "pci_bus_id": "00000000:3b:00.0", "uuid": "GPU-b"}]
    torch_devices = [{"index": 0, "pci_bus_id": "0000:3b:00.0"},       # CUDA's fastest-first order
                     {"index": 1, "pci_bus_id": None, "uuid": "GPU-a"},  # no bus id: fall back to UUID
                     {"index": 2, "pci_bus_id": "0000:99:00.0"}]         # not an NVML device
    assert match_torch_to_nvml(torch_devices, nvml) == {0: 1, 1: 0, 2: None}


def test_cheap_reads_skip_the_slow_counters():
    calls = []
    mod = fake_pynvml()
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=1, free=2, total=3)

    def pcie(h, counter):
        calls.append("pcie")  # NVML measures this over a 20 ms window
        return 5
    mod.nvmlDeviceGetPcieThroughput = pcie
    backend = NvmlBackend(NvmlGate(mod))
    # This stand-in has no v2 memory call: used comes from v1, reserved is NA with the reason.
    assert backend.memory(0) == {"memory_used_bytes": 1, "memory_free_bytes": 2, "memory_total_bytes": 3,
                                 "memory_reserved_bytes": NA("MemoryV2NotSupported")}
    fast = backend.fast_sample(0)
    assert fast["gpu_util_pct"] == 55 and fast["memory_used_bytes"] == 1 and "pcie_tx_kbps" not in fast
    assert calls == []
    full = backend.sample(0)
    assert set(fast) <= set(full) and full["pcie_tx_kbps"] == 5 and calls == ["pcie", "pcie"]


def test_replay_cheap_reads_are_cuts_of_samples(data_dir):
    backend = ReplayBackend.from_file(data_dir / "handmade_hardware_faults.json")
    assert backend.fast_sample(0)["temperature_c"] == 90
    assert backend.memory(0)["memory_total_bytes"] == 85520809984
    lost = ReplayBackend.from_file(data_dir / "handmade_gpu_lost.json")
    assert lost.memory(0)["memory_used_bytes"] == NA("GpuIsLost")


# --------------------------------------------------------------------------- the seam
def _backend_pair(data_dir):
    return NvmlBackend(NvmlGate(fake_pynvml())), ReplayBackend.from_file(data_dir / "handmade_hardware_faults.json")


def test_both_backends_satisfy_the_one_protocol(data_dir):
    import inspect

    from gpudoctor.backends.base import GpuBackend

    live, replay = _backend_pair(data_dir)
    assert isinstance(live, GpuBackend) and isinstance(replay, GpuBackend)
    for name in (n for n in dir(GpuBackend) if not n.startswith("_") and callable(getattr(GpuBackend, n))):
        wanted = list(inspect.signature(getattr(GpuBackend, name)).parameters)
        for backend in (live, replay):
            method = getattr(type(backend), name)  # a method on the class, not found by getattr probing
            assert list(inspect.signature(method).parameters) == wanted, (type(backend).__name__, name)


def test_both_backends_give_the_same_record_types(data_dir):
    from gpudoctor.backends.base import MemoryReading, ProcessReading, UtilizationReading

    live, replay = _backend_pair(data_dir)
    for backend in (live, replay):
        assert isinstance(backend.memory(0), MemoryReading)
        assert isinstance(backend.utilization(0), UtilizationReading)
        assert isinstance(backend.sample(0), dict) and isinstance(backend.fast_sample(0), dict)
        assert isinstance(backend.static(0), dict)
        procs = backend.processes(0)
        assert isinstance(procs, list) and all(isinstance(p, ProcessReading) for p in procs)
        assert set(backend.fast_sample(0)) == set(catalogue.fast_keys())
        assert backend.compute_mode(0) is not None
        backend.reset()  # both can start again; the replay has nothing to redo
    assert live.utilization(0).gpu_util_pct == 55
    assert replay.processes(0)[0]["pid"] == replay.processes(0)[0].pid


def test_memory_used_comes_from_the_v2_structure_with_reserved_apart():
    mod, seen = v2_memory_nvml(v2_answer)
    backend = NvmlBackend(NvmlGate(mod))
    reading = backend.memory(0)
    assert reading.memory_used_bytes == 3 << 30 and reading.memory_reserved_bytes == 1 << 29
    assert seen == [0x2000028]
    assert backend.fast_sample(0)["memory_reserved_bytes"] == 1 << 29


def test_memory_falls_back_to_v1_once_when_v2_is_unsupported(caplog):
    def unsupported():
        raise nvml_error("NotSupported")()

    mod, seen = v2_memory_nvml(unsupported, v1_used=7)
    backend = NvmlBackend(NvmlGate(mod))
    with caplog.at_level("INFO", logger="gpudoctor.backends.nvml"):
        first, second = backend.memory(0), backend.memory(0)
    assert first.memory_used_bytes == 7 and first.memory_reserved_bytes == NA("MemoryV2NotSupported")
    assert second == first and seen == [0x2000028, None, None]  # v2 is tried once, not every read
    assert "reserved" in caplog.text


def test_a_lost_gpu_is_lost_in_every_memory_field():
    mod = fake_pynvml(lost=True)
    mod.nvmlMemory_v2 = 0x2000028
    mod.nvmlDeviceGetMemoryInfo = lambda h, version=None: (_ for _ in ()).throw(nvml_error("GpuIsLost")())
    reading = NvmlBackend(NvmlGate(mod)).memory(0)
    assert set(reading.values()) == {NA("GpuIsLost")}


def test_replay_of_a_recording_without_reserved_memory(data_dir):
    replay = ReplayBackend.from_file(data_dir / "handmade_hardware_faults.json")
    assert replay.memory(0).memory_reserved_bytes == NA("NotRecorded")
    assert replay.fast_sample(0)["memory_reserved_bytes"] == NA("NotRecorded")


def test_sample_fields_are_one_list_for_nvml_replay_and_the_recording_schema():
    from typing import get_type_hints

    from gpudoctor.backends.base import GpuSample
    from gpudoctor.backends.recording import _SAMPLE_FIELDS

    fields = set(get_type_hints(GpuSample))
    assert fields == set(_SAMPLE_FIELDS)  # what a recording may hold is what a backend gives
    mod = fake_pynvml()
    assert set(NvmlBackend(NvmlGate(mod)).sample(0)) == fields
    assert set(catalogue.fast_keys()) == set(NvmlBackend(NvmlGate(fake_pynvml())).fast_sample(0)) < fields


def test_host_sample_reads_ram_from_meminfo_and_cpu_as_the_mean_of_cores(tmp_path, monkeypatch):
    """RAM used is MemTotal - MemAvailable (psutil's total and available on Linux); a kernel
    without MemAvailable, or no /proc, falls back to psutil; the CPU total is the cores' mean."""
    import psutil

    from gpudoctor.backends import host

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384 kB\nMemFree:        1024 kB\nMemAvailable:   4096 kB\n"
                       "Buffers:          12 kB\n")
    assert host._meminfo_total_available(str(meminfo)) == (16384 * 1024, 4096 * 1024)
    meminfo.write_text("MemTotal:       16384 kB\nMemFree:        1024 kB\n")
    assert host._meminfo_total_available(str(meminfo)) is None
    assert host._meminfo_total_available(str(tmp_path / "absent")) is None

    monkeypatch.setattr(psutil, "cpu_percent", lambda interval=None, percpu=False: [10.0, 30.0, 50.0, 20.0]
                        if percpu else 99.0)
    monkeypatch.setattr(host, "_meminfo_total_available", lambda: (8 << 30, 6 << 30))
    sample = host.host_sample()
    assert sample["cpu_pct"] == 27.5 and sample["cpu_per_core_pct"] == [10.0, 30.0, 50.0, 20.0]
    assert (sample["ram_used_bytes"], sample["ram_total_bytes"]) == (2 << 30, 8 << 30)

    monkeypatch.setattr(host, "_meminfo_total_available", lambda: None)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: types.SimpleNamespace(total=100, available=40))
    assert (host.host_sample()["ram_used_bytes"], host.host_sample()["ram_total_bytes"]) == (60, 100)


def test_host_ram_agrees_with_psutil_on_this_machine():
    import psutil

    from gpudoctor.backends import host

    read = host._meminfo_total_available()
    if read is None:
        pytest.skip("no /proc/meminfo with MemAvailable here")
    vm = psutil.virtual_memory()
    assert read[0] == vm.total
    assert abs(read[1] - vm.available) < 64 << 20  # read a moment apart


def test_temperature_is_read_with_the_versioned_call_and_the_old_one_where_it_is_missing():
    """nvmlDeviceGetTemperature is deprecated: nvmlDeviceGetTemperatureV is asked first; a driver or
    binding without it (FunctionNotFound, NotSupported) still gives the temperature the old way."""
    from support.nvml_fake import nvml_error

    fake = FakePynvml(readings={"nvmlDeviceGetTemperatureV": lambda sensor: 57,
                                "nvmlDeviceGetTemperature": lambda sensor: 41})
    assert NvmlBackend(NvmlGate(fake)).fast_sample(0)["temperature_c"] == 57
    old = FakePynvml(readings={"nvmlDeviceGetTemperatureV": nvml_error("FunctionNotFound"),
                               "nvmlDeviceGetTemperature": lambda sensor: 41})
    assert NvmlBackend(NvmlGate(old)).fast_sample(0)["temperature_c"] == 41
    assert NvmlBackend(NvmlGate(FakePynvml())).fast_sample(0)["temperature_c"] == 41  # binding without V


def test_the_resolver_reads_each_devices_identity_once_not_its_static_facts():
    """nvml_index_for runs on the training thread at the first monitored step: two NVML calls per
    device, kept until NVML restarts, instead of static()'s twenty-odd every time (review item 8)."""
    from types import SimpleNamespace

    from gpudoctor.backends.visibility import nvml_index_for

    fake = FakePynvml(count=4)
    for index, device in enumerate(fake.devices):
        device["nvmlDeviceGetPciInfo"] = SimpleNamespace(busId=f"00000000:{index + 1:02X}:00.0".encode())
        device["nvmlDeviceGetUUID"] = f"GPU-{index}"
    backend = NvmlBackend(NvmlGate(fake))
    assert nvml_index_for(backend, 0, pci_bus_id="0000:03:00.0") == 2
    assert nvml_index_for(backend, 0, pci_bus_id="0000:04:00.0") == 3
    assert fake.calls["nvmlDeviceGetPciInfo"] == 4 and fake.calls["nvmlDeviceGetUUID"] == 4  # once each
    assert fake.calls["nvmlDeviceGetVbiosVersion"] == 0 and fake.calls["nvmlDeviceGetMaxClockInfo"] == 0
    backend.reset()  # a driver reload: read again
    assert nvml_index_for(backend, 0, pci_bus_id="0000:01:00.0") == 0
    assert fake.calls["nvmlDeviceGetPciInfo"] == 8
