"""`gpudoctor bench mnist` end to end: outputs, bad input, Ctrl-C, and the report probe."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.fresh_interpreter import modules_loaded

from gpudoctor.core import exitcodes
from gpudoctor.cli import main

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "docs" / "report.schema.json"
SWEEP_SCHEMA = REPO / "docs" / "bench-mnist.schema.json"


def validate_sweep(doc: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads(SWEEP_SCHEMA.read_text()))
SMALL = ["bench", "mnist", "--device", "cpu", "--train-samples", "1024", "--test-samples", "256"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _data_helpers():
    """tests/workload/test_workload_data.py by path (works whether or not tests/ is a package)."""
    from support.script_loader import load_script

    return load_script(Path(__file__).with_name("test_workload_data.py"), "_workload_data_helpers")


def _torch_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize("argv,fragment", [
    (["--batch-sizes", "0"], "--batch-sizes: 0 must be >= 1"),
    (["--batch-sizes", "-64"], "--batch-sizes: -64 must be >= 1"),
    (["--batch-sizes", "64,abc"], "--batch-sizes: 'abc' is not an integer"),
    (["--batch-sizes", "6.4"], "--batch-sizes: '6.4' is not an integer"),
    (["--batch-sizes", "64,,128"], "--batch-sizes: empty entry"),
    (["--workers", "-1"], "--workers: -1 must be >= 0"),
    (["--modes", "dataloader,turbo"], "--modes: unknown value 'turbo'"),
    (["--device", "tpu"], "--device: unknown value 'tpu'"),
    (["--epochs", "0"], "--epochs: 0 must be >= 1"),
    (["--repeat", "0"], "--repeat: 0 must be >= 1"),
    (["--train-samples", "x"], "--train-samples: 'x' is not an integer"),
    (["--csv", "/nonexistent-dir/out.csv"], "directory /nonexistent-dir does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, fragment):
    code = main(["bench", "mnist", *argv])
    captured = capsys.readouterr()
    assert code == exitcodes.USAGE
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpudoctor: error: ") and fragment in lines[0]


def test_repeat_runs_the_grid_again_and_the_advice_weighs_the_repeats(capsys):
    code = main([*SMALL, "--batch-sizes", "512", "--workers", "0", "--modes", "resident,tuned", "--repeat", "2",
                 "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == exitcodes.OK and doc["config"]["repeat"] == 2
    validate_sweep(doc)
    assert sorted((r["mode"], r["batch_size"]) for r in doc["runs"]) == [("resident", 512)] * 2 + [("tuned", 512)] * 2
    assert doc["recommendation"]["variation"]["source"] == "repeated runs of one configuration"
    assert doc["recommendation"]["variation"]["ratio"] >= 1.0


def test_cuda_on_a_machine_without_it_is_exit_2(capsys):
    if _torch_cuda():
        pytest.skip("this machine has CUDA")
    code = main([*SMALL[:2], "--device", "cuda", "--batch-sizes", "64"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == exitcodes.USAGE and len(err) == 1 and "--device cuda: torch sees no CUDA device" in err[0]


def test_corrupt_data_dir_names_the_file(capsys, tmp_path):
    write_mnist = _data_helpers().write_mnist
    write_mnist(tmp_path / "d")
    bad = tmp_path / "d" / "train-images-idx3-ubyte"
    bad.write_bytes(bad.read_bytes()[:1000])
    code = main([*SMALL, "--data-dir", str(tmp_path / "d")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == exitcodes.USAGE and len(err) == 1 and str(bad) in err[0] and "truncated" in err[0]


def test_json_csv_plot_and_table(capsys, tmp_path):
    out_json, out_csv, out_png = tmp_path / "s.json", tmp_path / "s.csv", tmp_path / "s.png"
    code = main([*SMALL, "--batch-sizes", "256,512", "--workers", "0", "--json", "-o", str(out_json),
                 "--csv", str(out_csv), "--plot", str(out_png)])
    captured = capsys.readouterr()
    assert code == exitcodes.OK
    doc = json.loads(captured.out)
    assert doc == json.loads(out_json.read_text())
    validate_sweep(doc)
    assert doc["kind"] == "gpudoctor.bench.mnist" and doc["complete"] and not doc["interrupted"]
    assert len(doc["runs"]) == 6  # 2 batch sizes x (dataloader, tuned, resident)
    epochs = [r["epoch_s"] for r in doc["runs"]]
    assert epochs == sorted(epochs)
    assert doc["recommendation"]["best"]["device"] == "cpu"
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    assert [(r["mode"], int(r["batch_size"])) for r in rows] == [(r["mode"], r["batch_size"]) for r in doc["runs"]]
    assert all(float(r["samples_per_s"]) > 0 for r in rows)
    png = out_png.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    # Progress went to stderr, one line per run (not a terminal here).
    assert captured.err.count("gpudoctor: [") == 6

    code = main([*SMALL, "--batch-sizes", "256", "--workers", "0", "--modes", "resident"])
    table = capsys.readouterr().out
    assert code == exitcodes.OK
    assert "resident" in table and "Recommendation:" in table and "samples/s" in table


def test_ctrl_c_keeps_finished_runs_and_exits_130(tmp_path):
    """SIGINT to a real `gpudoctor bench mnist` process mid-sweep: valid JSON/CSV, exit 130."""
    out_json, out_csv = tmp_path / "s.json", tmp_path / "s.csv"
    # Many runs, the first few quick: the signal lands with some finished and more to come.
    argv = [sys.executable, "-m", "gpudoctor", *SMALL, "--modes", "resident",
            "--batch-sizes", "1024,512,256,128,64,32,16,8", "--train-samples", "4096",
            "-o", str(out_json), "--csv", str(out_csv)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    progress = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        progress.append(line)
        if line.startswith("gpudoctor: [") and len([p for p in progress if p.startswith("gpudoctor: [")]) == 2:
            proc.send_signal(signal.SIGINT)
            break
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == exitcodes.INTERRUPTED, err
    doc = json.loads(out_json.read_text())
    validate_sweep(doc)
    assert doc["interrupted"] and not doc["complete"] and doc["planned_runs"] == 8
    assert 2 <= len(doc["runs"]) < 8
    assert all(r["status"] == "ok" for r in doc["runs"])
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    assert len(rows) == len(doc["runs"])
    assert "interrupted" in err and f"{len(doc['runs'])} of 8 runs" in err
    assert "Traceback" not in err
    assert "interrupted: " in out  # the table says so too


def test_bench_without_workload_shows_help(capsys):
    assert main(["bench"]) == exitcodes.USAGE
    assert "mnist" in capsys.readouterr().err


# --------------------------------------------------------------------------- probe
def test_probe_is_registered_at_full_level():
    from gpudoctor.probes import registry

    probe = registry()["workload"]
    assert probe.level == "full" and probe.uses_torch and not probe.runs_at("standard")


def test_probe_skips_without_cuda():
    from gpudoctor.backends.na import NA
    from gpudoctor.probes import ProbeContext
    from gpudoctor.probes.workload import run

    ctx = ProbeContext(gpu=None, level="full", _torch_facts={"cuda_available": False,
                                                             "cuda_init_error": "RuntimeError: no driver"})
    result = run(ctx)
    assert result.status.value == "skip" and "no driver" in result.summary
    quick = run(ProbeContext(gpu=None, level="quick", _torch_facts=NA("QuickMode")))
    assert quick.status.value == "skip"


def test_probe_measurement_without_a_reference_figure():
    """The probe's body on the CPU: the figure is reported, with no comparison invented."""
    from gpudoctor.core.model import ProbeResult
    from gpudoctor.probes import workload

    assert workload.EXPECTED_SAMPLES_PER_S == {} or all(
        isinstance(v, tuple) and v[1] for v in workload.EXPECTED_SAMPLES_PER_S.values())
    result = workload.measure(ProbeResult(probe="workload"), "cpu", train_samples=2048)
    names = {m.name: m for m in result.measurements}
    assert names["workload_samples_per_s"].value > 0
    assert "workload_expected_samples_per_s" not in names
    assert result.details["comparison"] is None
    codes = [f.code for f in result.findings]
    assert "workload_measured" in codes
    assert "nothing to compare" in [f for f in result.findings if f.code == "workload_measured"][0].summary
    # 2048 samples is too few to learn the set: the accuracy warning fires for real.
    assert "workload_low_accuracy" in codes and result.status.value == "warn"
    json.dumps(result.to_dict(), allow_nan=False)
    if SCHEMA.exists():
        jsonschema = pytest.importorskip("jsonschema")
        from gpudoctor.core.model import Report

        jsonschema.validate(Report(results=[result]).to_dict(), json.loads(SCHEMA.read_text()))


def test_probe_compares_when_a_figure_is_known(monkeypatch):
    from gpudoctor.probes import workload

    assert workload.expected_for("NVIDIA H100 80GB HBM3") is None or workload.EXPECTED_SAMPLES_PER_S
    monkeypatch.setitem(workload.EXPECTED_SAMPLES_PER_S, "H100", (1.0e6, "test entry"))
    assert workload.expected_for("NVIDIA H100 80GB HBM3") == (1.0e6, "test entry")
    assert workload.expected_for("Tesla T4") is None


def test_command_line_and_probe_discovery_do_not_import_torch():
    """Parsing `bench mnist` and listing probes stays light: torch loads only when runs start."""
    assert modules_loaded("from gpudoctor.cli import build_parser\n"
                          "build_parser().parse_args(['bench', 'mnist', '--quick'])\n"
                          "from gpudoctor.probes import registry\n"
                          "registry()\n"
                          "import gpudoctor.workload",
                          ("torch", "pynvml", "textual", "matplotlib")) == []
