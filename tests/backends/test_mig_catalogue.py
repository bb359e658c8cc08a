"""MIG readings from the catalogue (gpudoctor.backends.catalogue.MIG_READINGS): a MIG reading defined
there, and nowhere else by hand, reaches every place MIG readings go.

The first test adds a MIG reading to the catalogue only (a widget temperature of each MIG device,
answered by a fake NVML function on the MIG handle) and finds it in the live MIG reading (read through
the gate: an NVML error is NA, an impossible value is NA), ``MigDeviceReading`` as
``python -m gpudoctor.tools.regenerate`` writes it (made in memory here, base.py untouched), the
recording schema, a recording and its replay, the exporter's per-MIG-device gauges and docs/fleet.md's
MIG table, ``watch`` (its MIG lines and JSON records), the TUI's MIG rows and the report's JSON. The
second changes the words, places and whole-GPU words of the existing MIG readings in the catalogue
alone and finds every front end following (none writes a MIG reading by hand). The third adds one
read by an existing reader (GPM per GPU instance). The others hold the catalogue's MIG entries to what
the backend can read.
"""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from gpudoctor.backends import NA, NvmlBackend, NvmlGate, ReplayBackend, catalogue
from gpudoctor.core import exitcodes
from gpudoctor.backends import nvml as nvml_backend
from support.nvml_fake import FakePynvml, h100_mig, nvml_error

pytestmark = pytest.mark.timeout(120)

WIDGET = catalogue.MigReading(
    "widget_temp_c", "°C", "number", "gpudoctor_mig_widget_temperature_celsius",
    help="Temperature of the MIG device's widget", nvml=catalogue.NvmlRead(("nvmlDeviceGetMigWidgetTemperature",)),
    plausible=catalogue.C_SENSOR, word="widget", line=4, short_word="widget", short=3, label="widget", panel=3,
    report=("widget_temp", 4))

# Modules that read the catalogue's MIG readings: imported before it is patched.
CONSUMERS = ("gpudoctor.backends.plausible", "gpudoctor.backends.replay", "gpudoctor.backends.recording",
             "gpudoctor.sampling.sampler", "gpudoctor.sampling.presentation", "gpudoctor.sampling.recorder",
             "gpudoctor.exporter", "gpudoctor.fleet.text", "gpudoctor.tui.widgets", "gpudoctor.commands.watch",
             "gpudoctor.cli", "gpudoctor.tools.regenerate")


def _regenerate_mig_device_reading(monkeypatch):
    """``MigDeviceReading`` as the regenerate command writes it for the patched catalogue: its class
    statement from the regenerated base.py, run in base.py's namespace, put in place of the class in
    every gpudoctor module that holds it (the file itself is not written)."""
    import ast

    from gpudoctor.backends import base
    from gpudoctor.tools import regenerate

    text = regenerate.base_text((regenerate.ROOT / "gpudoctor" / "backends" / "base.py").read_text(encoding="utf-8"))
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "MigDeviceReading")
    source = "".join(text.splitlines(keepends=True)[node.decorator_list[0].lineno - 1:node.end_lineno])
    namespace = dict(vars(base))
    exec(compile("from __future__ import annotations\n" + source, base.__file__, "exec"), namespace)
    old, new = base.MigDeviceReading, namespace["MigDeviceReading"]
    for name, module in list(sys.modules.items()):
        if name.startswith("gpudoctor") and getattr(module, "MigDeviceReading", None) is old:
            monkeypatch.setattr(module, "MigDeviceReading", new)
    return new


def _add(monkeypatch, *added):
    for name in CONSUMERS:
        importlib.import_module(name)
    monkeypatch.setattr(catalogue, "MIG_READINGS", catalogue.MIG_READINGS + added)
    return _regenerate_mig_device_reading(monkeypatch)


@pytest.fixture
def widget(monkeypatch):
    """The catalogue with the widget reading; a fake H100 in MIG mode whose first MIG device answers
    47 C for it and whose second answers NotSupported (as the whole GPU does)."""
    monkeypatch.setattr(nvml_backend, "GPM_MIN_INTERVAL_S", 0.0)
    readings = h100_mig()
    readings["nvmlDeviceGetMigWidgetTemperature"] = nvml_error("NotSupported")
    readings["mig"][0]["nvmlDeviceGetMigWidgetTemperature"] = 47
    readings["mig"][2]["nvmlDeviceGetMigWidgetTemperature"] = nvml_error("NotSupported")
    return _add(monkeypatch, WIDGET), FakePynvml(readings=readings)


def _recorded(nvml, tmp_path):
    from support.recorded import record_file

    backend = NvmlBackend(NvmlGate(nvml))
    path = tmp_path / "mig_widget.json"
    record_file(backend, path, seconds=0.0, interval=0.01)
    backend.close()
    return path


def test_a_mig_reading_added_to_the_catalogue_reaches_every_place_mig_readings_go(widget, tmp_path, capsys):
    regenerated, fake = widget
    # Live: read on each MIG handle through the gate; an NVML error is NA, an impossible value NA.
    live = NvmlBackend(NvmlGate(fake))
    first, second = live.mig_devices(0)
    assert type(first) is regenerated and first.widget_temp_c == 47 and first["widget_temp_c"] == 47
    assert second.widget_temp_c == NA("NotSupported")
    assert first.sm_count == 60 and first.memory_used_bytes == 12 << 30  # the others read as before
    fake.devices[0]["mig"][0]["nvmlDeviceGetMigWidgetTemperature"] = 4000
    assert live.mig_devices(0)[0].widget_temp_c == NA("implausible value 4000")
    fake.devices[0]["mig"][0]["nvmlDeviceGetMigWidgetTemperature"] = 47
    assert live.mig_devices(0, readings=False)[0].widget_temp_c == NA("NotRead")
    live.close()

    # The recording schema (after regenerating it in memory) has it, with its type.
    from gpudoctor.backends.recording import RecordingError, current_schema, load_recording, schema_text
    from gpudoctor.tools import regenerate

    sample = current_schema()["properties"]["nvml"]["properties"]["samples"]["items"]["properties"]
    entry = next(s for s in sample["mig"]["items"]["anyOf"] if s.get("type") == "array")["items"]["properties"]
    assert entry["widget_temp_c"] == {"$ref": "#/$defs/number_or_na"}
    assert '"widget_temp_c"' in schema_text()
    # the one command rewrites the files made from the catalogue that name MIG readings
    assert {"docs/recording.schema.json", "docs/fleet.md", "gpudoctor/backends/base.py"} <= set(regenerate.stale())
    assert "    widget_temp_c: FloatOrNA\n    # mig-reading:end" in regenerate.base_text(
        (regenerate.ROOT / "gpudoctor" / "backends" / "base.py").read_text(encoding="utf-8"))

    # A recording holds it and replays it; a wrong type is refused, an impossible value replays as NA.
    path = _recorded(fake, tmp_path)
    replay = ReplayBackend.from_file(path)
    replay.sample(0)
    first, second = replay.mig_devices(0)
    assert type(first) is regenerated and first.widget_temp_c == 47 and second.widget_temp_c == NA("NotSupported")
    data = json.loads(path.read_text())
    data["nvml"]["samples"][0]["mig"][0][0]["widget_temp_c"] = "hot"
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(RecordingError, match="widget_temp_c"):
        load_recording(tmp_path / "bad.json")
    data["nvml"]["samples"][0]["mig"][0][0]["widget_temp_c"] = 4000
    (tmp_path / "hot.json").write_text(json.dumps(data))
    hot = ReplayBackend.from_file(tmp_path / "hot.json")
    hot.sample(0)
    assert hot.mig_devices(0)[0].widget_temp_c == NA("implausible value 4000")

    # The exporter writes its per-MIG-device gauge (none for the slice without one), names it among
    # its metrics, and docs/fleet.md's MIG table (regenerated in memory) lists it.
    from prometheus_client import generate_latest

    from gpudoctor.exporter import GpudoctorCollector, GpuSampler, all_metric_names, build_registry

    sampler = GpuSampler(ReplayBackend.from_file(path), 1.0)
    sampler.sample_once()
    text = generate_latest(build_registry(GpudoctorCollector(sampler))).decode()
    assert "# HELP gpudoctor_mig_widget_temperature_celsius Temperature of the MIG device's widget" in text
    series = [line for line in text.splitlines() if line.startswith("gpudoctor_mig_widget_temperature_celsius{")]
    assert len(series) == 1 and 'gpu_instance="1"' in series[0] and series[0].endswith(" 47.0"), series
    assert "gpudoctor_mig_widget_temperature_celsius" in all_metric_names()
    assert "| `gpudoctor_mig_widget_temperature_celsius` | Temperature of the MIG device's widget | °C | none |" \
        in regenerate.fleet_md_text((regenerate.ROOT / "docs" / "fleet.md").read_text(encoding="utf-8"))

    # watch: its MIG lines (short and verbose: NA in words there) and its JSON records.
    from gpudoctor.cli import main

    assert main(["watch", "--replay", str(path), "-n", "1"]) == 0
    short = [line for line in capsys.readouterr().out.splitlines() if " mig" in line]
    assert "widget 47°C" in short[0] and "widget" not in short[1], short
    assert main(["watch", "--replay", str(path), "-v", "-n", "1"]) == 0
    verbose = [line for line in capsys.readouterr().out.splitlines() if " mig" in line]
    assert "| widget 47°C |" in verbose[0] and "| widget n/a (" in verbose[1], verbose
    assert main(["watch", "--replay", str(path), "--json", "-n", "1"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    slices = [r for r in records if "mig" in r and r["mig"] is not None]
    assert [r["mig"]["widget_temp_c"] for r in slices] == [47, None]
    assert slices[1]["na"]["widget_temp_c"] == "NotSupported"

    # The TUI's GPU panel: the MIG device's row.
    from gpudoctor.sampling.sampler import Sampler
    from gpudoctor.tui.widgets import GpuPanel

    core = Sampler(ReplayBackend.from_file(path, loop=True), None, with_processes=False, reads="full")
    snap = core.read()
    panel = GpuPanel(0)
    panel.show(snap.devices[0], core.history)
    rows = [getattr(line, "plain", str(line)) for line in panel.lines(100)]
    row = next(line for line in rows if "mig1.0" in line)
    assert "widget 47°C" in row, rows
    assert "widget" not in next(line for line in rows if "mig2.0" in line)

    # The report's JSON: the devices probe measures it per MIG device, at its place (before the processes).
    assert main(["report", "--quick", "--json", "--replay", str(path)]) in (exitcodes.OK, exitcodes.WARN)
    probe = next(p for p in json.loads(capsys.readouterr().out)["results"] if p["probe"] == "devices")
    names = [m["name"] for m in probe["measurements"]]
    measured = {m["name"]: m for m in probe["measurements"]}
    assert (measured["mig1.0_widget_temp"]["value"], measured["mig1.0_widget_temp"]["unit"]) == (47, "°C")
    assert measured["mig2.0_widget_temp"]["value"] is None and measured["mig2.0_widget_temp"]["note"] == "NotSupported"
    assert names.index("mig1.0_memory_total") < names.index("mig1.0_widget_temp") < names.index("mig1.0_processes")


def test_the_front_ends_show_the_existing_mig_readings_as_the_catalogue_says(monkeypatch, capsys):
    """The words, places, formatters and whole-GPU words of the MIG readings already in the catalogue,
    changed there alone, change watch's MIG lines (short and verbose), its JSON notes, the TUI's MIG
    rows and their note, and the report: no front end writes memory, SM activity, SMs, utilisation or energy by hand."""
    from gpudoctor.core._record import replace

    from support.tui_support import DATA

    for name in CONSUMERS:
        importlib.import_module(name)
    changed = {"sm_count": dict(word="", line=0, report=("", 0)),
               "memory_used_bytes": dict(word="used", short_word="used", label="used", report=("in_use", 2)),
               "sm_active_pct": dict(word="gi_sm", line=13, short_word="gism", short=12, label="gism", panel=14,
                                     fmt="", report=("gi_sm", 1)),
               "gpu_util_pct": dict(whole_gpu="no rates here", whole_gpu_panel="no rates in MIG", report=("util", 12)),
               "energy_mj": dict(whole_gpu_short="", short=0, word="joules")}
    monkeypatch.setattr(catalogue, "MIG_READINGS",
                        tuple(replace(r, **changed.get(r.key, {})) for r in catalogue.MIG_READINGS))
    mig = DATA / "handmade_h100_mig_two_slices.json"
    from gpudoctor.cli import main

    assert main(["watch", "--replay", str(mig), "-n", "2", "-i", "0.25"]) == 0
    short = [line for line in capsys.readouterr().out.splitlines() if " mig1.0 " in line][-1]
    assert short.endswith(" mig1.0 3g.40gb used 12.0/39.5 GiB procs 2 gism 42%"), short
    assert main(["watch", "--replay", str(mig), "-n", "2", "-i", "0.25", "-v"]) == 0
    verbose = [line for line in capsys.readouterr().out.splitlines() if " mig1.0 " in line][-1]
    assert "| used 12.0/39.5 GiB | procs 2 (" in verbose and "sms" not in verbose, verbose
    assert verbose.endswith("| util n/a: no rates here | joules n/a: whole-GPU figure only | gi_sm 42%"), verbose
    assert main(["watch", "--replay", str(mig), "-n", "1", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert next(r for r in records if r.get("mig"))["notes"]["gpu_util_pct"] == "no rates here"

    from gpudoctor.sampling.sampler import Sampler
    from gpudoctor.tui.widgets import GpuPanel

    core = Sampler(ReplayBackend.from_file(mig), None, with_processes=False, reads="full")
    core.read()
    panel = GpuPanel(0)
    panel.show(core.read().devices[0], core.history)
    rows = [getattr(line, "plain", str(line)) for line in panel.lines(100)]
    row = next(line for line in rows if "mig1.0" in line)
    assert row.endswith("mig1.0 3g.40gb used 12.0/39.5 GiB 2 procs gism 42%"), row
    assert rows[rows.index(row) + 2].strip() == "no rates in MIG; power and energy are the whole GPU's", rows

    assert main(["report", "--quick", "--json", "--replay", str(mig)]) in (exitcodes.OK, exitcodes.WARN)
    probe = next(p for p in json.loads(capsys.readouterr().out)["results"] if p["probe"] == "devices")
    names = [m["name"] for m in probe["measurements"] if m["name"].startswith("mig1.0_")]
    assert names == ["mig1.0_uuid", "mig1.0_gi_sm", "mig1.0_in_use", "mig1.0_memory_total", "mig1.0_processes",
                     "mig1.0_util", "mig1.0_energy"], names
    util = next(m for m in probe["measurements"] if m["name"] == "mig1.0_util")
    assert util["note"] == "no rates here (NotSupported on a MIG device)"


def test_a_mig_reading_read_by_an_existing_reader_needs_only_its_catalogue_entry(monkeypatch):
    """Tensor activity per GPU instance: the "gpm" reader's answer, by the GPM reading's key; GPM
    read once per GPU instance however many MIG readings take it."""
    monkeypatch.setattr(nvml_backend, "GPM_MIN_INTERVAL_S", 0.0)
    tensor = catalogue.MigReading(
        "tensor_active_pct", "%", "number", "gpudoctor_mig_tensor_active_ratio", 0.01,
        help="Tensor activity of the MIG device's GPU instance, 0-1", reader="gpm",
        nvml=catalogue.NvmlRead((), attribute="tensor_active_pct"), plausible=catalogue.PCT)
    _add(monkeypatch, tensor)
    from support.nvml_fake import gpm_table

    readings = h100_mig()
    readings["gpm_mig"] = {1: gpm_table(sm=41.5, tensor=30.0), 2: gpm_table(sm=0.0, fp32=0.0, dram=0.0)}
    fake = FakePynvml(readings=readings)
    taken = []
    sample_get = fake.nvmlGpmMigSampleGet
    fake.nvmlGpmMigSampleGet = lambda handle, gpu_instance, sample: (taken.append(gpu_instance),
                                                                       sample_get(handle, gpu_instance, sample))[1]
    live = NvmlBackend(NvmlGate(fake))
    assert [m.tensor_active_pct for m in live.mig_devices(0)] == [NA("Warming")] * 2
    first, second = live.mig_devices(0)
    assert (first.tensor_active_pct, first.sm_active_pct) == (30.0, 41.5) and second.tensor_active_pct == 0.0
    assert taken == [1, 2, 1, 2]  # one GPM sample per GPU instance and read, for both readings
    live.close()


def test_every_mig_reading_can_be_read_by_the_backend():
    """Each catalogue MIG reading has one way to be read live: an NVML call of its own, or a reader
    the backend has (with no call of its own: the reader makes them), converted by its NvmlRead; a
    "gpm" reading names one of the catalogue's GPM readings."""
    gpm = {r.key for r in catalogue.gpm_readings()}
    words = set()
    for r in catalogue.mig_readings():
        assert r.value in ("number", "integer"), r.key
        assert r.nvml is not None, r.key
        if r.reader:
            assert r.reader in nvml_backend.MIG_READERS and not r.nvml.functions, r.key
        else:
            assert r.nvml.functions and all(f.startswith("nvmlDevice") for f in r.nvml.functions), r.key
        if r.reader == "gpm":
            assert r.nvml.attribute in gpm, r.key
        if r.prometheus:
            assert r.prometheus.startswith("gpudoctor_mig_") and r.help, r.key
        if r.word:
            assert r.word not in words, f"two MIG readings share the word {r.word}"
            words.add(r.word)
    assert len({r.key for r in catalogue.mig_readings()}) == len(catalogue.mig_readings())


def test_an_nvml_error_on_a_mig_handle_is_na_for_the_readings_of_that_call_only():
    readings = h100_mig()
    readings["mig"][0]["nvmlDeviceGetMemoryInfo"] = nvml_error("GpuIsLost")
    readings["mig"][2]["nvmlDeviceGetAttributes"] = nvml_error("Unknown")
    fake = FakePynvml(readings=readings)
    first, second = NvmlBackend(NvmlGate(fake)).mig_devices(0)
    assert (first.memory_used_bytes, first.memory_total_bytes) == (NA("GpuIsLost"), NA("GpuIsLost"))
    assert first.sm_count == 60 and first.memory_size_bytes == 40448 << 20
    assert (second.sm_count, second.memory_size_bytes) == (NA("Unknown"), NA("Unknown"))
    assert second.memory_total_bytes == 40448 << 20
    # a call that gives two readings is made once per MIG device
    assert fake.calls["nvmlDeviceGetAttributes"] == 2


def test_every_mig_readings_places_and_formatter_are_ones_the_front_ends_know():
    """No MIG reading takes the processes' place, none shares a place or a report name with another,
    its formatter is one presentation.mig_reading_text knows, and the short line's and the panel's
    whole-GPU words come with the whole-GPU words."""
    readings = catalogue.mig_readings()
    for place in ("line", "short", "panel", "report"):
        placed = catalogue.mig_placed(place)
        at = [r.report[1] if place == "report" else getattr(r, place) for r in placed]
        assert catalogue.MIG_PROCESSES_PLACE not in at and len(set(at)) == len(at), place
    names = [r.report[0] for r in catalogue.mig_placed("report")]
    assert all(names) and len(set(names)) == len(names) and "processes" not in names and "uuid" not in names
    for r in readings:
        assert r.fmt in ("", "memory", "activity"), r.key
        assert not (r.whole_gpu_short or r.whole_gpu_panel) or r.whole_gpu, r.key
        assert bool(r.report[0]) == bool(r.report[1]), r.key
