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

from gpudoctor.system import _proc

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and a subreaper")

TESTS = Path(__file__).resolve().parents[1]

# The TUI's Doctor: the runner in a daemon thread, a quiet child; then `q` (the process exits).
# argv: the marker to wait for before quitting ("" quits after argv 2 seconds, racing the start).
SCENARIO = r"""
import os, sys, threading, time
sys.path.insert(0, {tests!r})
from gpudoctor.report import runner
from support import fault_probes
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

from support.subreaper import REAPER  # noqa: E402


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


# --------------------------------------------------------------------------- each starter on its limit
# The scenario leaves with os._exit once the starter has given up on its child: what is left then
# is what the starter left (the exit hook, which would end what is still tracked, does not run).
FAKE_NVML = TESTS.parent / "benchmarks" / "fake_nvml"


def _left_after(scenario: str, **env: str) -> dict:
    import os
    import textwrap

    full = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_CUDA", "FAKE_NVML", "PYTEST"))}
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", REAPER.format(root=str(TESTS.parent)), textwrap.dedent(scenario)],
                          capture_output=True, text=True, timeout=300, env=full, cwd=TESTS.parent)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "Traceback" not in seen["stderr"], seen["stderr"]
    return seen


@pytest.mark.parametrize("threaded", [False, True], ids=["forked", "spawned"])
def test_cuda_start_child_past_its_limit_leaves_nothing(threaded):
    """A cuInit that started a helper and hangs: the child and its helper are ended on the limit.
    Before (forked): the fork was killed alone, its helper ran on."""
    seen = _left_after(f"""
        import os, sys, threading
        from gpudoctor.backends import cuda_driver
        if {threaded}:  # another thread: the check starts an interpreter instead of forking
            threading.Thread(target=threading.Event().wait, daemon=True).start()
        answer = cuda_driver.begin_cuda_start(3.0).answer()
        print(getattr(answer, "reason", answer), file=sys.stderr, flush=True)
        os._exit(0)
    """, PYTHONPATH=str(FAKE_NVML), FAKE_CUDA_INIT="hang-tree")
    assert seen["code"] == 0 and "Timeout" in seen["stderr"], seen
    assert seen["left"] == [], seen


def test_run_bounded_past_its_limit_leaves_nothing():
    """The memory probe's fresh process (and every run_bounded command) on its limit: its tree ends."""
    seen = _left_after("""
        import os, subprocess, sys
        from gpudoctor.system import _proc
        code = "import subprocess, time; subprocess.Popen(['sleep', '600']); print('up', flush=True); time.sleep(600)"
        try:
            _proc.run_bounded([sys.executable, "-c", code], timeout_s=5.0, max_output=1 << 16)
        except _proc.ChildTimeout:
            print("Timeout", file=sys.stderr, flush=True)
        os._exit(0)
    """)
    assert seen["code"] == 0 and "Timeout" in seen["stderr"], seen
    assert seen["left"] == [], seen


@pytest.mark.timeout(240)
def test_distributed_probe_with_a_hung_rank_leaves_nothing():
    """Rank 1 starts a helper and hangs in its all-reduce: on the probe's limit every rank and the
    helper are ended."""
    seen = _left_after("""
        import os, sys
        from gpudoctor.probes.distributed import launch_local
        payloads, failures = launch_local(2, "gloo", [64 << 10], 30, fault="hang-tree:1:allreduce")
        print(repr(failures)[:500], file=sys.stderr, flush=True)
        os._exit(0)
    """)
    assert seen["code"] == 0, seen
    assert seen["left"] == [], seen


# A torch whose import starts a helper process and never finishes (a stuck CUDA start).
_SLOW_TORCH = """
import os, subprocess, time
subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open(os.environ["FAKE_TORCH_MARKER"], "w").close()
time.sleep(600)
"""


@pytest.mark.parametrize("how", ["limit", "sigterm"])
def test_record_stopped_during_its_torch_step_leaves_nothing(tmp_path, how):
    """record's torch child, with a helper of its own, on its limit or stopped by SIGTERM (which
    gpudoctor turns into KeyboardInterrupt): the child and the helper are ended."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(_SLOW_TORCH)
    marker = tmp_path / "torch.started"
    seen = _left_after(f"""
        import os, signal, sys, threading, time
        from gpudoctor.sampling import recorder
        def stop(*_):
            raise KeyboardInterrupt
        def stop_once_started():
            while not os.path.exists({str(marker)!r}):
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGTERM)
        signal.signal(signal.SIGTERM, stop)
        if {how == "sigterm"}:
            threading.Thread(target=stop_once_started, daemon=True).start()
        try:
            print(recorder.torch_facts_in_child(timeout=240 if {how == "sigterm"} else 30), file=sys.stderr)
        except KeyboardInterrupt:
            print("stopped", file=sys.stderr)
        sys.stderr.flush()
        os._exit(0)
    """, PYTHONPATH=str(tmp_path), FAKE_TORCH_MARKER=str(marker))
    assert marker.exists(), seen
    assert ("stopped" if how == "sigterm" else "Timeout") in seen["stderr"], seen
    assert seen["code"] == 0 and seen["left"] == [], seen
