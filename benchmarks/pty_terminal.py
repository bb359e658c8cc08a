"""A program on a pseudo-terminal of a fixed size, its output read as fast as it comes, as a
terminal would read it: what the TUI's CPU benchmark (benchmarks/tui_cpu.py) measures on and what
the TUI's terminal tests (tests/support/tui_support.py, PtyApp) drive. POSIX only."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
from pathlib import Path
from typing import Callable


def start_on_pty(argv: list[str], *, cols: int, rows: int, cwd: str | Path,
                 env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """``argv`` in a session of its own on a new pseudo-terminal of ``cols`` x ``rows`` (TERM
    xterm-256color, COLUMNS and LINES on top of ``env``, else this environment): the process and
    the terminal's master end, which the caller reads and closes."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {**(os.environ if env is None else env), "TERM": "xterm-256color", "COLUMNS": str(cols),
           "LINES": str(rows)}
    try:
        proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env,
                                start_new_session=True)
    finally:
        os.close(slave)
    return proc, master


def read_until_closed(master: int, sink: Callable[[bytes], None]) -> None:
    """Hand each chunk the program writes to ``sink`` until the terminal closes (run it in a thread)."""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            return
        if not data:
            return
        sink(data)


def end(proc: subprocess.Popen[bytes], master: int) -> None:
    """Kill the program if it still runs, and close the terminal."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)
    try:
        os.close(master)
    except OSError:
        pass
