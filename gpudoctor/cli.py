"""Command line: ``gpudoctor [COMMAND] ...`` (also ``python -m gpudoctor``).

Front end only: it parses arguments, calls the runner / recorder, renders, and maps
outcomes to the exit codes in :mod:`gpudoctor.exitcodes`. It never imports torch or
pynvml. JSON goes to stdout, diagnostics to stderr.

Sub-commands that live in other modules are listed in ``EXTRA_COMMANDS``: each module
has ``register(subparsers)`` which adds its parser and sets ``handler=callable(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any, Callable, Sequence

from gpudoctor import exitcodes
from gpudoctor._version import __version__
from gpudoctor.errors import DeviceSelectionError, GpudoctorError, UsageError

# Modules that add sub-commands: each defines register(subparsers).
EXTRA_COMMANDS: list[str] = [
    "gpudoctor.distributed_cmd",
    "gpudoctor.exporter",
    "gpudoctor.compare_cmd",
    "gpudoctor.fleet_cmd",
    "gpudoctor.tui.command",
    "gpudoctor.watch",
    "gpudoctor.workload.command",
]

# What ``gpudoctor`` with no arguments runs (the TUI once it is registered).
DEFAULT_COMMAND = "tui"


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors exit with our USAGE code and one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(exitcodes.USAGE, f"{self.prog}: error: {message}\n"
                                   f"Try '{self.prog} --help'.\n")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _device_index(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a device index: {text!r} (use 0, 1, ...)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"device index must be >= 0, got {value}")
    return value


def build_parser(with_extra: bool = True) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gpudoctor",
        description="GPU diagnostics and utilisation monitor for PyTorch training.",
        epilog="Exit codes: " + "; ".join(f"{c} {d}" for c, d in exitcodes.DESCRIPTIONS.items()),
    )
    parser.add_argument("--version", action="version", version=f"gpudoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    report = sub.add_parser("report", help="check this machine's GPU stack (text or --json)",
                            description="Check the GPU stack probe by probe and give a verdict.")
    level = report.add_mutually_exclusive_group()
    level.add_argument("--quick", dest="level", action="store_const", const="quick",
                       help="NVML and host facts only: no torch import, no CUDA context")
    level.add_argument("--full", dest="level", action="store_const", const="full",
                       help="also exercise memory, bandwidth, compute and the MNIST workload")
    report.set_defaults(level="standard")
    report.add_argument("--json", action="store_true", help="print one JSON document to stdout")
    report.add_argument("--probe", action="append", metavar="NAME", help="run only this probe (repeatable)")
    report.add_argument("--list-probes", action="store_true", help="list probes and exit")
    report.add_argument("--device", type=_device_index, metavar="N", help="check only torch device N")
    report.add_argument("-o", "--output", metavar="FILE", help="also write the JSON report to FILE (atomically)")
    report.add_argument("--fail-on", choices=("warn", "fail"), default="warn",
                        help="lowest status that gives a non-zero exit (default: warn)")
    report.add_argument("--anonymize", action="store_true",
                        help="strip GPU UUIDs, serial numbers and the host name")
    report.add_argument("--replay", metavar="FILE", help="read NVML/torch facts from a recording (gpudoctor record)")
    report.add_argument("--data-dir", metavar="DIR", help="MNIST IDX files for the workload probe")
    report.add_argument("-v", "--verbose", action="store_true", help="show every measurement and passing finding")
    report.add_argument("--python", metavar="PATH", help="check the torch of this interpreter (your training "
                        "environment's python); gpudoctor need not be installed there")
    report.set_defaults(handler=cmd_report)

    record = sub.add_parser("record", help="capture real NVML and torch readings into a recording",
                            description="Capture device readings for replay and bug reports.")
    record.add_argument("-o", "--output", metavar="FILE", required=True, help="recording file to write")
    record.add_argument("--seconds", type=_positive_float, default=5.0, help="how long to sample (default 5)")
    record.add_argument("--interval", type=_positive_float, default=0.5, help="seconds between samples (default 0.5)")
    record.add_argument("--no-torch", action="store_true", help="do not record torch facts (no CUDA context)")
    record.add_argument("--anonymize", action="store_true", help="strip UUIDs, serials and host name")
    record.set_defaults(handler=cmd_record)

    for module_name in EXTRA_COMMANDS if with_extra else ():
        importlib.import_module(module_name).register(sub)
    return parser


# --------------------------------------------------------------------------- report
def _check_device(device: int | None, replay: str | None) -> None:
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


def cmd_report(args: argparse.Namespace) -> int:
    from gpudoctor import runner

    if args.list_probes:
        for probe in runner.all_probes().values():
            print(f"{probe.name:<14} {probe.level:<9} {probe.title}")
        return exitcodes.OK
    if args.python:
        if args.replay:
            raise UsageError("--python checks a live environment; it cannot be combined with --replay")
        from gpudoctor.torch_build import InterpreterError, inspect_interpreter

        try:
            inspect_interpreter(args.python)
        except InterpreterError as exc:
            raise UsageError(str(exc)) from None
    if args.replay:
        from gpudoctor.backends import load_recording, RecordingError

        try:
            load_recording(args.replay)
        except RecordingError as exc:
            raise UsageError(str(exc)) from None
    try:
        probes = runner.select_probes(args.probe, args.level)
    except runner.ProbeSelectionError as exc:
        raise UsageError(str(exc)) from None
    _check_device(args.device, args.replay)
    if args.output:
        _check_writable(args.output)

    options: dict[str, Any] = {}
    if args.data_dir:
        options["data_dir"] = args.data_dir
    spec = runner.RunSpec(level=args.level, device=args.device, replay=args.replay, options=options,
                          python=args.python)
    progress = _Progress(enabled=sys.stderr.isatty() and not args.json)
    report = runner.run_probes(probes, spec, on_start=progress.start, on_result=progress.done)
    progress.clear()

    return emit_report(report, args)


def torchrun_rank() -> int | None:
    """This process's rank when started by torchrun with WORLD_SIZE > 1, else None."""
    world, rank = os.environ.get("WORLD_SIZE", ""), os.environ.get("RANK", "")
    if world.isdigit() and int(world) > 1 and rank.isdigit():
        return int(rank)
    return None


def emit_report(report: Any, args: argparse.Namespace) -> int:
    """Write a finished report as asked (``--json``, ``-o``, text) and return the exit code.

    ``args`` needs ``json``, ``output``, ``anonymize``, ``verbose`` and ``fail_on``. Under
    torchrun every rank runs the checks; rank 0 alone prints and writes.
    """
    from gpudoctor.render import render_text, report_to_json

    rank = torchrun_rank()
    if rank not in (None, 0):
        print(f"gpudoctor: rank {rank}: done ({report.status.value}); rank 0 writes the report",
              file=sys.stderr)
        # Exit 0 unless this rank's own run broke: torchrun stops every rank as soon as one
        # exits non-zero, which could kill rank 0 before it has written the report.
        return exitcodes.PROBE_ERROR if report.status.value == "error" else exitcodes.OK
    text = report_to_json(report, anonymize=args.anonymize)
    if args.output:
        from gpudoctor.fileio import atomic_write_text

        atomic_write_text(args.output, text + "\n")
    if args.json:
        sys.stdout.write(text + "\n")
    else:
        render_text(report, sys.stdout, verbose=args.verbose, anonymize=args.anonymize)
    if report.interrupted:
        print("gpudoctor: interrupted; finished results were kept"
              + (f" in {args.output}" if args.output else ""), file=sys.stderr)
        return exitcodes.INTERRUPTED
    return exitcodes.for_status(report.status.value, args.fail_on)


def _check_writable(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"cannot write {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise UsageError(f"cannot write {path}: directory {directory} is not writable")
    if os.path.isdir(path):
        raise UsageError(f"cannot write {path}: it is a directory")


class _Progress:
    """One status line on stderr while probes run (only on a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def start(self, probe: Any) -> None:
        if self.enabled:
            sys.stderr.write(f"\r\033[K  checking {probe.name} ...")
            sys.stderr.flush()

    def done(self, result: Any) -> None:
        pass

    def clear(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


# --------------------------------------------------------------------------- record
def cmd_record(args: argparse.Namespace) -> int:
    from gpudoctor.recorder import record_to_file

    _check_writable(args.output)
    path, interrupted = record_to_file(args.output, seconds=args.seconds, interval=args.interval,
                                       with_torch=not args.no_torch, anonymize=args.anonymize,
                                       log=lambda msg: print(msg, file=sys.stderr))
    print(f"gpudoctor: recording written to {path}", file=sys.stderr)
    return exitcodes.INTERRUPTED if interrupted else exitcodes.OK


# --------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `report` and `record` are defined here: skip importing the other commands' modules.
    parser = build_parser(with_extra=not (argv and argv[0] in ("report", "record")))
    if not argv:
        known = parser._subparsers._group_actions[0].choices if parser._subparsers else {}  # type: ignore[union-attr]
        argv = [DEFAULT_COMMAND] if DEFAULT_COMMAND in known else ["--help"]
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return exitcodes.USAGE
    try:
        return int(handler(args))
    except KeyboardInterrupt:
        print("gpudoctor: interrupted", file=sys.stderr)
        return exitcodes.INTERRUPTED
    except GpudoctorError as exc:
        print(f"gpudoctor: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        # `gpudoctor report --json | head`: the reader left; not our failure.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return exitcodes.OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
