"""What users install: the sdist and the wheel built from this checkout, installed into fresh
virtual environments and run from a directory outside the checkout.

The rest of the suite runs the editable source tree, which is green even when the wheel lacks a
module (it once lacked gpudoctor.commands and gpudoctor.why, so the installed `gpudoctor` did
not start). Here:
- `python -m build` makes the sdist and, from it, the wheel (what pip does with a source
  release); the wheel's modules must be exactly the tree's (gpudoctor/ and probes/ as
  gpudoctor.probes, the TUI's .tcss, py.typed);
- the wheel goes into a fresh venv without torch (the light install of the README's first
  command), and from outside the checkout every command starts: `--version`, each command's
  `--help`, `report --quick --json`, `report`, `watch`, `exporter` (scraped once) and the TUI on
  a pseudo-terminal, the last three on the fake one-GPU NVML of benchmarks/fake_nvml;
- the wheel goes once more into a fresh venv with its `[torch]` extra, whose report then runs
  the torch probes;
- the Docker image is built where a Docker daemon answers.
pip installs the dependencies from the package index, as a user's would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import venv
import zipfile
from pathlib import Path

import pytest

from gpudoctor.commands import COMMAND_NAMES
from support.tui_support import STANDIN, PtyApp

ROOT = Path(__file__).resolve().parents[2]
FAKE_NVML = ROOT / "benchmarks" / "fake_nvml"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600,
         check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{argv} exited {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\n"
                             f"stderr:\n{proc.stderr[-3000:]}")
    return proc


def _user_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: nothing of this test run's interpreter or checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP") and not k.startswith("PYTEST")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, Path]:
    """The sdist and the wheel, the wheel built from the unpacked sdist (`python -m build`)."""
    out = tmp_path_factory.mktemp("dist")
    # The checkout is copied first, so the build writes nothing (egg-info, build/) into it.
    src = tmp_path_factory.mktemp("src") / "gpudoctor"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", ".pytest_cache", ".whl"))
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, src], cwd=src)
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0]}


def _tree_files() -> set[str]:
    """What the wheel must hold, as paths inside site-packages."""
    expected: set[str] = set()
    for folder, prefix in ((ROOT / "gpudoctor", "gpudoctor"), (ROOT / "probes", "gpudoctor/probes")):
        for path in folder.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and (
                    path.suffix in (".py", ".tcss", ".typed") or path.parent.name == "demo" and path.suffix == ".json"):
                expected.add(f"{prefix}/{path.relative_to(folder).as_posix()}")
    return expected


def test_the_wheel_holds_every_module_of_the_tree(dists):
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        names = {n for n in wheel.namelist() if not n.split("/")[0].endswith(".dist-info")}
        metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        requires = [line for line in wheel.read(metadata).decode().splitlines() if line.startswith("Requires-Dist:")]
    expected = _tree_files()
    assert not expected - names, f"the wheel lacks {sorted(expected - names)}"
    assert not names - expected, f"the wheel holds files the tree does not: {sorted(names - expected)}"
    # The light install has no torch; the [torch] extra brings torch and torchvision.
    base = [r for r in requires if "extra ==" not in r]
    assert not any(re.match(r"Requires-Dist: torch", r) for r in base), base
    torch_extra = [r for r in requires if 'extra == "torch"' in r]
    assert any("torch>=" in r for r in torch_extra) and any("torchvision" in r for r in torch_extra), requires


def _make_venv(where: Path, spec: str) -> Path:
    venv.EnvBuilder(with_pip=True, symlinks=True).create(where)
    python = where / "bin" / "python"
    _run([python, "-m", "pip", "install", "-q", spec], cwd=where, env=_user_env(), timeout=1200)
    return where / "bin"


@pytest.fixture(scope="module")
def light(dists, tmp_path_factory) -> dict[str, Path]:
    """The light install: the wheel alone, into a fresh venv, used from an empty directory."""
    bin_dir = _make_venv(tmp_path_factory.mktemp("light") / "venv", str(dists["wheel"]))
    return {"bin": bin_dir, "cwd": tmp_path_factory.mktemp("elsewhere")}


def test_light_install_has_no_torch_and_loads_gpudoctor_from_the_venv(light):
    code = ("import importlib.util, gpudoctor, gpudoctor.probes, gpudoctor.commands, gpudoctor.why;"
            "print(gpudoctor.__file__); print(gpudoctor.probes.__file__);"
            "print(importlib.util.find_spec('torch'))")
    out = _run([light["bin"] / "python", "-c", code], cwd=light["cwd"], env=_user_env()).stdout.splitlines()
    venv_dir = str(light["bin"].parent)
    assert out[0].startswith(venv_dir) and out[1].startswith(venv_dir), out
    assert out[2] == "None"


def test_every_command_starts_from_the_installed_wheel(light):
    gpudoctor = light["bin"] / "gpudoctor"
    version = _run([gpudoctor, "--version"], cwd=light["cwd"], env=_user_env())
    assert re.fullmatch(r"gpudoctor \d+\.\d+\S*\n", version.stdout), version.stdout
    helps = [[name, "--help"] for name in COMMAND_NAMES] + [["bench", "mnist", "--help"], ["--help"]]
    for args in helps:
        proc = _run([gpudoctor, *args], cwd=light["cwd"], env=_user_env())
        assert proc.stdout.startswith("usage: gpudoctor"), (args, proc.stdout[:200])


def test_report_runs_from_the_installed_wheel(light):
    gpudoctor = light["bin"] / "gpudoctor"
    quick = _run([gpudoctor, "report", "--quick", "--json"], cwd=light["cwd"], env=_user_env(), check=False)
    assert "Traceback" not in quick.stderr, quick.stderr
    document = json.loads(quick.stdout)
    assert document["tool"]["name"] == "gpudoctor" and document["results"]
    assert quick.returncode in (0, 3, 4, 5), quick.returncode

    # The full report without torch: the torch probes say how to get torch, nothing crashes.
    full = _run([gpudoctor, "report", "--json"], cwd=light["cwd"], env=_user_env(), check=False)
    assert "Traceback" not in full.stderr, full.stderr
    assert full.returncode in (0, 3, 4, 5), (full.returncode, full.stderr)
    results = {r["probe"]: r for r in json.loads(full.stdout)["results"]}
    environment = results["environment"]
    texts = json.dumps(environment)
    assert "torch" in texts and "Traceback" not in texts


def test_report_on_a_gpu_from_the_installed_wheel(light):
    """The fake one-GPU NVML: the quick report reads the GPU through the installed package."""
    env = _user_env(PYTHONPATH=str(FAKE_NVML))
    quick = _run([light["bin"] / "gpudoctor", "report", "--quick", "--json"], cwd=light["cwd"], env=env,
                 check=False)
    assert "Traceback" not in quick.stderr, quick.stderr
    devices = next(r for r in json.loads(quick.stdout)["results"] if r["probe"] == "devices")
    assert "H100" in json.dumps(devices), devices


def test_watch_from_the_installed_wheel(light):
    gpudoctor = light["bin"] / "gpudoctor"
    env = _user_env(PYTHONPATH=str(FAKE_NVML))
    proc = _run([gpudoctor, "watch", "-n", "1", "-i", "0.25"], cwd=light["cwd"], env=env)
    assert re.search(r"\bgpu0 util \d+%", proc.stdout), proc.stdout
    as_json = _run([gpudoctor, "watch", "-n", "1", "-i", "0.25", "--json"], cwd=light["cwd"], env=env)
    assert json.loads(as_json.stdout.splitlines()[0])
    # Without a driver: the documented "no usable GPU" exit, one line, no traceback.
    bare = _run([gpudoctor, "watch", "-n", "1"], cwd=light["cwd"], env=_user_env(), check=False)
    assert bare.returncode == 6 and "Traceback" not in bare.stderr, (bare.returncode, bare.stderr)


def test_exporter_from_the_installed_wheel_serves_metrics(light):
    env = _user_env(PYTHONPATH=str(FAKE_NVML))
    proc = subprocess.Popen([str(light["bin"] / "gpudoctor"), "exporter", "--port", "0", "--interval", "0.5",
                             "--exit-after", "60"], cwd=light["cwd"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            found = re.search(r"serving (http://\S+/metrics)", line)
            url = found.group(1) if found else None
        assert url, f"the exporter did not say where it serves (exit {proc.poll()})"
        body = ""
        while time.monotonic() < deadline and "gpudoctor_gpu_utilization" not in body:
            with urllib.request.urlopen(url, timeout=10) as answer:
                body = answer.read().decode()
            time.sleep(0.3)
        assert "gpudoctor_gpu_utilization" in body, body[:2000]
        proc.terminate()  # a service's normal stop: exit 0
        assert proc.wait(30) == 0 and "gpudoctor exporter: stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_tui_from_the_installed_wheel_on_a_terminal(light):
    app = PtyApp([str(light["bin"] / "gpudoctor"), "--replay", str(STANDIN), "--interval", "0.5",
                  "--doctor-level", "quick"], cwd=light["cwd"], env=_user_env())
    try:
        app.wait_for("GPU 1: NVIDIA A100-SXM4-40GB")
        since = app.mark()
        app.keys("?")
        app.wait_for("gpudoctor keys", since)
        since = app.mark()
        app.keys("\x1b")
        app.wait_for("GPU 1: NVIDIA", since)  # the help closed: the Overview again
        app.keys("q")
        assert app.proc.wait(30) == 0
    finally:
        app.close()


def test_demo_from_the_installed_wheel(light):
    """`gpudoctor --demo` plays the recording the wheel ships (a fake 8-GPU node): `--once` prints
    every GPU within COLUMNS, plain text; the TUI opens on it at 80x24 with the verdict and the
    replay marker in its header."""
    gpudoctor = light["bin"] / "gpudoctor"
    once = _run([gpudoctor, "--demo", "--once"], cwd=light["cwd"], env=_user_env(COLUMNS="80"))
    lines = once.stdout.splitlines()
    assert "replay" in lines[0] and "Doctor: " in lines[0] and "\x1b" not in once.stdout
    assert len([line for line in lines if re.match(r" ?\d util", line)]) == 8 and max(map(len, lines)) <= 80
    app = PtyApp([str(gpudoctor), "--demo", "--interval", "0.5", "--doctor-level", "quick"], cols=80, rows=24,
                 cwd=light["cwd"], env=_user_env())
    try:
        app.wait_for(" 7 util")
        app.wait_for("· replay")
        app.keys("q")
        assert app.proc.wait(30) == 0
    finally:
        app.close()


def test_the_torch_extra_from_the_wheel_runs_the_torch_probes(dists, tmp_path_factory):
    """`pip install "WHEEL[torch]"`: torch and torchvision from the package index, and the report's
    torch probes run in that environment (not skipped for a missing torch)."""
    bin_dir = _make_venv(tmp_path_factory.mktemp("with-torch") / "venv", f"{dists['wheel']}[torch]")
    cwd = tmp_path_factory.mktemp("elsewhere-torch")
    code = "import torch, torchvision; print(torch.__version__, torchvision.__version__)"
    versions = _run([bin_dir / "python", "-c", code], cwd=cwd, env=_user_env()).stdout.split()
    assert len(versions) == 2, versions
    proc = _run([bin_dir / "gpudoctor", "report", "--json", "--probe", "environment", "--probe", "devices"],
                cwd=cwd, env=_user_env(), check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    results = {r["probe"]: r for r in json.loads(proc.stdout)["results"]}
    measured = {m["name"]: m["value"] for m in results["environment"]["measurements"]}
    assert measured.get("torch") == versions[0], measured
    assert results["devices"]["status"] != "skip", results["devices"]


def test_docker_image_builds_and_starts(tmp_path):
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("docker is not installed here")
    info = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        pytest.skip("no Docker daemon answers here (docker info: "
                    f"{(info.stderr.strip().splitlines() or ['?'])[-1][:120]})")
    tag = f"gpudoctor-wheel-test:{os.getpid()}"
    _run([docker, "build", "-q", "-f", ROOT / "deploy" / "docker" / "Dockerfile", "-t", tag, ROOT], cwd=ROOT,
         timeout=1200)
    try:
        out = _run([docker, "run", "--rm", tag, "--version"], cwd=ROOT, timeout=120).stdout
        assert out.startswith("gpudoctor "), out
    finally:
        subprocess.run([docker, "rmi", "-f", tag], capture_output=True, timeout=120)
