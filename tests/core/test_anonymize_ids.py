"""--anonymize (and the markdown report, anonymised by default) strikes out every device
identifier a user gave in CUDA_VISIBLE_DEVICES, in whatever spelling, and every GPU UUID
wherever it appears: values, dict keys, lists and free text."""

from __future__ import annotations

import json

import pytest

from gpudoctor.backends.catalogue import identifying_keys
from gpudoctor.core.anonymize import REDACTED, anonymize_dict, anonymize_report_dict

RECORDING = "handmade_nvml_gone_midsession.json"  # two GPUs: the devices probe runs on replay
FULL = "GPU-7a6b5c4d-3e2f-1a0b-9c8d-7e6f5a4b3c2d"
FORMS = {
    "full": FULL,
    "full-lowercase": FULL.lower(),
    "prefix": "GPU-7a6b5c4d-3e2f",
    "mig": "MIG-9f8e7d6c-5b4a-3f2e-1d0c-bA9876543210",
    "mig-lowercase": "mig-9f8e7d6c-5b4a-3f2e-1d0c-ba9876543210",
    "bare": "7a6b5c4d-3e2f-1a0b-9c8d-7e6f5a4b3c2d",
}
FORMATS = {"json": ["--json", "--anonymize"], "markdown": ["--format", "markdown"]}


@pytest.mark.parametrize("output", sorted(FORMATS))
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_device_named_in_cuda_visible_devices_leaves_no_trace(cli, data_dir, form, output):
    given = FORMS[form]
    run = cli("report", "--replay", str(data_dir / RECORDING), *FORMATS[output],
              env={"CUDA_VISIBLE_DEVICES": given})
    assert run.returncode in (0, 1, 4), run.stderr[-2000:]
    if output == "json":
        json.loads(run.stdout)
    assert REDACTED in run.stdout or "&lt;redacted&gt;" in run.stdout
    distinctive = given.split("-")[1].lower()  # the first group of hex digits
    assert distinctive not in run.stdout.lower(), [ln for ln in run.stdout.splitlines()
                                                    if distinctive in ln.lower()]


def test_uuids_in_keys_lists_and_text_are_struck_out():
    data = {
        "per_gpu": {FULL: {"util": 5}, FULL.lower(): {"util": 6}},
        "order": [FULL.lower(), "0"],
        "note": f"slice {FORMS['mig-lowercase']} (from {FORMS['bare']})",
    }
    text = json.dumps(anonymize_dict(data, identifying_keys(), hostname="builder-host"))
    assert "7a6b5c4d" not in text.lower() and "9f8e7d6c" not in text.lower(), text
    out = anonymize_dict(data, identifying_keys(), hostname="builder-host")
    assert [v["util"] for v in out["per_gpu"].values()] == [5, 6]  # both kept, under distinct keys
    assert out["order"][1] == "0"  # an index is not an identifier


def test_a_device_name_recorded_in_the_data_is_struck_everywhere(monkeypatch):
    """A report read from elsewhere (replayed, compared) names a device in its own environment
    list in a spelling no pattern knows; that entry is struck out wherever it appears."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    data = {"host": {"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,slot-alpha-7"}]},
            "results": [{"probe": "devices", "findings": [{"summary": "slot-alpha-7 is busy"}],
                         "details": {"hosts": ["n1"]}}]}
    text = json.dumps(anonymize_report_dict(data, identifying_keys()))
    assert "slot-alpha-7" not in text and '"0,' + REDACTED in text, text


def test_an_nvswitch_fabric_cluster_uuid_is_struck_out():
    """The fabric's cluster UUID (nvmlDeviceGetGpuFabricInfoV, written 8-4-4-4-12 without a prefix)
    names the NVLink domain a node belongs to: an identifier like a GPU's."""
    cluster = "5e1f00d2-77aa-4b3c-9d8e-0f1e2d3c4b5a"
    data = {"results": [{"probe": "devices", "details": {"static": [{"fabric_cluster_uuid": cluster,
                                                                      "fabric_clique_id": 3}]}}]}
    text = json.dumps(anonymize_report_dict(data, identifying_keys()))
    assert "5e1f00d2" not in text and REDACTED in text, text
    assert '"fabric_clique_id": 3' in text  # a small number within the domain, not an identifier


def test_report_to_json_anonymizes_as_it_always_was_called():
    """``Report.to_json(anonymize=True)``, or ``True`` first as before: the host's name and the keys the
    catalogue marks identifying are struck out (a bare True must not read as an indent and strip nothing)."""
    from gpudoctor.core.model import Measurement, ProbeResult, Report

    result = ProbeResult("devices", details={"hostname": "secret-node-42"})
    result.measurements.append(Measurement("uuid", "GPU-0f0e0d0c-1111-2222-3333-444455556666", device=0))
    report = Report(results=[result])
    for text in (report.to_json(True), report.to_json(anonymize=True), report.to_json(anonymize=identifying_keys())):
        assert "secret-node-42" not in text and "GPU-0f0e0d0c" not in text, text
        assert json.loads(text)["results"][0]["measurements"][0]["value"] == REDACTED
    assert "secret-node-42" in report.to_json() and "GPU-0f0e0d0c" in report.to_json(False, None)
    assert "\n" not in report.to_json(False, None)  # the indent stays the second argument
    with pytest.raises(TypeError):
        report.to_json("uuid")
