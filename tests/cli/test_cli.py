"""The command line, run for real in subprocesses: exit codes, streams, files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.fresh_interpreter import modules_loaded

from conftest import cuda_available
from gpudoctor.core import exitcodes


def test_version_and_help(cli):
    out = cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("gpudoctor ")
    helped = cli("report", "--help")
    assert helped.returncode == 0 and "--fail-on" in helped.stdout and "--anonymize" in helped.stdout


@pytest.mark.skipif(cuda_available(), reason="checks the no-GPU verdict")
def test_report_without_gpu_is_a_clear_failure(cli, validate_report):
    out = cli("report", "--json")
    assert out.returncode == exitcodes.FAIL, out.stderr
    data = validate_report(json.loads(out.stdout))  # stdout is exactly one JSON document
    assert data["status"] == "fail"
    devices = next(r for r in data["results"] if r["probe"] == "devices")
    assert any(f["code"] == "no_cuda_device" for f in devices["findings"])
    assert "Traceback" not in out.stderr
    text = cli("report")
    assert text.returncode == exitcodes.FAIL
    assert "Verdict: FAIL" in text.stdout and "fix:" in text.stdout and "Traceback" not in text.stdout


def test_quick_report_never_imports_torch_or_textual():
    code = (
        "import sys, io, contextlib\n"
        "from gpudoctor.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    rc = main(['report', '--quick', '--json'])\n"
        "bad = [m for m in ('torch', 'textual') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "import json; data = json.loads(buf.getvalue())\n"
        "print(rc, data['status'], len(data['results']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rc, status, n = out.stdout.split()
    assert int(n) == 5 and int(rc) == exitcodes.for_status(status)  # environment, devices, health, events, p2p


def test_standard_report_keeps_torch_out_of_the_parent():
    assert modules_loaded("import io, contextlib\n"
                          "from gpudoctor.cli import main\n"
                          "with contextlib.redirect_stdout(io.StringIO()):\n"
                          "    main(['report', '--json', '--probe', 'environment'])",
                          ("torch", "textual")) == []


@pytest.mark.parametrize("args, message", [
    (["report", "--device", "7"], "--device 7 is out of range"),
    (["report", "--device", "-1"], "device index must be >= 0"),
    (["report", "--device", "one"], "not a device index"),
    (["report", "--probe", "nope"], "unknown probe 'nope'"),
    (["report", "--fail-on", "sometimes"], "invalid choice"),
    (["report", "--quick", "--full"], "not allowed with argument"),
    (["report", "--replay", "/nonexistent/rec.json"], "no such file"),
    (["report", "-o", "/nonexistent/dir/out.json"], "does not exist"),
    (["record"], "required: -o/--output"),
    (["record", "-o", "x.json", "--seconds", "0"], "must be > 0"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_is_one_line_and_exit_2(cli, args, message):
    out = cli(*args)
    assert out.returncode == exitcodes.USAGE, (out.returncode, out.stderr)
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert out.stdout == ""


def test_device_out_of_range_on_a_replayed_one_gpu_machine(cli, data_dir):
    out = cli("report", "--device", "1", "--replay", str(data_dir / "handmade_hardware_faults.json"))
    assert out.returncode == exitcodes.USAGE
    assert out.stderr.strip().splitlines()[0] == (
        "gpudoctor: error: --device 1 is out of range: this machine has 1 visible CUDA device (0..0)")


def test_exit_codes_follow_status_and_fail_on(cli, data_dir, tmp_path):
    # A warning alone: the GPU-lost recording with a torch whose only code for the H100 (9.0) is PTX,
    # JIT-compiled at start-up (ptx_jit_only). Its environment warned before for a driver older than
    # torch's CUDA minor; since CUDA started there, that passes now.
    recording = json.loads((data_dir / "handmade_gpu_lost.json").read_text())
    recording["torch"]["arch_list"] = ["sm_75", "sm_80", "sm_86", "compute_86"]
    warn_only = str(tmp_path / "ptx_only_torch.json")
    (tmp_path / "ptx_only_torch.json").write_text(json.dumps(recording))
    assert cli("report", "--replay", warn_only, "--probe", "environment").returncode == exitcodes.WARN
    assert cli("report", "--replay", warn_only, "--probe", "environment", "--fail-on", "fail").returncode == exitcodes.OK
    healthy = str(data_dir / "handmade_consumer_notsupported.json")
    assert cli("report", "--replay", healthy).returncode == exitcodes.OK
    assert cli("report", "--replay", str(data_dir / "handmade_hardware_faults.json"),
               "--fail-on", "fail").returncode == exitcodes.FAIL


def test_output_file_anonymize_and_list(cli, tmp_path, data_dir, validate_report):
    target = tmp_path / "report.json"
    target.write_text("old content")
    out = cli("report", "--replay", str(data_dir / "handmade_hardware_faults.json"), "-o", str(target),
              "--anonymize")
    assert out.returncode == exitcodes.FAIL
    text = target.read_text()
    data = validate_report(json.loads(text))
    assert "GPU-00000000-1111" not in text and "handmade-host" not in text
    assert data["host"]["hostname"] == "<redacted>"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temp file left behind
    assert "Verdict: FAIL" in out.stdout
    listed = cli("report", "--list-probes")
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()][:3] == ["environment", "devices", "health"]


def test_python_dash_m_and_console_script_agree(cli):
    from pathlib import Path

    script = Path(sys.executable).with_name("gpudoctor")
    assert script.exists(), "the console script is installed next to the interpreter"
    a = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=30)
    assert a.stdout == cli("--version").stdout


def _check_round_trip(cli, rec, validate_report):
    data = json.loads(rec.read_text())
    assert data["format"] == "gpudoctor-recording" and data["meta"]["hand_made"] is False
    assert data["meta"]["created"] and "driver_version" in data["meta"]
    assert data["torch"]["importable"] is True and len(data["nvml"]["samples"]) >= 3
    replayed = cli("report", "--json", "--replay", str(rec))
    report = validate_report(json.loads(replayed.stdout))
    assert report["source"] == f"replay:{rec.name}"
    env = next(r for r in report["results"] if r["probe"] == "environment")
    assert any(m["name"] == "torch" and m["value"] == data["torch"]["version"] for m in env["measurements"])


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="records a real GPU")
def test_record_then_replay_round_trip(cli, tmp_path, validate_report):
    rec = tmp_path / "rec.json"
    out = cli("record", "-o", str(rec), "--seconds", "0.6", "--interval", "0.2")
    assert out.returncode == 0, out.stderr
    _check_round_trip(cli, rec, validate_report)


def test_record_command_round_trip_on_a_replayed_gpu(cli, tmp_path, validate_report, data_dir, monkeypatch):
    """The record command end to end in-process, its NVML backend served by a recording.

    (Before: this test recorded on a machine without a GPU and expected exit 0, the
    defect of issue #12 item 5; `record` without a GPU now exits 6, tested below.)"""
    from gpudoctor.backends import ReplayBackend
    from gpudoctor.cli import main

    source = str(data_dir / "handmade_consumer_notsupported.json")
    monkeypatch.setattr("gpudoctor.backends.NvmlBackend", lambda: ReplayBackend.from_file(source, loop=True))
    rec = tmp_path / "rec.json"
    assert main(["record", "-o", str(rec), "--seconds", "0.6", "--interval", "0.2"]) == exitcodes.OK
    _check_round_trip(cli, rec, validate_report)


@pytest.mark.skipif(cuda_available(), reason="checks the no-GPU exit")
def test_record_without_a_gpu_exits_6_at_once(cli, tmp_path):
    rec = tmp_path / "rec.json"
    out = cli("record", "-o", str(rec), "--seconds", "30")
    assert out.returncode == exitcodes.NO_GPU, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpudoctor record: nothing to record: ")
    assert "sampling" not in out.stderr and not rec.exists() and out.stdout == ""


def test_text_report_shows_brackets_literally(data_dir):
    import io

    from gpudoctor.core.model import ProbeResult, Report
    from gpudoctor.console.render import render_text

    r = ProbeResult("health")
    r.measure("temperature", 40, "C", device=1)
    r.measure("odd", "[bold]not markup[/bold]")
    r.find("warn", "x", "a [red]literal[/red] summary", fix="run `x [y]`")
    buf = io.StringIO()
    render_text(Report(results=[r]), buf, verbose=True, color=False)
    text = buf.getvalue()
    assert "temperature [gpu 1]" in text and "[bold]not markup[/bold]" in text
    assert "a [red]literal[/red] summary" in text and "run `x [y]`" in text
