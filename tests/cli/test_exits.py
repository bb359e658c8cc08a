"""Ways out that must not wait for a hung driver, and Ctrl-C in the TUI (issue: hangs on quit).

The TUI runs on a pseudo-terminal over the fake NVML of benchmarks/fake_nvml, with one symbol
made to hang (``FAKE_NVML_HANG``); the gate's own rule is tested on the in-process fake.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from support.nvml_fake import FakePynvml
from support.tui_support import PtyApp

ROOT = Path(__file__).resolve().parents[2]
FAKE_NVML = ROOT / "benchmarks" / "fake_nvml"

pytestmark = pytest.mark.timeout(120)


def fake_nvml_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_NVML), str(ROOT)])
    env.update(extra)
    return env


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pseudo-terminal and fake libnvidia-ml")
def test_tui_quits_on_q_while_an_nvml_call_hangs():
    """The start-up quick doctor waits on the hung call too; quitting must not wait for it."""
    app = PtyApp([sys.executable, "-m", "gpudoctor", "tui", "-i", "0.5"],
                 env=fake_nvml_env(FAKE_NVML_HANG="nvmlDeviceGetTemperatureV"))
    with app:
        app.wait_for("driver not answering", timeout=60)
        assert app.quit(60) == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pseudo-terminal and fake libnvidia-ml")
def test_ctrl_c_quits_the_tui_with_130():
    app = PtyApp([sys.executable, "-m", "gpudoctor", "tui", "-i", "0.5"], env=fake_nvml_env())
    try:
        app.wait_for("GPU 0: NVIDIA H100", timeout=60)
        app.keys("\x03")  # what the terminal sends for Ctrl-C in raw mode
        assert app.proc.wait(60) == 130
    finally:
        app.close()


def _hanging_gate(monkeypatch: pytest.MonkeyPatch):
    from gpudoctor.backends import nvml as nvml_module
    from gpudoctor.backends import NvmlBackend, NvmlGate

    monkeypatch.setattr(nvml_module, "STUCK_S", 0.2)
    release = threading.Event()
    entered = threading.Event()

    def hang(*args):
        entered.set()
        release.wait(300)  # far past any bound below: answering at once is told from waiting behind it
        return 41

    fake = FakePynvml(readings={"nvmlDeviceGetTemperature": hang})
    gate = NvmlGate(fake)
    return NvmlBackend(gate), gate, fake, entered, release


def test_a_call_stuck_in_the_driver_makes_the_others_answer_at_once(monkeypatch):
    backend, gate, fake, entered, release = _hanging_gate(monkeypatch)
    assert gate.start() is None
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    try:
        threading.Thread(target=gate.query, args=("nvmlDeviceGetTemperature", handle, 0), daemon=True).start()
        assert entered.wait(10)
        time.sleep(0.3)  # past STUCK_S: being stuck is a matter of time, there is no event for it
        started = time.monotonic()
        answer = gate.query("nvmlDeviceGetName", handle)
        assert time.monotonic() - started < 30  # waiting behind the hung call would take 300 s
        assert getattr(answer, "reason", None) == "DriverNotAnswering"
        started = time.monotonic()
        gate.shutdown()  # closing never waits behind the hung call
        assert time.monotonic() - started < 30
    finally:
        release.set()


def test_a_hung_nvml_init_does_not_hold_the_other_callers(monkeypatch):
    from gpudoctor.backends import nvml as nvml_module
    from gpudoctor.backends import NvmlGate

    monkeypatch.setattr(nvml_module, "STUCK_S", 0.2)
    release = threading.Event()
    entered = threading.Event()

    class SlowInit(FakePynvml):
        def nvmlInit(self) -> None:
            entered.set()
            release.wait(300)
            super().nvmlInit()

    gate = NvmlGate(SlowInit())
    try:
        threading.Thread(target=gate.start, daemon=True).start()
        assert entered.wait(10)
        started = time.monotonic()
        assert getattr(gate.query("nvmlDeviceGetCount"), "reason", None) == "DriverNotAnswering"
        gate.shutdown()
        assert time.monotonic() - started < 30  # the init hangs for 300 s
    finally:
        release.set()


def test_a_missing_nvml_binding_is_never_taken_for_a_hung_driver(monkeypatch):
    """Without nvidia-ml-py, start-up ends at once: later calls say PythonBindingMissing, never
    DriverNotAnswering, and no thread counts as blocked (the runner would abandon its probe)."""
    from gpudoctor.backends import nvml as nvml_module
    from gpudoctor.backends import NvmlGate

    monkeypatch.setattr(nvml_module, "STUCK_S", 0.1)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    gate = NvmlGate()
    assert getattr(gate.start(), "reason", None) == "PythonBindingMissing"
    time.sleep(0.3)  # past STUCK_S
    assert not gate.stuck() and not nvml_module.thread_blocked(threading.get_ident())
    assert getattr(gate.query("nvmlDeviceGetCount"), "reason", None) == "PythonBindingMissing"


def _exporter(env: dict[str, str]):
    import re
    import subprocess

    proc = subprocess.Popen([sys.executable, "-m", "gpudoctor", "exporter", "--port", "0", "--no-report"],
                            env=env, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    url = None
    for _ in range(5):
        line = proc.stderr.readline()
        found = re.search(r"http://\S+/metrics", line)
        if found:
            url = found.group(0)
            break
    return proc, url


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fake libnvidia-ml")
def test_the_exporter_serves_while_the_device_count_hangs():
    import signal
    import urllib.request

    proc, url = _exporter(fake_nvml_env(FAKE_NVML_HANG="nvmlDeviceGetCount_v2"))
    try:
        assert url is not None, "the exporter never said where it serves"
        body = urllib.request.urlopen(url, timeout=10).read().decode()
        assert "gpudoctor_nvml_up 0" in body
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stderr.close()


# --------------------------------------------------------------------------- outputs
REPLAY = ROOT / "tests" / "data" / "handmade_consumer_notsupported.json"


def test_o_file_is_written_when_the_reader_of_stdout_has_gone(tmp_path):
    """`report -o FILE | head -1`: Rich's own broken-pipe handling raised SystemExit(1) inside
    the rendering, before the file was written."""
    import subprocess

    out = tmp_path / "r.json"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first line
    try:
        proc = subprocess.run([sys.executable, "-m", "gpudoctor", "report", "-o", str(out), "--replay", str(REPLAY)],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr
    assert json.loads(out.read_text())["results"]
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not hasattr(os, "fchmod"), reason="POSIX modes")
def test_an_output_over_a_setuid_file_drops_the_setuid_and_setgid_bits(tmp_path):
    from gpudoctor.system import fileio

    target = tmp_path / "report.json"
    target.write_text("old")
    os.chmod(target, 0o6755)
    fileio.write_text(target, "{}\n")
    assert target.read_text() == "{}\n"
    assert os.stat(target).st_mode & 0o7777 == 0o755


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to own files of another user")
def test_an_output_over_another_users_file_keeps_its_owner(tmp_path):
    from gpudoctor.system import fileio

    target = tmp_path / "report.json"
    target.write_text("old")
    os.chown(target, 65534, 65534)
    os.chmod(target, 0o644)
    fileio.write_text(target, "{}\n")
    info = os.stat(target)
    assert (info.st_uid, info.st_gid) == (65534, 65534) and target.read_text() == "{}\n"


# --------------------------------------------------------------------------- fleet: one deadline
class _Trickle:
    """A 'Prometheus' that answers one byte every 0.2 s, forever: each read gets data in time."""

    def __init__(self) -> None:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n" + b" " * 100000
        try:
            conn.recv(65536)
            for byte in answer:
                if self.done.wait(0.2):
                    break
                conn.sendall(bytes([byte]))
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.done.set()
        self.sock.close()


def test_fleet_timeout_is_one_deadline_for_the_whole_run():
    import subprocess

    from gpudoctor.core import exitcodes

    server = _Trickle()
    try:
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "gpudoctor", "fleet", "--prometheus", server.url, "--timeout", "3"],
                              capture_output=True, text=True, cwd=ROOT, timeout=240)
        took = time.monotonic() - started
    finally:
        server.close()
    assert proc.returncode == exitcodes.UNREACHABLE, proc.stderr
    # the trickle never ends: a deadline per read would run to the 240 s limit; 3 s in all plus a
    # start-up that a busy machine may stretch stays far below
    assert took < 120, f"fleet --timeout 3 took {took:.0f} s"
    assert "within the 3 s allowed" in proc.stderr
