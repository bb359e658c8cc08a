"""Argument types every command shares (one bounded number, one output path) and the options several share.

argparse calls a type with the text the user typed; an ``argparse.ArgumentTypeError``
becomes ``gpudoctor CMD: error: argument --x: MESSAGE`` and exit 2 (cli._Parser).
"""

from __future__ import annotations

import argparse
import math
import os
from typing import TYPE_CHECKING, Any, Callable, Union

from gpudoctor.core._text import plain_text
from gpudoctor.core.errors import UsageError

if TYPE_CHECKING:
    from gpudoctor.backends.base import GpuBackend

    #: What ``register(subparsers)`` is given: the action that holds gpudoctor's commands. Its
    #: parsers are of the CLI's own ArgumentParser subclass (cli._Parser), which a command need not know.
    Subcommands = argparse._SubParsersAction[Any]

Number = Union[int, float]


def bounded(kind: type = float, *, minimum: Number | None = None, maximum: Number | None = None,
            above: Number | None = None, what: str = "a number", unit: str = "",
            below_message: str | None = None) -> Callable[[str], Number]:
    """An argparse type: an ``int`` or a finite ``float`` within bounds.

    ``minimum``/``maximum`` are inclusive, ``above`` is an exclusive lower bound; ``unit``
    is appended to the bounds in messages (" s"). NaN, ±inf and overflowing literals
    (``1e309`` reads as inf) are refused with a one-line message, so no interval, count or
    time limit is NaN or infinite downstream. ``below_message`` (a format string with
    ``{text}``) replaces the message for a value under the lower bound.
    """
    if kind not in (int, float):
        raise TypeError("kind must be int or float")

    def parse(text: str) -> Number:
        raw = text.strip()
        try:
            value: Number = int(raw, 10) if kind is int else float(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if isinstance(value, float) and math.isinf(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        # Comparisons written so that NaN fails them (NaN compares false with everything).
        if above is not None and not value > above:
            raise argparse.ArgumentTypeError(
                below_message.format(text=text) if below_message else f"must be > {above:g}{unit}, got {text}")
        if minimum is not None and not value >= minimum:
            raise argparse.ArgumentTypeError(
                below_message.format(text=text) if below_message else f"must be at least {minimum:g}{unit}, got {text}")
        if maximum is not None and not value <= maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:g}{unit}, got {text}")
        if isinstance(value, float) and math.isnan(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        return value

    parse.__name__ = what.replace(" ", "_")  # argparse names the type in some messages
    return parse


# Upper bounds keep every duration a valid argument of time.sleep / Event.wait / timers
# (1e309 overflows; threading.TIMEOUT_MAX is about 9.2e9 s on Linux) and far past any use.
MAX_SECONDS = 10 * 365 * 24 * 3600.0  # ten years

seconds = bounded(float, above=0, maximum=MAX_SECONDS, what="a number of seconds", unit=" s")
seconds_or_zero = bounded(float, minimum=0, maximum=MAX_SECONDS, what="a number of seconds", unit=" s")

# The refresh interval of the TUI and watch. Also gpudoctor.tui.app.MIN_INTERVAL_S: kept
# here so that parsing needs no textual.
MIN_INTERVAL_S = 0.25
refresh_interval = bounded(float, minimum=MIN_INTERVAL_S, maximum=MAX_SECONDS, what="a number of seconds",
                           unit=" s")


def output_path(text: str) -> str:
    """An argparse type for ``-o FILE`` and friends: a non-empty path."""
    if not text.strip():
        raise argparse.ArgumentTypeError("give a file name (got an empty one)")
    return text


#: The largest process ID Linux can give (pid_max is at most 2**22; a pid_t holds 2**31 - 1).
MAX_PID = 2 ** 31 - 1


def process_id(text: str) -> int:
    """A process ID as typed: ASCII digits, 1..MAX_PID (``²`` is a digit to ``str.isdigit``, not
    to ``int``; ``2147483648`` does not fit a pid_t); else :class:`UsageError`."""
    raw = text.strip()
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 10 or not 0 < int(raw) <= MAX_PID:
        raise UsageError(f"not a process ID: {plain_text(raw, limit=40)} (expected 1 to {MAX_PID})")
    return int(raw)


def listen_host(text: str) -> str:
    """An argparse type for ``--host``: an address or a host name that can be looked up
    (labels of 1 to 63 characters, 253 in all, as IDNA allows), not a resolver's traceback."""
    raw = text.strip()
    if not raw or len(raw) > 253:
        raise argparse.ArgumentTypeError(f"not a host name or address: {plain_text(raw, limit=40)!r}")
    try:
        raw.encode("idna")
    except UnicodeError:
        if ":" not in raw:  # IPv6 addresses are not IDNA names
            raise argparse.ArgumentTypeError(
                f"not a host name or address: {plain_text(raw, limit=40)!r} (each dot-separated part "
                "must be 1 to 63 characters)") from None
    return raw


def add_command(subparsers: Subcommands, name: str, run: Callable[[argparse.Namespace], int], *, help: str,
                description: str, usage: str | None = None) -> argparse.ArgumentParser:
    """The parser of command ``name``; ``run(args)`` is called with what it parsed and returns the
    exit code (:mod:`gpudoctor.core.exitcodes`)."""
    parser = subparsers.add_parser(name, help=help, description=description, usage=usage)
    parser.set_defaults(handler=run)
    return parser


def add_json(parser: argparse.ArgumentParser, help: str) -> None:
    """``--json``: the command's result as JSON on stdout; ``help`` says which document."""
    parser.add_argument("--json", action="store_true", help=help)


def add_output(parser: argparse.ArgumentParser, help: str, *, required: bool = False) -> None:
    """``-o/--output FILE``: a file the command writes, refused at once when it never could be."""
    parser.add_argument("-o", "--output", type=output_path, metavar="FILE", required=required, help=help)


def add_json_document(parser: argparse.ArgumentParser, json_help: str, output_help: str) -> None:
    """``--json`` and ``-o/--output FILE`` together: a command whose result is one JSON document,
    printed, written to a file, or both."""
    add_json(parser, json_help)
    add_output(parser, output_help)


def add_replay(parser: argparse.ArgumentParser, help: str) -> None:
    """``--replay FILE``: read a recording made by ``gpudoctor record`` instead of live NVML."""
    parser.add_argument("--replay", metavar="FILE", help=help)


def add_refresh_interval(parser: argparse.ArgumentParser) -> None:
    """``-i/--interval``: how often a live view reads the GPUs (the TUI, watch)."""
    parser.add_argument("-i", "--interval", type=refresh_interval, default=1.0, metavar="SECONDS",
                        help="seconds between readings (default 1, minimum 0.25)")


def add_fail_on(parser: argparse.ArgumentParser) -> None:
    """``--fail-on warn|fail``: the lowest status that gives a non-zero exit (``exitcodes.for_status``),
    one option for every command that judges a report."""
    parser.add_argument("--fail-on", choices=("warn", "fail"), default="warn",
                        help="lowest status that gives a non-zero exit (default: warn)")


def check_writable(path: str | None, option: str | None = None) -> None:
    """Refuse, before a run, an output path that can never be written (UsageError, exit 2).

    Whether the write then works (disk full, device, permissions on the file) is known only
    when writing: see :mod:`gpudoctor.commands.output`.
    """
    if path is None:
        return
    label = f"{option} {path}" if option else f"cannot write {path}"
    if not path.strip():
        raise UsageError(f"{option or 'output'}: give a file name (got an empty one)")
    try:
        directory = os.path.dirname(os.path.abspath(path))
    except OSError:  # a relative path in a working directory that was removed
        raise UsageError(f"{label}: the working directory no longer exists; give an absolute path") from None
    if not os.path.isdir(directory):
        raise UsageError(f"{label}: directory {directory} does not exist")
    if os.path.isdir(path):
        raise UsageError(f"{label}: it is a directory")
    if os.path.exists(path) and not os.path.isfile(path):
        return  # a device, a FIFO, a terminal: written directly, the directory does not matter
    if not os.access(directory, os.W_OK):
        raise UsageError(f"{label}: directory {directory} is not writable")


def check_recording(path: str | None) -> None:
    """Refuse, before a run, a ``--replay FILE`` that is not a readable recording (UsageError,
    exit 2, the loader's one-line reason)."""
    if path is None:
        return
    from gpudoctor.backends import RecordingError, load_recording

    try:
        load_recording(path)
    except RecordingError as exc:
        raise UsageError(str(exc)) from None


def open_backend(replay: str | None, *, loop: bool = False) -> GpuBackend:
    """Live NVML, or the recording ``--replay`` names; one that cannot be read is a UsageError
    (exit 2, the loader's one-line reason)."""
    from gpudoctor.backends import RecordingError, open_gpu_backend

    try:
        return open_gpu_backend(replay, loop=loop)
    except RecordingError as exc:
        raise UsageError(str(exc)) from None


__all__ = ["bounded", "seconds", "seconds_or_zero", "MAX_SECONDS", "MIN_INTERVAL_S", "refresh_interval", "output_path",
           "check_writable", "check_recording", "open_backend", "add_command", "add_json", "add_output",
           "add_json_document", "add_replay", "add_refresh_interval", "add_fail_on", "process_id", "listen_host", "MAX_PID"]
