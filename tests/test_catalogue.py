"""One catalogue of per-GPU readings (gpudoctor.backends.catalogue): a reading defined there, and
nowhere else, reaches every consumer.

The first test adds a reading in this file only (a widget temperature, answered by a fake NVML
function) and finds it in a live sample, the recording schema, a recording and its replay,
``watch`` (its JSON records and its verbose line), the exporter's exposition and the TUI panel.
The others check that what still has a hand-written list (the ``GpuSample`` type for type
checkers, fleet's row fields) says the same as the catalogue.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import get_type_hints

import pytest

from gpudoctor.backends import NA, NvmlBackend, NvmlGate, ReplayBackend, catalogue
from nvml_fake import FakePynvml

WIDGET = catalogue.Reading(
    "widget_temp_c", "°C", "number", "fast", plausible=catalogue.C_SENSOR,
    nvml=catalogue.NvmlRead(("nvmlDeviceGetWidgetTemperature",)),
    history=True, label="widget", panel=10, spark_top=("", 100.0), word="widget", line=11, watch=15,
    prometheus="gpudoctor_gpu_widget_temperature_celsius", help="Temperature of the widget")


# Modules that keep a copy of a list as the catalogue stood at import (for callers that read the
# old names): imported before the catalogue is patched, so that no copy holds the test's reading.
CONSUMERS = ("gpudoctor.backends.plausible", "gpudoctor.backends.replay", "gpudoctor.backends.recording", "gpudoctor.sampling",
             "gpudoctor.presentation", "gpudoctor.exporter", "gpudoctor.fleet",
             "gpudoctor.hooks.sampler", "gpudoctor.tui.widgets", "gpudoctor.commands.watch", "gpudoctor.cli")


@pytest.fixture
def widget(monkeypatch):
    """The catalogue with the widget reading, and a fake NVML whose GPU answers 47 C for it."""
    import importlib

    for name in CONSUMERS:
        importlib.import_module(name)
    monkeypatch.setattr(catalogue, "READINGS", catalogue.READINGS + (WIDGET,))
    return FakePynvml(readings={"nvmlDeviceGetWidgetTemperature": 47})


def _recorded(nvml, tmp_path):
    from gpudoctor.recorder import record

    data, _ = record(NvmlBackend(NvmlGate(nvml)), seconds=0.0, interval=0.01, with_torch=False)
    path = tmp_path / "widget.json"
    path.write_text(json.dumps(data))
    return path


def test_a_reading_added_to_the_catalogue_reaches_every_consumer(widget, tmp_path, capsys):
    # A live sample reads it through the gate, fast and full, and screens it with its range.
    live = NvmlBackend(NvmlGate(widget))
    assert live.fast_sample(0)["widget_temp_c"] == 47
    assert live.sample(0)["widget_temp_c"] == 47
    widget.devices[0]["nvmlDeviceGetWidgetTemperature"] = 4000
    assert live.fast_sample(0)["widget_temp_c"] == NA("implausible value 4000")
    widget.devices[0]["nvmlDeviceGetWidgetTemperature"] = 47

    # The recording schema has it, with its type.
    from gpudoctor.backends.recording import RecordingError, current_schema, load_recording, schema_text

    sample = current_schema()["properties"]["nvml"]["properties"]["samples"]["items"]["properties"]
    assert sample["devices"]["items"]["properties"]["widget_temp_c"] == {"$ref": "#/$defs/number_or_na"}
    assert '"widget_temp_c"' in schema_text()

    # A recording holds it, replays it (fast reads included), and a wrong type is refused.
    path = _recorded(widget, tmp_path)
    replay = ReplayBackend.from_file(path)
    assert replay.sample(0)["widget_temp_c"] == 47
    assert ReplayBackend.from_file(path).fast_sample(0)["widget_temp_c"] == 47
    bad = json.loads(path.read_text())
    bad["nvml"]["samples"][0]["devices"][0]["widget_temp_c"] = "hot"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(RecordingError, match="widget_temp_c"):
        load_recording(tmp_path / "bad.json")

    # watch: a field of every JSON record, and a part of the verbose line.
    from gpudoctor.cli import main

    assert main(["watch", "--replay", str(path), "--json", "-n", "1"]) == 0
    record = json.loads(capsys.readouterr().out.splitlines()[0])
    assert record["widget_temp_c"] == 47
    assert main(["watch", "--replay", str(path), "-v", "-n", "1"]) == 0
    assert "| widget 47°C" in capsys.readouterr().out

    # The exporter writes its gauge, and names it among its metrics.
    from prometheus_client import generate_latest

    from gpudoctor.exporter import GpudoctorCollector, GpuSampler, all_metric_names, build_registry

    sampler = GpuSampler(ReplayBackend.from_file(path), 1.0)
    sampler.sample_once()
    text = generate_latest(build_registry(GpudoctorCollector(sampler))).decode()
    assert "# HELP gpudoctor_gpu_widget_temperature_celsius Temperature of the widget" in text
    assert any(line.startswith("gpudoctor_gpu_widget_temperature_celsius{") and line.endswith(" 47.0")
               for line in text.splitlines())
    assert "gpudoctor_gpu_widget_temperature_celsius" in all_metric_names()

    # The sampler keeps its history, and the TUI panel draws it as a cell of its own, in two
    # columns and in one.
    from gpudoctor.sampling import Sampler
    from gpudoctor.tui.widgets import GpuPanel

    core = Sampler(ReplayBackend.from_file(path, loop=True), None, with_processes=False, reads="full")
    for _ in range(3):
        snap = core.read()
    assert core.history.series(0, "widget_temp_c") == [47.0, 47.0, 47.0]
    panel = GpuPanel(0)
    panel.show(snap.devices[0], core.history)
    for width in (100, 40):
        lines = [getattr(line, "plain", str(line)) for line in panel.lines(width)]
        cell = next(line for line in lines if "widget" in line)
        assert "47°C" in cell, lines


def test_the_panel_lays_out_an_odd_or_even_number_of_cells(monkeypatch):
    """Two to a row, whatever their number: the ECC count beside the last odd cell, else on a row
    of its own; no cell is lost."""
    import importlib

    for name in CONSUMERS:
        importlib.import_module(name)
    from gpudoctor.sampling import Sampler
    from gpudoctor.tui.widgets import GpuPanel
    from nvml_fake import FakePynvml as Fake

    placed = [r for r in catalogue.READINGS if r.panel]
    for keep in (len(placed), len(placed) - 1, 3):
        shown = {r.key for r in placed[:keep]}
        monkeypatch.setattr(catalogue, "READINGS", tuple(
            r if r.key in shown or not r.panel else replace(r, panel=0) for r in catalogue.READINGS))
        snap = Sampler(NvmlBackend(NvmlGate(Fake())), None, with_processes=False, reads="full").read()
        panel = GpuPanel(0)
        from gpudoctor.sampling import History

        history = History()
        history.add(snap)
        panel.show(snap.devices[0], history)
        lines = [getattr(line, "plain", str(line)) for line in panel.lines(100)]
        labels = [r.label for r in placed[:keep]]
        for label in labels:
            assert sum(line.count(label.ljust(6)) for line in lines) >= 1, (label, lines)
        ecc_rows = [line for line in lines if "ECC" in line]
        assert len(ecc_rows) == 1
        if keep % 2:
            assert ecc_rows[0].startswith(labels[-1])  # beside the last cell
        else:
            assert ecc_rows[0].startswith("ECC")       # a row of its own


def test_what_keeps_a_list_of_its_own_matches_the_catalogue():
    from gpudoctor.backends.base import GpuSample
    from gpudoctor.backends.plausible import plausible_ranges
    from gpudoctor.fleet import FleetRow
    from gpudoctor.backends.recording import sample_fields

    keys = catalogue.keys()
    assert list(get_type_hints(GpuSample)) == list(keys)  # the type for type checkers
    assert list(sample_fields()) == list(keys)
    assert len(set(keys)) == len(keys)
    row_fields = set(FleetRow("node:9400", "0").to_dict())
    assert {r.fleet for r in catalogue.fleet_readings()} <= row_fields
    assert set(catalogue.watch_keys()) <= set(keys)
    # one table of ranges: every bounded reading's range is the catalogue's
    assert all(plausible_ranges()[r.key] == r.plausible for r in catalogue.READINGS if r.plausible)


def test_every_reading_is_well_formed():
    names = set()
    for r in catalogue.READINGS:
        assert r.value in ("number", "integer", "flag") and r.read in ("fast", "full"), r.key
        assert r.kind in ("gauge", "counter"), r.key
        assert r.fmt in ("", "memory", "power", "rate", "throttle"), r.key
        if r.panel:
            assert r.label and len(r.label) <= 6, r.key
        if r.line or r.short:
            assert r.word or r.short_word or r.short, r.key
        if r.prometheus:
            assert r.prometheus.startswith("gpudoctor_gpu_") and r.help, r.key
            assert r.prometheus.endswith("_total") == (r.kind == "counter"), r.key
            if not r.labels:
                assert r.prometheus not in names, f"{r.prometheus} names two readings"
            names.add(r.prometheus)
        if r.dcgm:
            assert r.dcgm.startswith(("DCGM_FI_DEV_", "DCGM_FI_PROF_")), r.key
            assert r.dcgm.startswith("DCGM_FI_PROF_") == (r.gpm is not None), r.key  # GPM is DCGM's profiling
        if r.fleet:
            assert r.prometheus, r.key
        if r.dcgm_unit:
            assert r.dcgm and r.dcgm_unit in catalogue.DCGM_UNITS, r.key
        if r.dcgm_new[0]:
            # a renamed field keeps its family; a unit is known for it only where the old one's is
            assert r.dcgm and r.dcgm_new[0].startswith(r.dcgm[:12]) and r.dcgm_new[0] != r.dcgm, r.key
            assert not r.dcgm_new[1] or r.dcgm_new[1] in catalogue.DCGM_UNITS, r.key
    for place in ("panel", "line", "short", "watch"):
        places = [getattr(r, place) for r in catalogue.READINGS if getattr(r, place)]
        assert len(places) == len(set(places)), f"two readings share a {place} place"
