"""SIGTERM handled like Ctrl-C, and quiet child processes.

A timeout, systemd, Kubernetes or Slurm ends a program with SIGTERM. Python's default is to
die at once, so a ``report --full`` or a ``bench mnist`` that had finished half its work
wrote nothing. :func:`install` turns the first SIGTERM into :class:`Terminated`, a
:class:`KeyboardInterrupt`, so every path that keeps finished results on Ctrl-C (the runner,
the sweep, the recorder, the output) keeps them on SIGTERM too; :func:`terminated` then tells
the CLI to exit with 143 rather than 130. Only the first SIGTERM raises: a second one, sent
while the finished results are being written, is ignored.

The probe runner's child installs it too, so that the parent's stop (SIGTERM) runs the
probe's ``finally`` blocks (temporary directories, child ranks) before the child ends; it
then ends quietly, as it does on a broken pipe to a parent that is gone.

Standard library only (foundation layer).
"""

from __future__ import annotations

import signal
from typing import Any

_received = False


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by the first SIGTERM once :func:`install` ran."""


def _on_sigterm(signum: int, frame: Any) -> None:
    global _received
    if _received:
        return  # the first one is being handled: finish writing what was kept
    _received = True
    raise Terminated()


def install() -> bool:
    """Turn SIGTERM into :class:`Terminated` in this process (main thread only).

    Returns False where no handler can be installed (not the main thread)."""
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):
        return False
    return True


def terminated() -> bool:
    """Whether a SIGTERM arrived since :func:`install` (or :func:`reset`)."""
    return _received


def stopped_word() -> str:
    """How the run was stopped, for the one line that says what was kept."""
    return "terminated (SIGTERM)" if _received else "interrupted"


def reset() -> None:
    """Forget an earlier SIGTERM (tests, and a child that inherited the flag)."""
    global _received
    _received = False


__all__ = ["Terminated", "install", "terminated", "stopped_word", "reset"]
