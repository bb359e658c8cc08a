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
from typing import Any

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

    class QuietLinuxDriver(LinuxDriver):  # type: ignore[misc, valid-type]
        """Textual's Linux driver, whose input thread sleeps until there is input."""

        def __init__(self, *args: Any, **kw: Any) -> None:
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
            fileno, wake = self.fileno, self._wake_r
            parser = XTermParser(self._debug)
            decode = getincrementaldecoder("utf-8")().decode
            selector = selectors.SelectSelector()
            selector.register(fileno, selectors.EVENT_READ)
            selector.register(wake, selectors.EVENT_READ)
            last_input = float("-inf")

            def read_input(final: bool = False) -> bool:
                """Read and dispatch what the terminal has; False at its end."""
                nonlocal last_input
                raw = os.read(fileno, 4096)
                data = decode(raw, final=final or not raw)
                if data:
                    last_input = time.monotonic()
                    for message in parser.feed(data):
                        self.process_message(message)
                return bool(raw)

            try:
                reading = True
                while not self.exit_event.is_set():
                    ticking = time.monotonic() - last_input < TICK_FOR_S
                    for key, _mask in selector.select(TICK_S if ticking else None):
                        if key.fd == wake:
                            _drain(wake)
                        elif reading:
                            try:
                                reading = read_input()
                            except OSError:
                                reading = False
                            if not reading:  # the terminal is gone: wait for the stop alone
                                selector.unregister(fileno)
                    for message in parser.tick():
                        self.process_message(message)
                if reading:  # what was typed before the stop
                    for key, _mask in selector.select(0):
                        if key.fd == fileno:
                            try:
                                read_input(final=True)
                            except OSError:
                                pass
            finally:
                selector.close()
                try:
                    for _message in parser.feed(""):
                        pass
                except Exception:  # the parser's end-of-input on a half-read sequence
                    pass

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
