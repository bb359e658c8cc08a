"""``gpudoctor fleet --prometheus URL``: every node's GPUs from Prometheus, worst first.

Exit codes (gpudoctor/core/exitcodes.py): 0 every GPU passes; 3 warnings (with --fail-on warn,
the default); 4 at least one GPU fails; 5 no failure, but a target stopped answering or its
readings are stale (its health is unknown); 2 bad arguments or a query Prometheus refused;
6 Prometheus holds no GPU series for the selection; 8 Prometheus could not be reached.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from typing import TYPE_CHECKING

from gpudoctor.commands.args import add_command, add_fail_on, add_json, bounded
from gpudoctor.commands.output import is_terminal

#: The command's words in `gpudoctor --help` and `gpudoctor fleet --help`.
HELP = "every node's GPUs from Prometheus, worst first"
DESCRIPTION = ("Read what Prometheus holds from gpudoctor exporters (and dcgm-exporter) and list "
               "every node's GPUs, worst first, with the reason. Exit codes: 0 pass, 3 warn, 4 fail, "
               "5 stale targets, 2 usage or refused query, 6 no GPU series, 8 Prometheus unreachable.")

if TYPE_CHECKING:
    from gpudoctor.commands.args import Subcommands


# Per-request limit and staleness: more than 0, at most a year.
_seconds = bounded(float, above=0, maximum=86400 * 365, what="a number of seconds", unit=" s")


def _lookback(text: str) -> str:
    import re

    if not re.fullmatch(r"[1-9][0-9]{0,5}(s|m|h|d)", text):
        raise argparse.ArgumentTypeError(f"not a Prometheus duration like 30m, 1h or 2d: {text!r}")
    return text


def register(subparsers: Subcommands) -> None:
    parser = add_command(subparsers, "fleet", run, help=HELP, description=DESCRIPTION)
    parser.add_argument("--prometheus", metavar="URL", required=True,
                        help="the Prometheus server, e.g. http://prometheus:9090")
    parser.add_argument("--match", action="append", default=[], metavar="LABEL=VALUE",
                        help="only series with this label (repeatable; also !=, =~, !~), e.g. job=gpu")
    add_json(parser, "print one JSON document (docs/fleet.schema.json)")
    add_fail_on(parser)
    parser.add_argument("--stale-after", type=_seconds, default=120.0, metavar="SECONDS",
                        help="readings older than this are stale (default 120)")
    parser.add_argument("--lookback", type=_lookback, default="1h", metavar="DURATION",
                        help="how far back to look for GPUs of targets that stopped answering (default 1h)")
    parser.add_argument("--idle-window", type=_lookback, default="30m", metavar="DURATION",
                        help="a GPU a job or pod holds that did no work this long is listed as held but idle "
                             "(default 30m)")
    parser.add_argument("--timeout", type=_seconds, default=10.0, metavar="SECONDS",
                        help="per-request time limit (default 10)")


def run(args: argparse.Namespace) -> int:
    from gpudoctor import fleet

    try:
        matchers = [fleet.parse_match(text) for text in args.match]
        client = fleet.Prometheus(args.prometheus, timeout_s=args.timeout)
        view = fleet.collect(client, matchers, stale_after_s=args.stale_after, lookback=args.lookback,
                             idle_window=args.idle_window)
    except fleet.FleetError as exc:
        print(f"gpudoctor fleet: {exc}", file=sys.stderr)
        return fleet.error_exit_code(exc)
    if args.json:
        sys.stdout.write(json.dumps(view.to_dict(), indent=2) + "\n")
    else:
        width = shutil.get_terminal_size((120, 24)).columns if is_terminal(sys.stdout) else 160
        sys.stdout.write(fleet.render_text(view, width=max(80, width)))
    sys.stdout.flush()
    return fleet.exit_code(view, args.fail_on)
