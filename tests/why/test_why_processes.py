"""`gpudoctor why` on real training processes (CPU): the verdict, the lines named, the exit codes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from gpudoctor.core import exitcodes
from gpudoctor.cli import main

from support._why_targets import ASLEEP, HEAVY_MODEL, SLOW_DATASET, line_of, start, stop

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "why.schema.json").read_text(encoding="utf-8"))
SECONDS = "3"

pytest.importorskip("torch")


def _why(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["why", "--json", "--seconds", SECONDS, *argv])
    out = capsys.readouterr().out
    data = json.loads(out)
    jsonschema.validate(data, SCHEMA)
    return code, data


def _why_of(tmp_path, capsys, name: str, script: str, *args: str) -> tuple[int, dict]:
    """Start a training script, sample it with `gpudoctor why --json`, stop it."""
    proc = start(tmp_path, name, script, *args)
    try:
        code, data = _why(capsys, str(proc.pid))
    finally:
        stop(proc)
    assert data["pid"] == proc.pid
    return code, data


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_slow_dataset_is_input_bound_and_its_line_is_named(tmp_path, capsys, workers):
    code, data = _why_of(tmp_path, capsys, "slow", SLOW_DATASET, workers)
    assert code == exitcodes.OK
    verdict = data["verdict"]
    assert verdict["code"] == "input_bound", verdict
    assert data["shares"]["data_wait"] >= 0.5
    top = verdict["lines"][0]
    assert top["file"] == str(tmp_path / "slow.py") and top["line"] == line_of(SLOW_DATASET, "SLOW LINE")
    assert "__getitem__" in top["function"] and "time.sleep(0.02)" in top["code"]
    assert "DataLoader" in verdict["fix"] or "workers" in verdict["fix"]
    roles = sorted(p["role"] for p in data["processes"])
    assert roles == (["trainer", "worker", "worker"] if workers == "2" else ["trainer"])
    assert data["gpu"]["available"] is False and data["gpu"]["reason"]


def test_pre_batched_tensors_and_a_heavy_model_are_not_input_bound(tmp_path, capsys):
    code, data = _why_of(tmp_path, capsys, "heavy", HEAVY_MODEL)
    assert code == exitcodes.OK
    assert data["verdict"]["code"] == "cpu_bound", data["verdict"]
    assert data["shares"]["data_wait"] == 0
    assert data["shares"]["forward"] + data["shares"]["backward"] + data["shares"]["optimizer"] >= 0.5


def test_a_sleeping_process_is_idle(tmp_path, capsys):
    code, data = _why_of(tmp_path, capsys, "asleep", ASLEEP)
    assert code == exitcodes.OK
    assert data["verdict"]["code"] == "idle", data["verdict"]
    assert data["verdict"]["lines"][0]["line"] == line_of(ASLEEP, "ASLEEP LINE")


def test_text_output_is_plain_and_names_the_verdict(tmp_path, capsys):
    proc = start(tmp_path, "asleep", ASLEEP)
    try:
        code = main(["why", "--seconds", "2", str(proc.pid), "-o", str(tmp_path / "why.json")])
    finally:
        stop(proc)
    out = capsys.readouterr().out
    assert code == exitcodes.OK
    assert out.splitlines()[0] == f"asleep.py (pid {proc.pid}): idle"
    assert "\x1b" not in out and "fix: " in out
    jsonschema.validate(json.loads((tmp_path / "why.json").read_text()), SCHEMA)


# py-spy needs time of its own to start before its first sample, and a loaded machine gives it
# little: a test that needs a sample gives the sampling more time at each try until one is taken
# (a gpudoctor that never samples fails every try). Each try checks everything else as it is.
SAMPLING_TRIES_S = (1.5, 6.0, 30.0)


def _until_sampled(attempt) -> dict:
    """``attempt(seconds)`` for each of SAMPLING_TRIES_S until its data has a sample."""
    for seconds in SAMPLING_TRIES_S:
        data = attempt(seconds)
        if data["samples"] > 0:
            return data
    return data


def test_why_dash_dash_command_passes_the_exit_code_on(tmp_path):
    script = tmp_path / "ends.py"

    def attempt(seconds: float) -> dict:
        script.write_text(f"import time\nt = time.time()\nwhile time.time() - t < {seconds}:\n    sum(range(1000))\n"
                          "raise SystemExit(7)\n", encoding="utf-8")
        out = subprocess.run([sys.executable, "-m", "gpudoctor", "why", "--json", "--seconds", str(4 * seconds), "--",
                              sys.executable, str(script)], capture_output=True, text=True, timeout=300)
        assert out.returncode == 7, out.stderr
        if not out.stdout.strip() and "during start-up" in out.stderr:
            return {"samples": 0}  # ended before its loop was seen: said in one line; a longer run next
        data = json.loads(out.stdout)
        jsonschema.validate(data, SCHEMA)
        assert data["ended"] is True
        return data

    assert _until_sampled(attempt)["samples"] > 0


def test_no_such_pid_is_a_usage_error(capsys):
    pid = 2 ** 22 + 12345
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    assert main(["why", "--seconds", "1", str(pid)]) == exitcodes.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpudoctor: error: no process with PID {pid}"]


def test_a_process_that_is_not_python(capsys):
    proc = subprocess.Popen(["sleep", "60"])
    try:
        code = main(["why", "--seconds", "1", str(proc.pid)])
    finally:
        stop(proc)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == exitcodes.USAGE
    assert err == [f"gpudoctor: error: process {proc.pid} is not a Python process "
                   "(py-spy found no Python interpreter in it)"]


def test_a_process_that_ends_while_sampled_reports_what_was_sampled(tmp_path, capsys):
    script = tmp_path / "short.py"

    def attempt(seconds: float) -> dict:
        script.write_text("import time\nprint('ready', flush=True)\nt = time.time()\n"
                          f"while time.time() - t < {seconds}:\n    sum(range(1000))\n", encoding="utf-8")
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            code = main(["why", "--json", "--seconds", str(4 * seconds), str(proc.pid)])
        finally:
            stop(proc)
        captured = capsys.readouterr()
        if not captured.out and ("ended before it could be sampled" in captured.err
                                 or "no process with PID" in captured.err):
            return {"samples": 0}  # it ended before py-spy could look at it: one line, no verdict
        assert code == exitcodes.PROCESS_ENDED, captured.err
        data = json.loads(captured.out)
        assert data["ended"] is True and data["sampled_s"] < 4 * seconds
        assert f"process {proc.pid} ended after" in captured.err
        return data

    assert _until_sampled(attempt)["samples"] > 0


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="needs root to drop privileges")
def test_no_permission_to_attach_names_the_fix(tmp_path, capsys, monkeypatch):
    """py-spy run as `nobody` against a root process: the kernel refuses, and the message says
    what to do (exit 9)."""
    from gpudoctor.why import pyspy

    original = pyspy.start_record
    monkeypatch.setattr(pyspy, "start_record",
                        lambda command: original(["runuser", "-u", "nobody", "--", *command]))
    proc = start(tmp_path, "asleep", ASLEEP)
    try:
        code = main(["why", "--seconds", "1", str(proc.pid)])
    finally:
        stop(proc)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == exitcodes.CANNOT_ATTACH, err
    assert len(err) == 1 and "no permission" in err[0]
    assert "SYS_PTRACE" in err[0] and "ptrace_scope" in err[0] and "as root" in err[0]


def test_torchrun_each_rank_is_diagnosed_and_the_straggler_named(tmp_path, capsys):
    from support._why_targets import DDP_STRAGGLER, start_torchrun, stop_group

    proc = start_torchrun(tmp_path, DDP_STRAGGLER)
    try:
        code, data = _why(capsys, str(proc.pid))
    finally:
        stop_group(proc)
    assert code == exitcodes.OK
    ranks = {p["rank"]: p for p in data["processes"] if p["role"] == "trainer"}
    assert sorted(ranks) == [0, 1] and sorted(data["ranks"]) == sorted(p["pid"] for p in ranks.values())
    assert all("verdict" in p for p in ranks.values())
    assert [p["role"] for p in data["processes"]].count("launcher") == 1
    assert data["straggler"]["pid"] == ranks[1]["pid"], data["straggler"]
    assert data["verdict"]["code"] == "straggler" and data["verdict"]["pid"] == ranks[1]["pid"]
    top = data["verdict"]["lines"][0]
    assert top["file"].endswith("ddp.py") and top["line"] == line_of(DDP_STRAGGLER, "STRAGGLER LINE")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, exitcodes.INTERRUPTED), (signal.SIGTERM, exitcodes.TERMINATED)])
def test_ctrl_c_and_sigterm_report_what_was_sampled(tmp_path, sig, code):
    proc = start(tmp_path, "asleep", ASLEEP)

    def attempt(seconds: float) -> dict:
        why = subprocess.Popen([sys.executable, "-m", "gpudoctor", "why", "--json", "--seconds", "120", str(proc.pid)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120  # started: its py-spy child is there (no event in another process)
        while not _children(why.pid) and why.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _children(why.pid), "py-spy never started"
        time.sleep(2 * seconds)  # at 100 Hz, hundreds of chances of a sample once py-spy runs
        why.send_signal(sig)
        out, err = why.communicate(timeout=120)
        assert why.returncode == code, err
        data = json.loads(out)
        jsonschema.validate(data, SCHEMA)
        assert data["interrupted"] is True
        assert "what was sampled is reported" in err
        return data

    try:
        assert _until_sampled(attempt)["samples"] > 0
    finally:
        stop(proc)


@pytest.mark.parametrize("argv, words", [
    (["12", "34"], "give one PID, or -- and a command"),
    (["--", "no-such-command-gpudoctor"], "no command 'no-such-command-gpudoctor' on PATH"),
    (["0"], "not a process ID: 0"),
])
def test_bad_targets_are_one_line_usage_errors(capsys, argv, words):
    assert main(["why", "--seconds", "1", *argv]) == exitcodes.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


@pytest.mark.parametrize("option", [["--seconds", "0"], ["--seconds", "nan"], ["--rate", "0"], ["--rate", "5000"]])
def test_bad_numbers_are_refused(capsys, option):
    with pytest.raises(SystemExit) as exit_info:
        main(["why", *option, "1"])
    assert exit_info.value.code == exitcodes.USAGE


def test_why_dash_dash_a_command_killed_by_a_signal_exits_128_plus_n():
    out = subprocess.run([sys.executable, "-m", "gpudoctor", "why", "--seconds", "2", "--", sys.executable, "-c",
                          "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 128 + signal.SIGKILL, out.stderr


def test_why_dash_dash_waits_for_the_loop_prints_a_block_on_stderr_and_can_stop_the_job(tmp_path):
    """The issue's `why -- python slow_loader.py`: start-up is waited out (a progress line), the
    verdict judges the loop, comes as one block on stderr apart from the job's stdout, and
    `--then stop` ends the job after it."""
    from support._why_targets import SLOW_START

    script = tmp_path / "slow_loader.py"
    script.write_text(SLOW_START, encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "gpudoctor", "why", "--seconds", "2", "--then", "stop", "--",
                          sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 128 + signal.SIGINT, out.stderr  # --then stop sends SIGINT first (issue 36)
    assert "is starting up" in out.stderr and "waiting for the loop" in out.stderr
    assert "gpudoctor why: verdict" in out.stderr and "input-bound" in out.stderr, out.stderr
    assert "slow_loader.py" in out.stderr and "stopping the command (--then stop)" in out.stderr
    assert "input-bound" not in out.stdout and out.stdout.startswith("step 0")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                found += [int(p) for p in fh.read().split()]
        except OSError:
            pass
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sighup_reports_what_was_sampled_stops_py_spy_and_exits_129(tmp_path):
    """A closed terminal (SIGHUP) is handled as SIGTERM is; py-spy is not left running."""
    proc = start(tmp_path, "asleep", ASLEEP)
    try:
        why = subprocess.Popen([sys.executable, "-m", "gpudoctor", "why", "--json", "--seconds", "60", str(proc.pid)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not _children(why.pid) and time.monotonic() < deadline:
            time.sleep(0.1)  # py-spy started: there is no event to wait on in another process
        spies = _children(why.pid)
        assert spies, "py-spy never started"
        time.sleep(3.0)  # some samples taken
        why.send_signal(signal.SIGHUP)
        out, err = why.communicate(timeout=120)
    finally:
        stop(proc)
    assert why.returncode == exitcodes.HANGUP == 129, err
    assert json.loads(out)["interrupted"] is True
    for spy in spies:
        try:
            os.kill(spy, 0)
        except ProcessLookupError:
            continue
        with open(f"/proc/{spy}/stat") as fh:
            assert fh.read().split()[2] == "Z", f"py-spy {spy} is still running"


def test_why_refuses_its_own_parent_and_itself():
    """`gpudoctor why $$` samples the shell that started it (a Python one here: the test runner)
    no more: one line, exit 2, naming what it is."""
    out = subprocess.run([sys.executable, "-m", "gpudoctor", "why", "--seconds", "1", str(os.getpid())],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == exitcodes.USAGE, out.stderr
    [line] = out.stderr.strip().splitlines()
    assert f"PID {os.getpid()} is" in line and "that started this gpudoctor" in line and "not a training job" in line


def test_ctrl_c_sent_to_why_stops_the_command_it_started_too(tmp_path):
    """A SIGINT that reaches only `gpudoctor why -- CMD` (kill -INT, a supervisor) reported what was
    sampled and then waited on the command for ever; it is passed on to the command now."""
    script = tmp_path / "spin.py"
    script.write_text("while True:\n    sum(range(10000))\n", encoding="utf-8")
    why = subprocess.Popen([sys.executable, "-m", "gpudoctor", "why", "--seconds", "60", "--", sys.executable,
                            str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _children(why.pid):
            time.sleep(0.1)
        children = _children(why.pid)
        assert children, "the command never started"
        time.sleep(3.0)  # sampling under way: there is no event to wait on in another process
        why.send_signal(signal.SIGINT)
        _out, err = why.communicate(timeout=60)
    finally:
        if why.poll() is None:
            why.kill()
    assert "interrupted; stopping the command: SIGINT" in err, (why.returncode, err[-2000:])
    assert why.returncode == 128 + signal.SIGINT or why.returncode == exitcodes.INTERRUPTED, why.returncode
    for child in children:
        assert not os.path.exists(f"/proc/{child}") or open(f"/proc/{child}/stat").read().split()[2] == "Z"
