"""``gpudoctor record -o FILE``: capture real NVML and torch readings for replay and bug reports.

Exit codes: 0 written; 2 bad arguments; 6 no usable GPU (said at once, nothing sampled);
7 the recording could not be written; 130 Ctrl-C (what was sampled is written).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gpudoctor.core import exitcodes
from gpudoctor.commands.args import add_command, add_output, check_writable, seconds
from gpudoctor.commands.output import say

#: The command's words in `gpudoctor --help` and `gpudoctor record --help`.
HELP = "capture real NVML and torch readings into a recording"
DESCRIPTION = "Capture device readings for replay and bug reports."

if TYPE_CHECKING:
    from gpudoctor.backends.base import GpuBackend
    from gpudoctor.commands.args import Subcommands


def register(subparsers: Subcommands) -> None:
    record = add_command(subparsers, "record", run, help=HELP, description=DESCRIPTION)
    add_output(record, "recording file to write", required=True)
    record.add_argument("--seconds", type=seconds, default=5.0, help="how long to sample (default 5)")
    record.add_argument("--interval", type=seconds, default=0.5, help="seconds between samples (default 0.5)")
    record.add_argument("--no-torch", action="store_true", help="do not record torch facts (no CUDA context)")
    record.add_argument("--anonymize", action="store_true", help="strip UUIDs, serials and host name")


def no_gpu_reason(gpu: GpuBackend) -> str | None:
    """Why there is nothing to record (one sentence), or None when NVML sees a GPU."""
    from gpudoctor.sampling.presentation import no_gpu_words

    status = gpu.status()
    if status is not None:
        return f"{no_gpu_words(status.reason)} (NVML: {status.reason})"
    count = gpu.device_count()
    if not isinstance(count, int) or count < 1:
        reason = getattr(count, "reason", None) or "NoDevices"  # NA: the count itself failed (a hung driver)
        return f"{no_gpu_words(reason)} (NVML: {reason})"
    return None


def run(args: argparse.Namespace) -> int:
    from gpudoctor.backends import NvmlBackend
    from gpudoctor.core.errors import first_line
    from gpudoctor.sampling.recorder import record_parts

    check_writable(args.output)
    gpu = NvmlBackend()
    try:
        from gpudoctor.sampling.sampler import bounded_call

        reason = bounded_call(lambda: no_gpu_reason(gpu))  # NVML calls, which may hang
        if reason is not None:
            say(f"gpudoctor record: nothing to record: {reason}. `gpudoctor report` says why.")
            return exitcodes.NO_GPU
        # written as it is taken: parts as they fill, the part being taken every few seconds
        try:
            paths, interrupted = record_parts(args.output, seconds=args.seconds, interval=args.interval,
                                              with_torch=not args.no_torch, anonymize=args.anonymize, gpu=gpu,
                                              log=say)
        except OSError as exc:
            say(f"gpudoctor: error: cannot write {args.output}: {exc.strerror or first_line(exc)}")
            return exitcodes.WRITE_FAILED
    finally:
        gpu.close()
    if len(paths) == 1:
        say(f"gpudoctor: recording written to {args.output}")
    else:
        say(f"gpudoctor: recording written in {len(paths)} parts (each replays on its own): "
            + ", ".join(str(p) for p in paths))
    return exitcodes.INTERRUPTED if interrupted else exitcodes.OK


__all__ = ["register", "run", "no_gpu_reason"]
