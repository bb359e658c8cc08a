"""``gpudoctor compare BASELINE REPORT``: this node's figures against a known-good baseline.

BASELINE is a report from a known-good node (``gpudoctor report --full -o good.json``) or a
directory of them (their median per figure); REPORT is the report to judge. Exit codes: 0 every
figure within tolerance; 3 a figure worse than its warn tolerance (or a changed driver/torch);
4 a figure worse than its fail tolerance, or either report's own status is fail; 2 unreadable files, different GPU models (without
--force) or nothing to compare.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from gpudoctor.core import exitcodes
from gpudoctor.commands.args import add_command, add_fail_on, add_json

#: The command's words in `gpudoctor --help` and `gpudoctor compare --help`.
HELP = "compare a report's figures with a known-good baseline report (or a directory of them)"
DESCRIPTION = ("Compare bandwidth, TFLOP/s, CUDA context size, workload throughput and samples per joule, "
               "idle power and temperature and the PCIe link with a known-good report of the same GPU model "
               "(or the median of a directory of them). Exit codes: 0 within tolerance, 3 warn, 4 fail, 2 usage.")

if TYPE_CHECKING:
    from gpudoctor.report.baseline import Baseline
    from gpudoctor.commands.args import Subcommands
    from gpudoctor.core.model import ProbeResult


def register(subparsers: Subcommands) -> None:
    parser = add_command(subparsers, "compare", run, help=HELP, description=DESCRIPTION)
    parser.add_argument("baseline", metavar="BASELINE", help="known-good report (JSON) or a directory of them")
    parser.add_argument("report", metavar="REPORT", help="the report to judge (gpudoctor report --full --json)")
    add_json(parser, "print a report document (docs/report.schema.json)")
    parser.add_argument("--force", action="store_true", help="compare even when the GPU models differ")
    add_fail_on(parser)


def run(args: argparse.Namespace) -> int:
    from gpudoctor import _version
    from gpudoctor.report import baseline
    from gpudoctor.core.model import Report

    try:
        base = baseline.load_baseline(args.baseline)
        candidate = baseline.read_report(args.report)
        result = baseline.compare(base, candidate, force=args.force, candidate_name=args.report)
    except baseline.BaselineError as exc:
        print(f"gpudoctor compare: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    report = Report(results=[result], tool_version=_version.__version__, source=f"compare:{args.report}",
                    host=dict(candidate.get("host") or {}))
    from gpudoctor.commands.output import deliver

    text = (json.dumps(report.to_dict(), indent=2) + "\n" if args.json
            else render_comparison(result, base, args.report))
    if not deliver(lambda out: out.write(text), ()):  # /dev/full, a closed stdout: one line, exit 7
        return exitcodes.WRITE_FAILED
    return exitcodes.for_status(report.status.value, args.fail_on)


def render_comparison(result: ProbeResult, base: Baseline, report_name: str) -> str:
    header = ("STATUS", "FIGURE", "GPU", "BASELINE", "THIS", "CHANGE")
    rows = []
    for row in result.details.get("figures", []):
        base_value, value = row["baseline"], row["value"]
        if row["unit"] == "C":
            change = f"{value - base_value:+.1f} C"
        else:
            change = f"{(value - base_value) / abs(base_value) * 100:+.0f} %" if base_value else "-"
        rows.append((row["status"].upper(), row["figure"], "-" if row["device"] is None else str(row["device"]),
                     f"{base_value:.4g}", f"{value:.4g}", change))
    lines = [f"gpudoctor compare: {report_name} against {len(base.sources)} baseline report(s): "
             f"{str(result.status).upper()}: {result.summary}"]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    for row in [header] + rows:
        lines.append("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    for f in result.findings:
        if f.status.value != "pass" or f.code == "baseline_outliers_ignored":
            lines.append(f"{f.status.value.upper()}: {f.summary}")
            if f.fix and f.status.value != "pass":
                lines.append(f"  fix: {f.fix}")
    return "\n".join(lines) + "\n"
