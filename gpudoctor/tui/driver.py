"""The terminal driver of the TUI on Linux and macOS: Textual's, with an input thread that
sleeps until there is input.

Textual's own input thread wakes ten times a second to see whether it should stop, which is
about a sixth of what the TUI costs at a 1 s refresh on an idle screen. Here the thread waits
on the terminal and on a pipe that is written when Textual asks it to stop, so it wakes only
for a key, a mouse event or that request. For a second after any input it also wakes every
0.1 s, as Textual's does, so that a lone Escape (told apart from the start of an escape
sequence by a timeout) still arrives.

Where this Textual's driver is not the one this was written for (its input thread's stop
event, its parser or their methods differ), the TUI uses Textual's input thread unchanged.
"""

from __future__ import annotations

import functools
import inspect
import os
import selectors
import threading
import time
from codecs import getincrementaldecoder
from typing import Any, Callable, Iterable, Protocol

#: How long after the last input the thread keeps waking every ``TICK_S`` for the parser's
#: timeouts (a lone Escape is reported 0.1 s after it came).
TICK_FOR_S = 1.0
TICK_S = 0.1


class _WakingEvent(threading.Event):
    """A stop event that also wakes the input thread out of its wait."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        if self._wake_fd < 0:  # the driver is closed: nothing waits any more
            return
        try:
            os.write(self._wake_fd, b"\0")
        except OSError:  # full (the thread is about to drain it) or gone
            pass

    def detach(self) -> None:
        """Stop writing to the pipe (before it is closed and its number reused)."""
        self._wake_fd = -1


class _Parser(Protocol):
    """What the loop needs of Textual's XTermParser."""

    def feed(self, data: str) -> Iterable[object]: ...

    def tick(self) -> Iterable[object]: ...


class _InputLoop:
    """The input thread's loop: waits on the terminal and on the wake pipe, feeds what the
    terminal sends to the parser and hands the parser's messages on, until ``stop`` is set."""

    def __init__(self, fileno: int, wake: int, parser: _Parser, dispatch: Callable[[object], None],
                 stop: threading.Event) -> None:
        self.fileno, self.wake, self.parser, self.dispatch, self.stop = fileno, wake, parser, dispatch, stop
        self.decode = getincrementaldecoder("utf-8")().decode
        self.last_input = float("-inf")

    def read_input(self, final: bool = False) -> bool:
        """Read and dispatch what the terminal has; False at its end."""
        raw = os.read(self.fileno, 4096)
        data = self.decode(raw, final=final or not raw)
        if data:
            self.last_input = time.monotonic()
            for message in self.parser.feed(data):
                self.dispatch(message)
        return bool(raw)

    def run(self) -> None:
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(self.wake, selectors.EVENT_READ)
        try:
            reading = True
            while not self.stop.is_set():
                ticking = time.monotonic() - self.last_input < TICK_FOR_S
                for key, _mask in selector.select(TICK_S if ticking else None):
                    if key.fd == self.wake:
                        _drain(self.wake)
                    elif reading:
                        try:
                            reading = self.read_input()
                        except OSError:
                            reading = False
                        if not reading:  # the terminal is gone: wait for the stop alone
                            selector.unregister(self.fileno)
                for message in self.parser.tick():
                    self.dispatch(message)
            if reading:  # what was typed before the stop
                self._read_rest(selector)
        finally:
            selector.close()
            try:
                for _message in self.parser.feed(""):
                    pass
            except Exception:  # the parser's end-of-input on a half-read sequence
                pass

    def _read_rest(self, selector: selectors.BaseSelector) -> None:
        for key, _mask in selector.select(0):
            if key.fd == self.fileno:
                try:
                    self.read_input(final=True)
                except OSError:
                    pass


@functools.lru_cache(maxsize=1)
def driver_class() -> Any:
    """The driver class for this platform and Textual, or None to leave Textual's choice."""
    try:
        from textual._xterm_parser import XTermParser
        from textual.drivers.linux_driver import LinuxDriver
    except ImportError:
        return None
    if not all(hasattr(LinuxDriver, name) for name in ("run_input_thread", "process_message", "close")) \
            or not all(hasattr(XTermParser, name) for name in ("feed", "tick")):
        return None
    try:
        parameters = list(inspect.signature(XTermParser).parameters)
    except (TypeError, ValueError):
        return None
    if parameters != ["debug"]:  # the parser this was written for takes only `debug`
        return None

    class QuietLinuxDriver(LinuxDriver):
        """Textual's Linux driver, whose input thread sleeps until there is input."""

        def __init__(self, *args: object, **kw: object) -> None:  # handed on to Textual's driver unchanged
            super().__init__(*args, **kw)
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
            # Textual's thread stops when its `exit_event` is set; without one, keep Textual's thread.
            self._quiet = isinstance(getattr(self, "exit_event", None), threading.Event)
            if self._quiet:
                self.exit_event = _WakingEvent(self._wake_w)

        def run_input_thread(self) -> None:
            if not self._quiet:
                return super().run_input_thread()
            _InputLoop(self.fileno, self._wake_r, XTermParser(self._debug), self.process_message,
                       self.exit_event).run()

        def close(self) -> None:
            super().close()
            if self._quiet:
                self.exit_event.detach()
            for fd in (self._wake_r, self._wake_w):
                try:
                    os.close(fd)
                except OSError:
                    pass

    return QuietLinuxDriver


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except (BlockingIOError, OSError):
        pass


__all__ = ["driver_class", "TICK_FOR_S", "TICK_S"]
