"""Hardening of the command line and the file writer (issue #11 items 1, 6, 9, 14, 18; #12 items 5, 6).

Nothing here touches the real /dev/null or needs root: devices are a FIFO, a pty, a pipe
behind /proc/self/fd, and /dev/full opened for writing (which fails, and changes nothing).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import pty
import stat
import subprocess
import sys
import threading

import pytest

from conftest import ROOT, run_cli
from gpudoctor.core import exitcodes
from gpudoctor.system import fileio
from gpudoctor.cli import main
from gpudoctor.commands.args import bounded, check_writable, output_path

HEALTHY = str(ROOT / "tests" / "data" / "handmade_consumer_notsupported.json")
QUICK_JSON = ["report", "--quick", "--json", "--replay", HEALTHY]


# --------------------------------------------------------------------------- the file writer
def test_a_fifo_is_written_directly_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    try:
        fileio.write_text(fifo, "through the pipe\n")
        reader.join(60)
        assert got == [b"through the pipe\n"]
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    finally:
        if reader.is_alive():  # the write never reached the pipe: let the reader go
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
    assert [p.name for p in tmp_path.iterdir()] == ["fifo"]  # no temporary file beside it


def test_a_character_device_is_written_directly_and_stays_a_device():
    leader, follower = pty.openpty()
    try:
        name = os.ttyname(follower)
        before = os.stat(name)
        assert stat.S_ISCHR(before.st_mode)
        fileio.write_text(name, "hello\n")
        after = os.stat(name)
        assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino
        assert b"hello" in os.read(leader, 100)
    finally:
        os.close(follower)
        os.close(leader)


def test_a_link_to_proc_self_fd_writes_into_the_pipe_and_stays_a_link(tmp_path):
    read_end, write_end = os.pipe()
    link = tmp_path / "out"
    link.symlink_to(f"/proc/self/fd/{write_end}")
    try:
        fileio.write_text(link, "piped\n")
        os.close(write_end)
        assert os.read(read_end, 100) == b"piped\n"
        assert link.is_symlink() and [p.name for p in tmp_path.iterdir()] == ["out"]
    finally:
        os.close(read_end)


def test_a_link_to_a_regular_file_replaces_the_file_and_keeps_the_link(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    fileio.write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # a replaced file keeps its mode


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_new_files_follow_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        fileio.write_text(tmp_path / "new.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == mode


def test_a_250_character_name_is_written(tmp_path):
    name = "r" * 245 + ".json"
    fileio.write_text(tmp_path / name, "{}")
    assert (tmp_path / name).read_text() == "{}"
    assert len(fileio._temporary_name("é" * 127)) <= 255 and len(os.fsencode(fileio._temporary_name("é" * 127))) <= 255


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "keep.json"
    target.write_text("old")

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", lambda fd: full(fd, b""))
    with pytest.raises(OSError):
        fileio.write_text(target, "new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["keep.json"]


# --------------------------------------------------------------------------- print first, then write
def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_after_the_run_prints_then_exits_7(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fileio, "write_bytes", _no_space)  # the seam every writer goes through
    out = tmp_path / "report.json"
    assert main([*QUICK_JSON, "-o", str(out)]) == exitcodes.WRITE_FAILED
    captured = capsys.readouterr()
    assert json.loads(captured.out)["results"]  # the run was printed first
    errors = captured.err.strip().splitlines()
    assert errors == [f"gpudoctor: error: cannot write {out}: No space left on device"]
    assert not out.exists()


def test_output_directory_removed_during_the_run_is_exit_7(tmp_path, monkeypatch, capsys):
    from gpudoctor.report import runner

    directory = tmp_path / "gone"
    directory.mkdir()
    original = runner.run_probes

    def run_then_remove(*args, **kwargs):
        report = original(*args, **kwargs)
        directory.rmdir()
        return report

    monkeypatch.setattr(runner, "run_probes", run_then_remove)
    assert main([*QUICK_JSON, "-o", str(directory / "r.json")]) == exitcodes.WRITE_FAILED
    captured = capsys.readouterr()
    assert json.loads(captured.out)["results"]
    assert "cannot write" in captured.err and "No such file or directory" in captured.err


def test_stdout_on_dev_full_still_writes_the_file_and_exits_7(tmp_path):
    out = tmp_path / "report.json"
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "gpudoctor", *QUICK_JSON, "-o", str(out)],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == exitcodes.WRITE_FAILED, proc.stderr
    assert proc.stderr.strip().splitlines() == ["gpudoctor: error: cannot write to stdout: No space left on device"]
    assert json.loads(out.read_text())["results"]


def test_stdout_closed_still_writes_the_file_and_exits_7(tmp_path):
    out = tmp_path / "report.json"
    proc = subprocess.run(["sh", "-c", f'exec "$0" -m gpudoctor {" ".join(QUICK_JSON)} -o "$1" >&-',
                           sys.executable, str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == exitcodes.WRITE_FAILED, proc.stderr
    assert "cannot write to stdout" in proc.stderr and "Traceback" not in proc.stderr
    assert json.loads(out.read_text())["results"]


def test_stderr_closed_report_still_writes_its_file(tmp_path):
    out = tmp_path / "report.json"
    proc = subprocess.run(["sh", "-c", 'exec "$0" -m gpudoctor report --quick --replay "$1" -o "$2" 2>&-',
                           sys.executable, HEALTHY, str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == exitcodes.OK, proc.stdout
    assert "Verdict: " in proc.stdout
    assert json.loads(out.read_text())["results"]


def test_output_to_proc_version_is_one_line_never_a_traceback():
    proc = run_cli(*QUICK_JSON, "-o", "/proc/version", timeout=120)
    # Refused before the run where /proc is not writable (exit 2), else after it (exit 7).
    assert proc.returncode in (exitcodes.USAGE, exitcodes.WRITE_FAILED), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    if proc.returncode == exitcodes.WRITE_FAILED:
        assert json.loads(proc.stdout)["results"]


def test_a_link_to_proc_self_fd_1_is_not_replaced(tmp_path):
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    proc = run_cli(*QUICK_JSON, "-o", str(link), timeout=120)
    assert proc.returncode == exitcodes.OK, proc.stderr
    assert link.is_symlink()
    assert proc.stdout.count('"schema_version"') == 2  # printed, then written through the link


def test_bench_csv_that_cannot_be_written_keeps_the_table_and_exits_7(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    from gpudoctor.workload import output

    def csv_fails(path, runs):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(output, "write_csv", csv_fails)
    doc = tmp_path / "sweep.json"
    code = main(["bench", "mnist", "--device", "cpu", "--train-samples", "512", "--test-samples", "128",
                 "--batch-sizes", "256", "--workers", "0", "--modes", "resident",
                 "--csv", str(tmp_path / "runs.csv"), "-o", str(doc)])
    assert code == exitcodes.WRITE_FAILED
    captured = capsys.readouterr()
    assert "samples/s" in captured.out  # the table was printed
    assert json.loads(doc.read_text())["runs"]  # the other file was still written
    assert captured.err.strip().splitlines()[-1] == f"gpudoctor: error: cannot write {tmp_path / 'runs.csv'}: Permission denied"


# --------------------------------------------------------------------------- arguments
@pytest.mark.parametrize("argv", [
    ["exporter", "--interval", "nan"],
    ["exporter", "--interval", "1e309"],
    ["exporter", "--interval", "inf"],
    ["exporter", "--report-interval", "nan"],
    ["exporter", "--exit-after", "nan"],
    ["exporter", "--exit-after", "-inf"],
    ["exporter", "--port", "1e3"],
    ["record", "-o", "x.json", "--seconds", "1e309"],
    ["record", "-o", "x.json", "--interval", "nan"],
    ["watch", "-i", "inf"],
    ["watch", "-n", "nan"],
    ["tui", "-i", "1e309"],
    ["distributed", "--timeout", "nan"],
    ["distributed", "--timeout", "inf"],
    ["distributed", "--nproc", "inf"],
    ["report", "--device", "nan"],
    ["report", "-o", ""],
    ["record", "-o", ""],
    ["distributed", "-o", " "],
    ["bench", "mnist", "--csv", ""],
])
def test_nan_inf_overflow_and_empty_names_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == exitcodes.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("gpudoctor ") and ": error: argument " in err[0] and len(err) == 2


def test_bounded_number_type():
    seconds = bounded(float, above=0, maximum=60, what="a number of seconds", unit=" s")
    assert seconds("0.5") == 0.5 and seconds(" 60 ") == 60.0
    for text, message in [("nan", "must be > 0 s"), ("inf", "finite"), ("1e309", "finite"), ("-1", "must be > 0 s"),
                          ("61", "at most 60 s"), ("x", "not a number of seconds")]:
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            seconds(text)
    whole = bounded(int, minimum=1, what="a whole number")
    assert whole("3") == 3
    for text in ("1.5", "1e3", "nan", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            whole(text)
    free = bounded(float)  # no bounds: still finite
    with pytest.raises(argparse.ArgumentTypeError, match="finite"):
        free("nan")
    with pytest.raises(argparse.ArgumentTypeError):
        output_path("")


def test_writable_check(tmp_path):
    from gpudoctor.core.errors import UsageError

    check_writable(str(tmp_path / "new.json"))
    check_writable(None)
    with pytest.raises(UsageError, match="does not exist"):
        check_writable(str(tmp_path / "no" / "x.json"), "--csv")
    with pytest.raises(UsageError, match="is a directory"):
        check_writable(str(tmp_path))


# --------------------------------------------------------------------------- Ctrl-C twice
SECOND_CTRL_C = """
import io, os, signal, sys
import gpudoctor.commands.watch as command

class Stderr(io.StringIO):
    sent = False
    def write(self, text):
        if not Stderr.sent:  # a second Ctrl-C while the first one is being reported
            Stderr.sent = True
            os.kill(os.getpid(), signal.SIGINT)
        return super().write(text)

def first_ctrl_c(args):
    sys.stderr = Stderr()
    raise KeyboardInterrupt

command.run = first_ctrl_c
from gpudoctor import cli
sys.argv = ["gpudoctor", "watch"]
raise SystemExit(cli.main())
"""

CTRL_C_AT_SHUTDOWN = """
import os, signal, sys, threading, time
import gpudoctor.commands.watch as command

def first_ctrl_c(args):
    threading.Thread(target=time.sleep, args=(60,)).start()  # cleanup still running at exit
    threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    raise KeyboardInterrupt

command.run = first_ctrl_c
from gpudoctor import cli
sys.argv = ["gpudoctor", "watch"]
raise SystemExit(cli.main())
"""


@pytest.mark.parametrize("script", [SECOND_CTRL_C, CTRL_C_AT_SHUTDOWN], ids=["while-reporting", "at-shutdown"])
def test_a_second_ctrl_c_still_exits_130(script):
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == exitcodes.INTERRUPTED, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- first use
def test_tui_options_without_the_command_open_the_tui():
    # Not a terminal here: the TUI's own one-line refusal shows the options reached it.
    proc = run_cli("-i", "1", "--replay", HEALTHY, timeout=60)
    assert proc.returncode == exitcodes.USAGE
    assert proc.stderr.strip() == ("gpudoctor: error: the TUI needs a terminal; for logs use `gpudoctor watch` "
                                   "(or --json)")
    bad = run_cli("-i", "0.1", timeout=60)
    assert bad.returncode == exitcodes.USAGE and "gpudoctor tui: error: argument -i/--interval" in bad.stderr
    assert run_cli("--version", timeout=60).stdout.startswith("gpudoctor ")


def test_distributed_prints_its_own_header(monkeypatch, capsys):
    from gpudoctor.report import runner
    from gpudoctor.core.model import ProbeResult, Report

    monkeypatch.setattr(runner, "run_probes",
                        lambda probes, spec, **kw: Report(results=[ProbeResult.skip("distributed", "not here")]))
    main(["distributed"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("gpudoctor distributed  ") and "gpudoctor report" not in first
