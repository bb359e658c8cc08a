"""Ctrl-C and SIGTERM keep what finished (issue #11 items 3, 4 and 16).

Real processes receive real signals here: ``report --full`` (the probe runner and its child),
``bench mnist`` (a tiny CPU sweep), ``record`` (on a replayed GPU) and ``distributed`` (gloo
ranks on this machine). Each must write what finished, exit 130 (Ctrl-C) or 143 (SIGTERM),
print no traceback, and leave no rank folder behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from support import fault_probes as fp
from conftest import ROOT
from gpudoctor.core import exitcodes
from gpudoctor.report import runner
from gpudoctor.system import signals
from gpudoctor.core.model import Status

TESTS = str(ROOT / "tests")
HEALTHY = str(ROOT / "tests" / "data" / "handmade_consumer_notsupported.json")
# Generous: the machine running the suite may be slow and loaded.
WAIT_S = 180.0

PRELUDE = f"""
import os, signal, sys, time
sys.path.insert(0, {TESTS!r})
from support import fault_probes as fp
from gpudoctor import cli
from gpudoctor.report import runner
"""


def _start(script: str, tmp_path: Path, **env: str) -> subprocess.Popen:
    environment = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path), **env)
    # A session of its own: a signal sent to its group never reaches pytest.
    return subprocess.Popen([sys.executable, "-c", PRELUDE + script], cwd=ROOT, env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for(condition, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"ended (exit {proc.returncode}) before {what}: {err[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {what} within {WAIT_S:.0f} s")
        time.sleep(0.1)


def _signal_when_ready(proc: subprocess.Popen, ready, what: str, sig: int, *,
                       to_group: bool = False) -> tuple[int, str, str]:
    """Wait until ``ready()`` (said as ``what`` when it never comes), send ``sig`` to the process
    (or to its whole group: the ranks and the probe child too), and wait for its end: (exit code,
    stdout, stderr)."""
    _wait_for(ready, proc, what)
    (os.killpg if to_group else os.kill)(proc.pid, sig)
    return _finish(proc)


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"did not end after the signal: {err[-2000:]}")
    return proc.returncode, out, err


# --------------------------------------------------------------------------- the signals module
def test_the_first_sigterm_raises_terminated_and_a_second_is_ignored():
    previous = signal.getsignal(signal.SIGTERM)
    signals.reset()
    try:
        assert signals.install()
        with pytest.raises(signals.Terminated) as caught:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here, long before
        assert isinstance(caught.value, KeyboardInterrupt)  # every Ctrl-C path keeps results on SIGTERM too
        assert signals.terminated() and signals.stopped_word().startswith("terminated")
        os.kill(os.getpid(), signal.SIGTERM)  # the second: ignored while results are written
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGTERM, previous)
        signals.reset()
    assert not signals.terminated() and signals.stopped_word() == "interrupted"


def test_set_handlers_gives_back_what_it_replaced():
    before = {signum: signal.getsignal(signum) for signum in signals.STOP_SIGNALS}
    seen: list[int] = []
    previous = signals.set_handlers(lambda signum, _frame: seen.append(signum))
    try:
        assert previous == before
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + WAIT_S
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == [signal.SIGTERM]
    finally:
        signals.restore(previous)
    assert {signum: signal.getsignal(signum) for signum in signals.STOP_SIGNALS} == before


def test_no_module_sets_the_stop_signals_handlers_but_signals():
    """SIGTERM and SIGHUP are set up in one place (gpudoctor/system/signals.py): a command with a stop of
    its own passes its handler to signals.set_handlers (why, the exporter, the runner's child)."""
    import ast

    found = []
    for path in [*(ROOT / "gpudoctor").rglob("*.py"), *(ROOT / "probes").rglob("*.py")]:
        if path == ROOT / "gpudoctor" / "system" / "signals.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "signal"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "signal"):
                first = node.args[0] if node.args else None
                if not (isinstance(first, ast.Attribute) and first.attr == "SIGINT"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found


# --------------------------------------------------------------------------- item 3: Ctrl-C during the child's stop
# The first wait for the child to end (inside ``_Child.stop``) gets a real SIGINT.
SIGINT_INSIDE_THE_STOP = """
stopped = []
real_stop = runner._Child.stop
def stop(self, graceful=True):
    real_join = self.process.join
    def join(timeout=None):
        self.process.join = real_join
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # KeyboardInterrupt is raised here, inside the stop
        return real_join(timeout)
    if not stopped:
        self.process.join = join
    stopped.append(self.process.pid)
    return real_stop(self, graceful)
runner._Child.stop = stop
"""


def test_ctrl_c_while_the_child_is_stopped_keeps_the_results(monkeypatch):
    monkeypatch.setattr(runner._Child, "stop", runner._Child.stop)  # put back after the test
    names = {"runner": runner, "os": os, "signal": signal, "time": time}
    exec(SIGINT_INSIDE_THE_STOP, names)
    report = runner.run_probes([fp.OK, fp.OK_INPROC], runner.RunSpec(level="standard"))
    assert [r.probe for r in report.results] == ["ok", "ok_inproc"]
    assert all(r.status == Status.PASS for r in report.results)
    assert report.interrupted is True  # the exit is 130, with every result written
    stopped = names["stopped"]
    assert len(stopped) == 2  # stopped again, at once (terminate, kill): no child left
    with pytest.raises(ProcessLookupError):
        os.kill(stopped[0], 0)


CTRL_C_DURING_STOP = SIGINT_INSIDE_THE_STOP + """
runner.select_probes = lambda names, level: [fp.OK]
sys.argv = ["gpudoctor", "report", "--json", "-o", sys.argv[1]]
raise SystemExit(cli.main())
"""


def test_report_with_ctrl_c_during_the_child_stop_prints_writes_and_exits_130(tmp_path):
    out_file = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-c", PRELUDE + CTRL_C_DURING_STOP, str(out_file)], cwd=ROOT,
                          capture_output=True, text=True, timeout=WAIT_S)
    assert proc.returncode == exitcodes.INTERRUPTED, proc.stderr
    assert "Traceback" not in proc.stderr
    printed = json.loads(proc.stdout)
    written = json.loads(out_file.read_text())
    for doc in (printed, written):
        assert doc["interrupted"] is True and [r["probe"] for r in doc["results"]] == ["ok"]
        assert doc["results"][0]["status"] == "pass"


# --------------------------------------------------------------------------- item 4: SIGTERM
REPORT_FULL_THEN_WAIT = """
real = runner.select_probes
runner.select_probes = lambda names, level: real(names, level) + [fp.WAITS]
sys.argv = ["gpudoctor", "report", "--full", "--json", "-o", os.environ["OUT_FILE"]]
raise SystemExit(cli.main())
"""


@pytest.mark.parametrize("to_group", [False, True], ids=["to-the-process", "to-its-group"])
def test_sigterm_during_report_full_writes_the_finished_results_and_exits_143(tmp_path, to_group):
    """SIGTERM to the CLI alone (Kubernetes) or to its whole group, the child too (timeout, systemd)."""
    out_file, started = tmp_path / "full.json", tmp_path / "started"
    proc = _start(REPORT_FULL_THEN_WAIT, tmp_path, OUT_FILE=str(out_file), GPUDOCTOR_TEST_STARTED=str(started))
    code, out, err = _signal_when_ready(proc, started.exists, "start of the last probe", signal.SIGTERM,
                                        to_group=to_group)
    assert code == exitcodes.TERMINATED, err
    assert "Traceback" not in err and "BrokenPipeError" not in err
    assert "terminated (SIGTERM); finished results were kept in" in err
    written = json.loads(out_file.read_text())
    assert json.loads(out) == written
    names = [r["probe"] for r in written["results"]]
    assert written["interrupted"] is True
    assert names[0] == "environment" and "distributed" in names and "waits" not in names
    with pytest.raises(ProcessLookupError):
        os.kill(int(started.read_text()), 0)  # the probe's child was stopped


# Batch 1000 first (10 steps), then batch 8 (1250 steps): SIGTERM lands in the second run.
BENCH = """
sys.argv = ["gpudoctor", "bench", "mnist", "--device", "cpu", "--batch-sizes", "1000,8", "--workers", "0",
            "--modes", "resident", "--train-samples", "1000", "--test-samples", "100", "--epochs", "10",
            "--json", "-o", os.environ["OUT_FILE"]]
raise SystemExit(cli.main())
"""


def test_sigterm_during_bench_mnist_keeps_the_finished_runs_and_exits_143(tmp_path):
    out_file = tmp_path / "bench.json"
    proc = _start(BENCH, tmp_path, OUT_FILE=str(out_file))
    first_run = []

    def one_run_done() -> bool:
        line = proc.stderr.readline()
        first_run.append(line)
        return "samples/s" in line

    code, out, err = _signal_when_ready(proc, one_run_done, "first finished run", signal.SIGTERM)
    assert code == exitcodes.TERMINATED, err
    assert "Traceback" not in err
    assert "terminated (SIGTERM); 1 of 2 runs finished and were kept" in err
    doc = json.loads(out_file.read_text())
    assert json.loads(out) == doc
    assert doc["interrupted"] is True and doc["complete"] is False
    assert len(doc["runs"]) == 1 and doc["planned_runs"] == 2


RECORD_ON_REPLAY = f"""
from gpudoctor.backends import ReplayBackend
import gpudoctor.backends
gpudoctor.backends.NvmlBackend = lambda: ReplayBackend.from_file({HEALTHY!r}, loop=True)
import gpudoctor.sampling.recorder
gpudoctor.sampling.recorder.FLUSH_S = 0.2  # the part being taken reaches the file quickly: the test waits on it
sys.argv = ["gpudoctor", "record", "-o", os.environ["OUT_FILE"], "--seconds", "600", "--interval", "0.1",
            "--no-torch"]
raise SystemExit(cli.main())
"""


def _samples_in(path: Path) -> int:
    from gpudoctor.backends.recording import RecordingError, load_recording

    try:
        return len(load_recording(path)["nvml"]["samples"])
    except RecordingError:
        return 0


def test_sigterm_during_record_writes_the_samples_taken_and_exits_143(tmp_path):
    out_file = tmp_path / "rec.json"
    proc = _start(RECORD_ON_REPLAY, tmp_path, OUT_FILE=str(out_file))
    _wait_for(lambda: "sampling" in proc.stderr.readline(), proc, "start of the sampling")
    _wait_for(lambda: _samples_in(out_file) >= 1, proc, "a sample in the file")  # taken: a condition, not a guess
    os.kill(proc.pid, signal.SIGTERM)
    code, out, err = _finish(proc)
    assert code == exitcodes.TERMINATED, err
    assert "Traceback" not in err and "recording written to" in err
    data = json.loads(out_file.read_text())
    assert data["format"] == "gpudoctor-recording" and len(data["nvml"]["samples"]) >= 1


# --------------------------------------------------------------------------- item 16: rank folders
DISTRIBUTED = """
sys.argv = ["gpudoctor", "distributed", "--backend", "gloo", "--nproc", "2", "--timeout", "300",
            "--json", "-o", os.environ["OUT_FILE"]]
raise SystemExit(cli.main())
"""


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, exitcodes.INTERRUPTED), (signal.SIGTERM, exitcodes.TERMINATED)],
                         ids=["ctrl-c-to-the-group", "sigterm-to-the-process"])
def test_a_signal_during_the_distributed_probe_leaves_no_rank_folder(tmp_path, sig, code):
    out_file = tmp_path / "dist.json"
    proc = _start(DISTRIBUTED, tmp_path, OUT_FILE=str(out_file))
    folders = lambda: [p for p in tmp_path.iterdir() if p.name.startswith("gpudoctor-dist-")]  # noqa: E731
    # Ctrl-C in a terminal reaches the whole foreground group (the ranks too); SIGTERM the CLI alone.
    got, out, err = _signal_when_ready(proc, lambda: any((f / "rank1.stderr").exists() for f in folders()),
                                       "rank folder", sig, to_group=sig == signal.SIGINT)
    assert got == code, err
    assert "Traceback" not in err
    assert folders() == []
    assert json.loads(out_file.read_text())["interrupted"] is True


def test_folders_of_killed_launchers_are_removed_and_live_ones_kept(tmp_path):
    from gpudoctor.probes.distributed import WORKDIR_PREFIX, remove_stale_workdirs

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{WORKDIR_PREFIX}{dead.pid}-abc"
    live = tmp_path / f"{WORKDIR_PREFIX}{os.getpid()}-def"
    other = tmp_path / f"{WORKDIR_PREFIX}notapid"
    for folder in (stale, live, other):
        folder.mkdir()
        (folder / "rank0.json").write_text("{}")
    assert remove_stale_workdirs(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and live.exists() and other.exists()
    assert remove_stale_workdirs(str(tmp_path / "missing")) == []


def test_the_launcher_names_its_folder_after_itself(tmp_path, monkeypatch):
    from gpudoctor.probes import distributed

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []
    monkeypatch.setattr(distributed, "_wait_for_ranks",
                        lambda procs, timeout: (seen.extend(tmp_path.iterdir()), ({}, set(procs)))[1])
    real_popen = subprocess.Popen
    monkeypatch.setattr(distributed.subprocess, "Popen",
                        lambda *a, **k: real_popen([sys.executable, "-c", "import time; time.sleep(60)"]))
    payloads, failures = distributed.launch_local(2, "gloo", [1024], 5.0)
    assert payloads == {} and set(failures) == {0, 1}
    assert [p.name.startswith(f"gpudoctor-dist-{os.getpid()}-") for p in seen] == [True]
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- SIGHUP: as SIGTERM, exit 129
# A closed terminal or a dropped ssh session sends SIGHUP to the foreground process group.
def test_sighup_during_report_full_writes_the_results_stops_the_child_and_exits_129(tmp_path):
    out_file, started = tmp_path / "full.json", tmp_path / "started"
    proc = _start(REPORT_FULL_THEN_WAIT, tmp_path, OUT_FILE=str(out_file), GPUDOCTOR_TEST_STARTED=str(started))
    code, out, err = _signal_when_ready(proc, started.exists, "start of the last probe", signal.SIGHUP, to_group=True)
    assert code == exitcodes.HANGUP == 129, err
    assert "Traceback" not in err
    assert "hung up (SIGHUP); finished results were kept in" in err
    written = json.loads(out_file.read_text())
    assert written["interrupted"] is True and written["results"][0]["probe"] == "environment"
    with pytest.raises(ProcessLookupError):
        os.kill(int(started.read_text()), 0)  # the probe's child was stopped, not left behind


def _hang_up_after_line(script: str, tmp_path, out_file, words: str, what: str) -> tuple[int, str]:
    """Run ``script`` writing ``out_file``; SIGHUP once a line of its stderr holds ``words`` (``what``
    names that moment in a failure): its exit code and stderr."""
    proc = _start(script, tmp_path, OUT_FILE=str(out_file))
    code, _out, err = _signal_when_ready(proc, lambda: words in proc.stderr.readline(), what, signal.SIGHUP)
    return code, err


def test_sighup_during_record_keeps_the_recording_and_exits_129(tmp_path):
    out_file = tmp_path / "rec.json"
    code, err = _hang_up_after_line(RECORD_ON_REPLAY, tmp_path, out_file, "sampling", "start of the sampling")
    assert code == exitcodes.HANGUP, err
    assert "Traceback" not in err and "recording written to" in err
    assert json.loads(out_file.read_text())["format"] == "gpudoctor-recording"


def test_sighup_during_bench_mnist_keeps_the_finished_runs_and_exits_129(tmp_path):
    out_file = tmp_path / "bench.json"
    code, err = _hang_up_after_line(BENCH, tmp_path, out_file, "samples/s", "first finished run")
    assert code == exitcodes.HANGUP, err
    assert "hung up (SIGHUP); 1 of 2 runs finished and were kept" in err
    assert json.loads(out_file.read_text())["interrupted"] is True


def test_sighup_during_the_distributed_probe_leaves_no_rank_folder(tmp_path):
    out_file = tmp_path / "dist.json"
    proc = _start(DISTRIBUTED, tmp_path, OUT_FILE=str(out_file))
    folders = lambda: [p for p in tmp_path.iterdir() if p.name.startswith("gpudoctor-dist-")]  # noqa: E731
    code, out, err = _signal_when_ready(proc, lambda: any((f / "rank1.stderr").exists() for f in folders()),
                                        "rank folder", signal.SIGHUP, to_group=True)
    assert code == exitcodes.HANGUP, err
    assert "Traceback" not in err
    assert folders() == []
    assert json.loads(out_file.read_text())["interrupted"] is True
