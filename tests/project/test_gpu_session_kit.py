"""benchmarks/gpu_session.sh, the GPU check kit, works before a GPU exists (issues #16, #40).

A lent GPU gives 15 minutes of device time in all, machine starts counted, so the kit is at most
two commands, the first at most 360 s, each ending itself before its call's limit. Here, with no
GPU, each command runs with ``--smoke`` (tiny sizes, the same steps and packaging; the steps that
need a GPU run and fail fast, and their exit status is recorded) in the GPU machine's conditions
as far as this machine allows: gpudoctor's wheel is built first by the kit's own preparation
(benchmarks/gpu_session_prepare.sh), then installed from the carried wheels with ``pip --no-index``
while every proxy points nowhere, and every step runs outside the checkout against the fake
one-GPU NVML of benchmarks/fake_nvml. The interpreter is this test run's (the GPU machine's is
Python 3.12 with torch 2.11; the checks here hold for whichever Python runs them).

Nothing here asserts a duration: limits are exercised with a step that never ends, and conditions
are waited for with a generous upper bound.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import psutil
import pytest

from conftest import ROOT
from gpudoctor.backends.recording import load_recording

SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"
PREPARE = ROOT / "benchmarks" / "gpu_session_prepare.sh"
DOC = ROOT / "docs" / "gpu-session.md"
FAKE_NVML = ROOT / "benchmarks" / "fake_nvml"
COMMANDS = ["first", "rest"]
# The device tool's limits (/work/.library/device/README.md) and issue 40's: 8 files back from
# $OUT, 2,000 characters a command; at most two commands, the first at most 360 s, the second 300 s.
MAX_FILES = 8
MAX_COMMANDS = 2
CALL_LIMIT_S = {"first": 360, "rest": 300}
# The first command's steps in order of value: the facts only a GPU gives, then the measuring
# probes' ceilings (inside report_full), then the workload, the hooks, distributed and why.
FIRST_STEPS = ["setup", "nvidia_smi", "record", "report_quick", "report_standard", "report_full", "gpm_truth",
               "gpu_facts", "cuinit", "bench_mnist", "hooks_overhead", "distributed", "why_gpu"]
WAIT_S = 1500  # a smoke command's own bound: its budget at the smoke slack, and then some

pytestmark = pytest.mark.timeout(WAIT_S + 300)


def _kit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=WAIT_S, env=env)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """gpudoctor's wheel, built by the kit's own preparation (the other carried wheels, textual and the
    peers, are already installed here)."""
    folder = tmp_path_factory.mktemp("carried") / ".whl"
    env = dict(os.environ, GPU_SESSION_WHEELS=str(folder), PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(PREPARE), "--wheel-only"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    built = sorted(p.name for p in folder.iterdir())
    assert len(built) == 2 and built[0] == "COMMIT" and re.fullmatch(r"gpudoctor-.+-py3-none-any\.whl", built[1])
    return folder


def _env(tmp_path: Path, wheels: Path | None, fake_nvml: bool = True, **extra: str) -> dict[str, str]:
    """The GPU machine's conditions: no package index, no network, the carried wheels only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "GPU_SESSION_"))}
    env.update(OUT=str(tmp_path / "out"), GPU_SESSION_WORK=str(tmp_path / "work"), PYTHON=sys.executable,
               GPU_SESSION_WHEELS=str(wheels or tmp_path / "no-wheels"), PIP_NO_INDEX="1",
               http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9",
               HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9")
    env.pop("PYTHONPATH", None)
    if fake_nvml:
        env["PYTHONPATH"] = str(FAKE_NVML)
    env.update(extra)
    return env


def _plan(*args: str) -> list[list[str]]:
    proc = _kit("--steps", *args)
    assert proc.returncode == 0, proc.stderr
    return [line.split("\t") for line in proc.stdout.splitlines()]


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def _members(tarball: Path) -> dict[str, bytes]:
    with tarfile.open(tarball) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _step_rows(members: dict[str, bytes], command: str) -> dict[str, tuple[int, str]]:
    """Each step's (limit, exit status) as steps.tsv holds them, in order."""
    lines = members[f"{command}/steps.tsv"].decode().splitlines()
    assert lines[0].split("\t") == ["step", "limit_s", "exit", "seconds"]
    rows = [line.split("\t") for line in lines[1:]]
    return {name: (int(limit), status) for name, limit, status, _ in rows}


def _planned(command: str) -> list[str]:
    return [row[1] for row in _plan(command) if row[0] == command and row[1] != "total"]


# ---------------------------------------------------------------------------- the plan


def test_list_prints_the_commands_one_per_line_in_order_of_value():
    proc = _kit("--list")
    assert proc.returncode == 0 and proc.stdout.splitlines() == COMMANDS


def test_steps_shows_at_most_two_commands_the_first_within_360_s():
    rows = _plan()
    commands = [r[0] for r in rows if r[0] != "all"]
    assert list(dict.fromkeys(commands)) == COMMANDS and len(COMMANDS) <= MAX_COMMANDS
    for command in COMMANDS:
        limits = [int(r[2]) for r in rows if r[0] == command and r[1] != "total"]
        total = [r for r in rows if r[0] == command and r[1] == "total"]
        assert len(total) == 1 and int(total[0][2]) == sum(limits), command
        ends_by, call_limit = map(int, re.search(r"ends by (\d+) s, its call limit timeout_s=(\d+)",
                                                 total[0][3]).groups())
        # the step limits fit inside the time the command gives itself, which ends before its call's
        assert sum(limits) <= ends_by < call_limit <= CALL_LIMIT_S[command], (command, sum(limits), ends_by)
        assert _plan(command) == [r for r in rows if r[0] == command]
    assert [r[1] for r in rows if r[0] == "first" and r[1] != "total"] == FIRST_STEPS
    said = {r[1]: r for r in rows if r[0] == "all"}
    assert int(said["commands"][2]) == len(COMMANDS) <= MAX_COMMANDS
    assert int(said["total"][2]) == sum(CALL_LIMIT_S.values())
    assert "the first at most 360 s" in said["commands"][3]


def test_the_doc_shows_the_plan_and_the_exact_calls():
    """docs/gpu-session.md lists every step with the limit the kit gives it, and the device calls
    whose timeout_s is each command's limit, each under the tool's 2,000 characters."""
    doc = DOC.read_text(encoding="utf-8")
    for command, name, limit in (r[:3] for r in _plan() if r[0] in COMMANDS and r[1] != "total"):
        assert re.search(rf"\|\s*`{command}`\s*\|\s*`{name}`\s*\|\s*{limit}\s*\|", doc), (command, name, limit)
    for command in COMMANDS:
        call = (f'run(command="bash benchmarks/gpu_session.sh {command}", carry=[".whl"], '
                f"timeout_s={CALL_LIMIT_S[command]})")
        assert call in doc and len(call) < 2000
    assert "bash benchmarks/gpu_session_prepare.sh" in doc
    assert "1500" not in SCRIPT.read_text() and "TOTAL_LIMIT_S" not in SCRIPT.read_text()


def test_bad_arguments_are_usage_errors():
    for args in ([], ["nonsense"], ["--smoke"], ["--smoke", "everything"], ["--steps", "nonsense"]):
        proc = _kit(*args)
        assert proc.returncode == 2 and "usage:" in proc.stderr, args


# ---------------------------------------------------------------------------- smoke runs


def test_smoke_first_runs_every_step_from_the_carried_wheel_and_packs_after_each(tmp_path, wheels):
    """The whole first command; one step (hooks_overhead) is made to hang, and its time limit ends
    it while the steps before and after keep their results. setuptools cannot be imported (the GPU
    image's may be older than the >= 77 that building gpudoctor needs): nothing may be built there."""
    old_setuptools = tmp_path / "old-setuptools" / "setuptools"
    old_setuptools.mkdir(parents=True)
    (old_setuptools / "__init__.py").write_text("raise ImportError('setuptools too old to build gpudoctor')\n")
    env = _env(tmp_path, wheels, GPU_SESSION_SMOKE_HANG="hooks_overhead", GPU_SESSION_LIMITS="hooks_overhead=2",
               PYTHONPATH=os.pathsep.join([str(FAKE_NVML), str(old_setuptools.parent)]))
    proc = _kit("--smoke", "first", env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = _files(tmp_path / "out")
    assert len(files) <= MAX_FILES and [f.name for f in files] == ["gpu_session_first.tgz"]
    members = _members(files[0])
    rows = _step_rows(members, "first")
    assert list(rows) == FIRST_STEPS  # every step ran, in order, and its exit status is kept
    for name, (_, status) in rows.items():
        assert status.isdigit(), (name, status)  # ran (none skipped for want of time)
        assert f"first/{name}.err" in members
        assert f"first/{name}.out" in members or name == "setup"
    assert members["first/packed.log"].decode().splitlines() == [f"packed after {name}" for name in FIRST_STEPS]
    # gpudoctor came from the carried wheel, installed with no index, and ran outside the checkout
    setup = members["first/setup.out"].decode()
    assert "installing 1 carried wheels: gpudoctor-" in setup
    assert re.search(r"^gpudoctor \S+ from .*/work/site/gpudoctor$", setup, re.M), setup
    assert "the carried gpudoctor wheel matches this tree" in setup
    assert rows["setup"][1] == "0"
    # on the fake NVML the facts that need no torch GPU are real results
    for name in ("record", "report_quick", "cuinit"):
        assert rows[name][1] == "0", (name, members[f"first/{name}.err"][-800:])
    for result in ("recording.json", "recording_training.json", "report_quick.json", "report_standard.json",
                   "full/report-full.json", "full/summary.json", "cuinit.json", "bench_mnist.json"):
        assert members.get(f"first/{result}"), result
    assert rows["hooks_overhead"] == (2, "124")  # killed at its limit
    for recording in ("recording.json", "recording_training.json"):  # replayable, as tests/data needs
        path = tmp_path / recording
        path.write_bytes(members[f"first/{recording}"])
        assert load_recording(path)["nvml"]["samples"], recording
    cuinit = json.loads(members["first/cuinit.json"])
    assert cuinit["started"] and cuinit["gpus"][0]["persistence_mode"] == 1  # the fake board's, as found
    assert cuinit["cuinit_s"]["median"] is not None and cuinit["cuda_start_wall_s"]["median"] is not None
    assert b"first" in members["first/session.tsv"] and b"smoke" in members["first/session.tsv"]
    assert "gpu-session: first done" in proc.stdout


def test_smoke_rest_runs_every_step(tmp_path, wheels):
    proc = _kit("--smoke", "rest", env=_env(tmp_path, wheels))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = _files(tmp_path / "out")
    assert [f.name for f in files] == ["gpu_session_rest.tgz"]
    members = _members(files[0])
    rows = _step_rows(members, "rest")
    assert list(rows) == _planned("rest") and all(status.isdigit() for _, status in rows.values())
    pytest_out = members["rest/pytest_gpu.out"].decode()
    assert "tests/probes/test_gpu_core.py" in pytest_out and "tests/probes/test_probes_gpu.py" in pytest_out
    assert rows["pytest_gpu"][1] == "0"  # the named GPU test files collected and skipped cleanly
    assert rows["watch"][1] == "0"


def test_the_command_ends_itself_before_its_budget_skipping_what_no_longer_fits(tmp_path, wheels):
    """A step that hangs is cut to the time the command has left, and every later step is recorded
    as skipped: the command cannot run past its own end, whatever its steps do."""
    env = _env(tmp_path, wheels, GPU_SESSION_SMOKE_HANG="record", GPU_SESSION_BUDGET_S="20")
    proc = _kit("--smoke", "first", env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = _step_rows(_members(tmp_path / "out" / "gpu_session_first.tgz"), "first")
    assert list(rows) == FIRST_STEPS
    assert rows["record"][1] in ("124", "skipped")
    after = FIRST_STEPS[FIRST_STEPS.index("record") + 1:]
    assert [rows[name][1] for name in after] == ["skipped"] * len(after)
    assert "--- report_quick: skipped" in proc.stdout


def test_a_command_cut_off_still_returns_the_steps_before(tmp_path, wheels):
    """The device call's limit (or a machine taken back) kills everything: what finished is in $OUT."""
    env = _env(tmp_path, wheels, GPU_SESSION_SMOKE_HANG="report_quick")  # report_quick never ends
    proc = subprocess.Popen(["bash", str(SCRIPT), "--smoke", "first"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    tarball = tmp_path / "out" / "gpu_session_first.tgz"
    deadline = time.monotonic() + WAIT_S
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if "record" in _step_rows(_members(tarball), "first"):
                    break  # report_quick, which never ends, is running now
            except (OSError, tarfile.TarError, KeyError, EOFError):
                pass
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.2)  # the next look at the tarball, or the kit's end
    finally:
        # each step's `timeout` leads a process group of its own: its processes are ended by id too
        started = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for child in started:
            with contextlib.suppress(psutil.Error):
                child.kill()
        proc.wait()
    members = _members(tarball)
    rows = _step_rows(members, "first")
    assert list(rows)[:3] == ["setup", "nvidia_smi", "record"]
    assert members["first/recording.json"] and members["first/record.err"]
    assert len(_files(tmp_path / "out")) == 1


def test_a_failed_install_of_the_carried_wheels_stops_the_command_with_one_line(tmp_path, wheels):
    broken = tmp_path / "wheels"
    broken.mkdir()
    for wheel in wheels.glob("*.whl"):
        (broken / wheel.name).write_bytes(wheel.read_bytes())
    (broken / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip file")
    proc = _kit("--smoke", "first", env=_env(tmp_path, broken))
    assert proc.returncode == 3
    said = [line for line in proc.stdout.splitlines() if line.startswith("gpu-session: ")]
    assert len(said) == 2 and said[1].startswith("gpu-session: cannot install the carried wheels in ")
    rows = _step_rows(_members(tmp_path / "out" / "gpu_session_first.tgz"), "first")
    assert rows == {"setup": (120, "3")}  # stopped at once: no later step ran


def test_a_wheel_older_than_the_tree_is_said_before_the_steps(tmp_path, wheels):
    """A wheel prepared before the last change of gpudoctor/ or probes/ would check old code with
    the new tests and scripts: the set-up says so (and the command goes on: the GPU time is not lost)."""
    stale = tmp_path / "stale"
    stale.mkdir()
    (wheel,) = wheels.glob("gpudoctor-*.whl")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(stale / wheel.name, "w") as copy:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "gpudoctor/probes/__init__.py":
                data += b"# an older version\n"
            copy.writestr(item, data)
    proc = _kit("--smoke", "first", env=_env(tmp_path, stale, GPU_SESSION_BUDGET_S="1"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    warned = [line for line in proc.stdout.splitlines() if "WARNING" in line]
    assert len(warned) == 1 and warned[0].startswith(
        "gpu-session: WARNING: the carried gpudoctor wheel differs from this tree (prepare again): ")
    assert "__init__.py" in warned[0]
    rows = _step_rows(_members(tmp_path / "out" / "gpu_session_first.tgz"), "first")
    assert rows["setup"][1] == "0" and list(rows) == FIRST_STEPS


def test_without_gpudoctors_wheel_the_command_stops_naming_the_preparation(tmp_path):
    (tmp_path / "no-wheels").mkdir()
    proc = _kit("--smoke", "first", env=_env(tmp_path, None))
    assert proc.returncode == 3
    assert proc.stdout.strip().splitlines()[-1].startswith("gpu-session: need exactly one gpudoctor wheel in ")


def test_a_missing_module_stops_the_command_naming_it(tmp_path, wheels):
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['jsonschema'] = None\n")
    proc = _kit("--smoke", "rest", env=_env(tmp_path, wheels, fake_nvml=False, PYTHONPATH=str(blocker)))
    assert proc.returncode == 3
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("gpu-session: missing on this machine: jsonschema (run benchmarks/gpu_session_prepare.sh")


def test_gpm_truth_knows_each_phases_answer_and_reads_through_the_backend():
    """benchmarks/gpm_truth.py on stand-ins (no GPU here): each phase's medians get gpudoctor's
    verdict, and the expected verdicts are ones the verdict function gives for such readings."""
    from types import SimpleNamespace

    from gpudoctor.backends import NA
    from support.script_loader import load_script

    truth = load_script(ROOT / "benchmarks" / "gpm_truth.py", "gpm_truth")
    typical = {"idle": {"gpu_util_pct": 0, "sm_active_pct": 0.2},
               "bf16_gemm": {"gpu_util_pct": 100, "sm_active_pct": 92, "tensor_active_pct": 71},
               "tiny_kernels": {"gpu_util_pct": 100, "sm_active_pct": 4, "tensor_active_pct": 0},
               "copy": {"gpu_util_pct": 100, "sm_active_pct": 45, "dram_active_pct": 88}}
    for phase in truth.PHASES:
        judged = truth._judge({"phase": phase, "median": typical[phase]})
        assert judged["met"], (phase, judged["verdict"])

    class Gpu:
        reads = 0

        def gpm(self, index):
            self.reads += 1
            return {"sm_active_pct": NA("Warming")} if self.reads == 1 else {"sm_active_pct": 5.0,
                                                                             "tensor_active_pct": 0.0}

        def fast_sample(self, index):
            return {"gpu_util_pct": 100, "power_w": 80.0}

        def static(self, index):
            return {"power_limit_w": 350.0}

    fake_torch = SimpleNamespace(cuda=SimpleNamespace(synchronize=lambda: None))
    result = truth._judge(truth._run_phase(fake_torch, Gpu(), 0, "idle", 1.2, "small"))
    assert result["readings"] and result["median"]["sm_active_pct"] == 5.0
    assert result["gpm_read_cpu_ms"] is not None and result["verdict"]["code"] == "busy_small_kernels"
    assert not result["met"]  # an "idle" phase whose GPU is busy does not meet its answer
