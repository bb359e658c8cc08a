"""What a recording does not hold replays as "not recorded", never as a failure.

A recording made by the light install (no torch in that environment) used to replay as
`[FAIL] environment torch does not import ... pip install --force-reinstall torch`, exit 4,
where the live report on that machine passed.
"""

from __future__ import annotations

import json

from support.nvml_fake import FakePynvml

from gpudoctor.core import exitcodes
from gpudoctor.sampling import recorder
from gpudoctor.backends import NvmlBackend, NvmlGate, ReplayBackend
from gpudoctor.backends.na import NA
from gpudoctor.cli import main

NO_TORCH = {"importable": False, "import_error": "ModuleNotFoundError: No module named 'torch'"}


def _recording(data_dir, tmp_path, torch):
    recording = json.loads((data_dir / "handmade_hardware_faults.json").read_text())
    recording["torch"] = torch
    path = tmp_path / "light_install_handmade.json"
    path.write_text(json.dumps(recording))
    return path


def _replay(capsys, path):
    code = main(["report", "--replay", str(path), "--probe", "environment", "--probe", "devices", "--json"])
    out, _ = capsys.readouterr()
    return code, {r["probe"]: r for r in json.loads(out)["results"]}


def test_a_light_install_recording_replays_torch_as_not_recorded(data_dir, tmp_path, capsys):
    path = _recording(data_dir, tmp_path, NO_TORCH)
    assert ReplayBackend.from_file(path).torch_facts() == NA("NotRecorded")
    code, results = _replay(capsys, path)
    assert code == exitcodes.OK
    env = results["environment"]
    codes = {f["code"]: f for f in env["findings"]}
    assert "torch_import_failed" not in codes
    assert codes["torch_not_recorded"]["status"] == "skip" and "not recorded" in codes["torch_not_recorded"]["summary"]
    assert env["status"] == "skip" and "torch not recorded" in env["summary"]
    torch_count = next(m for m in results["devices"]["measurements"] if m["name"] == "torch_device_count")
    assert torch_count["note"] == "NotRecorded"  # not "QuickMode": this was no --quick run
    # A broken torch that was recorded is a fact, and still fails.
    broken = {"importable": False, "import_error": "ImportError: libcudnn.so.9: cannot open shared object file"}
    code, results = _replay(capsys, _recording(data_dir, tmp_path, broken))
    assert code == exitcodes.FAIL
    assert "torch_import_failed" in {f["code"] for f in results["environment"]["findings"]}


def test_record_without_torch_in_the_environment_records_no_torch_facts(monkeypatch):
    monkeypatch.setattr(recorder, "torch_facts_in_child", lambda timeout=120.0: dict(NO_TORCH))
    recording, _ = recorder.capture(NvmlBackend(NvmlGate(FakePynvml())), seconds=0.05, interval=0.05)
    assert recording["torch"] is None
