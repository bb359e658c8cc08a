"""benchmarks/gpu_session.sh, the GPU check kit, works before a GPU exists (issue #16 items 1, 2).

Every part runs here with ``--smoke`` (tiny sizes, the same packaging; the steps that need a
GPU run and fail fast, and their exit status is recorded): exit 0, at most 8 files under
$OUT, one tarball holding each step's output and exit status. The step limits fit a device
call: each part at most 480 s, all parts at most 25 minutes with each start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"
PARTS = ["core", "measure", "workload", "compare"]
# The device tool's limits (/work/.library/device/README.md): 8 files back from $OUT, 10 minutes
# a command; the kit's own budget: 480 s of steps a part, 25 minutes in all.
MAX_FILES = 8
PART_LIMIT_S = 480
TOTAL_LIMIT_S = 25 * 60
WAIT_S = 600


def _kit(*args: str, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=WAIT_S, env=env, **kw)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, OUT=str(tmp_path / "out"), GPU_SESSION_WORK=str(tmp_path / "work"),
               PYTHON=sys.executable, GPU_SESSION_WHEELS=str(tmp_path / "no-wheels"))
    env.update(extra)
    return env


def _steps(part: str | None = None) -> list[tuple[str, str, int]]:
    proc = _kit("--steps", *([part] if part else []))
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    return [(r[0], r[1], int(r[2])) for r in rows]


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def _members(tarball: Path) -> dict[str, bytes]:
    with tarfile.open(tarball) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _step_rows(members: dict[str, bytes], part: str) -> dict[str, tuple[int, int]]:
    lines = members[f"{part}/steps.tsv"].decode().splitlines()
    assert lines[0].split("\t") == ["step", "limit_s", "exit", "seconds"]
    rows = [line.split("\t") for line in lines[1:]]
    return {name: (int(limit), int(status)) for name, limit, status, _ in rows}


def test_list_prints_the_parts_one_per_line_in_order_of_value():
    proc = _kit("--list")
    assert proc.returncode == 0 and proc.stdout.splitlines() == PARTS


def test_each_part_fits_one_device_call_and_all_fit_25_minutes_with_their_starts():
    rows = _steps()
    script = SCRIPT.read_text()
    start_s = int(script.split("\nSTART_S=")[1].split()[0])
    assert start_s >= 60  # a device call spends "a minute or more" starting a machine
    grand = 0
    for part in PARTS:
        limits = [limit for p, name, limit in rows if p == part and name != "total"]
        total = [limit for p, name, limit in rows if p == part and name == "total"]
        assert limits and total == [sum(limits)], part
        assert sum(limits) <= PART_LIMIT_S, (part, sum(limits))
        assert _steps(part) == [r for r in rows if r[0] == part]
        grand += sum(limits) + start_s
    assert grand <= TOTAL_LIMIT_S
    assert [r for r in rows if r[0] == "all"] == [("all", "total", grand)]


def test_bad_arguments_are_usage_errors():
    for args in ([], ["nonsense"], ["--smoke"], ["--smoke", "everything"], ["--steps", "nonsense"]):
        proc = _kit(*args)
        assert proc.returncode == 2 and "usage:" in proc.stderr, args


@pytest.mark.parametrize("part", PARTS)
def test_smoke_run_of_each_part_packs_every_step_into_one_tarball(tmp_path, part):
    proc = _kit("--smoke", part, env=_env(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "out"
    files = _files(out)
    assert len(files) <= MAX_FILES and [f.name for f in files] == [f"gpu_session_{part}.tgz"]
    members = _members(files[0])
    planned = [name for p, name, _ in _steps(part) if name != "total"]
    rows = _step_rows(members, part)
    assert list(rows) == planned  # every step ran, in order, and its exit status is kept
    for name in planned:
        assert f"{part}/{name}.out" in members or name == "setup"
        assert f"{part}/{name}.err" in members
    assert rows["setup"][1] == 0
    assert f"{part}/console.log" in members and b"smoke" in members[f"{part}/session.tsv"]
    assert f"gpu-session: part {part} done" in proc.stdout
    if part == "core":
        _check_core(members, rows)


def _check_core(members: dict[str, bytes], rows: dict[str, tuple[int, int]]) -> None:
    for report in ("report_quick", "report_standard", "report_full"):
        assert f"core/{report}.json" in members, report  # written even where no GPU answers
    pytest_out = members["core/pytest_core.out"].decode()
    assert "tests/test_gpu_core.py" in pytest_out and "tests/test_probes_gpu.py" in pytest_out
    assert rows["pytest_core"][1] == 0  # the named GPU test files collected and skipped cleanly


def test_a_failed_install_of_the_carried_wheels_stops_the_part_with_one_line(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip file")
    proc = _kit("--smoke", "core", env=_env(tmp_path, GPU_SESSION_WHEELS=str(wheels)))
    assert proc.returncode == 3
    said = [line for line in proc.stdout.splitlines() if line.startswith("gpu-session: ")]
    assert len(said) == 2 and said[1].startswith("gpu-session: cannot install the carried wheels in ")
    rows = _step_rows(_members(tmp_path / "out" / "gpu_session_core.tgz"), "core")
    assert rows == {"setup": (30, 3)}  # stopped at once: no later step ran


def test_a_missing_module_stops_the_part_naming_it(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['jsonschema'] = None\n")
    env = _env(tmp_path, PYTHONPATH=os.pathsep.join(filter(None, [str(blocker), os.environ.get("PYTHONPATH")])))
    proc = _kit("--smoke", "measure", env=env)
    assert proc.returncode == 3
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("gpu-session: missing on this machine: jsonschema (run ../shared/tools/gpu-wheelhouse.sh")


def test_a_part_cut_off_still_returns_the_steps_before(tmp_path):
    env = _env(tmp_path)
    proc = subprocess.Popen(["bash", str(SCRIPT), "--smoke", "workload"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    tarball = tmp_path / "out" / "gpu_session_workload.tgz"
    deadline = time.monotonic() + WAIT_S
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if tarball.exists():
                try:
                    if "bench_mnist" in _step_rows(_members(tarball), "workload"):
                        break
                except (tarfile.TarError, KeyError, EOFError):
                    pass
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the device call's limit, or a lost machine
        proc.wait()
    rows = _step_rows(_members(tarball), "workload")
    assert list(rows)[:2] == ["setup", "bench_mnist"]
    assert len(_files(tmp_path / "out")) == 1
    assert _members(tarball)["workload/bench_mnist.out"]


def test_gpm_truth_knows_each_phases_answer_and_reads_through_the_backend():
    """benchmarks/gpm_truth.py on stand-ins (no GPU here): each phase's medians get gpudoctor's
    verdict, and the expected verdicts are ones the verdict function gives for such readings."""
    from types import SimpleNamespace

    from gpudoctor.backends import NA
    from script_loader import load_script

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
