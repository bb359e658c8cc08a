"""`gpudoctor why` reads a frame's source line only from a regular file that the sampled process's
own user could read: a frame's file name is whatever that process says it is, and gpudoctor may
run as root."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from gpudoctor.why import session

SECRET = "root-only secret line"
SLEEPER = "import sys, time; print('ready', flush=True); time.sleep(120)"


def _start(**kwargs) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE, text=True, **kwargs)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(10)


@pytest.fixture
def folder():
    """A folder everyone may enter (pytest's own tmp folders are root's, 0700)."""
    path = tempfile.mkdtemp(prefix="gpudoctor-why-source-")
    os.chmod(path, 0o755)
    yield path
    for name in os.listdir(path):
        os.unlink(os.path.join(path, name))
    os.rmdir(path)


def _write(path: str, text: str, mode: int) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    os.chmod(path, mode)
    return path


@pytest.fixture
def nobody_process():
    if os.geteuid() != 0:
        pytest.skip("needs root: the test starts a process as another user")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this machine has no user 'nobody'")
    # not this interpreter: it may live under /root, where nobody may not go; any process will
    # do, since what is checked is its user (Popen returns once it has exec'd as nobody)
    proc = subprocess.Popen(["sleep", "120"], user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[], cwd="/")
    yield proc
    _stop(proc)


def test_a_root_only_file_named_by_an_unprivileged_process_is_not_read(folder, nobody_process):
    secret = _write(os.path.join(folder, "secret.py"), SECRET, 0o600)
    public = _write(os.path.join(folder, "public.py"), "x = 1  # public line", 0o644)
    line = session.source_reader(nobody_process.pid)
    assert line(secret, 1) == ""
    assert line(public, 1) == "x = 1  # public line"


def test_a_readable_file_in_a_folder_the_process_may_not_enter_is_not_read(folder, nobody_process):
    os.chmod(folder, 0o700)
    inside = _write(os.path.join(folder, "inside.py"), SECRET, 0o644)
    assert session.source_reader(nobody_process.pid)(inside, 1) == ""


def test_group_bits_count_for_the_process_groups(folder, nobody_process):
    nobody = pwd.getpwnam("nobody")
    shared = _write(os.path.join(folder, "shared.py"), "shared = 1", 0o640)
    os.chown(shared, 0, nobody.pw_gid)
    assert session.source_reader(nobody_process.pid)(shared, 1) == "shared = 1"
    os.chown(shared, 0, 0)
    assert session.source_reader(nobody_process.pid)(shared, 1) == ""


def test_credentials_are_the_process_ids():
    proc = _start()
    try:
        who = session.process_credentials(proc.pid)
    finally:
        _stop(proc)
    assert who is not None and os.getuid() in who.uids and os.getgid() in who.gids


def test_no_credentials_no_source(folder):
    public = _write(os.path.join(folder, "public.py"), "x = 1", 0o644)
    proc = _start()
    _stop(proc)  # ended: nothing tells whose it was
    assert session.source_reader(proc.pid)(public, 1) == ""


def _within(seconds: float, call):
    """call() in a thread; fails the test if it has not returned within ``seconds``."""
    result: list = []
    worker = threading.Thread(target=lambda: result.append(call()), daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still reading after {seconds} s"
    return result[0], time.monotonic() - started


def _read_for_a_live_process(path: str) -> str:
    """What the source reader of a running process gives for ``path`` (within 60 s, or the test fails)."""
    proc = _start()
    try:
        text, _ = _within(60.0, lambda: session.source_reader(proc.pid)(path, 1))
    finally:
        _stop(proc)
    return text


def test_a_fifo_named_as_a_frame_file_returns_at_once(folder):
    fifo = os.path.join(folder, "frame.py")
    os.mkfifo(fifo, 0o644)
    assert _read_for_a_live_process(fifo) == ""


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_named_as_a_frame_file_is_not_read(device):
    if not stat.S_ISCHR(os.stat(device).st_mode):
        pytest.skip(f"{device} is not a device here")
    assert _read_for_a_live_process(device) == ""

