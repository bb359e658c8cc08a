"""``gpudoctor distributed``: the distributed probe as a command of its own.

Starts N ranks on this machine (rendezvous on 127.0.0.1), or, when itself started by
torchrun, joins the job torchrun set up (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
Either way one report comes out: here, or on rank 0 under torchrun (the other ranks
print nothing to stdout and write no file, and exit with the same code as rank 0).

Front end only: torch is imported by the probe, in the runner's child process.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any



def _sizes(text: str) -> list[int]:
    from gpudoctor.probes.distributed import parse_size

    try:
        sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not sizes:
        raise argparse.ArgumentTypeError("give at least one size, e.g. 1M,64M")
    return sizes


def _nproc(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of processes: {text!r}") from None
    if value < 2:
        raise argparse.ArgumentTypeError("a distributed check needs at least 2 processes")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value < 5:
        raise argparse.ArgumentTypeError("the time limit must be at least 5 s")
    return value


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "distributed", help="check torch.distributed: all-reduce bandwidth, DDP, stragglers, peers",
        description="All-reduce bus bandwidth over message sizes, a DDP step of the reference MNIST "
                    "network with a gradient agreement check, per-rank timings, and on multi-GPU nodes "
                    "peer access, NVLink and DataParallel. NCCL on GPUs, gloo on CPU. Under torchrun it "
                    "joins the job (torchrun --nproc-per-node N -m gpudoctor distributed).")
    p.add_argument("--nproc", type=_nproc, metavar="N",
                   help="ranks to start on this machine (default: one per GPU with NCCL, 2 with gloo); "
                        "ignored under torchrun")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="auto: NCCL with >= 2 GPUs, else gloo on CPU (default)")
    p.add_argument("--sizes", type=_sizes, metavar="LIST",
                   help="all-reduce message sizes, e.g. 1M,16M,256M (default: 64K,1M,16M for gloo; "
                        "1M,16M,128M,512M for NCCL)")
    p.add_argument("--timeout", type=_seconds, default=120.0, metavar="S",
                   help="time limit for the whole check; a rank still running then is reported as hung "
                        "(default 120)")
    p.add_argument("--json", action="store_true", help="print one JSON report to stdout")
    p.add_argument("-o", "--output", metavar="FILE", help="also write the JSON report to FILE (atomically)")
    p.add_argument("--fail-on", choices=("warn", "fail"), default="warn",
                   help="lowest status that gives a non-zero exit (default: warn)")
    p.add_argument("--anonymize", action="store_true", help="strip GPU UUIDs, serial numbers and host names")
    p.add_argument("-v", "--verbose", action="store_true", help="show every measurement")
    p.set_defaults(handler=cmd_distributed)


def cmd_distributed(args: argparse.Namespace) -> int:
    from gpudoctor import runner
    from gpudoctor.cli import _check_writable, emit_report, torchrun_rank

    rank = torchrun_rank()
    if args.output and (rank is None or rank == 0):
        _check_writable(args.output)
    options: dict[str, Any] = {"backend": args.backend, "timeout_s": args.timeout}
    if args.nproc and rank is None:
        options["nproc"] = args.nproc
    if args.sizes:
        options["sizes"] = args.sizes
    probe = runner.select_probes(["distributed"], "full")[0]
    # The runner's limit: the check's own limit plus time to import torch and gather results.
    probe = dataclasses.replace(probe, timeout_s=args.timeout + 30.0)
    spec = runner.RunSpec(level="full", options=options)
    if rank is None and sys.stderr.isatty():
        sys.stderr.write("gpudoctor: running the distributed check ...\n")
    report = runner.run_probes([probe], spec, isolate=True)
    return emit_report(report, args)


__all__ = ["register", "cmd_distributed"]
