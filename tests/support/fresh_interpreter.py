"""What a fresh Python interpreter loads: the import contracts (front ends without torch, the
command line without textual...) are checked in a new process, where nothing the test suite
imported can hide a stray import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterable

ROOT = Path(__file__).resolve().parents[2]


def modules_loaded(statements: str, watched: Iterable[str], timeout: float = 120) -> list[str]:
    """Run ``statements`` in a fresh interpreter (in the repository); of the ``watched`` top-level
    modules, those it then has loaded, sorted. The test fails if the statements fail."""
    names = sorted(set(watched))
    code = (f"{statements}\nimport sys as _sys, json as _json\n"
            f"print(_json.dumps(sorted(m for m in {names!r} if m in _sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
