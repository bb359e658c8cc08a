"""Probes that misbehave on purpose, for runner tests (module-level so a spawned child can import them)."""

from __future__ import annotations

import os
import time

from gpudoctor.core.model import ProbeResult, Status
from gpudoctor.probes import Probe


def _raises(ctx):
    raise ValueError("deliberate failure\nsecond line is not shown")


def _hangs(ctx):
    time.sleep(3600)
    return ProbeResult("hangs")


def _slow(ctx):
    time.sleep(3)  # at least 3 s: past its 1 s limit unless the limit was stretched
    return _ok(ctx)


def _aborts(ctx):
    os.abort()


def _ok(ctx):
    r = ProbeResult("ok")
    r.measure("pid", os.getpid())
    r.find(Status.PASS, "fine", "all good")
    return r.settle("fine")


def _wrong_type(ctx):
    return {"not": "a ProbeResult"}


def _exits(ctx):
    raise SystemExit(3)


RAISES = Probe("raises", "raises ValueError", _raises, uses_torch=True, timeout_s=30)
RAISES_INPROC = Probe("raises_inproc", "raises ValueError in-process", _raises, uses_torch=False, timeout_s=30)
HANGS = Probe("hangs", "sleeps forever in the child", _hangs, uses_torch=True, timeout_s=2)
HANGS_INPROC = Probe("hangs_inproc", "sleeps forever in a thread", _hangs, uses_torch=False, timeout_s=1)
SLOW = Probe("slow", "works 3 s against a 1 s limit in the child", _slow, uses_torch=True, timeout_s=1)
SLOW_INPROC = Probe("slow_inproc", "works 3 s against a 1 s limit in a thread", _slow, uses_torch=False, timeout_s=1)
ABORTS = Probe("aborts", "os.abort() in the child", _aborts, uses_torch=True, timeout_s=30)
OK = Probe("ok", "passes", _ok, uses_torch=True, timeout_s=30)
OK_INPROC = Probe("ok_inproc", "passes in-process", _ok, uses_torch=False, timeout_s=30)
WRONG_TYPE = Probe("wrong_type", "returns a dict", _wrong_type, uses_torch=False, timeout_s=30)
EXITS = Probe("exits", "raises SystemExit", _exits, uses_torch=True, timeout_s=30)


def _noisy(ctx):
    import sys

    print("NOISY-STDOUT")
    print("NOISY-STDERR", file=sys.stderr)
    return ProbeResult("noisy", summary="printed")


NOISY = Probe("noisy", "prints to stdout and stderr", _noisy, uses_torch=True, timeout_s=30)


def _waits(ctx):
    """Says it started (a file named by GPUDOCTOR_TEST_STARTED), then waits to be stopped."""
    marker = os.environ.get("GPUDOCTOR_TEST_STARTED")
    if marker:
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
    time.sleep(3600)
    return ProbeResult("waits")


WAITS = Probe("waits", "waits in the child until stopped", _waits, uses_torch=True, timeout_s=600)


def _starts_a_tree(ctx):
    """A probe that starts processes as torchrun and DataLoader workers do: two in its own
    group, one in a session of its own; then it waits, as a hung collective does."""
    import subprocess
    import sys

    marker = os.environ.get("GPUDOCTOR_TEST_TREE_MARKER")
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) for _ in range(2)]
    kids.append(subprocess.Popen(["sleep", "600"], start_new_session=True))
    if marker:
        with open(marker + ".tmp", "w") as fh:
            fh.write(" ".join(str(k.pid) for k in kids))
        os.replace(marker + ".tmp", marker)
    time.sleep(3600)
    return ProbeResult("tree")


STARTS_A_TREE = Probe("tree", "starts a tree of processes", _starts_a_tree, uses_torch=True, timeout_s=300)


def _poisons(ctx):
    """Returns normally but says its process must not run another probe (as a hung peer copy does)."""
    r = ProbeResult("poisons")
    r.measure("pid", os.getpid())
    r.poison_process("a peer copy never finished")
    return r.settle("returned, process poisoned")


POISONS = Probe("poisons", "returns but poisons its child", _poisons, uses_torch=True, timeout_s=30)
