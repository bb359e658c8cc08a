"""`gpudoctor why` on jobs written the way public training set-ups are (issue 36, and issue 35's
`why` parts): training is not evaluation, several trainers are not one, a stopped job leaves
nothing behind, a job that dies at start-up is said to, a sleeping GPU holder is idle, the words
fit the job (ranks, NCCL, bounds), thread ids across PID namespaces, a kernel thread.

Real processes run the scripts of tests/support/why_scripts/ (epochs.py, hogwild.py, dies_at_start.py);
each waits on a condition (a ``ready`` line, a process tree), never a guessed time.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import jsonschema
import pytest

from gpudoctor.core import exitcodes
from gpudoctor.cli import main
from gpudoctor.why import analysis, rules, session
from gpudoctor.why.stacks import parse_line, parse_raw

from test_why_hang import diagnose as hang_diagnose
from test_why_hang import in_collective, readings, sleeping
from test_why_rules import StandInNvml

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "support" / "why_scripts"
SCHEMA = json.loads((ROOT / "docs" / "why.schema.json").read_text(encoding="utf-8"))
SITE = "/venv/lib/python3.11/site-packages"
LINUX = sys.platform.startswith("linux")
READY_BOUND_S = 240  # an upper bound on start-up on a loaded machine; the wait ends on `ready`


def _line(name: str, mark: str) -> int:
    text = (SCRIPTS / f"{name}.py").read_text(encoding="utf-8")
    return next(n for n, row in enumerate(text.splitlines(), 1) if mark in row)


class _Reader:
    """A source reader over one real file (the shape of session.SourceReader: lines and a tree)."""

    def __init__(self, path: Path) -> None:
        self.path, self.text = str(path), path.read_text(encoding="utf-8")

    def __call__(self, file: str, number: int) -> str:
        rows = self.text.splitlines() if file == self.path else []
        return rows[number - 1].strip() if 0 < number <= len(rows) else ""

    def tree(self, file: str) -> ast.Module | None:
        return ast.parse(self.text) if file == self.path else None


# -- 1. training is not evaluation -------------------------------------------------------------------

def test_no_grad_is_decided_in_the_frames_own_function():
    tree = ast.parse((SCRIPTS / "epochs.py").read_text(encoding="utf-8"))
    assert not rules.no_grad_in_scope(tree, _line("epochs", "TRAIN FORWARD"))
    assert not rules.no_grad_in_scope(tree, _line("epochs", "MODULE FORWARD"))
    assert not rules.no_grad_in_scope(tree, _line("epochs", "while not train(epoch, clock)"))
    assert rules.no_grad_in_scope(tree, _line("epochs", "with torch.no_grad():") + 1)
    other = ast.parse("import torch\n@torch.no_grad()\ndef f():\n    return m(x)\n"
                      "with torch.inference_mode():\n    y = m(x)\n"
                      "    def g():\n        return m(x)\n")
    assert rules.no_grad_in_scope(other, 4) and rules.no_grad_in_scope(other, 6)
    assert not rules.no_grad_in_scope(other, 8)  # a function defined in the block runs when called


@pytest.mark.parametrize("caller, mark", [("while not train(epoch, clock)", "TRAIN FORWARD"),
                                          (None, "MODULE FORWARD")])
def test_a_forward_after_a_no_grad_test_function_is_training(caller, mark):
    """pytorch/examples' style: train(epoch) and then test() with no_grad, the loop under
    `if __name__ == "__main__":`: reading upwards from the module's line found test()'s block."""
    path = SCRIPTS / "epochs.py"
    frames = [f"<module> ({path}:{_line('epochs', caller or mark)})"]
    if caller:
        frames.append(f"train ({path}:{_line('epochs', mark)})")
    frames.append(f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116)")
    stack = parse_line('process 1:"python epochs.py";thread (1): MainThread;' + ";".join(frames) + " 10")
    assert stack is not None
    assert rules.classify(stack, _Reader(path)).category == rules.FORWARD


pytest.importorskip("torch")

from test_why_styles import _kill  # noqa: E402  (the script and its children: the whole session)


def _start(*argv: str, readies: int = 1) -> subprocess.Popen:
    """Start a script of tests/support/why_scripts in a session of its own; return once ``readies``
    processes printed ready (their loops run). If the script ends first, the error carries the end
    of what it wrote to stderr (a trainer's traceback, say)."""
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=err, text=True,
                            start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.stdout is not None
    seen = 0
    for row in proc.stdout:
        seen += row.strip() == "ready"
        if seen >= readies:
            err.close()
            return proc
    _kill(proc)
    err.seek(0)
    said = err.read().decode(errors="replace")[-3000:]
    err.close()
    raise AssertionError(f"{argv} did not reach its loop (exit {proc.returncode}); its stderr ends:\n{said}")


def _why_json(pid: int, capsys, seconds: str = "3") -> dict:
    code = main(["why", "--json", "--seconds", seconds, str(pid)])
    assert code == exitcodes.OK
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, SCHEMA)
    return data


def test_the_scripts_write_each_line_in_one_piece(monkeypatch):
    """Several trainers share one stdout pipe: a line written in pieces (``print`` under
    PYTHONUNBUFFERED writes the word, then the newline) interleaves with another trainer's into
    "readyready", and the test never sees two readies. Each line is one write."""
    from support.script_loader import load_script

    harness = load_script(SCRIPTS / "_harness.py", "_harness")
    writes: list[str] = []

    class Pipe:
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sys, "stdout", Pipe())
    options = harness.parser("doc", 8).parse_args(["--progress", "--steps", "3"])
    clock = harness.StepClock(options)
    ended = [clock.tick() for _ in range(3)]
    assert ended == [False, False, True]
    assert len(writes) == 4 and writes[2] == "ready\n", writes
    assert all(text.endswith("\n") and text.count("\n") == 1 for text in writes), writes
    assert [text.split()[0] for text in writes] == ["progress", "progress", "ready", "progress"], writes


@pytest.mark.parametrize("style", ["functions", "module"])
def test_training_scripts_with_a_no_grad_test_are_not_called_evaluation(style, capsys):
    proc = _start(str(SCRIPTS / "epochs.py"), "--style", style, "--seconds", str(READY_BOUND_S))
    try:
        data = _why_json(proc.pid, capsys)
    finally:
        _kill(proc)
    assert data["shares"]["evaluation"] < 0.05, data["verdict"]
    assert data["shares"]["forward"] + data["shares"]["backward"] + data["shares"]["optimizer"] > 0.5, data["shares"]
    assert "sample during training" not in data["verdict"]["message"]


# -- 2. several trainers are not one -----------------------------------------------------------------

# spawn in the default run (it starts multiprocessing's resource tracker too, which must not count);
# fork, the examples' default on Linux, outside it (about 30 s more on the shared 2-core machine)
@pytest.mark.parametrize("method", [pytest.param("fork", marks=pytest.mark.benchmark), "spawn"])
def test_hogwild_trainers_are_judged_and_no_rank_words_are_used(method, capsys):
    """mnist_hogwild: the parent waits in p.join() while its trainers work. The verdict is a
    trainer's; there are no ranks, no straggler, no collective; spawn's resource tracker is a helper."""
    proc = _start(str(SCRIPTS / "hogwild.py"), "--start-method", method, "--seconds", str(READY_BOUND_S), readies=2)
    try:
        data = _why_json(proc.pid, capsys)
    finally:
        _kill(proc)
    roles = {p["pid"]: p["role"] for p in data["processes"]}
    trainers = [p for p, role in roles.items() if role == "trainer"]
    assert roles[proc.pid] == "parent" and len(trainers) == 2, roles
    assert set(roles.values()) <= {"parent", "trainer", "helper"}, roles
    assert data["ranks"] == [] and data["straggler"] is None and data["hang"] is None
    verdict = data["verdict"]
    assert verdict["pid"] in trainers and verdict["code"] != "idle", verdict
    assert f"pid {proc.pid} waits for the 2 trainer processes it started" in verdict["message"]
    words = (verdict["message"] + verdict["fix"]).lower()
    assert "rank" not in words and "collective" not in words, verdict
    assert any(line["line"] in range(_line("hogwild", "def train"), _line("hogwild", "return") + 1)
               for line in verdict["lines"]), verdict["lines"]


def _spawn_stacks() -> tuple[list, dict]:
    """mp.spawn's tree: the parent in spawn's join, the resource tracker, rank 0 in all_reduce and
    rank 1 asleep before it (no RANK in their environment: mp.spawn passes it as an argument)."""
    join = ["<module> (/w/ddp.py:60)", f"spawn ({SITE}/torch/multiprocessing/spawn.py:328)",
            f"ProcessContext.join ({SITE}/torch/multiprocessing/spawn.py:160)",
            "wait (/usr/lib/python3.11/multiprocessing/connection.py:947)"]
    tracker = ["<module> (<string>:1)", "main (/usr/lib/python3.11/multiprocessing/resource_tracker.py:200)"]
    reduce = ["<module> (<string>:1)", "run (/w/ddp.py:30)", f"wrapper ({SITE}/torch/distributed/c10d_logger.py:83)",
              f"all_reduce ({SITE}/torch/distributed/distributed_c10d.py:2800)"]
    nap = ["<module> (<string>:1)", "run (/w/ddp.py:25)", "sleep (/usr/lib/python3.11/time.py:1)"]

    def line(pid: int, frames: list[str]) -> str:
        chain = 'process 10:"python ddp.py";' + (f'process {pid}:"python -c spawn_main";' if pid != 10 else "")
        return chain + f"thread ({pid}): MainThread;" + ";".join(frames) + " 300"

    stacks = list(parse_raw("\n".join([line(10, join), line(11, tracker), line(12, reduce), line(13, nap)]) + "\n"))
    data = readings({10: None, 11: None, 12: None, 13: None}, {10: 0.0, 11: 0.0, 12: 1.0, 13: 0.5})
    for pid in (11, 12, 13):
        data["processes"][pid]["ppid"] = 10
    return stacks, data


def test_mp_spawn_ranks_are_the_children_that_joined_a_group_not_the_parent_or_the_tracker():
    stacks, data = _spawn_stacks()
    d = analysis.diagnose(stacks, data, lambda f, n: "", pid=10,
                          meta={"sampled_s": 3.0, "rate_hz": 100, "ended": False, "interrupted": False})
    jsonschema.validate(json.loads(json.dumps(d)), SCHEMA)
    roles = {p["pid"]: p["role"] for p in d["processes"]}
    assert roles == {10: "parent", 11: "helper", 12: "trainer", 13: "trainer"}
    assert sorted(d["ranks"]) == [12, 13]
    assert d["hang"] is not None and d["verdict"]["pid"] == 13 and d["hang"]["waiting"] == [12]


def test_trainers_with_no_group_are_not_ranks_and_get_no_straggler():
    """Two processes that never joined a process group: one works all the time, one half of it;
    no straggler words (those are for ranks waiting in collectives)."""
    work = ["<module> (/w/t.py:5)", f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116)"]
    nap = ["<module> (/w/t.py:9)", "sleep (/usr/lib/python3.11/time.py:1)"]
    lines = ['process 1:"p";process 2:"t";thread (2): MainThread;' + ";".join(work) + " 300",
             'process 1:"p";process 3:"t";thread (3): MainThread;' + ";".join(work) + " 150",
             'process 1:"p";process 3:"t";thread (3): MainThread;' + ";".join(nap) + " 150"]
    data = readings({2: None, 3: None}, {2: 100.0, 3: 50.0})
    d = analysis.diagnose(list(parse_raw("\n".join(lines) + "\n")), data, lambda f, n: "", pid=2,
                          meta={"sampled_s": 3.0, "rate_hz": 100, "ended": False, "interrupted": False})
    assert d["ranks"] == [] and d["straggler"] is None
    assert "rank" not in d["verdict"]["message"] and "collective" not in d["verdict"]["message"]


# -- 3. a stopped job leaves nothing behind ----------------------------------------------------------

# stderr goes to a file, not a pipe: a process left running holds a pipe open, so reading it to
# its end would wait for what was left to end by itself (hogwild's trainers at --seconds), and the
# subreaper would then count nothing even where nothing had been stopped
STOP_SCENARIO = r"""
import subprocess, sys, tempfile
with tempfile.TemporaryFile("w+") as err:
    code = subprocess.run([sys.executable, "-m", "gpudoctor", "why", "--seconds", "2", "--then", "stop", "--wait-start",
                           sys.argv[1], "--", sys.executable, sys.argv[2], "--seconds", sys.argv[1], *sys.argv[3:]],
                          stdout=subprocess.DEVNULL, stderr=err).returncode
    err.seek(0)
    text = err.read()
# the job's own tracebacks first, gpudoctor's lines last (the reaper keeps the tail)
sys.stderr.write(text[-1000:] + "\n".join(r for r in text.splitlines() if r.startswith("gpudoctor")))
sys.exit(code)
"""


def _stopped_under_a_subreaper(script: str, *script_args: str) -> dict:
    """Run STOP_SCENARIO on a script of tests/support/why_scripts under tests/system/test_child_trees.py's subreaper:
    its exit code, stderr and the commands of what was left running below it (killed after)."""
    from support.subreaper import REAPER

    reaper = REAPER.format(root=str(ROOT))
    out = subprocess.run([sys.executable, "-c", reaper, STOP_SCENARIO, str(READY_BOUND_S), str(SCRIPTS / script),
                          *script_args], capture_output=True, text=True, timeout=READY_BOUND_S + 200, cwd=str(ROOT))
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not LINUX, reason="/proc and a subreaper")
def test_then_stop_ends_every_process_the_command_started(tmp_path):
    """hogwild's trainers kept running under PID 1 after `why --then stop` stopped their parent.
    The scenario runs under a subreaper (tests/system/test_child_trees.py's), which counts what is left."""
    result = _stopped_under_a_subreaper("hogwild.py")
    assert result["left"] == [], result
    assert "stopping the command (--then stop): SIGINT to pid" in result["stderr"], result["stderr"][-2000:]
    assert "and the 2 processes it started" in result["stderr"] or "and the 3 processes" in result["stderr"], \
        result["stderr"][-2000:]


@pytest.mark.skipif(not LINUX, reason="/proc and a subreaper")
def test_then_stop_ends_a_grandchild_deaf_to_signals_a_new_session_and_a_double_forked_daemon(tmp_path):
    """Every process the command started, whatever its depth and however it hides: a grandchild
    that ignores SIGINT and SIGTERM (and the process it started), a child in a session of its own
    (setsid), a daemon whose two parents ended at once (double fork). What is left: nothing."""
    result = _stopped_under_a_subreaper("stubborn_tree.py", "--marks", str(tmp_path))
    started = {path.stem: int(path.read_text(encoding="ascii")) for path in tmp_path.glob("*.pid")}
    assert set(started) == {"relay", "stubborn", "deepest", "session", "daemon"}, (started, result["stderr"][-2000:])
    assert result["left"] == [], result
    assert "stopping the command (--then stop): SIGINT to pid" in result["stderr"], result["stderr"][-2000:]
    assert "SIGKILL to" in result["stderr"], result["stderr"][-2000:]  # the deaf grandchild needed it


# -- 4. the edges of a job's life --------------------------------------------------------------------

def test_a_job_that_dies_at_start_up_is_said_to_with_its_exit_code():
    out = subprocess.run([sys.executable, "-m", "gpudoctor", "why", "--seconds", "3", "--", sys.executable,
                          str(SCRIPTS / "dies_at_start.py")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "gpudoctor why: the command exited (code 1) after" in out.stderr, out.stderr[-2000:]
    assert "during start-up" in out.stderr and "no process with PID" not in out.stderr
    assert "Dataset not found" in out.stderr  # its own error, passed through unchanged
    for wrong in ("CPU-bound", "input-bound", "-> idle"):
        assert wrong not in out.stderr, out.stderr[-2000:]


def _frameless(pid: int, n: int, cpu: float) -> session.Sampled:
    """What py-spy sees of an interpreter tearing down its modules (after the script's last line, or an
    exception out of it): a main thread with no Python frame, using CPU."""
    stacks = list(parse_raw(f'process {pid}:"python dies.py";thread ({pid}): MainThread {n}\n'))
    assert stacks and not stacks[0].frames and stacks[0].is_main_thread
    return session.Sampled(stacks, {"processes": {pid: {"cpu_pct": cpu, "threads_cpu_pct": {pid: cpu}}}}, 3.0, 100)


def test_an_interpreter_tearing_down_is_said_to_be_ending_not_judged(monkeypatch):
    """Before: on a busy machine the dying script was still tearing torch down when the window ended,
    and its 100% "other" samples at full CPU were judged CPU-bound. A main thread without a Python
    frame is an interpreter ending: the process is waited for (a condition, up to ENDING_WAIT_S)
    and said to have ended during start-up."""
    proc = _start("-c", "import time; print('ready', flush=True); time.sleep(900)")
    try:
        monkeypatch.setattr(session, "sample", lambda pid, seconds, **kw: _frameless(pid, 290, 99.0))
        monkeypatch.setattr(session, "ENDING_WAIT_S", 0.5)  # this one does not end: the verdict still holds
        d = session.why(proc.pid, 3)
        assert d["verdict"]["words"] == "ended during start-up", d["verdict"]
        assert d["ended"] is False  # it was ending, and had not ended
        ending = threading.Timer(1.0, proc.kill)
        ending.start()
        monkeypatch.setattr(session, "ENDING_WAIT_S", 300.0)
        d = session.why(proc.pid, 3)
        assert d["verdict"]["words"] == "ended during start-up" and d["ended"] is True
    finally:
        _kill(proc)
    assert analysis.interpreter_ending(_frameless(5, 10, 99.0).stacks, 5)
    running = list(parse_raw(stack_line_of(5, "<module> (/w/t.py:3)", 10)))
    assert not analysis.interpreter_ending(running + _frameless(5, 9, 99.0).stacks, 5)


def stack_line_of(pid: int, frame: str, n: int) -> str:
    return f'process {pid}:"python t.py";thread ({pid}): MainThread;{frame} {n}\n'


def test_a_torchvision_dataset_being_built_is_start_up():
    frames = ["<module> (/w/main.py:120)", f"MNIST.__init__ ({SITE}/torchvision/datasets/mnist.py:99)",
              f"MNIST.download ({SITE}/torchvision/datasets/mnist.py:190)",
              "urlopen (/usr/lib/python3.11/urllib/request.py:216)"]
    stack = parse_line('process 1:"python main.py";thread (1): MainThread;' + ";".join(frames) + " 10")
    assert stack is not None
    assert rules.classify(stack, lambda f, n: "").category == rules.STARTUP


def test_the_verdict_of_a_process_that_ended_during_start_up_has_no_steady_words():
    verdict = analysis.ended_during_startup({"code": "idle", "words": "idle", "message": "x", "fix": "y", "lines": [],
                                             "pid": 5}, 1.5)
    assert verdict["code"] == analysis.UNKNOWN and verdict["words"] == "ended during start-up"
    assert verdict["pid"] == 5 and "idle" not in verdict["message"]


# -- 5. a sleeping process holding a GPU -------------------------------------------------------------

@pytest.mark.parametrize("util", [None, 0])
def test_a_sleeping_gpu_holder_whose_source_cannot_be_read_is_idle(util):
    """`python3 -c "import time; time.sleep(900)"` with a GPU context (the NVML stand-in lists it):
    no source to see the sleep in, 0% CPU: idle, never "computing on the CPU"."""
    proc = _start("-c", "import time; print('ready', flush=True); time.sleep(900)")
    try:
        d = session.why(proc.pid, 2, gpu_backend=StandInNvml(proc.pid, util))
    finally:
        _kill(proc)
    jsonschema.validate(json.loads(json.dumps(d)), SCHEMA)
    assert d["gpu"]["in_use"] == "yes"
    assert d["verdict"]["code"] == "idle", d["verdict"]
    assert "computing on the CPU" not in d["verdict"]["message"] and "holds a GPU" in d["verdict"]["message"] \
        or "the GPU it holds is busy 0%" in d["verdict"]["message"]


def test_a_quiet_main_thread_on_a_busy_gpu_is_not_called_idle():
    """The other side of the rule: a main thread with little CPU beside a GPU busy 95% is the GPU's."""
    work = ['process 1:"python t.py";thread (1): MainThread;<module> (/w/t.py:5) 100']
    views = analysis.build_views(list(parse_raw("\n".join(work) + "\n")), lambda f, n: "")
    d = analysis.decide(views[1], views, lambda f, n: "", gpu_util=95.0, on_gpu=True, idle_cpus=1.0, main_cpu_pct=3.0)
    assert d.code != "idle"


# -- 6. words that do not apply ----------------------------------------------------------------------

def test_a_gloo_job_gets_no_nccl_flight_recorder_advice():
    flight = {"dumps": [], "errors": [], "settings": {"0": {}, "1": {}, "2": {}, "3": {}}}
    d = hang_diagnose([in_collective(11), in_collective(12), sleeping(13), in_collective(14)],
                      {11: 0, 12: 1, 13: 2, 14: 3}, {11: 1.0, 12: 1.0, 13: 0.5, 14: 1.0}, flight=flight)
    assert d["hang"]["gpu"]["state"] == "no_gpu"
    assert "TORCH_NCCL" not in d["verdict"]["fix"] and d["hang"]["flight_recorder"]["advice"] == []
    assert "does not apply" in d["hang"]["flight_recorder"]["words"]


def test_the_wait_is_never_said_longer_than_the_ranks_have_run():
    lines = [in_collective(11), in_collective(12), sleeping(13)]
    data = readings({11: 0, 12: 1, 13: 2}, {11: 1.0, 12: 1.0, 13: 0.5})
    for info in data["processes"].values():
        info["age_s"] = 6.2
    d = analysis.diagnose(list(parse_raw("\n".join(lines) + "\n")), data, lambda f, n: "", pid=11,
                          meta={"sampled_s": 8.0, "rate_hz": 100, "ended": False, "interrupted": False})
    assert d["hang"]["waited_s"] <= 6.2
    assert "for at least 6.2 s" in d["verdict"]["message"] and "started 7 s ago" in d["verdict"]["message"]


# -- issue 35: identity across PID namespaces, a kernel thread ----------------------------------------

def _status(root: Path, pid: int, tid: int, nspid: str) -> None:
    folder = root / str(pid) / "task" / str(tid)
    folder.mkdir(parents=True)
    (folder / "status").write_text(f"Name:\tpython\nNSpid:\t{nspid}\n", encoding="ascii")


def test_thread_ids_from_a_container_are_mapped_to_this_namespace(tmp_path):
    _status(tmp_path, 4242, 4242, "4242\t1")
    _status(tmp_path, 4242, 4250, "4250\t9")
    stacks = list(parse_raw('process 4242:"python t.py";thread (1): ;<module> (/w/t.py:5) 10\n'
                            'process 4242:"python t.py";thread (9): ;run (/w/t.py:9) 10\n'))
    mapped = session.to_this_namespace(stacks, str(tmp_path))
    assert [s.tid for s in mapped] == [4242, 4250]
    assert mapped[0].is_main_thread and not mapped[1].is_main_thread


@pytest.mark.skipif(not LINUX or os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare for a PID namespace")
def test_why_on_a_process_in_its_own_pid_namespace_sees_its_main_thread(tmp_path, capsys):
    script = tmp_path / "spin.py"
    script.write_text("import time\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.001)\n", encoding="utf-8")
    outer = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(script)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert outer.stdout is not None and outer.stdout.readline().strip() == "ready", outer.stderr
        inner = next(p for p in session.psutil.Process(outer.pid).children(recursive=True)
                     if str(script) in " ".join(p.cmdline()))
        # py-spy's start takes its share of a short window on a busy machine: a longer window at
        # each try until the main thread has its samples (one that is never seen fails every try)
        for seconds in ("2", "6", "30"):
            data = _why_json(inner.pid, capsys, seconds=seconds)
            if data["processes"][0]["main_thread_samples"] >= analysis.MIN_SAMPLES:
                break
    finally:
        _kill(outer)
    assert data["processes"][0]["main_thread_samples"] >= analysis.MIN_SAMPLES, data["processes"]
    assert data["verdict"]["code"] != analysis.UNKNOWN, data["verdict"]


def _kthreadd() -> bool:
    try:
        with open("/proc/2/comm", encoding="ascii") as handle:
            return handle.read().strip() == "kthreadd"
    except OSError:
        return False


@pytest.mark.skipif(not LINUX or not _kthreadd(), reason="needs kthreadd as PID 2")
def test_why_on_a_kernel_thread_exits_2(capsys):
    assert main(["why", "--seconds", "1", "2"]) == exitcodes.USAGE
    assert "kernel thread" in capsys.readouterr().err


def test_processes_seen_in_ddp_or_torch_distributed_are_ranks():
    """The other side: a process group joined (DDP's forward, a collective) makes them ranks."""
    ddp = ["<module> (/w/t.py:5)", f"DistributedDataParallel.forward ({SITE}/torch/nn/parallel/distributed.py:1600)",
           f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116)"]
    lines = [f'process 1:"p";process {pid}:"t";thread ({pid}): MainThread;' + ";".join(ddp) + " 300" for pid in (2, 3)]
    data = readings({2: None, 3: None}, {2: 100.0, 3: 100.0})
    d = analysis.diagnose(list(parse_raw("\n".join(lines) + "\n")), data, lambda f, n: "", pid=2,
                          meta={"sampled_s": 3.0, "rate_hz": 100, "ended": False, "interrupted": False})
    assert sorted(d["ranks"]) == [2, 3]
