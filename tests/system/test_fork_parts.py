"""gpudoctor.system._fork.ForkedParts: one forked child answering in parts, each read as it comes (the
TUI's first reading, then its quick verdict: gpudoctor.tui.early)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from gpudoctor.system._fork import ForkedParts

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks: Linux only")

WAIT_S = 60.0  # generous: the child waits for the test, never for a guessed time


def _wait_for(path: Path) -> None:
    end = time.monotonic() + WAIT_S
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.01)


def test_each_part_is_read_as_soon_as_the_child_has_made_it(tmp_path):
    go = tmp_path / "go"

    def work():
        yield b"first"
        _wait_for(go)  # the second part is not made until the first was read
        yield b"second" * 1000

    call = ForkedParts(work, count=2)
    first, second = call.part(0, limit_s=WAIT_S), call.part(1)
    assert first.answer_bytes() == (b"first", "")
    assert first.ready() and not second.ready()
    go.touch()
    assert second.answer() == ("second" * 1000, "")
    assert first.answer_bytes() == (b"first", "")  # read again: kept


def test_parts_read_from_two_threads_each_get_their_own(tmp_path):
    go = tmp_path / "go"

    def work():
        yield b"reading"
        _wait_for(go)
        yield b"report"

    call = ForkedParts(work, count=2)
    got: dict[int, tuple[bytes, str]] = {}
    reader = threading.Thread(target=lambda: got.update({1: call.part(1).answer_bytes()}))
    reader.start()  # waits for the second part while this thread reads the first
    got[0] = call.part(0, limit_s=WAIT_S).answer_bytes()
    go.touch()
    reader.join(WAIT_S)
    assert got == {0: (b"reading", ""), 1: (b"report", "")}


def test_a_part_not_made_within_its_limit_is_a_timeout_and_the_child_is_killed(tmp_path):
    def work():
        _wait_for(tmp_path / "never")
        yield b"too late"

    call = ForkedParts(work, count=2)
    pid = call.pid
    assert call.part(0, limit_s=0.2).answer_bytes() == (b"", "Timeout")
    assert call.part(1).answer_bytes() == (b"", "ChildFailed")
    end = time.monotonic() + WAIT_S
    while time.monotonic() < end:  # killed: reaped here at once or as a zombie at our exit
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                break
        except ChildProcessError:
            break
        time.sleep(0.01)
    else:
        pytest.fail("the child still runs")


def test_a_child_that_fails_after_its_first_part_keeps_that_part():
    def work():
        yield b"made"
        raise RuntimeError("the second part fails")

    call = ForkedParts(work, count=2)
    assert call.part(0).answer_bytes() == (b"made", "")
    assert call.part(1).answer_bytes() == (b"", "ChildFailed")
    assert call.part(1).ready()


def test_a_part_over_the_limit_in_bytes_fails_from_there_on():
    def work():
        yield b"small"
        yield b"x" * 100
        yield b"after"

    call = ForkedParts(work, count=3, max_bytes=10)
    assert [call.part(i).answer_bytes() for i in range(3)] == [(b"small", ""), (b"", "ChildFailed"), (b"", "ChildFailed")]


def test_cancel_ends_the_child_and_its_unread_parts(tmp_path):
    def work():
        yield b"one"
        _wait_for(tmp_path / "never")
        yield b"two"

    call = ForkedParts(work, count=2)
    assert call.part(0).answer_bytes() == (b"one", "")
    call.part(1).cancel()
    assert call.part(1).answer_bytes() == (b"", "ChildFailed") and call.pid == 0


def test_the_last_part_is_answered_once_the_child_has_ended_and_is_reaped(tmp_path):
    def work():
        yield b"one"
        yield b"two"

    call = ForkedParts(work, count=2)
    pid = call.pid
    assert call.part(1).answer_bytes() == (b"two", "") and call.part(0).answer_bytes() == (b"one", "")
    with pytest.raises(ChildProcessError):  # reaped: no zombie left for the caller's lifetime
        os.waitpid(pid, os.WNOHANG)
