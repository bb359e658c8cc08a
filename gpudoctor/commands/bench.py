"""``gpudoctor bench mnist``: the reference workload sweep (the library: :mod:`gpudoctor.workload`).

Front end: validates the command line (one-line error, exit 2) before importing torch,
runs :func:`gpudoctor.workload.sweep.run_sweep` with progress on stderr, prints the table
(or ``--json``) to stdout, then writes ``--csv``/``--plot``/``-o``. Ctrl-C keeps the
finished runs, writes them, and exits 130; an output that cannot be written is one line
and exit 7.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gpudoctor.core import exitcodes
from gpudoctor.system import signals
from gpudoctor.commands.args import add_command, add_json, add_output, check_writable, output_path
from gpudoctor.commands.output import Progress, deliver, say
from gpudoctor.core.errors import UsageError
from gpudoctor.workload.config import (DEFAULT_BATCH_SIZES, DEFAULT_WORKERS, DEVICES, MODES,
                                       QUICK_BATCH_SIZES, QUICK_WORKERS, SweepConfig,
                                       parse_choice_list, parse_int_list)

if TYPE_CHECKING:
    from gpudoctor.commands.args import Subcommands
    from gpudoctor.workload.run import RunResult


def register(subparsers: Subcommands) -> None:
    bench = add_command(subparsers, "bench", lambda args: _bench_help(bench), help="reference workloads (bench mnist)",
                        description="Reference workloads that show how well a training loop uses the GPU.")
    workloads = bench.add_subparsers(dest="workload", metavar="WORKLOAD", parser_class=type(bench))
    mnist = add_command(
        workloads, "mnist", run, help="MNIST sweep: throughput and GPU utilisation by batch size, workers and pipeline",
        description="Train the tutorials' MNIST network (784-512-256-128-64-10) across batch sizes, "
                    "DataLoader workers, pipeline modes and devices; tell which is fastest and "
                    "whether the input pipeline starves the GPU.")
    mnist.add_argument("--batch-sizes", metavar="N,N,...",
                       help=f"batch sizes (default {','.join(map(str, DEFAULT_BATCH_SIZES))}; "
                            f"--quick: {','.join(map(str, QUICK_BATCH_SIZES))})")
    mnist.add_argument("--workers", metavar="N,N,...",
                       help=f"DataLoader worker counts, capped at the CPU count (default "
                            f"{','.join(map(str, DEFAULT_WORKERS))}; --quick: {','.join(map(str, QUICK_WORKERS))})")
    mnist.add_argument("--modes", metavar="MODE,...", default=",".join(MODES),
                       help=f"pipeline modes: {', '.join(MODES)} (default: all)")
    mnist.add_argument("--device", metavar="DEV,...",
                       help="devices: cpu, cuda (default: cpu, plus cuda when torch sees a GPU)")
    mnist.add_argument("--epochs", metavar="N", default="1", help="epochs per run (default 1)")
    mnist.add_argument("--repeat", metavar="N", default="1",
                       help="run every configuration N times; the advice says when repeats disagree "
                            "more than the configurations differ (default 1)")
    mnist.add_argument("--quick", action="store_true",
                       help="a small look: 5000 training samples, batch sizes 64,1000, workers 0,2")
    mnist.add_argument("--train-samples", metavar="N",
                       help="use the first N training samples (default: all 60000; --quick: 5000)")
    mnist.add_argument("--test-samples", metavar="N",
                       help="use the first N held-out samples (default: all 10000; --quick: 1000)")
    mnist.add_argument("--data-dir", metavar="DIR",
                       help="real MNIST IDX files (plain or .gz) in DIR or DIR/MNIST/raw; "
                            "default: the built-in synthetic set")
    mnist.add_argument("--download", action="store_true",
                       help="download MNIST into --data-dir (default ~/.cache/gpudoctor/mnist) first")
    add_json(mnist, "print the JSON document to stdout")
    mnist.add_argument("--csv", type=output_path, metavar="FILE", help="write one CSV row per run to FILE")
    mnist.add_argument("--plot", type=output_path, metavar="FILE.png", help="plot samples/s and GPU utilisation against batch size")
    add_output(mnist, "write the JSON document to FILE")


def _bench_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return exitcodes.USAGE


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    """SweepConfig from the command line; UsageError (exit 2) on bad values."""
    config = SweepConfig.quick_defaults() if args.quick else SweepConfig()
    if args.batch_sizes is not None:
        config.batch_sizes = parse_int_list(args.batch_sizes, "--batch-sizes", 1)
    if args.workers is not None:
        config.workers = parse_int_list(args.workers, "--workers", 0)
    config.modes = parse_choice_list(args.modes, "--modes", MODES)
    if args.device is not None:
        config.devices = parse_choice_list(args.device, "--device", DEVICES)
    epochs = parse_int_list(args.epochs, "--epochs", 1)
    if len(epochs) != 1:
        raise UsageError("--epochs: give one number")
    config.epochs = epochs[0]
    repeat = parse_int_list(args.repeat, "--repeat", 1)
    if len(repeat) != 1:
        raise UsageError("--repeat: give one number")
    config.repeat = repeat[0]
    for option, name in (("--train-samples", "train_samples"), ("--test-samples", "test_samples")):
        text = getattr(args, name)
        if text is not None:
            values = parse_int_list(text, option, 1)
            if len(values) != 1:
                raise UsageError(f"{option}: give one number")
            setattr(config, name, values[0])
    config.data_dir = args.data_dir
    config.download = bool(args.download)
    config.validate()
    return config


def _run_line(result: RunResult, fraction: float) -> str:
    if result.status == "ok":
        outcome = f"{result.samples_per_s:,.0f} samples/s, epoch {result.epoch_s:.2f} s"
    else:
        outcome = f"{result.status}: {result.error}"
    return f"gpudoctor: [{fraction:4.0%}] {result.run.label()}: {outcome}"


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    from gpudoctor.backends.torch_build import TORCH_EXTRA_HINT, find_local_torch

    if find_local_torch() is None:  # the light install: say how to get torch, not a traceback
        raise UsageError(f"bench mnist needs torch, which is not installed in this environment: {TORCH_EXTRA_HINT}")
    for option, path in (("--csv", args.csv), ("--plot", args.plot), ("-o", args.output)):
        check_writable(path, option)
    if args.plot:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise UsageError("--plot needs matplotlib: pip install 'gpudoctor[plot]'")
    from gpudoctor.workload.output import render_table, sweep_json, write_csv, write_json, write_plot
    from gpudoctor.workload.sweep import run_sweep

    with Progress(lines=True) as progress:
        result = run_sweep(config,
                           on_start=lambda run, index, total: progress.start(f"running {run.label()} "
                                                                             f"({index + 1}/{total})"),
                           on_run=lambda result, fraction: progress.done(_run_line(result, fraction)))
    doc = result.to_dict()
    files = [(path, writer) for path, writer in ((args.output, lambda p: write_json(p, doc)),
                                                 (args.csv, lambda p: write_csv(p, doc["runs"])),
                                                 (args.plot, lambda p: write_plot(p, doc))) if path]
    written = deliver(lambda out: out.write(sweep_json(doc) + "\n") if args.json else render_table(doc, out),
                      files)
    if result.interrupted:
        kept = [path for path, _ in files] if written else []
        say(f"gpudoctor: {signals.stopped_word()}; {len(result.runs)} of {result.planned} runs finished and were kept"
            + (f" in {', '.join(kept)}" if kept else ""))
    if not written:
        return exitcodes.WRITE_FAILED
    return exitcodes.INTERRUPTED if result.interrupted else exitcodes.OK


__all__ = ["register", "run", "config_from_args"]
