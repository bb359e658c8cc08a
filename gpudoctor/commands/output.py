"""What commands share to hand results over: stdout first, then files; progress; the report.

The order is the rule (docs/reliability.md): a finished run is printed before any file is
written, so a file that cannot be written (disk full, directory gone, ``/proc/version``)
loses nothing that was already shown; each failed output is one line on stderr and the
command exits 7 (WRITE_FAILED) instead of a traceback.
"""

from __future__ import annotations

import errno
import io
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence, TextIO

from gpudoctor.core import exitcodes
from gpudoctor.system import fileio, signals
from gpudoctor.core.errors import WriteFailedError

if TYPE_CHECKING:
    import argparse

    from gpudoctor.core.model import Report

Writer = Callable[[str], Any]  # writes one output file at the path it is given


# --------------------------------------------------------------------------- streams
class ClosedStream(io.TextIOBase):
    """Stands in for a standard stream the process was started without (``2>&-``).

    Writing to it fails like writing to a closed descriptor, so a command reports it
    (exit 7) rather than crashing on ``None``; ``isatty()`` is False.
    """

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, f"{self.name} is closed")

    def isatty(self) -> bool:
        return False


def ensure_std_streams() -> None:
    """Give ``sys.stdout``/``sys.stderr`` a stand-in when the process started with them closed.

    stderr closed: diagnostics go nowhere, files are still written. stdout closed: printing
    the result fails with one line (on stderr) and exit 7, after the files are written.
    """
    if sys.stderr is None:
        try:
            sys.stderr = open(os.devnull, "w", encoding="utf-8")
        except OSError:
            sys.stderr = ClosedStream("stderr")
    if sys.stdout is None:
        sys.stdout = ClosedStream("stdout")


def is_terminal(stream: TextIO | None) -> bool:
    """``stream.isatty()``, False for a missing or closed stream."""
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False


def say(message: str) -> None:
    """One line on stderr; a stderr that cannot be written is not a failure of the run."""
    try:
        print(message, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def _quiet_stdout() -> None:
    """After stdout failed: point fd 1 at /dev/null so the interpreter's final flush of
    what is still buffered succeeds (no 'Exception ignored' and no exit 120)."""
    try:
        fd = sys.stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


# --------------------------------------------------------------------------- delivery
def deliver(show: Callable[[TextIO], object] | None, files: Iterable[tuple[str, Writer]]) -> bool:
    """Print with ``show(sys.stdout)``, then write each ``(path, writer)``.

    Returns True when everything was written. Every failure is one line on stderr. A reader
    that left the pipe (``| head``) is not a failure, and Ctrl-C while printing does not
    lose the files: they are still written, then ``BrokenPipeError``/``KeyboardInterrupt``
    goes on to ``cli.main`` as before.
    """
    ok = True
    pending: BaseException | None = None  # raised again once the files are written
    if show is not None:
        try:
            show(sys.stdout)
            sys.stdout.flush()
        except KeyboardInterrupt as exc:  # Ctrl-C while printing: the files still get written
            pending = exc
        except BrokenPipeError as exc:
            pending = exc
            _quiet_stdout()
        except SystemExit:
            # Rich's console answers a broken pipe itself: it points stdout at /dev/null and
            # raises SystemExit(1) from inside the rendering. The reader left (`| head -1`):
            # the files are still written, and it ends as any broken pipe does.
            pending = BrokenPipeError(errno.EPIPE, "the reader of stdout has gone")
            _quiet_stdout()
        except (OSError, ValueError) as exc:  # /dev/full, a closed stdout
            ok = False
            _quiet_stdout()
            say(f"gpudoctor: error: cannot write to stdout: {_reason(exc)}")
    for path, writer in files:
        try:
            writer(path)
        except OSError as exc:
            ok = False
            say(f"gpudoctor: error: cannot write {path}: {_reason(exc)}")
    if pending is not None:
        raise pending
    return ok


def write_stdout_line(line: str) -> None:
    """One line to stdout at once (watch, logs); a stdout that fails raises WriteFailedError."""
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        raise
    except (OSError, ValueError) as exc:
        _quiet_stdout()
        raise WriteFailedError(f"cannot write to stdout: {_reason(exc)}") from None


# --------------------------------------------------------------------------- progress
class Progress:
    """Progress on stderr: one status line rewritten in place on a terminal; elsewhere
    (logs, pipes) nothing, or one line per finished item when ``lines`` is set."""

    def __init__(self, enabled: bool = True, *, lines: bool = False) -> None:
        self.live = enabled and is_terminal(sys.stderr)
        self.lines = enabled and lines and not self.live

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()

    def start(self, label: str) -> None:
        if self.live:
            self._write(f"\r\033[K  {label} ...")

    def done(self, line: str | None = None) -> None:
        if self.lines and line:
            say(line)

    def clear(self) -> None:
        if self.live:
            self._write("\r\033[K")

    @staticmethod
    def _write(text: str) -> None:
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


# --------------------------------------------------------------------------- reports
def torchrun_rank() -> int | None:
    """This process's rank when started by torchrun with WORLD_SIZE > 1, else None."""
    world, rank = os.environ.get("WORLD_SIZE", ""), os.environ.get("RANK", "")
    if world.isdigit() and int(world) > 1 and rank.isdigit():
        return int(rank)
    return None


def emit_report(report: Report, args: argparse.Namespace, *, title: str = "gpudoctor report") -> int:
    """Hand a finished report over as asked (text or ``--json`` on stdout, ``-o`` file) and
    return the exit code.

    ``args`` needs ``json``, ``output``, ``anonymize``, ``verbose`` and ``fail_on``. Under
    torchrun every rank runs the checks; rank 0 alone prints and writes.
    """
    rank = torchrun_rank()
    if rank not in (None, 0):
        say(f"gpudoctor: rank {rank}: done ({report.status.value}); rank 0 writes the report")
        # Exit 0 unless this rank's own run broke: torchrun stops every rank as soon as one
        # exits non-zero, which could kill rank 0 before it has written the report.
        return exitcodes.PROBE_ERROR if report.status.value == "error" else exitcodes.OK
    anonymize = bool(args.anonymize)  # None (not given): off, except for markdown (--no-anonymize there)
    from gpudoctor.backends.catalogue import identifying_keys

    text = report.to_json(anonymize=identifying_keys() if anonymize else False) + "\n"

    def show(out: TextIO) -> None:
        if args.json:
            out.write(text)
            return
        from gpudoctor.console.render import render_text, report_to_markdown  # the text report's imports: not for --json

        if getattr(args, "format", "text") == "markdown":
            out.write(report_to_markdown(report, anonymize=args.anonymize is not False))
        else:
            render_text(report, out, verbose=args.verbose, anonymize=anonymize, title=title)

    files: Sequence[tuple[str, Writer]] = [(args.output, lambda p: fileio.write_text(p, text))] if args.output else []
    written = deliver(show, files)
    if report.interrupted:
        say(f"gpudoctor: {signals.stopped_word()}; finished results were kept"
            + (f" in {args.output}" if args.output and written else ""))
    if not written:
        return exitcodes.WRITE_FAILED
    if report.interrupted:
        return exitcodes.INTERRUPTED
    return exitcodes.for_status(report.status.value, args.fail_on)


__all__ = ["ClosedStream", "ensure_std_streams", "is_terminal", "say", "deliver", "write_stdout_line",
           "Progress", "torchrun_rank", "emit_report"]
