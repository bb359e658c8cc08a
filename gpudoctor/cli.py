"""Command line: ``gpudoctor [COMMAND] ...`` (also ``python -m gpudoctor``).

This module keeps the parser and :func:`main`; each command lives in its own module under
:mod:`gpudoctor.commands`. ``main`` maps what escapes a command to the exit codes in
:mod:`gpudoctor.core.exitcodes`: a :class:`~gpudoctor.core.errors.GpudoctorError` is one line on
stderr, Ctrl-C is 130, SIGTERM is 143, SIGHUP 129 (handled like Ctrl-C: finished results are kept and
written; :mod:`gpudoctor.system.signals`). It never imports torch or pynvml. JSON goes to stdout,
diagnostics to stderr.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
from types import FrameType
from typing import Callable, Sequence

from gpudoctor.core import exitcodes
from gpudoctor.system import signals
from gpudoctor._version import __version__
from gpudoctor.commands import COMMAND_NAMES, register_all
from gpudoctor.commands.output import ensure_std_streams, say
from gpudoctor.core.errors import GpudoctorError

# What ``gpudoctor`` with no command runs; options alone (``gpudoctor -i 1``) go to it too.
DEFAULT_COMMAND = "tui"
# Options of the top-level parser itself: everything else before a command is the TUI's.
_TOP_LEVEL_OPTIONS = ("-h", "--help", "--version")


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors exit with our USAGE code and one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(exitcodes.USAGE, f"{self.prog}: error: {message}\n"
                                   f"Try '{self.prog} --help'.\n")


def build_parser(commands: Sequence[str] = COMMAND_NAMES) -> argparse.ArgumentParser:
    """The parser with ``commands`` registered (all of them unless told)."""
    parser = _Parser(
        prog="gpudoctor",
        description="GPU diagnostics and utilisation monitor for PyTorch training. "
                    "With no command, or with only the TUI's options (gpudoctor -i 1), opens the TUI.",
        epilog="Exit codes: " + "; ".join(f"{c} {d}" for c, d in exitcodes.DESCRIPTIONS.items()),
    )
    parser.add_argument("--version", action="version", version=f"gpudoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    register_all(sub, commands)
    return parser


def _with_default_command(argv: list[str]) -> list[str]:
    """``gpudoctor`` and ``gpudoctor -i 1 --replay F`` (the nvitop habit) mean ``gpudoctor tui ...``."""
    if not argv:
        return [DEFAULT_COMMAND]
    if argv[0].startswith("-") and argv[0] != "-" and argv[0].split("=")[0] not in _TOP_LEVEL_OPTIONS:
        return [DEFAULT_COMMAND, *argv]
    return argv


def _exit_130_on_another_ctrl_c() -> None:
    """After Ctrl-C, the rest of the way out (cleanup, interpreter shutdown, child
    processes joined at exit) ends with 130 on a second Ctrl-C, not with a traceback or
    death by SIGINT (-2)."""
    def handler(signum: int, frame: FrameType | None) -> None:
        os._exit(exitcodes.INTERRUPTED)

    try:
        signal.signal(signal.SIGINT, handler)
    except (ValueError, OSError):  # not the main thread: nothing to install
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """The program (``argv`` None: ``sys.argv``, and the process is ours to set signal
    handlers in), or one command run in-process (``main(["report", "--json"])``)."""
    if argv is None:
        # Starting imports hundreds of modules whose objects live as long as the process: the
        # cyclic collector's passes over them free nothing and cost `report --quick` a tenth of
        # its time. Off while starting; each command but the short ones turns it back on.
        gc.disable()
    ensure_std_streams()
    on_exit = _exit_130_on_another_ctrl_c if argv is None else (lambda: None)
    try:
        return _main(list(sys.argv[1:] if argv is None else argv), on_exit, own_process=argv is None)
    except KeyboardInterrupt:  # a second Ctrl-C while handling the first one
        on_exit()
        return exitcodes.INTERRUPTED


# Commands that keep Python's default SIGTERM: the TUI has nothing to keep, and the exporter
# installs its own handler (SIGTERM is its normal stop, exit 0).
_OWN_SIGTERM = ("tui", "exporter")


def _collector_stays_off(args: argparse.Namespace) -> bool:
    """`report --quick` ends within a second and builds few cycles: the collector stays off. The
    TUI turns it on itself once its first frame is up (gpudoctor.tui.app)."""
    return (args.command == "report" and getattr(args, "level", None) == "quick") or args.command == "tui"


def _main(argv: list[str], on_interrupt: Callable[[], None], own_process: bool = False) -> int:
    argv = _with_default_command(argv)
    # A known command registers alone: `gpudoctor report` imports no other command's module.
    parser = build_parser((argv[0],) if argv[0] in COMMAND_NAMES else COMMAND_NAMES)
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return exitcodes.USAGE
    if own_process and not _collector_stays_off(args):
        gc.enable()
    code = _run(args, handler, on_interrupt, own_process)
    if own_process and args.command == "report" and getattr(args, "level", None) == "quick":
        _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    """End `report --quick` here, its output flushed: the interpreter's teardown (every module's
    objects freed, a last collection) would cost it another tenth of its time and frees nothing
    the system does not. Nothing is left to run: the report is written, NVML shut down, the CUDA
    check's child reaped. A flush that fails returns to the usual exit, which reports it."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


def _run(args: argparse.Namespace, handler: Callable[[argparse.Namespace], int],
         on_interrupt: Callable[[], None], own_process: bool) -> int:
    if own_process and args.command not in _OWN_SIGTERM:
        signals.install()  # SIGTERM and SIGHUP raise signals.Terminated, a KeyboardInterrupt
    try:
        code = int(handler(args))
    except KeyboardInterrupt:
        on_interrupt()
        if signals.terminated():
            say(f"gpudoctor: {signals.stopped_word()}")
            return signals.exit_code()
        say("gpudoctor: interrupted")
        return exitcodes.INTERRUPTED
    except GpudoctorError as exc:
        say(f"gpudoctor: error: {exc}")
        return exc.exit_code
    except BrokenPipeError:
        # `gpudoctor report --json | head`: the reader left; not our failure.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return exitcodes.OK
    if code == exitcodes.INTERRUPTED:
        on_interrupt()
        if signals.terminated():  # the command kept and wrote what finished, as on Ctrl-C
            return signals.exit_code()
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
