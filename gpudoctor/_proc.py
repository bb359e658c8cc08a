"""Small helpers for the child processes gpudoctor starts (probe runner, workload, ranks).

Standard library only, so every layer may use it.
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess


def describe_exit(code: int | None) -> str:
    """A process exit status in words: 'exited with code 3', 'killed by SIGABRT'."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def stop_popen(proc: subprocess.Popen[bytes] | subprocess.Popen[str] | None, grace_s: float = 10.0) -> None:
    """Stop a ``subprocess.Popen`` child: SIGTERM, then SIGKILL if it has not ended within
    ``grace_s``. Nothing to do for None or a child that has already ended."""
    import subprocess

    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def silence_stdio() -> None:
    """Point this process's stdout and stderr (fds 1 and 2) at /dev/null.

    For children whose parent owns the terminal (the TUI): library warnings printed by
    the child would draw over its screen. Results travel over pipes, not stdio.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)
    except OSError:
        pass
