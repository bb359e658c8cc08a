"""``gpudoctor report``: check the GPU stack probe by probe and give a verdict (exit code)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from gpudoctor.core import exitcodes
from gpudoctor.commands.args import (add_command, add_fail_on, add_json, add_output, add_replay, bounded, check_recording,
                                     check_writable)
from gpudoctor.commands.output import Progress, emit_report
from gpudoctor.core.errors import DeviceSelectionError, UsageError

#: The command's words in `gpudoctor --help` and `gpudoctor report --help`.
HELP = "check this machine's GPU stack (text or --json)"
DESCRIPTION = "Check the GPU stack probe by probe and give a verdict."

if TYPE_CHECKING:
    from gpudoctor.report.baseline import Baseline
    from gpudoctor.commands.args import Subcommands
    from gpudoctor.core.model import Report

device_index = bounded(int, minimum=0, what="a device index (use 0, 1, ...)",
                       below_message="device index must be >= 0, got {text}")


def register(subparsers: Subcommands) -> None:
    report = add_command(subparsers, "report", run, help=HELP, description=DESCRIPTION)
    level = report.add_mutually_exclusive_group()
    level.add_argument("--quick", dest="level", action="store_const", const="quick",
                       help="NVML and host facts only: no torch import, no CUDA context")
    level.add_argument("--full", dest="level", action="store_const", const="full",
                       help="also exercise memory, bandwidth, compute and the MNIST workload")
    report.set_defaults(level="standard")
    add_json(report, "print one JSON document to stdout (= --format json)")
    report.add_argument("--format", choices=("text", "json", "markdown"), default=None,
                        help="text (default), json, or markdown: a collapsible summary to paste into an issue")
    report.add_argument("--probe", action="append", metavar="NAME", help="run only this probe (repeatable)")
    report.add_argument("--list-probes", action="store_true", help="list probes and exit")
    report.add_argument("--device", type=device_index, metavar="N", help="check only torch device N")
    add_output(report, "also write the JSON report to FILE (atomically)")
    add_fail_on(report)
    report.add_argument("--anonymize", action=argparse.BooleanOptionalAction, default=None,
                        help="strip GPU UUIDs, serial numbers and the host name (default: on for "
                             "--format markdown only)")
    add_replay(report, "read NVML/torch facts from a recording (gpudoctor record)")
    report.add_argument("--data-dir", metavar="DIR", help="MNIST IDX files for the workload probe")
    report.add_argument("-v", "--verbose", action="store_true", help="show every measurement and passing finding")
    report.add_argument("--python", metavar="PATH", help="check the torch of this interpreter (your training "
                        "environment's python); gpudoctor need not be installed there")
    report.add_argument("--baseline", metavar="FILE_OR_DIR",
                        help="compare the measured figures with a known-good report of the same GPU model, or the "
                             "median of a directory of them (docs/baselines.md)")
    report.add_argument("--baseline-force", action="store_true",
                        help="compare with the baseline even when the GPU models differ")


def check_device(device: int | None, replay: str | None) -> None:
    """``--device N`` must exist: a one-line error (exit 2), not CUDA's opaque one."""
    if device is None:
        return
    from gpudoctor.backends import is_na, open_gpu_backend
    from gpudoctor.backends.visibility import visible_nvml_indices

    gpu = open_gpu_backend(replay)
    try:
        status = gpu.status()
        visible = visible_nvml_indices(gpu) if status is None else status
    finally:
        gpu.close()
    if is_na(visible):
        if status is not None:
            raise DeviceSelectionError(
                f"--device {device} is out of range: no CUDA device is visible (NVML: {visible.reason})")
        return  # MIG instances selected: let torch decide
    if device >= len(visible):
        if not visible:
            have = "no CUDA device is visible"
            if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
                have += f" (CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r})"
        else:
            have = (f"this machine has {len(visible)} visible CUDA device"
                    f"{'s' if len(visible) != 1 else ''} (0..{len(visible) - 1})")
        raise DeviceSelectionError(f"--device {device} is out of range: {have}")


def run(args: argparse.Namespace) -> int:
    from gpudoctor.report import runner

    if args.json and args.format not in (None, "json"):
        raise UsageError(f"--json is --format json; it cannot be combined with --format {args.format}")
    args.format = "json" if args.json else (args.format or "text")
    args.json = args.format == "json"
    if args.list_probes:
        for probe in runner.all_probes().values():
            print(f"{probe.name:<14} {probe.level:<9} {probe.title}")
        return exitcodes.OK
    if args.python:
        if args.replay:
            raise UsageError("--python checks a live environment; it cannot be combined with --replay")
        from gpudoctor.backends.torch_build import InterpreterError, inspect_interpreter

        try:
            inspect_interpreter(args.python)
        except InterpreterError as exc:
            raise UsageError(str(exc)) from None
    check_recording(args.replay)
    try:
        probes = runner.select_probes(args.probe, args.level)
    except runner.ProbeSelectionError as exc:
        raise UsageError(str(exc)) from None
    check_device(args.device, args.replay)
    check_writable(args.output)
    baseline = load_baseline(args.baseline)

    options: dict[str, Any] = {}
    if args.data_dir:
        options["data_dir"] = args.data_dir
    spec = runner.RunSpec(level=args.level, device=args.device, replay=args.replay, options=options,
                          python=args.python)
    with Progress(enabled=not args.json) as progress:
        report = runner.run_probes(probes, spec, on_start=lambda probe: progress.start(f"checking {probe.name}"))
    if baseline is not None:
        add_baseline_result(report, baseline, force=args.baseline_force)
    return emit_report(report, args)


def load_baseline(path: str | None) -> Baseline | None:
    """The baseline, read before anything runs: a bad one is one line and exit 2, not a lost run."""
    if path is None:
        return None
    from gpudoctor.report import baseline

    try:
        return baseline.load_baseline(path)
    except baseline.BaselineError as exc:
        raise UsageError(f"--baseline: {exc}") from None


def add_baseline_result(report: Report, base: Baseline, *, force: bool) -> None:
    """Append the comparison with ``base`` to ``report`` as the ``baseline`` result.

    A model mismatch found only now (the baseline was readable, but this machine's GPU differs)
    is a usage error, like in ``compare``; the report itself is not lost: it is emitted with a
    ``baseline`` result in error saying why.
    """
    from gpudoctor.core import findings
    from gpudoctor.report import baseline

    try:
        result = baseline.compare(base, report.to_dict(), force=force)
    except baseline.BaselineError as exc:
        result = findings.errored("baseline", "not_compared", error=exc)
    report.results.append(result)


__all__ = ["register", "run", "check_device", "device_index", "load_baseline", "add_baseline_result"]
