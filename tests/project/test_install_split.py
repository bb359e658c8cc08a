"""The light install (no torch), `report --python`, and one verdict for --quick and the full report.

Issue 12 items 1, 2 and 8: `pip install gpudoctor` has no torch, so every path must work
without it; `report --python PATH` checks another environment's torch; `--quick`, the
exporter and the TUI read torch's CUDA build as text and flag a driver too old for it with
the same code as the environment probe; `report --quick` imports only what it runs.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

from gpudoctor.core import exitcodes
from gpudoctor.backends.cuda_compat import driver_build_findings
from gpudoctor.core.model import Status
from gpudoctor.backends.torch_build import (InterpreterError, inspect_interpreter, local_build, parse_version_file,
                                   read_build)

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[1] / "data"
FAKE_NVML = ROOT / "benchmarks" / "fake_nvml"

from support.torchless import BLOCK_TORCH, _gpudoctor  # noqa: E402

TORCH_VERSION_PY = textwrap.dedent("""\
    from typing import Optional

    __all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
    __version__ = '{version}'
    debug = False
    cuda: Optional[str] = {cuda}
    git_version = '0000000000000000000000000000000000000000'
    hip: Optional[str] = None
    rocm: Optional[str] = None
    xpu: Optional[str] = None
""")


def _fake_torch(tmp_path: Path, version: str = "2.14.1+cu130", cuda: str | None = "13.0") -> Path:
    package = tmp_path / "faketorch" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('this fake torch must not be imported')\n")
    (package / "version.py").write_text(TORCH_VERSION_PY.format(
        version=version, cuda=repr(cuda) if cuda else "None"))
    return package.parent


def _codes(result: dict) -> set[str]:
    return {f["code"] for f in result["findings"]}


# ---------------------------------------------------------------------- the shared check
def test_driver_build_findings_table():
    fail = driver_build_findings("470.57.02", "11.4", "2.14.1+cu130", "13.0")
    assert [(f.status, f.code) for f in fail] == [(Status.FAIL, "driver_too_old")]
    assert ">= 580.65.06" in fail[0].fix and "cu118" in fail[0].fix
    warn = driver_build_findings("550.54.15", "12.4", "2.8.0+cu128", "12.8")
    assert [(f.status, f.code) for f in warn] == [(Status.WARN, "driver_older_than_build")]
    assert driver_build_findings("580.95.05", "13.0", "2.14.1+cu130", "13.0") == []
    assert driver_build_findings("580.95.05", "13.0", "2.14.1+cpu", None) == []
    assert driver_build_findings(None, None, "2.14.1+cu130", "13.0") == []


def test_parse_version_file_reads_torchs_layout():
    text = TORCH_VERSION_PY.format(version="2.14.1+cu130", cuda="'13.0'")
    assert parse_version_file(text) == {"version": "2.14.1+cu130", "cuda": "13.0", "hip": None}
    cpu = TORCH_VERSION_PY.format(version="2.13.0+cpu", cuda="None")
    assert parse_version_file(cpu) == {"version": "2.13.0+cpu", "cuda": None, "hip": None}
    old_style = "__version__ = '1.13.1+cu117'\ndebug = False\ncuda = '11.7'\nhip = None\n"
    assert parse_version_file(old_style)["cuda"] == "11.7"
    assert parse_version_file("print('hello')\n") == {"version": None, "cuda": None, "hip": None}


def test_read_build_of_a_fake_torch(tmp_path):
    folder = _fake_torch(tmp_path, "2.15.0+cu132", "13.2") / "torch"
    build = read_build(str(folder), sys.executable, "3.11")
    assert (build.installed, build.version, build.cuda) == (True, "2.15.0+cu132", "13.2")
    assert build.describe() == "torch 2.15.0+cu132 (CUDA 13.2)"
    (folder / "version.py").unlink()
    broken = read_build(str(folder), sys.executable, "3.11")
    assert broken.installed and broken.version is None and "cannot read" in broken.error
    assert not read_build(None, sys.executable, "3.11").installed


def test_local_build_matches_the_torch_this_python_imports():
    pytest.importorskip("torch")
    import torch

    build = local_build()
    assert build.version == str(torch.__version__)
    assert build.cuda == torch.version.cuda


# ---------------------------------------------------------------------- one verdict
def test_quick_fails_on_the_driver_too_old_recording_like_the_full_report():
    rec = str(DATA / "handmade_driver_too_old.json")
    quick = _gpudoctor(["report", "--quick", "--json", "--replay", rec])
    standard = _gpudoctor(["report", "--json", "--replay", rec, "--probe", "environment"])
    assert quick.returncode == exitcodes.FAIL, quick.stderr
    assert standard.returncode == exitcodes.FAIL, standard.stderr
    q_env = next(r for r in json.loads(quick.stdout)["results"] if r["probe"] == "environment")
    s_env = next(r for r in json.loads(standard.stdout)["results"] if r["probe"] == "environment")
    assert "driver_too_old" in _codes(q_env) and "driver_too_old" in _codes(s_env)
    q_find = next(f for f in q_env["findings"] if f["code"] == "driver_too_old")
    s_find = next(f for f in s_env["findings"] if f["code"] == "driver_too_old")
    assert q_find == s_find  # the same words, from the same code


def test_quick_fails_with_a_470_driver_and_a_cu130_torch_on_disk(tmp_path):
    """Live path end to end: fake 470 NVML (benchmarks/fake_nvml) and a torch/version.py
    saying CUDA 13.0 on a temporary path; torch is never imported (its __init__ raises)."""
    pytest.importorskip("pynvml")
    fake_torch = _fake_torch(tmp_path)
    env = {"PYTHONPATH": os.pathsep.join([str(fake_torch), str(FAKE_NVML), os.environ.get("PYTHONPATH", "")]),
           "FAKE_NVML_DRIVER": "470.57.02", "FAKE_NVML_CUDA": "11040"}
    proc = _gpudoctor(["report", "--quick", "--json"], env_extra=env)
    assert proc.returncode == exitcodes.FAIL, proc.stderr
    env_result = next(r for r in json.loads(proc.stdout)["results"] if r["probe"] == "environment")
    too_old = next(f for f in env_result["findings"] if f["code"] == "driver_too_old")
    assert "470.57.02" in too_old["summary"] and "CUDA 13.0" in too_old["summary"]
    measured = {m["name"]: m["value"] for m in env_result["measurements"]}
    assert measured["torch"] == "2.14.1+cu130" and measured["torch_cuda_build"] == "13.0"
    # The same machine with a current driver: no finding, exit 0.
    env.update(FAKE_NVML_DRIVER="580.95.05", FAKE_NVML_CUDA="13000")
    ok = _gpudoctor(["report", "--quick", "--json"], env_extra=env)
    assert ok.returncode == exitcodes.OK, ok.stdout[-2000:] + ok.stderr


def test_quick_verdict_and_the_exporter_agree_with_report_quick():
    from gpudoctor.exporter import quick_report_producer
    from gpudoctor.report.quick import quick_verdict

    rec = str(DATA / "handmade_driver_too_old.json")
    verdict = quick_verdict(replay=rec)
    assert verdict.status == Status.FAIL and verdict.probe == "environment"
    assert verdict.headline.startswith("The driver (550.54.15) supports CUDA up to 12.4")
    assert verdict.line(40).startswith("FAIL: The driver") and len(verdict.line(40)) == 40
    exported = quick_report_producer(rec)()
    assert exported.status == Status.FAIL
    assert "driver_too_old" in {f.code for f in exported.result("environment").findings}


def test_quick_verdict_is_plain_bounded_text():
    from gpudoctor.core.model import Report, ProbeResult
    from gpudoctor.report.quick import HEADLINE_MAX, verdict_of

    result = ProbeResult("environment")
    result.find(Status.WARN, "x", "\x1b[31mred\x1b[0m [bold]markup[/bold]\n" + "y" * 500)
    verdict = verdict_of(Report(results=[result.settle()]))
    assert "\x1b" not in verdict.headline and "\n" not in verdict.headline
    assert len(verdict.headline) <= HEADLINE_MAX
    assert verdict_of(Report(results=[ProbeResult("health")])).status == Status.PASS


# ---------------------------------------------------------------------- lazy registry / speed
def test_catalogue_matches_every_probe_module():
    import gpudoctor.probes as probes_pkg
    from gpudoctor.probes import CATALOGUE, Probe, _uncatalogued_modules

    assert _uncatalogued_modules() == [], "add new probe modules to probes.CATALOGUE"
    for name, (module_name, level) in CATALOGUE.items():
        probe = importlib.import_module(f"{probes_pkg.__name__}.{module_name}").PROBE
        assert isinstance(probe, Probe)
        assert (probe.name, probe.level) == (name, level)


def test_report_quick_json_imports_only_what_it_runs():
    code = BLOCK_TORCH + textwrap.dedent("""
        import io, json, contextlib
        from gpudoctor.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main(["report", "--quick", "--json"])
        json.loads(out.getvalue())
        print(json.dumps(sorted(sys.modules)))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    loaded = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    forbidden = {"torch", "textual", "gpudoctor.workload", "multiprocessing"} | {
        f"gpudoctor.probes.{m}" for m in ("memory", "compute", "transfer", "correctness", "workload", "distributed")}
    assert not loaded & forbidden, sorted(loaded & forbidden)
    assert not [m for m in loaded if m.startswith(("torch.", "textual.", "gpudoctor.workload."))]
    assert {"gpudoctor.probes.environment", "gpudoctor.probes.health"} <= loaded


# ---------------------------------------------------------------------- --python
@pytest.mark.parametrize("make_path, words", [
    (lambda tmp: str(tmp / "missing" / "python"), "no such file"),
    (lambda tmp: str(tmp), "is a directory"),
    (lambda tmp: "/bin/true" if os.path.exists("/bin/true") else sys.executable + "-absent", ""),
])
def test_bad_python_is_one_line_and_exit_2(tmp_path, make_path, words):
    proc = _gpudoctor(["report", "--python", make_path(tmp_path)])
    assert proc.returncode == exitcodes.USAGE
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpudoctor: error: --python"), proc.stderr
    assert words in lines[0]


def test_python_with_replay_is_a_usage_error():
    proc = _gpudoctor(["report", "--python", sys.executable, "--replay", str(DATA / "handmade_driver_too_old.json")])
    assert proc.returncode == exitcodes.USAGE and "cannot be combined with --replay" in proc.stderr


def test_inspect_interpreter_rejects_a_non_python(tmp_path):
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\necho hello\n")
    script.chmod(0o755)
    with pytest.raises(InterpreterError, match="not a Python interpreter"):
        inspect_interpreter(str(script))


@pytest.fixture(scope="module")
def torchless_python(tmp_path_factory) -> str:
    """A fresh venv with nothing installed: no torch, no gpudoctor, no nvidia-ml-py."""
    where = tmp_path_factory.mktemp("torchless") / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    return str(where / "bin" / "python")


def test_torch_probes_skip_in_an_environment_without_torch(torchless_python):
    proc = _gpudoctor(["report", "--json", "--python", torchless_python,
                       "--probe", "environment", "--probe", "memory"])
    assert proc.returncode in (exitcodes.OK, exitcodes.FAIL), proc.stderr  # FAIL: no driver here
    results = {r["probe"]: r for r in json.loads(proc.stdout)["results"]}
    env_skip = next(f for f in results["environment"]["findings"] if f["code"] == "torch_not_installed")
    assert torchless_python in env_skip["summary"]
    assert "--python" in env_skip["fix"] and "pip install torch torchvision" in env_skip["fix"]
    assert results["memory"]["status"] == "skip"
    assert _codes(results["memory"]) == {"torch_not_installed"}


def test_without_torch_here_the_report_still_runs_and_says_how_to_check(tmp_path):
    proc = _gpudoctor(["report", "--json", "--probe", "environment", "--probe", "devices", "--probe", "compute"],
                      prelude=BLOCK_TORCH)
    assert proc.returncode in (exitcodes.OK, exitcodes.FAIL), proc.stderr
    assert "Traceback" not in proc.stderr
    results = {r["probe"]: r for r in json.loads(proc.stdout)["results"]}
    assert "torch_not_installed" in _codes(results["environment"])
    assert results["devices"]["status"] != "error"
    assert results["compute"]["status"] == "skip"


def test_bench_and_hooks_without_torch_name_the_extra():
    proc = _gpudoctor(["bench", "mnist", "--quick"], prelude=BLOCK_TORCH)
    assert proc.returncode == exitcodes.USAGE
    assert proc.stderr.strip().splitlines() == [
        'gpudoctor: error: bench mnist needs torch, which is not installed in this environment: '
        'pip install torch torchvision']
    code = BLOCK_TORCH + textwrap.dedent("""
        from gpudoctor.hooks.torch_support import require_torch
        try:
            require_torch()
        except ModuleNotFoundError as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert "gpudoctor's training hooks need torch: pip install torch torchvision" in out.stdout


def test_python_runs_the_torch_probes_in_that_interpreter_from_a_torchless_process():
    """The parent cannot import torch; the child (this test's Python, which has torch) does."""
    pytest.importorskip("torch")
    prelude = BLOCK_TORCH + "import atexit\natexit.register(lambda: sys.stderr.write('PARENT-TORCH:' + str('torch' in sys.modules) + '\\n'))\n"
    proc = _gpudoctor(["report", "--json", "--python", sys.executable, "--probe", "environment"], prelude=prelude)
    assert proc.returncode in (exitcodes.OK, exitcodes.WARN, exitcodes.FAIL), proc.stderr
    assert "PARENT-TORCH:False" in proc.stderr
    env_result = json.loads(proc.stdout)["results"][0]
    import torch

    measured = {m["name"]: m["value"] for m in env_result["measurements"]}
    assert measured["torch"] == str(torch.__version__)
    assert f"checked with {sys.executable}" in env_result["summary"]
    assert env_result["details"]["torch"]["importable"] is True


def test_python_child_loads_gpudoctor_from_a_wheel_layout(tmp_path):
    """A wheel puts probes/ at gpudoctor/probes/; a source tree keeps them apart (package-dir
    mapping). Install this tree's files in the wheel layout and run --python from there, in a
    parent whose sys.path has no other gpudoctor."""
    pytest.importorskip("torch")
    import shutil

    import pynvml

    site = tmp_path / "site"
    shutil.copytree(ROOT / "gpudoctor", site / "gpudoctor", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "probes", site / "gpudoctor" / "probes", ignore=shutil.ignore_patterns("__pycache__"))
    deps = os.path.dirname(pynvml.__file__)
    code = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(site)!r}]
        sys.path.append({deps!r})
        import gpudoctor, gpudoctor.probes
        assert gpudoctor.__file__.startswith({str(site)!r}), gpudoctor.__file__
        from gpudoctor.cli import main
        sys.exit(main(["report", "--json", "--python", sys.executable, "--probe", "environment"]))
    """)
    # -S: no site-packages .pth files, so no editable install of gpudoctor is on the path.
    proc = subprocess.run([sys.executable, "-S", "-c", BLOCK_TORCH + code], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert proc.returncode in (exitcodes.OK, exitcodes.WARN, exitcodes.FAIL), proc.stderr
    env_result = json.loads(proc.stdout)["results"][0]
    assert env_result["status"] != "error", env_result
    assert env_result["details"]["torch"]["importable"] is True


def test_host_platform_text_matches_platform_without_its_subprocess():
    import platform

    from gpudoctor.backends.host import _platform_text

    assert _platform_text() == platform.platform()


def test_host_cores_and_memory_without_psutil_agree_with_psutil():
    psutil = pytest.importorskip("psutil")
    from gpudoctor.backends.host import _linux_cores_and_memory

    linux = _linux_cores_and_memory()
    if linux is None:
        pytest.skip("not Linux, or /sys//proc lack the fields (psutil is used there)")
    cores, total, available = linux
    assert cores == psutil.cpu_count(logical=False)
    assert total == psutil.virtual_memory().total
    assert abs(available - psutil.virtual_memory().available) < 512 * 2**20  # it moves between reads


def test_a_python_child_that_cannot_load_gpudoctor_is_one_error_result(tmp_path, monkeypatch):
    """A broken gpudoctor folder in the child: the probe becomes an error with the reason,
    and no traceback reaches the terminal."""
    from gpudoctor.report import runner
    from gpudoctor.core.model import ProbeResult

    broken = tmp_path / "gpudoctor"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise RuntimeError('broken install')\n")
    real = runner._installation_paths
    monkeypatch.setattr(runner, "_installation_paths", lambda: (str(broken), *real()[1:]))
    probes = runner.select_probes(["environment"], "standard")
    report = runner.run_probes(probes, runner.RunSpec(level="standard", python=sys.executable))
    result = report.result("environment")
    assert isinstance(result, ProbeResult) and result.status == Status.ERROR
    assert "RuntimeError: broken install" in result.summary


def test_a_torch_version_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    """Before: read_build used a plain open(): a FIFO named torch/version.py hung `report --python`."""
    import threading

    from gpudoctor.backends.torch_build import read_build

    torch_dir = tmp_path / "torch"
    torch_dir.mkdir()
    os.mkfifo(torch_dir / "version.py")
    box: list = []
    reader = threading.Thread(target=lambda: box.append(read_build(str(torch_dir), "python", "3.11")), daemon=True)
    reader.start()
    reader.join(60)
    assert box, "reading a FIFO blocked"
    assert box[0].error and "not a regular file" in box[0].error


def test_an_interpreter_that_prints_without_end_is_stopped_at_the_bound(tmp_path):
    """Before: all of the other interpreter's output was kept (300 MB printed, 1.4 GiB peak).
    Now it is ended, with what it started, once it printed more than the bound."""
    from gpudoctor.system import _proc
    from gpudoctor.backends import torch_build

    script = tmp_path / "python"
    marker = tmp_path / "child.pid"
    script.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {marker}\nexec yes GPUDOCTOR\n")
    script.chmod(0o755)
    with pytest.raises(InterpreterError, match="printed more than 1024 KiB"):
        inspect_interpreter(str(script))
    left = int(marker.read_text())
    assert not _proc._alive(left), "the interpreter's own child outlived it"
    assert torch_build.INSPECT_MAX_OUTPUT == 1 << 20
