"""The static facts (read once per device) in the catalogue (gpudoctor.backends.catalogue.STATIC_FACTS):
a fact defined there, and nowhere else, reaches every consumer.

The first tests add two facts in this file only (a board part number, shown as a label of
``gpudoctor_gpu_info``; a widget power limit with a range, an exporter gauge and a report name),
each answered by a fake NVML function, and find them in ``static()``, the type for type checkers
(``DeviceStatic``, made by ``python -m gpudoctor.tools.regenerate``), the recording schema, a
recording and its replay, the exporter's exposition (and docs/fleet.md's ``gpudoctor_gpu_info``
row) and the report; a third, identifying fact is struck out by ``--anonymize``. The others hold
what the catalogue replaced: ``static()``'s keys and values as they were written out by hand, and
the lists that follow the catalogue.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import get_type_hints

import pytest

from gpudoctor.backends import NA, NvmlBackend, NvmlGate, ReplayBackend, catalogue
from support.nvml_fake import FakePynvml, fabric, nvml_error

PART = catalogue.StaticFact("board_part_number", "", "text", catalogue.NvmlRead(("nvmlDeviceGetBoardPartNumber",)),
                            smi="board_part_number", info_label=True)
WIDGET_LIMIT = catalogue.StaticFact(
    "widget_limit_w", "W", "number", catalogue.NvmlRead(("nvmlDeviceGetWidgetPowerLimit",), divide=1000),
    plausible=catalogue.WATTS, prometheus="gpudoctor_gpu_widget_limit_watts", help="Power limit of the widget",
    report="widget_limit")

# Modules that read the catalogue: imported before it is patched, so that a copy taken at import
# (GPU_LABELS) is the catalogue's own, and the test's facts reach the others at call time.
CONSUMERS = ("gpudoctor.backends.plausible", "gpudoctor.backends.replay", "gpudoctor.backends.recording",
             "gpudoctor.sampling.sampler", "gpudoctor.sampling.recorder", "gpudoctor.exporter",
             "gpudoctor.probes.health", "gpudoctor.console.render", "gpudoctor.tools.regenerate")


@pytest.fixture
def facts(monkeypatch):
    """The catalogue with the two facts, and a fake NVML whose GPU answers them."""
    import importlib

    for name in CONSUMERS:
        importlib.import_module(name)
    monkeypatch.setattr(catalogue, "STATIC_FACTS", catalogue.STATIC_FACTS + (PART, WIDGET_LIMIT))
    return FakePynvml(readings={"nvmlDeviceGetBoardPartNumber": "900-2G133-0000-000",
                                "nvmlDeviceGetWidgetPowerLimit": 450_000})


def _recorded(nvml, tmp_path):
    from support.recorded import record_file

    path = tmp_path / "facts.json"
    record_file(NvmlBackend(NvmlGate(nvml)), path, seconds=0.0, interval=0.01)
    return path


def test_a_static_fact_added_to_the_catalogue_reaches_static_the_type_and_the_recording(facts, tmp_path):
    # static() reads both through the gate, converted (mW -> W) and screened with the range
    live = NvmlBackend(NvmlGate(facts))
    static = live.static(0)
    assert static["board_part_number"] == "900-2G133-0000-000"
    assert static["widget_limit_w"] == 450.0
    assert list(static)[-2:] == ["board_part_number", "widget_limit_w"]  # in the catalogue's order
    facts.devices[0]["nvmlDeviceGetWidgetPowerLimit"] = 9_000_000
    assert NvmlBackend(NvmlGate(facts)).static(0)["widget_limit_w"] == NA("implausible value 9000")
    facts.devices[0]["nvmlDeviceGetWidgetPowerLimit"] = nvml_error("NoPermission")
    assert NvmlBackend(NvmlGate(facts)).static(0)["widget_limit_w"] == NA("NoPermission")
    facts.devices[0]["nvmlDeviceGetWidgetPowerLimit"] = 450_000

    # DeviceStatic, the type for type checkers, gets a field of each (regenerate writes it)
    from gpudoctor.tools import regenerate

    fields = regenerate.device_static_fields()
    assert "    board_part_number: TextOrNA\n" in fields and "    widget_limit_w: FloatOrNA\n" in fields
    base = (regenerate.ROOT / "gpudoctor" / "backends" / "base.py").read_text(encoding="utf-8")
    assert "    widget_limit_w: FloatOrNA\n" in regenerate.base_text(base)
    assert regenerate.stale() == ["docs/recording.schema.json", "docs/fleet.md", "gpudoctor/backends/base.py"]

    # the recording schema has both, with their types
    from gpudoctor.backends.recording import RecordingError, current_schema, load_recording, schema_text

    nvml = current_schema()["properties"]["nvml"]["properties"]
    properties = nvml["static"]["items"]["properties"]
    assert properties["board_part_number"] == {"$ref": "#/$defs/text_or_na"}
    assert properties["widget_limit_w"] == {"$ref": "#/$defs/number_or_na"}
    assert '"widget_limit_w"' in schema_text()

    # a recording holds them and its replay gives them back; a wrong type is refused, by its place
    path = _recorded(facts, tmp_path)
    replayed = ReplayBackend.from_file(path).static(0)
    assert replayed["board_part_number"] == "900-2G133-0000-000"
    assert replayed["widget_limit_w"] == 450.0
    bad = json.loads(path.read_text())
    bad["nvml"]["static"][0]["widget_limit_w"] = "a lot"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(RecordingError, match=r"nvml\.static\[0\]\.widget_limit_w"):
        load_recording(tmp_path / "bad.json")


def test_a_static_fact_added_to_the_catalogue_reaches_the_exporter(facts, tmp_path):
    from prometheus_client import generate_latest

    from gpudoctor.exporter import GpudoctorCollector, GpuSampler, all_metric_names, build_registry
    from support.prom_support import parse_samples

    sampler = GpuSampler(ReplayBackend.from_file(_recorded(facts, tmp_path)), 1.0)
    sampler.sample_once()
    text = generate_latest(build_registry(GpudoctorCollector(sampler))).decode()
    series = parse_samples(text)
    info = [dict(labels) for (name, labels), _ in series.items() if name == "gpudoctor_gpu_info"]
    assert len(info) == 1 and info[0]["board_part_number"] == "900-2G133-0000-000"
    assert info[0]["name"] == "Fake GPU" and "driver_version" in info[0]  # the labels it had keep their places
    assert "# HELP gpudoctor_gpu_info 1 per GPU, with labels name, uuid, pci_bus_id, driver_version, " \
           "board_part_number" in text
    gauge = [(dict(labels), value) for (name, labels), value in series.items()
             if name == "gpudoctor_gpu_widget_limit_watts"]
    assert [value for _, value in gauge] == [450.0]
    assert gauge[0][0]["gpu"] == "0" and gauge[0][0]["name"] == "Fake GPU"  # labelled as every per-GPU series
    assert "# HELP gpudoctor_gpu_widget_limit_watts Power limit of the widget" in text
    assert "gpudoctor_gpu_widget_limit_watts" in all_metric_names()
    # docs/fleet.md's generated metric table has its row (python -m gpudoctor.tools.regenerate writes it)
    from gpudoctor.tools import regenerate

    doc = regenerate.fleet_md_text((regenerate.ROOT / "docs" / "fleet.md").read_text(encoding="utf-8"))
    assert "| `gpudoctor_gpu_widget_limit_watts` | Power limit of the widget (read once per GPU) | W | none |" in doc
    # and gpudoctor_gpu_info's row names the new label, in the catalogue's order: the committed row is stale
    row = ("| `gpudoctor_gpu_info` | 1 per GPU; labels `uuid`, `name`, `pci_bus_id`, `driver_version`, "
           "`board_part_number` | |")
    assert row in doc and row not in (regenerate.ROOT / "docs" / "fleet.md").read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.startswith("gpudoctor_gpu_info{"))
    served = set(re.findall(r'(\w+)="', line)) - {"gpu"}
    assert set(re.findall(r"`(\w+)`", row.split("labels ")[1])) == served  # the labels the series has


def test_an_info_label_alone_leaves_docs_fleet_md_behind_until_regenerated(monkeypatch):
    """gpudoctor_gpu_info's row in docs/fleet.md is generated: a static fact that only labels the
    info series (no gauge of its own) makes `regenerate --check` name docs/fleet.md, and the
    regenerated text has the label in that row, the only one of the series."""
    from gpudoctor.tools import regenerate

    assert "docs/fleet.md" not in regenerate.stale()
    monkeypatch.setattr(catalogue, "STATIC_FACTS", catalogue.STATIC_FACTS + (PART,))
    assert "docs/fleet.md" in regenerate.stale()
    doc = regenerate.fleet_md_text((regenerate.ROOT / "docs" / "fleet.md").read_text(encoding="utf-8"))
    rows = [line for line in doc.splitlines() if line.startswith("| `gpudoctor_gpu_info` |")]
    assert len(rows) == 1 and "`driver_version`, `board_part_number` |" in rows[0]
    assert regenerate.fleet_md_text(doc) == doc


def test_gpu_info_help_names_every_label_the_catalogue_gives_it(monkeypatch):
    """gpudoctor_gpu_info's help is made from the catalogue: a series label added there is named in it,
    as an info label is, with no list of labels written out by hand."""
    from gpudoctor.exporter import metrics

    board = catalogue.StaticFact("board_id", "", "text", catalogue.NvmlRead(("nvmlDeviceGetBoardId",)), series_label=4)
    monkeypatch.setattr(catalogue, "STATIC_FACTS", catalogue.STATIC_FACTS + (PART, board))
    words = metrics.gpu_info_help()
    assert words == "1 per GPU, with labels name, uuid, pci_bus_id, board_id, driver_version, board_part_number"
    assert set(words.partition("labels ")[2].split(", ")) == set(catalogue.gpu_info_labels()) - {"gpu"}


def test_a_static_fact_added_to_the_catalogue_reaches_the_report(facts):
    from support.probes_under_test import health_on

    _, measured, text = health_on(facts)
    assert measured[("widget_limit", 0)]["value"] == 450.0 and measured[("widget_limit", 0)]["unit"] == "W"
    assert not any(name == "board_part_number" for name, _ in measured)  # no report name: not measured
    assert "widget_limit" in text
    # an impossible value is said to be one, by its name
    facts.devices[0]["nvmlDeviceGetWidgetPowerLimit"] = 9_000_000
    result, _, _ = health_on(facts)
    assert any(f.code == "implausible_reading" and "widget_limit_w 9000" in f.summary for f in result.findings)


# --------------------------------------------------------------------------- --anonymize
#: A fact that names the board, marked so in the catalogue alone: no list of secret keys names it.
MODULE_SERIAL = catalogue.StaticFact("module_serial", "", "text", catalogue.NvmlRead(("nvmlDeviceGetModuleSerial",)),
                                     report="module_serial", identifying=True)
SERIAL = "MS-3318-7781"


@pytest.fixture
def identifying(monkeypatch):
    import importlib

    for name in CONSUMERS:
        importlib.import_module(name)
    monkeypatch.setattr(catalogue, "STATIC_FACTS", catalogue.STATIC_FACTS + (MODULE_SERIAL,))
    return FakePynvml(readings={"nvmlDeviceGetModuleSerial": SERIAL})


def test_an_identifying_static_fact_is_stripped_by_anonymize_from_the_recording_and_the_report(
        identifying, tmp_path, capsys):
    import io

    from gpudoctor.cli import main
    from gpudoctor.console.render import REDACTED, render_text, report_to_json, report_to_markdown
    from gpudoctor.core.model import Report
    from gpudoctor.probes import ProbeContext, health
    from support.recorded import record_file

    from gpudoctor.core.anonymize import HOST_KEYS

    assert "module_serial" in catalogue.identifying_keys()
    assert not HOST_KEYS & set(catalogue.static_keys())  # the anonymiser names no GPU fact by hand
    # record: kept as read without --anonymize, struck out with it
    plain, _ = record_file(NvmlBackend(NvmlGate(identifying)), tmp_path / "plain.json", seconds=0.0, interval=0.01)
    assert plain["nvml"]["static"][0]["module_serial"] == SERIAL
    hidden, _ = record_file(NvmlBackend(NvmlGate(identifying)), tmp_path / "hidden.json", seconds=0.0,
                            interval=0.01, anonymize=True)
    assert hidden["nvml"]["static"][0]["module_serial"] == REDACTED
    assert SERIAL not in (tmp_path / "hidden.json").read_text()
    identifying.devices[0]["nvmlDeviceGetModuleSerial"] = nvml_error("NotSupported")  # no value: nothing to strip
    unknown, _ = record_file(NvmlBackend(NvmlGate(identifying)), tmp_path / "unknown.json", seconds=0.0,
                             interval=0.01, anonymize=True)
    assert unknown["nvml"]["static"][0]["module_serial"] == {"__na__": "NotSupported"}
    identifying.devices[0]["nvmlDeviceGetModuleSerial"] = SERIAL

    # report: the health probe measures it under its report name; every anonymised output strips it
    result = health.run(ProbeContext(gpu=NvmlBackend(NvmlGate(identifying)), level="quick"))
    report = Report(results=[result])
    assert SERIAL in report.to_json()
    text = io.StringIO()
    render_text(report, text, color=False, width=120, verbose=True, anonymize=True)
    for out in (report_to_json(report, anonymize=True), text.getvalue()):
        assert SERIAL not in out and "module_serial" in out, out
    assert SERIAL not in report_to_markdown(report)  # the markdown summary (anonymised by default)
    assert {m["name"]: m["value"] for m in json.loads(report_to_json(report, anonymize=True))["results"][0]
            ["measurements"]}["module_serial"] == REDACTED
    # the command itself, on the recording: --json --anonymize
    assert main(["report", "--json", "--anonymize", "--probe", "health", "--replay", str(tmp_path / "plain.json")]) \
        in (0, 1)
    out = capsys.readouterr().out
    assert "module_serial" in out and SERIAL not in out, out


# --------------------------------------------------------------------------- what the catalogue replaced
#: An H100 in MIG mode as a fake NVML answers every static call.
H100 = {"nvmlDeviceGetName": "NVIDIA H100 80GB HBM3", "nvmlDeviceGetUUID": "GPU-5e2f", "nvmlDeviceGetSerial": "1654",
        "nvmlDeviceGetMemoryInfo": SimpleNamespace(total=85_520_809_984, used=0, free=0),
        "nvmlDeviceGetCudaComputeCapability": (9, 0), "nvmlDeviceGetArchitecture": 9,
        "nvmlDeviceGetVbiosVersion": "96.00.99.00.01", "nvmlDeviceGetTemperatureThreshold": lambda t: {0: 92, 1: 89, 3: 87}[t],
        "nvmlDeviceGetEnforcedPowerLimit": 700_000, "nvmlDeviceGetPowerManagementDefaultLimit": 700_500,
        "nvmlDeviceGetMaxClockInfo": lambda c: {1: 1980, 2: 2619}[c], "nvmlDeviceGetMaxPcieLinkGeneration": 5,
        "nvmlDeviceGetGpuMaxPcieLinkGeneration": 5, "nvmlDeviceGetMaxPcieLinkWidth": 16,
        "nvmlDeviceGetMemoryBusWidth": 5120, "nvmlDeviceGetMigMode": (1, 0), "nvmlDeviceGetEccMode": (1, 1),
        "nvmlDeviceGetNumFans": 0, "nvmlDeviceGetGpuFabricInfoV": fabric(3, 0, 7, b"\x01" * 16, 5)}


def test_static_gives_every_fact_it_gave_when_it_was_written_out_by_hand():
    """The keys, their order and the values of the hand-written static() this catalogue replaced."""
    assert NvmlBackend(NvmlGate(FakePynvml(readings=H100))).static(0) == {
        "index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-5e2f", "serial": "1654",
        "pci_bus_id": "0000:65:00.0", "memory_total_bytes": 85_520_809_984, "compute_capability": "9.0",
        "architecture": 9, "vbios_version": "96.00.99.00.01", "temperature_slowdown_c": 89,
        "temperature_shutdown_c": 92, "temperature_gpu_max_c": 87, "power_limit_w": 700.0,
        "power_default_limit_w": 700.5, "clock_sm_max_mhz": 1980, "clock_mem_max_mhz": 2619, "pcie_gen_max": 5,
        "pcie_gen_gpu_max": 5, "pcie_width_max": 16, "memory_bus_width_bits": 5120, "mig_mode": 1, "ecc_mode": 1,
        "num_fans": 0, "fabric_state": 3, "fabric_status": "Success", "fabric_clique_id": 7,
        "fabric_cluster_uuid": "01010101-0101-0101-0101-010101010101", "fabric_health_mask": 5,
        "fabric_health_summary": 0}
    assert list(NvmlBackend(NvmlGate(FakePynvml(readings=H100))).static(0)) == list(catalogue.static_keys())
    # each fact's own failure is its own NA; an impossible value is NA with its range's words
    broken = dict(H100, nvmlDeviceGetPciInfo=nvml_error("GpuIsLost"), nvmlDeviceGetMigMode=nvml_error("NotSupported"),
                  nvmlDeviceGetCudaComputeCapability=nvml_error("NoPermission"), nvmlDeviceGetMaxPcieLinkWidth=64)
    static = NvmlBackend(NvmlGate(FakePynvml(readings=broken))).static(0)
    assert (static["pci_bus_id"], static["mig_mode"], static["compute_capability"], static["pcie_width_max"]) == (
        NA("GpuIsLost"), NA("NotSupported"), NA("NoPermission"), NA("implausible value 64"))
    assert static["name"] == "NVIDIA H100 80GB HBM3" and static["ecc_mode"] == 1


def test_every_static_fact_is_well_formed_and_what_follows_it_matches():
    from gpudoctor.backends.base import DeviceStatic
    from gpudoctor.backends.nvml import FABRIC_KEYS, STATIC_READERS
    from gpudoctor.backends.plausible import plausible_ranges
    from gpudoctor.backends.recording import static_fields
    from gpudoctor.exporter import GPU_LABELS

    keys = catalogue.static_keys()
    assert len(set(keys)) == len(keys)
    assert list(get_type_hints(DeviceStatic)) == list(keys)  # the type for type checkers
    assert list(static_fields()) == list(keys)                # the recording schema
    for f in catalogue.STATIC_FACTS:
        assert f.value in ("index", "text", "optional_text", "integer", "number"), f.key
        assert (f.nvml is None) != (not f.reader), f"{f.key}: an NvmlRead or a reader, one of them"
        assert not f.reader or f.reader in STATIC_READERS, f.key
        if f.plausible is not None:
            assert plausible_ranges()[f.key] == f.plausible or f.key in catalogue.keys(), f.key
        if f.prometheus:
            assert f.prometheus.startswith("gpudoctor_gpu_") and f.help, f.key
    places = [f.series_label for f in catalogue.STATIC_FACTS if f.series_label]
    assert len(places) == len(set(places)), "two facts share a series label's place"
    assert GPU_LABELS == ("gpu", "uuid", "name", "pci_bus_id") == ("gpu",) + catalogue.series_labels()
    assert FABRIC_KEYS == ("fabric_state", "fabric_status", "fabric_clique_id", "fabric_cluster_uuid",
                           "fabric_health_mask", "fabric_health_summary")


def test_every_recording_in_the_test_data_holds_only_catalogued_static_facts():
    """The recordings made before the catalogue replay as they did: what they hold is in it."""
    from pathlib import Path

    data_dir = next(p / "data" for p in Path(__file__).resolve().parents if (p / "data" / "make_handmade.py").exists())
    recordings = sorted(data_dir.glob("*.json"))
    assert recordings
    keys = set(catalogue.static_keys())
    for path in recordings:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != "gpudoctor-recording":
            continue
        for static in (data.get("nvml") or {}).get("static") or []:
            assert set(static) <= keys, (path.name, set(static) - keys)
