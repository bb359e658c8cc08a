"""One catalogue of per-GPU readings (gpudoctor.backends.catalogue): a reading defined there, and
nowhere else, reaches every consumer.

The first tests add a reading in this file only (a widget temperature, answered by a fake NVML
function) and find it in a live sample, the recording schema, a recording and its replay,
``watch`` (its JSON records and its verbose line), the exporter's exposition, the TUI panel, the
report (the health probe's measurements, JSON and text), and fleet (its rows read back from the
exporter's series, the JSON output valid against the fleet schema made from the catalogue, the
table and the TUI's Fleet screen). The others check that the files made from the catalogue
(``python -m gpudoctor.tools.regenerate``) are current and what is still written out matches it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import get_type_hints

import pytest

from gpudoctor.backends import NA, NvmlBackend, NvmlGate, ReplayBackend, catalogue
from support.nvml_fake import FakePynvml

WIDGET = catalogue.Reading(
    "widget_temp_c", "°C", "number", "fast", plausible=catalogue.C_SENSOR,
    nvml=catalogue.NvmlRead(("nvmlDeviceGetWidgetTemperature",)),
    history=True, label="widget", panel=10, spark_top=("", 100.0), word="widget", line=11, watch=15,
    prometheus="gpudoctor_gpu_widget_temperature_celsius", help="Temperature of the widget",
    fleet="widget_temp_c", column=("WIDGET", 5, 6), report="widget_temperature")


# Modules that keep a copy of a list as the catalogue stood at import (for callers that read the
# old names): imported before the catalogue is patched, so that no copy holds the test's reading.
CONSUMERS = ("gpudoctor.backends.plausible", "gpudoctor.backends.replay", "gpudoctor.backends.recording", "gpudoctor.sampling.sampler",
             "gpudoctor.sampling.presentation", "gpudoctor.exporter", "gpudoctor.fleet", "gpudoctor.fleet.rules",
             "gpudoctor.hooks.sampler", "gpudoctor.tui.widgets", "gpudoctor.tui.fleet", "gpudoctor.commands.watch",
             "gpudoctor.cli", "gpudoctor.probes.health", "gpudoctor.console.render", "gpudoctor.tools.regenerate")


@pytest.fixture
def widget(monkeypatch):
    """The catalogue with the widget reading, and a fake NVML whose GPU answers 47 C for it."""
    import importlib

    for name in CONSUMERS:
        importlib.import_module(name)
    monkeypatch.setattr(catalogue, "READINGS", catalogue.READINGS + (WIDGET,))
    return FakePynvml(readings={"nvmlDeviceGetWidgetTemperature": 47})


def _recorded(nvml, tmp_path):
    from support.recorded import record_file

    path = tmp_path / "widget.json"
    record_file(NvmlBackend(NvmlGate(nvml)), path, seconds=0.0, interval=0.01)
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
    from gpudoctor.sampling.sampler import Sampler
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
    from gpudoctor.sampling.sampler import Sampler
    from gpudoctor.tui.widgets import GpuPanel
    from support.nvml_fake import FakePynvml as Fake

    placed = [r for r in catalogue.READINGS if r.panel]
    for keep in (len(placed), len(placed) - 1, 3):
        shown = {r.key for r in placed[:keep]}
        monkeypatch.setattr(catalogue, "READINGS", tuple(
            r if r.key in shown or not r.panel else replace(r, panel=0) for r in catalogue.READINGS))
        snap = Sampler(NvmlBackend(NvmlGate(Fake())), None, with_processes=False, reads="full").read()
        panel = GpuPanel(0)
        from gpudoctor.sampling.sampler import History

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


# --------------------------------------------------------------------------- the report and fleet
def test_a_reading_added_to_the_catalogue_reaches_the_report(widget):
    from support.probes_under_test import health_on

    _, measured, text = health_on(widget)
    assert measured[("widget_temperature", 0)]["value"] == 47 and measured[("widget_temperature", 0)]["unit"] == "°C"
    # the measurements the report had before keep their names (the catalogue's ``report``)
    assert {"gpu_utilization", "temperature", "power_draw", "sm_clock", "fan_speed"} <= {n for n, _ in measured}
    assert "widget_temperature" in text
    # an impossible value is said to be one, by its report name
    widget.devices[0]["nvmlDeviceGetWidgetTemperature"] = 4000
    result, _, _ = health_on(widget)
    assert any(f.code == "implausible_reading" and "widget_temperature 4000" in f.summary for f in result.findings)


class _Prometheus:
    """Prometheus at the HTTP seam, holding what the exporter served (one scrape of one target):
    an instant query for ``{__name__=~"a|b"}`` answers the series of those names, as Prometheus does."""

    def __init__(self, exposition: str, instance: str = "node:9402") -> None:
        from support.prom_support import parse_samples

        self.series = [({**dict(labels), "__name__": name, "instance": instance, "job": "gpudoctor"}, value)
                       for (name, labels), value in parse_samples(exposition).items()]
        self.instance = instance

    def answer(self, query: str) -> list:
        import re

        if query.startswith("up"):
            return [({"instance": self.instance, "job": "gpudoctor"}, 1.0)]
        found = re.fullmatch(r'(?:last_over_time\()?\{__name__=~"([^"]*)"\}(?:\[\w+\]\))?', query)
        names = set(found.group(1).split("|")) if found else {query.removeprefix("last_over_time(").split("{")[0]}
        return [(labels, value) for labels, value in self.series if labels["__name__"] in names]

    def __call__(self, request, timeout):
        import io
        import urllib.parse

        query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.full_url).query)["query"][0]
        result = [{"metric": labels, "value": [1_800_000_000.0, str(value)]} for labels, value in self.answer(query)]
        return io.BytesIO(json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode())


def test_a_reading_added_to_the_catalogue_reaches_fleet(widget, tmp_path):
    import jsonschema
    from prometheus_client import generate_latest

    from gpudoctor import fleet
    from gpudoctor.tools import regenerate
    from gpudoctor.exporter import GpudoctorCollector, GpuSampler, build_registry

    sampler = GpuSampler(ReplayBackend.from_file(_recorded(widget, tmp_path)), 1.0)
    sampler.sample_once()
    exposition = generate_latest(build_registry(GpudoctorCollector(sampler))).decode()
    prometheus = _Prometheus(exposition)
    view = fleet.collect(fleet.Prometheus("http://prom.example:9090", opener=prometheus), now=1_800_000_000.0)

    # fleet asks for the gauge, and the row holds it under the reading's fleet name
    row = next(r for r in view.rows if r.gpu == "0")
    assert row.widget_temp_c == 47 and row.to_dict()["widget_temp_c"] == 47
    # the JSON output is valid against the fleet schema made from the catalogue (it has the field,
    # and refuses what is not one: additionalProperties false)
    doc = (regenerate.ROOT / "docs" / "fleet.schema.json").read_text(encoding="utf-8")
    schema = json.loads(regenerate.fleet_schema_text(doc))
    assert "widget_temp_c" in schema["properties"]["rows"]["items"]["properties"]
    jsonschema.validate(json.loads(json.dumps(view.to_dict())), schema)
    # the table: its column, header and value
    text = fleet.render_text(view)
    header = next(line for line in text.splitlines() if line.startswith("STATUS"))
    assert " POWER WIDGET  XID " in header
    assert any(line.startswith("PASS") and " 47C " in line for line in text.splitlines()), text
    # the docs' metric table names its gauge
    assert "`gpudoctor_gpu_widget_temperature_celsius` | Temperature of the widget | °C |" in \
        regenerate.fleet_md_text((regenerate.ROOT / "docs" / "fleet.md").read_text(encoding="utf-8"))

    from gpudoctor.tui.fleet import FleetScreen
    from textual.app import App
    from support.tui_support import run_async, screen_text, wait_for

    class FleetApp(App):
        def on_mount(self) -> None:
            self.push_screen(screen)

    screen = FleetScreen("http://prom.example:9090", interval=3600, collect=lambda: view)

    @run_async
    async def shown() -> str:
        app = FleetApp()
        async with app.run_test(size=(160, 20)) as pilot:
            await wait_for(pilot, lambda: screen.view is not None)
            await pilot.pause()
            return screen_text(app)

    on_screen = shown()
    assert "WIDGET" in on_screen and "47C" in on_screen, on_screen


def test_the_files_made_from_the_catalogue_are_current():
    from gpudoctor.tools import regenerate

    assert regenerate.stale() == [], "run python -m gpudoctor.tools.regenerate"


def test_regenerate_rewrites_what_is_behind_and_checks(tmp_path, capsys):
    import shutil

    from gpudoctor.tools import regenerate

    for path in regenerate.generated():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(regenerate.ROOT / path, tmp_path / path)
    base = tmp_path / "gpudoctor" / "backends" / "base.py"
    base.write_text(base.read_text().replace("    fan_pct: FloatOrNA\n", ""))
    assert regenerate.main(["--check"], root=tmp_path) == 4
    assert "gpudoctor/backends/base.py is not current" in capsys.readouterr().err
    assert regenerate.main([], root=tmp_path) == 0
    assert "    fan_pct: FloatOrNA\n" in base.read_text()
    assert regenerate.main(["--check"], root=tmp_path) == 0
    assert regenerate.main(["--bogus"], root=tmp_path) == 2
    capsys.readouterr()
    (tmp_path / "docs" / "fleet.md").unlink()  # an installed package has no docs/: one line, exit 2
    assert regenerate.main([], root=tmp_path) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fleet.md not found: run it in a source checkout" in err


def test_mig_readings_are_the_catalogues():
    """A MIG device's readings (MigDeviceReading's fields besides its identity and processes, written
    by gpudoctor.tools.regenerate) are the catalogue's MIG readings, and the exporter's per-slice gauges and
    the recording schema's MIG properties are made from them; a device not read has each as NotRead."""
    from gpudoctor.backends.base import MigDeviceReading
    from gpudoctor.backends.recording import mig_fields
    from gpudoctor.exporter import all_metric_names, mig_metrics

    identity = ("parent", "slot", "gpu_instance_id", "compute_instance_id", "uuid", "name", "profile")
    readings = [n for n in MigDeviceReading._names() if n not in (*identity, "processes")]
    assert readings == [r.key for r in catalogue.mig_readings()]
    assert list(mig_fields()) == [*identity, *readings, "processes"]
    assert {r.prometheus for r in mig_metrics()} <= set(all_metric_names())
    assert all(r.prometheus.startswith("gpudoctor_mig_") and r.help for r in mig_metrics())
    from support.nvml_fake import h100_mig

    [named, _] = NvmlBackend(NvmlGate(FakePynvml(readings=h100_mig()))).mig_devices(0, readings=False)
    assert all(named[key] == NA("NotRead") for key in readings)
