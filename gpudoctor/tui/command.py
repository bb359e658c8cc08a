"""``gpudoctor tui`` (and ``gpudoctor`` with no arguments): open the TUI.

Registering the sub-command imports neither textual nor the app, so ``gpudoctor report``
stays free of textual; the app is imported when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpudoctor import exitcodes
from gpudoctor.errors import UsageError

MIN_INTERVAL_S = 0.25  # also gpudoctor.tui.app.MIN_INTERVAL_S; kept here so parsing needs no textual


def interval_seconds(text: str) -> float:
    """argparse type: a refresh interval of at least 0.25 s."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= MIN_INTERVAL_S:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"must be at least {MIN_INTERVAL_S:g} s, got {text}")
    if value == float("inf"):
        raise argparse.ArgumentTypeError("must be a finite number of seconds")
    return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tui", help="the live monitor (what `gpudoctor` with no arguments opens)",
        description="Live GPU panels with history, a process table, the Doctor (checks in the background) "
                    "and the MNIST Workload sweep. Keys: o p d w switch screens, ? help, q quit.")
    parser.add_argument("-i", "--interval", type=interval_seconds, default=1.0, metavar="SECONDS",
                        help="seconds between readings (default 1, minimum 0.25)")
    parser.add_argument("--replay", metavar="FILE", help="show a recording made with `gpudoctor record` (loops)")
    parser.add_argument("--doctor-level", choices=("quick", "standard", "full"), default="standard",
                        help="which checks the Doctor screen runs (default standard)")
    parser.add_argument("--screen", choices=("overview", "processes", "doctor", "workload"), default="overview",
                        help="screen to open first (default overview)")
    parser.set_defaults(handler=cmd_tui)


def cmd_tui(args: argparse.Namespace) -> int:
    if args.replay:
        from gpudoctor.backends import RecordingError, load_recording

        try:
            load_recording(args.replay)
        except RecordingError as exc:
            raise UsageError(str(exc)) from None
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("the TUI needs a terminal; for logs use `gpudoctor watch` (or --json)")
    from gpudoctor.tui.app import make_app

    app = make_app(replay=args.replay, interval=args.interval, doctor_level=args.doctor_level,
                   start_screen=args.screen)
    app.run()
    code = app.return_code
    return exitcodes.OK if code is None else int(code)
