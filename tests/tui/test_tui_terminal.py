"""End to end in a real terminal: `python -m gpudoctor tui --replay ...`.

Under tmux (the reference: start, switch screens with keys, read the pane, quit with q,
exit code 0); it skips when tmux is not installed (CI: apt-get install tmux) or its
server cannot start here. The same walk also runs on a bare pseudo-terminal, which
needs nothing but the standard library, so the real-terminal path is always tested.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.tui_support import STANDIN, PtyApp

TMUX = shutil.which("tmux")
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(180)


class Tmux:
    def __init__(self, socket: Path) -> None:
        self.socket = str(socket)

    def run(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run([TMUX, "-S", self.socket, *args], capture_output=True, text=True, timeout=30)
        if check and proc.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)} failed: {proc.stderr}")
        return proc.stdout

    def pane(self) -> str:
        return self.run("capture-pane", "-p", "-t", "gd")

    def wait_for(self, *texts: str, timeout: float = 60.0) -> str:
        """The pane once every one of ``texts`` is on it at the same time (a screen is
        painted in several writes: one string showing does not mean the rest has)."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.pane()
            if all(text in screen for text in texts):
                return screen
            time.sleep(0.2)
        missing = [text for text in texts if text not in screen]
        raise AssertionError(f"{missing!r} did not appear within {timeout} s; the pane shows:\n{screen}")

    def keys(self, *keys: str) -> None:
        # Leave any tmux mode first. In full CI runs (after a Lightning fit in the same pytest
        # process) the pane was found in tmux's view-mode, where tmux itself takes the keys and
        # the app never sees them; that is harness state, not the app's.
        self.run("copy-mode", "-q", "-t", "gd")
        self.run("send-keys", "-t", "gd", *keys)


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (CI: apt-get install tmux)")
def test_tui_under_tmux(tmp_path):
    status = tmp_path / "exit_status"
    command = (f"cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m gpudoctor tui "
               f"--replay {shlex.quote(str(STANDIN))} --interval 0.5 --doctor-level quick; "
               f"echo $? > {shlex.quote(str(status))}; sleep 30")
    tmux = Tmux(tmp_path / "tmux.sock")
    env_cmd = f"env TERM=xterm-256color PYTHONUNBUFFERED=1 sh -c {shlex.quote(command)}"
    # The server runs in the foreground (-D) as our child: it needs no daemon() (which
    # fails where /dev/null is not a character device, as in some sandboxes).
    server = subprocess.Popen([TMUX, "-S", tmux.socket, "-D", "-f", os.devnull],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not Path(tmux.socket).exists() and time.monotonic() < deadline and server.poll() is None:
        time.sleep(0.05)
    started = subprocess.run([TMUX, "-S", tmux.socket, "new-session", "-d", "-s", "gd",
                              "-x", "80", "-y", "24", env_cmd], capture_output=True, text=True, timeout=30)
    if started.returncode != 0:
        server.kill()
        server.wait(10)
        pytest.skip(f"tmux server cannot start here: {started.stderr.strip()}")
    try:
        tmux.wait_for("GPU 1: NVIDIA A100-SXM4-40GB", "GPU 0: NVIDIA A100-SXM4-40GB", "Host", "q quit")

        tmux.keys("p")
        tmux.wait_for("424242", "python train.py", "Processes")

        tmux.keys("d")
        tmux.wait_for("Doctor")
        tmux.wait_for("r re-run", timeout=60)  # the quick doctor finished

        tmux.keys("w")
        tmux.wait_for("Workload")

        tmux.keys("?")
        tmux.wait_for("gpudoctor keys")
        tmux.keys("Escape")
        # Esc followed at once by a key reads as Alt+key: wait for the help to close first.
        deadline = time.monotonic() + 30
        while "gpudoctor keys" in tmux.pane():
            assert time.monotonic() < deadline, "Esc did not close the help"
            time.sleep(0.2)
        tmux.keys("o")
        tmux.wait_for("GPU 0: NVIDIA")

        tmux.keys("q")
        deadline = time.monotonic() + 30
        while not status.exists() or not status.read_text().strip():
            assert time.monotonic() < deadline, "the app did not exit after q:\n" + tmux.pane()
            time.sleep(0.2)
        assert status.read_text().strip() == "0"
    finally:
        tmux.run("kill-server", check=False)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


def test_tui_on_a_pseudo_terminal():
    app = PtyApp([sys.executable, "-m", "gpudoctor", "tui", "--replay", str(STANDIN), "--interval", "0.5",
                  "--doctor-level", "quick"])
    with app:
        app.wait_for("GPU 1: NVIDIA A100-SXM4-40GB")
        app.wait_for("Host")
        for key, needle in (("p", "python train.py"), ("d", "Doctor"), ("w", "Workload"), ("?", "gpudoctor keys")):
            since = app.mark()
            app.keys(key)
            app.wait_for(needle, since)
        since = app.mark()
        app.keys("\x1b")  # Esc closes the help
        app.wait_for("x cancel", since)  # closed: the Workload screen again (Esc then o at once reads as Alt+o)
        since = app.mark()
        app.keys("o")
        app.wait_for("GPU 0: NVIDIA", since)
        assert app.quit(30) == 0


def _voluntary_switches(pid: int) -> int:
    """Times the process's threads went to sleep, all of them together (Linux /proc)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as status:
                total += sum(int(line.split()[1]) for line in status if line.startswith("voluntary_ctxt_switches"))
        except OSError:  # a thread that ended in between
            pass
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_tui_sleeps_while_nothing_happens():
    """Between readings and keys no thread of the TUI wakes: the input thread waits for input
    (Textual's own wakes ten times a second to look for a stop request), and nothing else polls."""
    from gpudoctor.tui.driver import TICK_FOR_S

    app = PtyApp([sys.executable, "-m", "gpudoctor", "tui", "--replay", str(STANDIN), "--interval", "60",
                  "--doctor-level", "quick"])
    with app:
        app.wait_for(" · d ")  # the start-up doctor's verdict (with its key) in the header: start-up is over
        time.sleep(TICK_FOR_S + 1.0)
        # Start-up's last work (the doctor's child ending, a repaint) can run late on a busy
        # machine and wake threads on its way: look at 3 s windows until one is quiet, up to a
        # generous bound. A TUI that polls is never quiet, however long it is watched.
        wakes: list[int] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            before = _voluntary_switches(app.proc.pid)
            time.sleep(3.0)
            wakes.append(_voluntary_switches(app.proc.pid) - before)
            if wakes[-1] <= 3:
                break
        assert wakes[-1] <= 3, f"the TUI's threads woke {wakes} times in each 3 s window with nothing to do"
        assert app.quit(30) == 0


def test_a_lone_escape_arrives_after_a_quiet_spell():
    """Escape alone is told from an escape sequence by a timeout; the input thread, asleep
    since the last key, still wakes to deliver it."""
    from gpudoctor.tui.driver import TICK_FOR_S

    app = PtyApp([sys.executable, "-m", "gpudoctor", "tui", "--replay", str(STANDIN), "--interval", "60",
                  "--doctor-level", "quick"])
    with app:
        app.wait_for("GPU 1: NVIDIA A100-SXM4-40GB")
        since = app.mark()
        app.keys("?")
        app.wait_for("gpudoctor keys", since)
        time.sleep(TICK_FOR_S + 1.0)  # the input thread waits without a timeout now
        since = app.mark()
        app.keys("\x1b")
        app.wait_for("GPU 0: NVIDIA", since, timeout=60)  # the help closed: the Overview again
        assert app.quit(30) == 0
