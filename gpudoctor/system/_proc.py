"""The child processes gpudoctor starts (probe runner, workload, ranks, ``report --python``):
their exit in words, their process groups and trees, their bounded output.

Standard library only, so every layer may use it. How to start a child so that it is ended
with its whole tree, quietly (docs/reliability.md):

- ``subprocess.Popen(argv, **_proc.NEW_GROUP)`` inside ``with _proc.starting():`` followed by
  ``_proc.track(proc.pid)``; end it with ``_proc.stop_popen(proc)`` (SIGTERM to its group
  and descendants, SIGKILL after the grace, reaped, untracked);
- a ``multiprocessing`` child calls ``_proc.own_group()`` first; its parent tracks
  ``process.pid`` inside ``starting()`` and ends it with ``_proc.end_tree(pid)``;
- a command whose output is read: ``_proc.run_bounded(argv, timeout_s=..., max_output=...)``.

What is still tracked at exit is ended by an exit hook, after a start in flight has finished.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    import subprocess


def describe_exit(code: int | None) -> str:
    """A process exit status in words: 'exited with code 3', 'killed by SIGABRT'."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def silence_stdio() -> None:
    """Point this process's stdout and stderr (fds 1 and 2) at /dev/null.

    For children whose parent owns the terminal (the TUI): library warnings printed by
    the child would draw over its screen. Results travel over pipes, not stdio.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)
    except OSError:
        pass


# --------------------------------------------------------------------------- process trees
# Every child gpudoctor starts leads a process group of its own (``NEW_GROUP`` for
# ``subprocess.Popen``; :func:`own_group` first thing in a ``multiprocessing`` child), is
# registered while it runs (:func:`track`, or :func:`starting` around a start whose pid is known
# only after), and is ended with its whole tree (:func:`end_tree`): the group and every
# descendant found in /proc, SIGTERM, then SIGKILL after a grace. At exit, whatever is still
# registered is ended, after any start in flight has finished: a child half started when the
# parent quits would otherwise print "EOFError: Ran out of input" over the user's terminal.

class _NewGroup(TypedDict):
    start_new_session: bool


#: Keyword arguments for ``subprocess.Popen``: the child leads a new session and process group.
NEW_GROUP: _NewGroup = {"start_new_session": True}

_registry_lock = threading.RLock()   # held while a child starts, and while the exit ends them
_tracked: dict[int, float] = {}      # pid -> grace in seconds
_exit_hook_installed = False


def own_group() -> None:
    """In a child: lead a process group of its own, so that its tree can be ended as one."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process in /proc (Linux); empty elsewhere."""
    found: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read(1024)
        except OSError:
            continue
        # the command name (field 2) may hold spaces and parentheses: fields follow the last ')'
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2:
            found[int(name)] = int(fields[1])
    return found


def _group_members(pgid: int) -> list[int]:
    members = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if name.isdigit():
            try:
                if os.getpgid(int(name)) == pgid:
                    members.append(int(name))
            except OSError:
                continue
    return members


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, grandchildren...), from /proc."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        if p not in found:
            found.append(p)
            todo.extend(children.get(p, []))
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie, ended and waiting for its parent, is not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read(1024)
        return stat[stat.rfind(b")") + 2:][:1] != b"Z"
    except OSError:
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True


def _signal_all(pids: list[int], group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)  # the group the child leads (none yet: nothing happens)
    except (ProcessLookupError, PermissionError, OSError):
        pass
    for p in pids:
        try:
            os.kill(p, signum)
        except (ProcessLookupError, PermissionError):
            pass


def alive(pid: int) -> bool:
    """Running: not ended, not a zombie (public name of the check :func:`end_tree` uses)."""
    return _alive(pid)


def become_subreaper() -> bool:
    """Linux: make this process the subreaper of its descendants (PR_SET_CHILD_SUBREAPER), so that
    what a child leaves behind when it ends is re-parented here, not to PID 1, and is still found
    by :func:`descendants`. False where it cannot be set."""
    if not os.path.isdir("/proc"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def tree(pid: int, leader: bool = True) -> list[int]:
    """``pid``, its descendants and the members of the group it leads. With ``leader`` false
    (a child already reaped, whose pid may since name another process), the group's members
    only: what it left behind."""
    members = [pid] + descendants(pid) if leader else []
    return members + [p for p in _group_members(pid) if p not in members and (leader or p != pid)]


def end_tree(pid: int, grace_s: float = 5.0, *, leader: bool = True) -> list[int]:
    """End ``pid`` and its whole tree, quietly: SIGTERM to all, SIGKILL to what is left after
    ``grace_s``. Returns the pids that were still running at the end (none, normally). The
    caller still reaps its own direct child (``Popen.wait``, ``Process.join``). ``leader``
    false: the child itself was reaped already; only the group it led is ended."""
    import time

    me = os.getpid()
    members = [p for p in tree(pid, leader) if p != me]
    _signal_all(members, pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        members = [p for p in members + (descendants(pid) if leader else []) if p != me and _alive(p)]
        if not members:
            return []
        time.sleep(0.02)
    members = [p for p in set(members + tree(pid, leader)) if p != me]
    _signal_all(members, pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(_alive(p) for p in members):
        time.sleep(0.02)
    return [p for p in members if _alive(p)]


def kill_tree(pid: int) -> None:
    """SIGKILL to ``pid``, its descendants and the group it leads, at once, without waiting (a
    child stuck in a driver may take its time to go; its parent reaps it later)."""
    me = os.getpid()
    _signal_all([p for p in tree(pid) if p != me], pid, signal.SIGKILL)


def track(pid: int, grace_s: float = 2.0) -> None:
    """Register a running child: ended with its tree at exit unless :func:`untrack` first."""
    global _exit_hook_installed
    with _registry_lock:
        _tracked[pid] = grace_s
        if not _exit_hook_installed:
            import atexit

            atexit.register(end_all)
            _exit_hook_installed = True


def untrack(pid: int) -> None:
    with _registry_lock:
        _tracked.pop(pid, None)


def starting() -> threading.RLock:
    """Hold this around starting a child and :func:`track`-ing it: the exit's :func:`end_all`
    waits for a start in flight (a daemon thread's) to finish before it ends the children."""
    return _registry_lock


def end_all() -> None:
    """End every registered child's tree (at exit); waits at most 10 s for a start in flight."""
    got = _registry_lock.acquire(timeout=10.0)
    try:
        parents = _parents()
        for pid, grace in list(_tracked.items()):
            # still our child (running, or ended and not reaped): its pid is its own; otherwise
            # only the group it led is ended (a reaped pid may name another process by now)
            end_tree(pid, grace, leader=parents.get(pid) == os.getpid())
            _tracked.pop(pid, None)
    finally:
        if got:
            _registry_lock.release()


def stop_popen(proc: subprocess.Popen[bytes] | subprocess.Popen[str] | None, grace_s: float = 10.0) -> None:
    """Stop a ``subprocess.Popen`` child and its whole tree (:func:`end_tree`), and reap it.
    Nothing to do for None or a child that has already ended with no tree left."""
    import subprocess

    if proc is None:
        return
    end_tree(proc.pid, grace_s, leader=proc.poll() is None)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    untrack(proc.pid)


# --------------------------------------------------------------------------- bounded output
class ChildTimeout(Exception):
    """A child that did not finish in time (its tree was ended)."""


class ChildOutputTooLarge(Exception):
    """A child that printed more than it was allowed to (its tree was ended)."""


def run_bounded(argv: list[str], *, timeout_s: float, max_output: int, env: dict[str, str] | None = None,
                text: bool = False, cwd: str | os.PathLike[str] | None = None) -> tuple[int, bytes, bytes]:
    """Run ``argv`` (in ``cwd``, when given) in a group of its own with stdin closed: (exit status, stdout, stderr), each
    stream kept up to ``max_output`` bytes. A child that prints more is ended with its tree
    (:class:`ChildOutputTooLarge`), one that runs past ``timeout_s`` too (:class:`ChildTimeout`):
    neither its time nor its output is unbounded. OSError when it cannot start."""
    import selectors
    import subprocess
    import time

    with starting():
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, cwd=cwd, **NEW_GROUP)
        track(proc.pid)
    kept: dict[int, list[bytes]] = {1: [], 2: []}
    sizes = {1: 0, 2: 0}
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        assert proc.stdout is not None and proc.stderr is not None
        sel.register(proc.stdout, selectors.EVENT_READ, 1)
        sel.register(proc.stderr, selectors.EVENT_READ, 2)
        try:
            ended_at = None
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChildTimeout(f"did not finish within {timeout_s:.0f} s")
                if ended_at is None and proc.poll() is not None:
                    ended_at = time.monotonic()
                # the child ended, but what it left running holds the pipes: read what is there
                if ended_at is not None and time.monotonic() - ended_at > 0.2:
                    break
                for key, _ in sel.select(min(left, 0.1 if ended_at is not None else 1.0)):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    sizes[key.data] += len(chunk)
                    if sizes[key.data] > max_output:
                        raise ChildOutputTooLarge(f"printed more than {max_output} bytes")
                    kept[key.data].append(chunk)
            code = proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stop_popen(proc, 1.0)
            raise ChildTimeout(f"did not finish within {timeout_s:.0f} s") from None
        except BaseException:
            stop_popen(proc, 1.0)
            raise
        finally:
            proc.stdout.close()
            proc.stderr.close()
    stop_popen(proc, 1.0)  # a tree it left behind (a daemon it started) ends with it
    return code, b"".join(kept[1]), b"".join(kept[2])
