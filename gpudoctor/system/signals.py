"""SIGTERM and SIGHUP handled like Ctrl-C, and quiet child processes.

A timeout, systemd, Kubernetes or Slurm ends a program with SIGTERM; a closed terminal or a
dropped ssh session sends SIGHUP. Python's default for both is to die at once, so a
``report --full`` or a ``bench mnist`` that had finished half its work wrote nothing, a
``record`` lost its recording and ``report --full`` left its probe child behind.
:func:`install` turns the first of them into :class:`Terminated`, a
:class:`KeyboardInterrupt`, so every path that keeps finished results on Ctrl-C (the runner,
the sweep, the recorder, the output) keeps them on SIGTERM and SIGHUP too; :func:`exit_code`
then tells the CLI to exit with 143 (SIGTERM) or 129 (SIGHUP) rather than 130. Only the first
one raises: another, sent while the finished results are being written, is ignored.

The probe runner's child installs it too, so that the parent's stop (SIGTERM) runs the
probe's ``finally`` blocks (temporary directories, child ranks) before the child ends; it
then ends quietly, as it does on a broken pipe to a parent that is gone.

Commands that stop on these signals in a way of their own (``why`` passes them on to the
command it runs; the exporter, for which they are the normal stop, notes them) set and give
back their handlers with :func:`set_handlers` and :func:`restore`, the one set-up.

Standard library only (foundation layer).
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from types import FrameType

    Handler = Callable[[int, FrameType | None], object]

#: The signals that stop a run as Ctrl-C does (SIGHUP does not exist on Windows).
STOP_SIGNALS: tuple[int, ...] = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                                      if hasattr(signal, name))
_EXIT_CODES = {signal.SIGTERM: 143, getattr(signal, "SIGHUP", -1): 129}
_WORDS = {signal.SIGTERM: "terminated (SIGTERM)", getattr(signal, "SIGHUP", -1): "hung up (SIGHUP)"}

_received = 0  # the signal number of the first stop signal, 0 for none


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by the first SIGTERM or SIGHUP once :func:`install` ran."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _received
    if _received:
        return  # the first one is being handled: finish writing what was kept
    _received = signum
    raise Terminated()


def set_handlers(handler: Handler | signal.Handlers) -> dict[int, Any]:
    """``handler`` for SIGTERM and SIGHUP; the handlers it replaced, for :func:`restore`. Outside
    the main thread (a command run in-process) no handler can be set: none are replaced."""
    previous: dict[int, Any] = {}
    try:
        for signum in STOP_SIGNALS:
            previous[signum] = signal.signal(signum, handler)
    except (ValueError, OSError):
        pass
    return previous


def restore(previous: dict[int, Any]) -> None:
    """Give SIGTERM and SIGHUP back the handlers :func:`set_handlers` replaced."""
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def install() -> dict[int, Any]:
    """Turn SIGTERM and SIGHUP into :class:`Terminated` in this process (main thread only).

    Returns the handlers it replaced, for :func:`restore`: empty (false) where no handler can be
    installed (not the main thread)."""
    return set_handlers(_on_sigterm)


def terminated() -> bool:
    """Whether a SIGTERM or SIGHUP arrived since :func:`install` (or :func:`reset`)."""
    return bool(_received)


def received() -> int:
    """The number of the stop signal that arrived (0: none)."""
    return _received


def exit_code() -> int:
    """The exit code for the stop signal that arrived: 143 for SIGTERM, 129 for SIGHUP
    (128 + the signal's number, as a shell reports a death by it); 130 when none did."""
    return _EXIT_CODES.get(_received, 130)


def stopped_word() -> str:
    """How the run was stopped, for the one line that says what was kept."""
    return _WORDS.get(_received, "interrupted")


def reset() -> None:
    """Forget an earlier stop signal (tests, and a child that inherited the flag)."""
    global _received
    _received = 0


__all__ = ["Terminated", "STOP_SIGNALS", "set_handlers", "restore", "install", "terminated", "received", "exit_code", "stopped_word",
           "reset"]
