"""``gpudoctor why PID`` / ``gpudoctor why -- python train.py ...``: why a running training job's
GPU is not busy, with no change to its code (py-spy stack samples, psutil, NVML).

Exit codes: 0 diagnosed; 2 bad arguments, no such PID, or not a Python process; 9 the process
could not be sampled (no permission to attach, a Python version py-spy cannot read);
10 the process ended while sampled (what was sampled is reported); 7 the -o file could not be
written; 130 Ctrl-C (what was sampled is reported). With ``-- CMD`` the exit code is CMD's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

from gpudoctor.core import exitcodes
from gpudoctor.system import signals
from gpudoctor.commands.args import add_command, add_json_document, bounded, check_writable, process_id
from gpudoctor.commands.output import deliver, is_terminal, say
from gpudoctor.core.errors import UsageError

#: The command's words in `gpudoctor --help` and `gpudoctor why --help`.
HELP = "why a running training process's GPU is not busy (no code change)"
DESCRIPTION = ("Sample a running Python process and its subprocesses (DataLoader workers, torchrun's "
               "ranks) with py-spy, join NVML and CPU figures, and say what holds it back: input-bound, "
               "host-sync-bound, CPU-bound, GPU-bound, I/O-bound or idle, with the lines and the fix. "
               "`gpudoctor why -- CMD ...` starts CMD, samples it and passes its exit code on. "
               "Exit codes: 0 diagnosed, 2 usage/no such PID/not Python, 9 cannot attach, "
               "10 the process ended while sampled, 7 write failed.")

if TYPE_CHECKING:
    from gpudoctor.commands.args import Subcommands

_rate = bounded(int, minimum=1, maximum=1000, what="a rate in samples per second")
_seconds = bounded(float, minimum=1, maximum=3600, what="a number of seconds", unit=" s")
_wait = bounded(float, minimum=0, maximum=3600, what="a number of seconds", unit=" s")
STOP_GRACE_S = 10.0
CTRL_C_GRACE_S = 3.0   # a Ctrl-C typed in the terminal reached the command too: time to end by itself
#: How the command is stopped (--then stop, or after a Ctrl-C): each signal to every process it
#: started, at any depth, then the grace for all of them to end; SIGKILL to what is left after.
STOP_STEPS = ((signal.SIGINT, STOP_GRACE_S), (signal.SIGTERM, STOP_GRACE_S))
KILL_WAIT_S = 5.0


def register(subparsers: Subcommands) -> None:
    parser = add_command(subparsers, "why", run, help=HELP, description=DESCRIPTION, usage="gpudoctor why [-h] [--seconds N] [--rate HZ] [--json] [-o FILE] PID\n"
              "       gpudoctor why [-h] [--seconds N] [--rate HZ] [--json] [-o FILE] [--wait-start N]\n"
              "                     [--then continue|stop] -- CMD [ARG ...]")
    parser.add_argument("target", nargs="+", metavar="PID or -- CMD",
                        help="the PID of a running Python process, or -- and a command to start")
    parser.add_argument("--seconds", type=_seconds, default=10.0, metavar="N",
                        help="how long to sample (default 10; less if the process ends)")
    parser.add_argument("--rate", type=_rate, default=100, metavar="HZ",
                        help="stack samples per second (default 100)")
    parser.add_argument("--then", choices=("continue", "stop"), default="continue",
                        help="with -- CMD: after the verdict, let the command run on (continue, the default: "
                             "a diagnosis never ends a job by itself) or stop it and every process it started "
                             "(SIGINT, SIGTERM after 10 s, SIGKILL after 10 s more); the exit code is the "
                             "command's either way")
    parser.add_argument("--wait-start", type=_wait, default=60.0, metavar="N",
                        help="with -- CMD: wait at most N seconds (default 60, 0 = not at all) for start-up "
                             "(imports, building the model) to end before the sampled window")
    add_json_document(parser, "print one JSON document (docs/why.schema.json)", "also write the JSON here")


def _target(args: argparse.Namespace) -> tuple[int | None, list[str] | None]:
    items = list(args.target)
    if len(items) == 1 and items[0].strip().isdigit():
        try:
            return process_id(items[0]), None
        except UsageError as exc:
            raise UsageError(f"why: {exc}") from None
    if items and items[0].lstrip("-").isdigit():
        raise UsageError("why: give one PID, or -- and a command (gpudoctor why -- python train.py)")
    if not items or shutil.which(items[0]) is None:
        raise UsageError(f"why: not a PID, and no command {items[0]!r} on PATH"
                         if items else "why: give a PID or -- CMD")
    return None, items


def _deliver(diag: dict[str, Any], args: argparse.Namespace, block: bool = False) -> bool:
    """Print the diagnosis. ``block`` (why -- CMD): the text goes to stderr as one framed block,
    apart from the command's own stdout; --json stays on stdout."""
    from gpudoctor.system import fileio
    from gpudoctor.why.text import render_text

    text = json.dumps(diag, indent=2) + "\n"

    def show(out: TextIO) -> None:
        if args.json:
            out.write(text)
            return
        target = sys.stderr if block else out
        width = shutil.get_terminal_size((100, 24)).columns if is_terminal(target) else 100
        body = render_text(diag, width=max(60, width))
        if block:
            rule = "-" * min(max(60, width), 100)
            body = f"{rule}\ngpudoctor why: verdict\n{body}{rule}\n"
        target.write(body)
        target.flush()

    files = [(args.output, lambda p: fileio.write_text(p, text))] if args.output else []
    return deliver(show, files)


def _diagnose(pid: int, args: argparse.Namespace, wait_start_s: float = 0.0) -> dict[str, Any]:
    from gpudoctor.backends import NvmlBackend
    from gpudoctor.why import why

    gpu = NvmlBackend()
    try:
        return why(pid, args.seconds, rate=args.rate, gpu_backend=gpu, wait_start_s=wait_start_s, progress=say)
    finally:
        gpu.close()


def run(args: argparse.Namespace) -> int:
    pid, command = _target(args)
    check_writable(args.output)
    if command is not None:
        return _run_command(command, args)
    assert pid is not None
    # SIGTERM and SIGHUP, handled like Ctrl-C: sampling stops (py-spy with it) and what was
    # sampled is reported
    signals.reset()
    previous = signals.install()
    try:
        diag = _diagnose(pid, args)
    except signals.Terminated:  # before sampling began: nothing to report
        return signals.exit_code()
    finally:
        signals.restore(previous)
    if not _deliver(diag, args):
        return exitcodes.WRITE_FAILED
    if diag.get("interrupted"):
        stop = signals.exit_code()
        say("gpudoctor why: " + {exitcodes.HANGUP: "hung up", exitcodes.TERMINATED: "terminated"}.get(stop, "interrupted")
            + "; what was sampled is reported")
        return stop
    if diag.get("ended"):
        say(f"gpudoctor why: process {pid} ended after {diag.get('sampled_s', 0):.1f} s; "
            f"the diagnosis is from what was sampled")
        return exitcodes.PROCESS_ENDED
    return exitcodes.OK


def _run_command(command: list[str], args: argparse.Namespace) -> int:
    """Start ``command``, diagnose it for --seconds (or until it ends), then pass its exit code on."""
    from gpudoctor.system import _proc

    _proc.become_subreaper()  # what the command leaves behind stays below gpudoctor, to be stopped with it
    before = set(_proc.descendants(os.getpid()))
    try:
        child = subprocess.Popen(command)
        _started[child.pid] = before
        _began[child.pid] = time.monotonic()
    except OSError as exc:
        raise UsageError(f"why: cannot start {command[0]}: {exc.strerror or exc}") from None
    # reaped as soon as it ends, so the sampler sees it gone rather than a zombie
    threading.Thread(target=child.wait, name="gpudoctor-why-child", daemon=True).start()
    # SIGTERM and SIGHUP are passed on: the command decides how to stop, and its code is ours
    previous = signals.set_handlers(lambda signum, frame: child.send_signal(signum))
    try:
        return _exit_code(_sample_command(child, args))
    except KeyboardInterrupt:  # before the sampling began (or while the verdict was written)
        return _exit_code(_stop_after_ctrl_c(child))
    finally:
        signals.restore(previous)


def _exit_code(returncode: int) -> int:
    """A command killed by signal N exits 128 + N, as a shell reports it."""
    return 128 - returncode if returncode < 0 else returncode


def _sample_command(child: subprocess.Popen, args: argparse.Namespace) -> int:
    from gpudoctor.why import WhyError
    from gpudoctor.why.session import python_target

    diag = None
    try:
        pid = python_target(child.pid, lambda: child.poll() is not None)
        diag = _diagnose(pid, args, args.wait_start) if pid is not None else None
        if diag is None:
            say(_ended_words(child, "before it could be sampled"))
        elif not _deliver(diag, args, block=True):
            say("gpudoctor why: the diagnosis could not be written; waiting for the command")
        elif _exited(child, 0.2):
            starting = "start" in str((diag.get("verdict") or {}).get("words", "")) or \
                ((diag.get("verdict") or {}).get("startup") or {}).get("share", 0) >= 0.5
            say(_ended_words(child, "during start-up" if starting else "while it was sampled"))
    except WhyError as exc:
        # the command ended between its start and the sampling (no such process any more): say so,
        # with its exit code, rather than an error about a PID the user never gave
        say(_ended_words(child, "during start-up") if _exited(child) else f"gpudoctor: error: {exc}")
    if diag is not None and diag.get("interrupted") and child.poll() is None:
        return _stop_after_ctrl_c(child)
    if args.then == "stop" and (child.poll() is None or _left(child)):
        return _stop_tree(child, "stopping the command (--then stop)")
    return child.wait()


_started: dict[int, set[int]] = {}   # the command's pid -> gpudoctor's descendants before it started
_began: dict[int, float] = {}        # the command's pid -> when it started (monotonic)


def _exited(child: subprocess.Popen, wait_s: float = 5.0) -> bool:
    """Whether the command has ended (waited for a moment: the reaping thread may be behind)."""
    try:
        child.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def _ended_words(child: subprocess.Popen, when: str) -> str:
    """'the command exited (code 1) after 2.4 s, during start-up': its stderr is above, unchanged."""
    code = child.poll()
    after = time.monotonic() - _began.get(child.pid, time.monotonic())
    how = "is still running" if code is None else (
        f"exited (code {code})" if code >= 0 else f"was killed by {_signal_name(-code)}")
    why = "; its own output (above) says why" if code else ""
    return f"gpudoctor why: the command {how} after {after:.1f} s, {when}{why}"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _left(child: subprocess.Popen) -> list[int]:
    """Every process the command started that still runs: its tree, and what it left behind (re-
    parented to gpudoctor, its subreaper), less what gpudoctor had started before it."""
    from gpudoctor.system import _proc

    before = _started.get(child.pid, set())
    return [p for p in _proc.descendants(os.getpid()) if p not in before and _proc.alive(p)]


def _stop_tree(child: subprocess.Popen, why: str) -> int:
    """Stop the command and every process it started, at any depth: SIGINT to all, SIGTERM to all
    after STOP_GRACE_S, SIGKILL to what is left after as long again (STOP_STEPS); the command's
    exit status."""
    for signum, grace in (*STOP_STEPS, (signal.SIGKILL, KILL_WAIT_S)):
        left = _left(child)
        if not left:
            break
        below = [p for p in left if p != child.pid]
        pids = ", ".join(map(str, below[:8])) + (", ..." if len(below) > 8 else "")
        them = f"the {len(below)} process{'es' if len(below) != 1 else ''} it started ({pids})"
        say(f"gpudoctor why: {why}: {signal.Signals(signum).name} to "
            + (f"pid {child.pid}" + (f" and {them}" if below else "") if child.pid in left
               else f"{them} (pid {child.pid} has ended)"))
        for pid in left:
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _left(child):
            time.sleep(0.05)
    return child.wait()


def _stop_after_ctrl_c(child: subprocess.Popen) -> int:
    """Ctrl-C stopped the sampling: the command is stopped too, as any wrapper's is. A Ctrl-C typed
    in the terminal reached it already (one process group), so it gets a moment to end on its own;
    then it and every process it started get SIGINT, SIGTERM and SIGKILL (STOP_STEPS)."""
    try:
        child.wait(timeout=CTRL_C_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    return _stop_tree(child, "interrupted; stopping the command")


__all__ = ["register", "run"]
