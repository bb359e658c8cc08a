"""``gpudoctor tui`` (and ``gpudoctor`` with no command, or with the TUI's options alone:
``gpudoctor -i 1``, ``gpudoctor --replay FILE``): open the TUI.

Registering the command imports neither textual nor the app, so ``gpudoctor report``
stays free of textual; the app is imported when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpudoctor import exitcodes
from gpudoctor.commands.args import check_recording, refresh_interval
from gpudoctor.commands.output import is_terminal
from gpudoctor.errors import UsageError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tui", help="the live monitor (what `gpudoctor` with no arguments opens)",
        description="Live GPU panels with history, a process table, the Doctor (checks in the background) "
                    "and the MNIST Workload sweep. Keys: o p d w switch screens, ? help, q quit. "
                    "`gpudoctor -i 1` is `gpudoctor tui -i 1`.")
    parser.add_argument("-i", "--interval", type=refresh_interval, default=1.0, metavar="SECONDS",
                        help="seconds between readings (default 1, minimum 0.25)")
    parser.add_argument("--replay", metavar="FILE", help="show a recording made with `gpudoctor record` (loops)")
    parser.add_argument("--doctor-level", choices=("quick", "standard", "full"), default="standard",
                        help="which checks the Doctor screen runs (default standard)")
    parser.add_argument("--screen", choices=("overview", "processes", "doctor", "workload", "fleet"),
                        default="overview", help="screen to open first (default overview; fleet needs --prometheus)")
    parser.add_argument("--prometheus", metavar="URL",
                        help="add the Fleet screen (n): every node's GPUs from this Prometheus, worst first")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    check_recording(args.replay)
    if args.prometheus:
        from gpudoctor.fleet import FleetError, check_url

        try:
            check_url(args.prometheus)
        except FleetError as exc:
            raise UsageError(str(exc)) from None
    elif args.screen == "fleet":
        raise UsageError("--screen fleet needs --prometheus URL")
    if not (is_terminal(sys.stdin) and is_terminal(sys.stdout)):
        raise UsageError("the TUI needs a terminal; for logs use `gpudoctor watch` (or --json)")
    from gpudoctor.tui.app import make_app

    app = make_app(replay=args.replay, interval=args.interval, doctor_level=args.doctor_level,
                   start_screen=args.screen, prometheus=args.prometheus)
    app.run()
    code = app.return_code
    return exitcodes.OK if code is None else int(code)


__all__ = ["register", "run"]
