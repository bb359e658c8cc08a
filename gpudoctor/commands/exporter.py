"""``gpudoctor exporter``: serve Prometheus metrics (the library: :mod:`gpudoctor.exporter`).

Exit codes: 0 stopped by SIGTERM or ``--exit-after``; 2 bad arguments, recording or
address; 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from gpudoctor.core import exitcodes
from gpudoctor.system import signals
from gpudoctor.commands.args import (add_command, add_replay, bounded, listen_host, open_backend, seconds,
                                     seconds_or_zero)
from gpudoctor.core.errors import UsageError
from gpudoctor.sampling.presentation import plain_text
from gpudoctor.exporter import (DEFAULT_INTERVAL_S, DEFAULT_PORT, DEFAULT_REPORT_INTERVAL_S, LOOPBACK,
                                GpudoctorCollector, GpuSampler, ReportStatus, build_registry, quick_report_producer,
                                serve_metrics, stop_sampler_then_close)

#: The command's words in `gpudoctor --help` and `gpudoctor exporter --help`.
HELP = "serve Prometheus metrics for every GPU and the last report"
DESCRIPTION = ("Prometheus exporter: per-GPU utilisation, memory, temperature, power, clocks, PCIe, "
               "ECC, throttle reasons, and each probe's status in the last quick report. Metric names "
               "and their dcgm-exporter counterparts: docs/fleet.md.")

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from gpudoctor.backends.base import GpuBackend
    from gpudoctor.backends.events import EventSource
    from gpudoctor.commands.args import Subcommands

port = bounded(int, minimum=0, maximum=65535, what="a port number")


def register(subparsers: Subcommands) -> None:
    p = add_command(subparsers, "exporter", run, help=HELP, description=DESCRIPTION)
    p.add_argument("--host", default="127.0.0.1", type=listen_host,
                   help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 opens it to the network)")
    p.add_argument("--port", type=port, default=DEFAULT_PORT,
                   help=f"TCP port (default {DEFAULT_PORT}; 0 picks a free one and prints it)")
    p.add_argument("--interval", type=seconds, default=DEFAULT_INTERVAL_S, metavar="S",
                   help=f"seconds between GPU samples (default {DEFAULT_INTERVAL_S:g}); scrapes serve the latest")
    p.add_argument("--report-interval", type=seconds_or_zero, default=DEFAULT_REPORT_INTERVAL_S, metavar="S",
                   help="run the quick report at start and then every S seconds (default 300; 0: at start only)")
    p.add_argument("--report-file", metavar="FILE",
                   help="expose the report in FILE (written by `gpudoctor report -o FILE`) instead of "
                        "running the quick report; re-read when it changes")
    p.add_argument("--no-report", action="store_true", help="expose no report metrics")
    p.add_argument("--proc-root", default="/proc", metavar="DIR",
                   help="where the GPU processes' cgroups are read to label each GPU with its Slurm job or "
                        "Kubernetes pod (default /proc; /host/proc in a container that mounts the host's)")
    add_replay(p, "serve a recording (gpudoctor record) instead of live NVML")
    p.add_argument("--exit-after", type=seconds, metavar="S",
                   help="stop after S seconds (for scripts and tests; default: run until Ctrl-C or SIGTERM)")


def run(args: argparse.Namespace) -> int:
    gpu = open_backend(args.replay)
    # SIGTERM and SIGHUP (its terminal closed) are its normal stop, from the first moment: a
    # stop that comes while the first sample is awaited ends it cleanly, not by the signal.
    terminated: list[int] = []
    previous = signals.set_handlers(lambda signum, _frame: terminated.append(signum))
    sampler = GpuSampler(gpu, args.interval, proc_root=args.proc_root)
    # Sampling starts in its own thread and the endpoint is served at once: a first NVML call
    # that hangs leaves the sample stale (gpudoctor_nvml_up 0), never the endpoint down.
    sampler.start()
    events = _EventsInBackground(gpu, sampler)
    reports = _report_status(args, events)
    source = f"replay:{os.path.basename(args.replay)}" if args.replay else "nvml"
    collector = GpudoctorCollector(sampler, reports, source, None)
    try:
        server = _serve(args, build_registry(collector))
    except UsageError:
        signals.restore(previous)
        gpu.close()
        raise
    events.start(collector)
    interrupted = False
    try:
        _say_first_sample(sampler, stop=terminated)
        if reports is not None:
            reports.start()
        _wait_for_stop(terminated, args.exit_after)  # None: until SIGTERM or SIGHUP (or Ctrl-C)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signals.restore(previous)
        server.shutdown()
        server.server_close()
        if reports is not None:
            reports.stop()
        events.stop()
        # A healthy sampler wakes at once; one stuck in the driver is left behind (a daemon).
        stop_sampler_then_close(sampler, gpu, join_s=2.0)
    print("gpudoctor exporter: stopped", file=sys.stderr, flush=True)
    return exitcodes.INTERRUPTED if interrupted else exitcodes.OK


def _report_status(args: argparse.Namespace, events: _EventsInBackground) -> ReportStatus | None:
    """The report to expose: none (--no-report), the file's (--report-file), or the quick report
    run every --report-interval seconds, whose events probe reads the watcher's NVML stream once
    it is open."""
    if args.no_report:
        return None
    if args.report_file:
        return ReportStatus(path=args.report_file)

    def produce() -> Any:
        return quick_report_producer(args.replay, events.watcher)()

    return ReportStatus(produce=produce, interval=args.report_interval)


def _serve(args: argparse.Namespace, registry: CollectorRegistry) -> Any:
    """Serve ``registry`` at --host/--port and say where on stderr; UsageError if it cannot listen."""
    try:
        server, _thread = serve_metrics(registry, args.host, args.port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in str(host) else host
    print(f"gpudoctor exporter: serving http://{shown}:{port}/metrics", file=sys.stderr, flush=True)
    if args.host not in LOOPBACK:
        print(f"gpudoctor exporter: warning: listening on {args.host}, reachable from other machines",
              file=sys.stderr, flush=True)
    return server


class _EventsInBackground:
    """Opens the event watcher in a daemon thread: opening it counts the GPUs and reads their bus
    ids, NVML calls that can hang like any other, and nothing before serving may wait on NVML.
    The collector exposes the events from the moment the watcher is open."""

    def __init__(self, gpu: GpuBackend, sampler: GpuSampler | None = None) -> None:
        self.gpu = gpu
        self.sampler = sampler
        self.watcher: EventSource | None = None
        self._stopped = False
        self._lock = threading.Lock()

    def start(self, collector: GpudoctorCollector) -> None:
        threading.Thread(target=self._open, args=(collector,), name="gpudoctor-events-open", daemon=True).start()

    def _open(self, collector: GpudoctorCollector) -> None:
        from gpudoctor.backends.events import open_event_watcher

        try:
            watcher = open_event_watcher(self.gpu)
            watcher.start()
        except Exception:  # no event set on this backend: the GPU metrics go on without events
            return
        with self._lock:
            if self._stopped:
                watcher.stop(join_s=0)
                return
            self.watcher = watcher
        # The sampler's NVML restart shuts NVML down: the watcher frees its event set first and
        # registers again afterwards, so Xids after a driver reload are still counted.
        restart_hooks = getattr(getattr(self.sampler, "core", None), "before_restart", None)
        if restart_hooks is not None and hasattr(watcher, "suspend"):
            restart_hooks.append(watcher.suspend)
        collector.events = watcher

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            watcher = self.watcher
        if watcher is not None:
            watcher.stop()


def _wait_for_stop(terminated: list[int], exit_after: float | None) -> None:
    """Sleep until SIGTERM (the handler appends to ``terminated``) or ``exit_after`` seconds.

    Polls a list instead of waiting on a threading.Event: an Event set from a signal handler
    deadlocks when the signal lands while the main thread holds the Event's lock inside
    wait() (the exporter then never stopped on SIGTERM, now and then, under load)."""
    deadline = None if exit_after is None else time.monotonic() + exit_after
    while not terminated:
        left = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
        if left <= 0:
            return
        time.sleep(left)


def _say_first_sample(sampler: GpuSampler, wait_s: float = 5.0, stop: list[int] | None = None) -> None:
    """One line on stderr when NVML is unusable, or when the first sample has not come back."""
    deadline = time.monotonic() + wait_s
    first = False
    while not (stop or first) and time.monotonic() < deadline:
        first = sampler.wait_first(min(0.2, max(0.0, deadline - time.monotonic())))
    if stop:
        return
    if not first:
        print(f"gpudoctor exporter: the first NVML sample has not come back in {wait_s:g} s; serving it as "
              "stale (gpudoctor_nvml_up 0) until it does", file=sys.stderr, flush=True)
        return
    latest = sampler.snapshot
    status = latest.nvml_status if latest is not None else None
    if status is not None:
        retry = latest.retry_in_s if latest is not None else None
        # the reason may come from a recording (--replay) or a driver: shown as plain text
        print(f"gpudoctor exporter: NVML unavailable ({plain_text(status.reason, limit=80)}); "
              "serving gpudoctor_nvml_up 0"
              + (f", trying again in {retry:.0f} s (then after 10, 20, 40 s, then every 60 s)" if retry is not None else ""),
              file=sys.stderr, flush=True)


__all__ = ["register", "run", "port"]
