"""py-spy's raw (collapsed-stack) output, parsed into bounded records. Pure: no I/O.

``py-spy record --format raw --threads --subprocesses --full-filenames`` writes one line per
distinct stack::

    process 41:"python train.py";process 57:"python train.py";thread (58): MainThread;<module> (/w/train.py:12);Queue.get (/usr/lib/python3.11/multiprocessing/queues.py:122) 93

the chain of processes from the one attached to the one sampled, the thread (native id and
name), the frames outermost first as ``function (file:line)``, and the number of samples.
The text comes from another process: every field is bounded and kept as plain data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Iterator

MAX_LINES = 50_000          # distinct stacks read from one recording
MAX_LINE_CHARS = 200_000    # one stack line
MAX_FRAMES = 400            # frames kept per stack (the innermost ones)
MAX_NAME_CHARS = 300        # a function, file or thread name
MAX_CMDLINE_CHARS = 500

_PROCESS_RE = re.compile(r'process ([0-9]{1,10}):"((?:[^"\\]|\\.)*)"(?:;|$)')
_THREAD_RE = re.compile(r"thread \((0x[0-9a-fA-F]{1,16}|[0-9]{1,20})\)(?::\s?([^;]*))?(?:;|$)")
_FRAME_RE = re.compile(r"^(.*) \((.*?)(?::([0-9]+))?\)$")


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int | None

    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file


@dataclass(frozen=True)
class CallStack:
    """One distinct stack and how many samples showed it."""

    pids: tuple[int, ...]        # the attached process first, the sampled one last
    cmdline: str                 # the sampled process's command line
    tid: int | None
    thread: str                  # the thread's name ("MainThread"), "" when unknown
    frames: tuple[Frame, ...]    # outermost first
    count: int

    @property
    def pid(self) -> int:
        return self.pids[-1]

    @property
    def is_main_thread(self) -> bool:
        return self.thread == "MainThread" or (self.tid is not None and self.tid == self.pid)


def _clip(text: str, limit: int = MAX_NAME_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_frame(text: str) -> Frame:
    match = _FRAME_RE.match(text)
    if not match:
        return Frame(_clip(text), "", None)
    line = match.group(3)
    return Frame(_clip(match.group(1)), _clip(match.group(2), 1000), int(line) if line and len(line) < 10 else None)


def parse_line(line: str) -> CallStack | None:
    """One raw line as a :class:`CallStack`; None for a line that is not a stack."""
    line = line.rstrip("\n")
    if len(line) > MAX_LINE_CHARS:
        return None
    body, _, count_text = line.rpartition(" ")
    if not body or not (count_text.isascii() and count_text.isdigit()) or len(count_text) > 12:
        return None
    pids: list[int] = []
    cmdline = ""
    pos = 0
    while True:
        match = _PROCESS_RE.match(body, pos)
        if not match:
            break
        pids.append(int(match.group(1)))
        cmdline = match.group(2)
        pos = match.end()
    tid, thread = None, ""
    match = _THREAD_RE.match(body, pos)
    if match:
        raw = match.group(1)
        tid = int(raw, 16) if raw.startswith("0x") else int(raw)
        thread = (match.group(2) or "").strip()
        pos = match.end()
    rest = body[pos:]
    frames = tuple(parse_frame(part) for part in rest.split(";")[-MAX_FRAMES:]) if rest else ()
    return CallStack(pids=tuple(pids) or (0,), cmdline=_clip(cmdline, MAX_CMDLINE_CHARS), tid=tid,
                 thread=_clip(thread), frames=frames, count=int(count_text))


_RECORD_END_RE = re.compile(r"(?<= )(\d+)\n(?=process \d+:\"|thread \(|$)")


def split_records(text: str) -> list[str]:
    """The raw output's records: one per stack, even when a command line holds newlines
    (``python -c "..."``), which become the visible mark ␊."""
    records, start = [], 0
    for match in _RECORD_END_RE.finditer(text):
        records.append(text[start:match.end(1)].replace("\n", "\u240a"))
        start = match.end()
        if len(records) >= MAX_LINES:
            return records
    tail = text[start:].strip("\n")
    if tail:
        records.append(tail.replace("\n", "\u240a"))
    return records


def parse_raw(text: str | Iterable[str]) -> Iterator[CallStack]:
    """Every stack in py-spy's raw output (at most :data:`MAX_LINES`)."""
    records = split_records(text if isinstance(text, str) else "".join(text))
    for record in records[:MAX_LINES]:
        stack = parse_line(record)
        if stack is not None and stack.count > 0:
            yield stack


__all__ = ["Frame", "CallStack", "parse_frame", "parse_line", "parse_raw", "split_records", "MAX_LINES", "MAX_FRAMES"]
