"""``gpudoctor tui`` (and ``gpudoctor`` with no command, or with the TUI's options alone:
``gpudoctor -i 1``, ``gpudoctor --replay FILE``): open the TUI.

Registering the command imports neither textual nor the app, so ``gpudoctor report``
stays free of textual; the app is imported when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gpudoctor.core import exitcodes
from gpudoctor.commands.args import add_command, add_refresh_interval, add_replay, check_recording
from gpudoctor.commands.output import is_terminal
from gpudoctor.core.errors import UsageError

#: The command's words in `gpudoctor --help` and `gpudoctor tui --help`.
HELP = "the live monitor (what `gpudoctor` with no arguments opens)"
DESCRIPTION = ("Live GPU panels with history, a process table, the Doctor (checks in the background) "
               "and the MNIST Workload sweep. Keys: o p d w switch screens, ? help, q quit. "
               "`gpudoctor -i 1` is `gpudoctor tui -i 1`.")

if TYPE_CHECKING:
    from gpudoctor.commands.args import Subcommands


def register(subparsers: Subcommands) -> None:
    parser = add_command(subparsers, "tui", run, help=HELP, description=DESCRIPTION)
    add_refresh_interval(parser)
    add_replay(parser, "show a recording made with `gpudoctor record` (loops)")
    parser.add_argument("--doctor-level", choices=("quick", "standard", "full"), default="standard",
                        help="which checks the Doctor screen runs (default standard)")
    parser.add_argument("--screen", choices=("overview", "processes", "doctor", "workload", "fleet"),
                        default="overview", help="screen to open first (default overview; fleet needs --prometheus)")
    parser.add_argument("--prometheus", metavar="URL",
                        help="add the Fleet screen (n): every node's GPUs from this Prometheus, worst first")
    parser.add_argument("--demo", action="store_true",
                        help="play the demo recording shipped with gpudoctor (a fake 8-GPU H100 node, recorded on "
                             "a fake NVML): the TUI without a GPU")
    parser.add_argument("--once", action="store_true",
                        help="print the compact view once as plain text (every GPU, its processes, the quick "
                             "doctor's verdict) to the terminal's width (COLUMNS), and exit: for logs and issues")


def run(args: argparse.Namespace) -> int:
    if args.demo:
        if args.replay:
            raise UsageError("--demo plays the shipped recording; leave out --replay")
        from gpudoctor.backends.recording import demo_recording_path

        args.replay = demo_recording_path()
    check_recording(args.replay)
    if args.prometheus:
        from gpudoctor.fleet import FleetError, check_url

        try:
            check_url(args.prometheus)
        except FleetError as exc:
            raise UsageError(str(exc)) from None
    elif args.screen == "fleet":
        raise UsageError("--screen fleet needs --prometheus URL")
    if args.once:
        return _once(args)
    if not (is_terminal(sys.stdin) and is_terminal(sys.stdout)):
        raise UsageError("the TUI needs a terminal; for logs use `gpudoctor watch` (or --json)")
    from gpudoctor.tui.early import begin_early_start

    # The first live reading and the header's verdict, worked out in one fork while this
    # process imports Textual (another core): the first frame shows both as soon as it is drawn.
    first, early = begin_early_start(args.replay)
    from gpudoctor.tui.app import make_app

    app = make_app(replay=args.replay, interval=args.interval, doctor_level=args.doctor_level,
                   start_screen=args.screen, prometheus=args.prometheus, early_report=early,
                   first_reading=first)
    app.run()
    code = app.return_code
    return exitcodes.OK if code is None else int(code)


def _once(args: argparse.Namespace) -> int:
    """``gpudoctor --once``: the compact view once, plain text (no escape sequences), as wide as the
    terminal (COLUMNS where set, 80 where there is no terminal)."""
    import shutil

    from gpudoctor.commands.args import open_backend
    from gpudoctor.report.quick import once_lines

    gpu = open_backend(args.replay)
    try:
        width = shutil.get_terminal_size((80, 24)).columns
        print("\n".join(once_lines(gpu, width, replay=args.replay)), flush=True)
    finally:
        gpu.close()
    return exitcodes.OK


__all__ = ["register", "run"]
