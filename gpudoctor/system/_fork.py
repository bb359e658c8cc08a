"""A function run in a fork of this process, its text answer read back through a pipe.

For work that should run beside the caller rather than before it, without starting another
Python: the CUDA driver's start (gpudoctor.backends.cuda_driver), and the TUI's first reading
and quick verdict (:class:`ForkedParts`: one child answers both, in turn).
Forking is safe only while the process has one thread (a lock held by another thread stays
held in the child): callers check :func:`one_thread` and do otherwise when it says no.

The child's stdin, stdout and stderr are /dev/null and it holds no other descriptor of the
parent's (a shell reading the parent's output must not wait for a child stuck in a driver);
it runs the function, writes its answer and leaves with ``os._exit``, never returning into
the caller's code. Linux and other POSIX systems only.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Iterator


def one_thread() -> bool:
    """Whether this process has a single thread, native threads included (Linux: /proc)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


class ForkedCall:
    """``work()`` in a forked child; :meth:`answer` waits for its text (once; then cached).

    ``limit_s``: seconds from the fork after which the child is killed and the answer is
    "Timeout" (None: no limit). ``max_bytes``: the most of its answer that is kept."""

    def __init__(self, work: Callable[[], str | bytes], limit_s: float | None = None, max_bytes: int = 1 << 20) -> None:
        self.began = time.monotonic()
        self.deadline = None if limit_s is None else self.began + limit_s
        self.max_bytes = max_bytes
        self._answer: tuple[bytes, str] | None = None
        self.pid, self.fd = _start(work, max_bytes)
        if not self.pid:
            self._answer = (b"", "ChildFailed")

    def answer(self) -> tuple[str, str]:
        """(text, why): why is "" when the child answered, "Timeout" when it did not within the
        limit (it is then killed), "ChildFailed" when it ended without an answer."""
        raw, why = self.answer_bytes()
        return raw.decode("utf-8", "replace"), why

    def answer_bytes(self) -> tuple[bytes, str]:
        """:meth:`answer` as the bytes the child wrote (work that returns bytes)."""
        if self._answer is None:
            raw, complete = _read_until(self.fd, self.deadline, self.max_bytes)
            os.close(self.fd)
            if not complete:
                self.cancel()
                self._answer = (b"", "Timeout")
            else:
                pid, self.pid = self.pid, 0
                code = _reap(pid) if pid else 1  # 0: cancelled meanwhile (never waitpid(0): any child)
                self._answer = (raw, "") if code == 0 else (b"", "ChildFailed")
        return self._answer

    def ready(self) -> bool:
        """Whether :meth:`answer` would not wait for the child's work: the child has written
        (or ended, or the answer is read already). It does not wait itself."""
        if self._answer is not None:
            return True
        import select

        return bool(select.select([self.fd], [], [], 0)[0])

    def cancel(self) -> None:
        """Kill the child if it still runs (nobody will read its answer)."""
        if self.pid:
            _kill(self.pid)
            self.pid = 0


class ForkedParts:
    """``work()``, a generator of bytes, in one forked child: each part it yields is written as
    soon as it is made, and :meth:`part` gives part ``i`` as an object with the methods of a
    :class:`ForkedCall` (``ready``, ``answer``, ``answer_bytes``, ``cancel``), each with its own
    limit in seconds from the fork (None: none). The parts may be read from different threads.
    A part that is not answered within its limit is "Timeout" and the child is killed (the
    parts after it are then "ChildFailed"); :meth:`cancel` of any part kills the child.
    ``count``: the parts the child makes; the last is answered once the child has ended (it is
    then reaped, as :class:`ForkedCall` reaps its child). ``max_bytes``: the most one part may
    hold (a longer one fails the parts from it on)."""

    _HEADER = 8  # each part: its length (8 bytes, big-endian), then its bytes

    def __init__(self, work: Callable[[], Iterator[bytes]], count: int, max_bytes: int = 1 << 20) -> None:
        import threading

        self.began = time.monotonic()
        self.count = count
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._buffer = b""
        self._parts: list[bytes] = []
        self.pid, self.fd = _start(lambda: _framed(work(), max_bytes), None)
        self._ended = not self.pid

    def part(self, index: int, limit_s: float | None = None) -> ForkedPart:
        return ForkedPart(self, index, None if limit_s is None else self.began + limit_s)

    def cancel(self) -> None:
        """Kill the child if it still runs; parts not read by now are "ChildFailed"."""
        with self._lock:
            self._end()

    def wait(self, index: int, deadline: float | None) -> tuple[bytes, str]:
        """Part ``index`` once it is there (why ""), or why it will not be."""
        import select

        while True:
            with self._lock:
                self._take_what_came()
                if self._answered(index):
                    return self._parts[index], ""
                if self._ended:
                    return b"", "ChildFailed"
                fd = self.fd
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                self.cancel()
                return b"", "Timeout"
            try:  # another thread may read what comes, or end the call: look again then
                select.select([fd], [], [], 0.5 if left is None else min(left, 0.5))
            except (OSError, ValueError):
                pass

    def has(self, index: int) -> bool:
        """Whether part ``index`` is there, or the child has ended (no waiting)."""
        with self._lock:
            self._take_what_came()
            return self._answered(index) or self._ended

    def _answered(self, index: int) -> bool:
        return len(self._parts) > index and (index < self.count - 1 or self._ended)

    def _take_what_came(self) -> None:
        """Read what the pipe holds now and split it into parts (the lock is held)."""
        import select

        while not self._ended and select.select([self.fd], [], [], 0)[0]:
            data = os.read(self.fd, 65536)
            if not data:  # the child has written all and is leaving (os._exit follows at once)
                pid, self.pid = self.pid, 0
                if pid:
                    _reap(pid)
                self._end()
                return
            self._buffer += data
            while len(self._buffer) >= self._HEADER:
                size = int.from_bytes(self._buffer[:self._HEADER], "big")
                if size > self.max_bytes:
                    self._end()
                    return
                if len(self._buffer) < self._HEADER + size:
                    break
                self._parts.append(self._buffer[self._HEADER:self._HEADER + size])
                self._buffer = self._buffer[self._HEADER + size:]

    def _end(self) -> None:
        """No more parts: close the pipe, kill the child if it still runs (the lock is held)."""
        if self._ended:
            return
        self._ended = True
        os.close(self.fd)
        pid, self.pid = self.pid, 0
        if pid:
            _kill(pid)


class ForkedPart:
    """Part ``index`` of a :class:`ForkedParts` call, read as a :class:`ForkedCall` is."""

    def __init__(self, call: ForkedParts, index: int, deadline: float | None) -> None:
        self.call, self.index, self.deadline = call, index, deadline

    def answer_bytes(self) -> tuple[bytes, str]:
        return self.call.wait(self.index, self.deadline)

    def answer(self) -> tuple[str, str]:
        raw, why = self.answer_bytes()
        return raw.decode("utf-8", "replace"), why

    def ready(self) -> bool:
        return self.call.has(self.index)

    def cancel(self) -> None:
        self.call.cancel()


def _kill(pid: int) -> None:
    """Kill the child and the whole tree it leads (what a driver or a library started in it)."""
    from gpudoctor.system import _proc

    _proc.kill_tree(pid)
    try:
        os.waitpid(pid, os.WNOHANG)  # a child stuck in a driver is reaped at our exit
    except OSError:
        pass


def _start(work: Callable[[], str | bytes | Iterator[bytes]], max_bytes: int | None) -> tuple[int, int]:
    """Fork a child that runs ``work`` (see :func:`_child`): (its pid, the pipe's read end), or
    (0, -1) when the fork failed."""
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return 0, -1
    if pid == 0:  # the child: never returns
        _child(work, read_end, write_end, max_bytes)
    os.close(write_end)
    return pid, read_end


def _framed(parts: Iterator[bytes], max_bytes: int) -> Iterator[bytes]:
    """Each part with its length before it; none from a part longer than ``max_bytes`` on."""
    for data in parts:
        if len(data) > max_bytes:
            return
        yield len(data).to_bytes(ForkedParts._HEADER, "big") + data


def _child(work: Callable[[], str | bytes | Iterator[bytes]], read_end: int, write_end: int,
           max_bytes: int | None) -> None:
    """Run ``work`` and write its answer (``max_bytes`` None: its parts, each as it comes)."""
    code = 1
    try:
        os.setpgid(0, 0)  # a group of its own: cancel() ends what it started with it
        os.close(read_end)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, write_end)  # nothing the parent had open stays held by a stuck child
        os.closerange(write_end + 1, 1 << 16)
        answer = work()
        if isinstance(answer, (str, bytes)):
            answer = iter([(answer.encode() if isinstance(answer, str) else answer)[:max_bytes]])
        for data in answer:
            while data:
                data = data[os.write(write_end, data):]
        code = 0
    finally:
        os._exit(code)


def _read_until(fd: int, deadline: float | None, max_bytes: int) -> tuple[bytes, bool]:
    """What the child writes until it closes the pipe (True), or what came before ``deadline``
    (False); at most ``max_bytes``."""
    import select

    chunks: list[bytes] = []
    size = 0
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return b"".join(chunks), False
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        data = os.read(fd, 65536)
        if not data:
            return b"".join(chunks), True
        if size < max_bytes:
            chunks.append(data)
            size += len(data)


def _reap(pid: int) -> int:
    """The exit code of a child that has closed its pipe (os._exit follows at once)."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return 1
    return os.waitstatus_to_exitcode(status)


__all__ = ["ForkedCall", "ForkedPart", "ForkedParts", "one_thread"]
