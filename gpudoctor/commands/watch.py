"""``gpudoctor watch``: one line per GPU per interval, for logs (JSON lines with --json).

Exit codes (gpudoctor/core/exitcodes.py): 0 after COUNT intervals; 2 bad arguments or
recording; 6 no usable GPU (NVML missing or no device: said on stderr, and as one JSON
line ``{"error": "no_gpu", ...}`` on stdout with --json); 7 stdout cannot be written;
130 stopped by Ctrl-C, which is the usual way to end an unbounded watch. A GPU that fails
mid-watch (GPU lost, driver gone) prints a FAULT line for that GPU and the watch goes on.
"""

from __future__ import annotations

import argparse
import itertools
import json
from typing import TYPE_CHECKING

from gpudoctor.core import exitcodes
from gpudoctor.commands.args import add_command, add_json, add_refresh_interval, add_replay, bounded, open_backend
from gpudoctor.commands.output import say, write_stdout_line

#: The command's words in `gpudoctor --help` and `gpudoctor watch --help`.
HELP = "one line per GPU per interval, for logs (--json: JSON lines)"
DESCRIPTION = ("Print one line per GPU every interval, within 100 columns: utilisation, memory used/total, "
               "temperature, power/limit, SM clock and throttle reasons "
               "(2026-11-21T05:21:07Z gpu0 util 95% mem 20.5/24.0 GiB 74°C 338/350W sm 1860MHz throttle "
               "sw_power_cap), and under a GPU in MIG mode one line per MIG device (memory, SM activity, "
               "processes; utilisation and energy are whole-GPU figures only in NVML). -v adds the memory clock, PCIe, fan, the driver's reserved memory and why a "
               "reading is n/a. Exit codes: 0 done, 2 usage, 4 a critical GPU event (a critical Xid, an "
               "uncorrectable ECC error) was reported, 6 no GPU, 130 Ctrl-C.")

if TYPE_CHECKING:
    from gpudoctor.backends.events import EventWatcher, ReplayEvents
    from gpudoctor.commands.args import Subcommands

count = bounded(int, minimum=1, what="a whole number")


def register(subparsers: Subcommands) -> None:
    parser = add_command(subparsers, "watch", run, help=HELP, description=DESCRIPTION)
    add_refresh_interval(parser)
    parser.add_argument("-n", "--count", type=count, metavar="COUNT",
                        help="stop after COUNT intervals (default: until Ctrl-C)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="every reading on the line (about 200 columns): memory clock, PCIe rx/tx, fan, "
                             "reserved memory, n/a reasons, throttle reasons in full")
    add_json(parser, "one JSON object per GPU per interval (every reading)")
    add_replay(parser, "read a recording made with `gpudoctor record`")


def run(args: argparse.Namespace) -> int:
    from gpudoctor.core import findings
    from gpudoctor.sampling.presentation import mig_lines, mig_records, no_gpu_words, plain_text, watch_line, watch_record
    from gpudoctor.sampling.sampler import Sampler, recorded_snapshot

    gpu = open_backend(args.replay, loop=False)
    sampler = Sampler(gpu, host_sampler=None, with_processes=False, interval_s=args.interval)
    from gpudoctor.backends.events import critical_events, open_event_watcher
    from gpudoctor.sampling.sampler import bounded_call

    events = bounded_call(lambda: open_event_watcher(gpu))  # it counts the GPUs: NVML calls
    try:
        reads = sampler.paced(count=args.count)
        snap = next(reads)
        if not snap.has_gpu:
            reason = snap.nvml_status.reason if snap.nvml_status is not None else "NoDevices"
            words = (no_gpu_words(reason) if snap.nvml_status is not None
                     else findings.wording("nvml_no_gpu:unstated").summary)
            say(f"gpudoctor watch: nothing to watch: {plain_text(words)} (NVML: {plain_text(reason, limit=80)}). "
                "`gpudoctor report` says why.")
            if args.json:
                write_stdout_line(json.dumps({"error": "no_gpu", "reason": reason, "message": words}))
            return exitcodes.NO_GPU
        bounded_call(events.start)  # registering for events makes NVML calls too
        seen: dict[int, int] = {}
        critical: set[int] = set()
        for snap in itertools.chain([snap], reads):  # noqa: B020 (chain() holds the first snapshot already)
            snap = recorded_snapshot(gpu, snap)  # a replay's lines carry the time it was recorded
            for dev in snap.devices:
                # flushed per line: a log reader sees each interval as it happens
                write_stdout_line(json.dumps(watch_record(snap, dev), allow_nan=False) if args.json
                                  else watch_line(snap, dev, verbose=args.verbose))
                # a GPU in MIG mode: one line (record) per MIG device under it
                for line in ([json.dumps(r, allow_nan=False) for r in mig_records(snap, dev)] if args.json
                             else mig_lines(snap, dev, verbose=args.verbose)):
                    write_stdout_line(line)
                _new_events(events, dev.index, seen, args.json)
                if critical_events(events.snapshot(dev.index)):
                    critical.add(dev.index)
        # A critical event (a critical Xid, an uncorrectable ECC error) fails the watch as it fails
        # the report, the TUI header and the exporter's status: a script sees it in the exit code.
        return exitcodes.FAIL if critical else exitcodes.OK
    except KeyboardInterrupt:
        return exitcodes.INTERRUPTED
    finally:
        events.stop(join_s=1.0)
        sampler.close()


def _new_events(events: EventWatcher | ReplayEvents, index: int, seen: dict[int, int], as_json: bool) -> None:
    """An EVENT line for each critical event (Xid, ECC) the GPU reported since the last interval.

    Kernel-log Xids from before the watch began come once, on the first interval."""
    from gpudoctor.sampling.presentation import event_line, event_record

    state = events.snapshot(index)
    happened = sorted(state.logged_xids + state.recent, key=lambda e: e.time)
    total = len(state.logged_xids) + sum(count for kind, count in state.counts.items() if kind != "clock_change")
    if total <= seen.get(index, 0):
        return
    fresh = happened[-(total - seen.get(index, 0)):] if total - seen.get(index, 0) <= len(happened) else happened
    seen[index] = total
    for event in fresh:
        write_stdout_line(json.dumps(event_record(index, event), allow_nan=False) if as_json
                          else event_line(index, event))


__all__ = ["register", "run", "count"]
