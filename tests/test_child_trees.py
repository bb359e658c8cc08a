"""Every child gpudoctor starts is ended with its whole tree, quietly (issue 35, item 2).

The scenario runs in a process of its own under a subreaper: what the scenario's children
leave behind when it ends is re-parented to the subreaper, which counts it. Zero is the answer.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor import _proc

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and a subreaper")

TESTS = Path(__file__).resolve().parent

# The TUI's Doctor: the runner in a daemon thread, a quiet child; then `q` (the process exits).
# argv: the marker to wait for before quitting ("" quits after argv 2 seconds, racing the start).
SCENARIO = r"""
import os, sys, threading, time
sys.path.insert(0, {tests!r})
from gpudoctor import runner
import fault_probes
marker, delay = sys.argv[1], float(sys.argv[2])
os.environ["GPUDOCTOR_TEST_TREE_MARKER"] = marker
spec = runner.RunSpec(level="full", quiet_child=True)
threading.Thread(target=lambda: runner.run_probes([fault_probes.STARTS_A_TREE], spec), daemon=True).start()
if delay:
    time.sleep(delay)
deadline = time.monotonic() + 240
while not delay and not os.path.exists(marker) and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(0)
"""

# Subreaper: runs the scenario, then reaps and counts what is left below itself.
REAPER = r"""
import ctypes, json, os, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
sys.path.insert(0, {root!r})
from gpudoctor import _proc
run = subprocess.run([sys.executable, "-c", sys.argv[1], *sys.argv[2:]], capture_output=True, text=True, timeout=280)
def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
left = []
deadline = time.monotonic() + 10  # a generous bound for a SIGTERM already sent to land
while time.monotonic() < deadline:
    reap()
    left = [p for p in _proc.descendants(os.getpid()) if _proc._alive(p)]
    if not left:
        break
    time.sleep(0.1)
commands = []
for p in left:
    try:
        commands.append(open(f"/proc/{{p}}/cmdline", "rb").read().replace(b"\0", b" ").decode()[:200])
    except OSError:
        pass
    try:
        os.kill(p, 9)
    except OSError:
        pass
reap()
print(json.dumps({{"code": run.returncode, "stderr": run.stderr[-3000:], "left": commands}}))
"""


def _quit(tmp_path: Path, wait_for_tree: bool, delay: float = 0.0) -> dict:
    marker = str(tmp_path / "tree.pids") if wait_for_tree else str(tmp_path / "never")
    proc = subprocess.run([sys.executable, "-c", REAPER.format(root=str(TESTS.parent)),
                           SCENARIO.format(tests=str(TESTS)), marker, "0" if wait_for_tree else str(delay)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_quitting_while_a_probe_runs_its_tree_leaves_nothing(tmp_path):
    """Before: the probe child was ended (multiprocessing's exit terminates daemonic children),
    the ranks and workers it started were not."""
    seen = _quit(tmp_path, wait_for_tree=True)
    assert (tmp_path / "tree.pids").exists()
    assert seen["code"] == 0 and seen["left"] == [], seen
    assert "Traceback" not in seen["stderr"], seen["stderr"]


@pytest.mark.parametrize("delay", [0.0, 0.2, 1.0])
def test_quitting_at_once_after_opening_the_doctor_is_quiet(tmp_path, delay):
    """Before: a probe child half started when the TUI quit printed `EOFError: Ran out of input`
    over the restored terminal. Quitting at any moment of the start: no output, nothing left."""
    seen = _quit(tmp_path, wait_for_tree=False, delay=delay)
    assert seen["code"] == 0 and seen["left"] == [], seen
    assert "EOFError" not in seen["stderr"] and "Traceback" not in seen["stderr"], seen["stderr"]


def test_run_bounded_ends_the_tree_a_command_leaves():
    code, out, _ = _proc.run_bounded([sys.executable, "-c",
                                      "import subprocess; p = subprocess.Popen(['sleep', '600']); print(p.pid)"],
                                     timeout_s=60, max_output=1 << 16)
    assert code == 0
    assert not _proc._alive(int(out.split()[-1]))
