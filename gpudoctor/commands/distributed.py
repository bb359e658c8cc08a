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
from typing import TYPE_CHECKING, Any

from gpudoctor.commands.args import (MAX_SECONDS, add_command, add_fail_on, add_json_document, bounded,
                                     check_writable)
from gpudoctor.commands.output import emit_report, is_terminal, say, torchrun_rank

#: The command's words in `gpudoctor --help` and `gpudoctor distributed --help`.
HELP = "check torch.distributed: all-reduce bandwidth, DDP, stragglers, peers"
DESCRIPTION = ("All-reduce bus bandwidth over message sizes, a DDP step of the reference MNIST "
               "network with a gradient agreement check, per-rank timings, and on multi-GPU nodes "
               "peer access, NVLink and DataParallel. NCCL on GPUs, gloo on CPU. Under torchrun it "
               "joins the job (torchrun --nproc-per-node N -m gpudoctor distributed).")

if TYPE_CHECKING:
    from gpudoctor.commands.args import Subcommands

nproc = bounded(int, minimum=2, what="a number of processes",
                below_message="a distributed check needs at least 2 processes")
time_limit = bounded(float, minimum=5, maximum=MAX_SECONDS, what="a number of seconds",
                     below_message="the time limit must be at least 5 s")


def _sizes(text: str) -> list[int]:
    from gpudoctor.probes.distributed import parse_size

    try:
        sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not sizes:
        raise argparse.ArgumentTypeError("give at least one size, e.g. 1M,64M")
    return sizes


def register(subparsers: Subcommands) -> None:
    p = add_command(subparsers, "distributed", run, help=HELP, description=DESCRIPTION)
    p.add_argument("--nproc", type=nproc, metavar="N",
                   help="ranks to start on this machine (default: one per GPU with NCCL, 2 with gloo); "
                        "ignored under torchrun")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="auto: NCCL with >= 2 GPUs, else gloo on CPU (default)")
    p.add_argument("--sizes", type=_sizes, metavar="LIST",
                   help="all-reduce message sizes, e.g. 1M,16M,256M (default: 64K,1M,16M for gloo; "
                        "1M,16M,128M,512M for NCCL)")
    p.add_argument("--timeout", type=time_limit, default=120.0, metavar="S",
                   help="time limit for the whole check; a rank still running then is reported as hung "
                        "(default 120)")
    add_json_document(p, "print one JSON report to stdout", "also write the JSON report to FILE (atomically)")
    add_fail_on(p)
    p.add_argument("--anonymize", action="store_true", help="strip GPU UUIDs, serial numbers and host names")
    p.add_argument("-v", "--verbose", action="store_true", help="show every measurement")


def run(args: argparse.Namespace) -> int:
    from gpudoctor.report import runner

    rank = torchrun_rank()
    if rank is None or rank == 0:
        check_writable(args.output)
    options: dict[str, Any] = {"backend": args.backend, "timeout_s": args.timeout}
    if args.nproc and rank is None:
        options["nproc"] = args.nproc
    if args.sizes:
        options["sizes"] = args.sizes
    probe = runner.select_probes(["distributed"], "full")[0]
    # The runner's limit: the check's own limit plus time to import torch and gather results.
    probe = dataclasses.replace(probe, timeout_s=args.timeout + 30.0)
    spec = runner.RunSpec(level="full", options=options)
    if rank is None and is_terminal(sys.stderr):
        say("gpudoctor: running the distributed check ...")
    report = runner.run_probes([probe], spec, isolate=True)
    return emit_report(report, args, title="gpudoctor distributed")


__all__ = ["register", "run", "nproc", "time_limit"]
