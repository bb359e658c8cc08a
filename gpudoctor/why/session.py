"""Sampling one process tree: py-spy for the stacks, psutil and NVML beside it (the I/O half
of ``gpudoctor why``; the rules and the verdict are pure, in rules.py and analysis.py)."""

from __future__ import annotations

import ast
import dataclasses
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import psutil

import gpudoctor
from gpudoctor.system import _published, fileio
from gpudoctor.core._text import plain_text
from gpudoctor.why import analysis, flightrec, pyspy, rules
from gpudoctor.why.readings import Readings, process_exists
from gpudoctor.why.stacks import CallStack, parse_raw

if TYPE_CHECKING:
    from gpudoctor.backends.base import GpuBackend

POLL_S = 0.5
MAX_SOURCE_BYTES = 4 << 20
OWN_PREFIXES = (os.path.dirname(os.path.abspath(gpudoctor.__file__)) + os.sep,)


@dataclass
class Sampled:
    stacks: list[CallStack]
    readings: dict[str, Any]
    seconds: float
    rate_hz: int
    ended: bool = False
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Credentials:
    """Who a process is, as /proc/PID/status tells it: its real and effective user ids, and its
    real and effective group ids with its supplementary groups."""
    uids: frozenset[int]
    gids: frozenset[int]


def process_credentials(pid: int) -> Credentials | None:
    """The sampled process's ids (Uid/Gid/Groups of /proc/PID/status); None when unreadable."""
    fields: dict[str, list[int]] = {}
    try:
        with open(f"/proc/{int(pid)}/status", encoding="ascii", errors="replace") as handle:
            for row in handle.read(64 << 10).splitlines():
                key, _, value = row.partition(":")
                if key in ("Uid", "Gid", "Groups"):
                    fields[key] = [int(word) for word in value.split()]
    except (OSError, ValueError):
        return None
    if len(fields.get("Uid", ())) < 2 or len(fields.get("Gid", ())) < 2:
        return None
    return Credentials(frozenset(fields["Uid"][:2]), frozenset(fields["Gid"][:2] + fields.get("Groups", [])))


def _permits(info: os.stat_result, who: Credentials, bits: tuple[int, int, int]) -> bool:
    """Whether one of ``who``'s user ids passes the owner/group/other ``bits`` of ``info``
    (the kernel's order: the owner's bits for the owner, else the group's, else the others')."""
    if 0 in who.uids:
        return True
    owner, group, other = bits
    for uid in who.uids:
        if uid == info.st_uid:
            allowed = bool(info.st_mode & owner)
        elif info.st_gid in who.gids:
            allowed = bool(info.st_mode & group)
        else:
            allowed = bool(info.st_mode & other)
        if allowed:
            return True
    return False


_READ = (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)
_SEARCH = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)


def _folders_searchable(candidate: str, top: str, who: Credentials) -> bool:
    """Every folder from ``top`` down to ``candidate``'s own may be entered by ``who``."""
    folder = os.path.dirname(candidate)
    while True:
        try:
            if not _permits(os.stat(folder), who, _SEARCH):
                return False
        except OSError:
            return False
        if len(folder) <= len(top) or folder == os.path.dirname(folder):
            return True
        folder = os.path.dirname(folder)


def _read_source(candidate: str, top: str, who: Credentials) -> list[str] | None:
    """The lines of ``candidate`` when it is a regular file of bounded size that ``who`` may
    read; None otherwise. Opened without blocking (a FIFO) and checked on the descriptor, so the
    file read is the file checked (no device, no FIFO, no swap between check and read)."""
    fd, info = fileio.open_regular(candidate)  # OSError (a FIFO, a device, none): the caller's None
    try:
        if info.st_size > MAX_SOURCE_BYTES:
            return None
        if not _permits(info, who, _READ) or not _folders_searchable(candidate, top, who):
            return None
        data = os.read(fd, MAX_SOURCE_BYTES + 1)
    finally:
        os.close(fd)
    return data[:MAX_SOURCE_BYTES].decode("utf-8", errors="replace").splitlines()


def source_reader(pid: int, credentials: Credentials | None = None) -> SourceReader:
    """(file, line) -> that line of the sampled process's source, read through /proc/PID/root
    (its own view of the files, a container's too), or the path itself when that view cannot
    be entered; "" when unreadable.

    A frame's file name is whatever the sampled process says it is, and gpudoctor may run with
    more rights than that process (root sampling a user's job). So a line is read only from a
    regular file of bounded size that the process's own user could read: its uids and gids
    (``credentials``, else read from /proc/PID/status now) against the file's owner, group and
    mode bits and the search bits of its folders. Unknown credentials read nothing. ACLs are not
    consulted: a file readable only through an ACL shows no line."""
    cache: dict[str, list[str] | None] = {}
    root = f"/proc/{pid}/root"
    who = credentials if credentials is not None else process_credentials(pid)

    def load(path: str) -> list[str] | None:
        if who is None or "\0" in path:
            return None
        # the process's own view when it can be entered; the path as gpudoctor sees it only
        # when it cannot (an ended process, or a /proc/PID/root this user may not enter)
        # (a relative name is relative to the process's working folder)
        if not path.startswith("/"):
            candidate, top = os.path.join(f"/proc/{pid}/cwd", path), f"/proc/{pid}/cwd"
        elif os.path.isdir(root):
            # ".." at /proc/PID/root would climb out of a container's root: fold it lexically
            candidate, top = root + os.path.normpath(path), root
        else:
            candidate, top = path, "/"
        try:
            return _read_source(candidate, top, who)
        except OSError:
            return None

    def lines_of(path: str) -> list[str] | None:
        if not path or path.startswith("<"):
            return None
        if path not in cache:
            cache[path] = load(path)
        return cache[path]

    return SourceReader(lines_of)


class SourceReader:
    """(file, line) -> the line's text, stripped; ``tree(file)``: the file's syntax tree (None
    when unreadable or not Python), parsed once, so a rule can ask which function holds a line."""

    def __init__(self, lines_of: Callable[[str], list[str] | None]) -> None:
        self._lines_of = lines_of
        self._trees: dict[str, ast.Module | None] = {}

    def __call__(self, path: str, number: int) -> str:
        lines = self._lines_of(path) if number else None
        return lines[number - 1].strip()[:300] if lines and 0 < number <= len(lines) else ""

    def tree(self, path: str) -> ast.Module | None:
        if path not in self._trees:
            lines = self._lines_of(path)
            try:
                self._trees[path] = ast.parse("\n".join(lines)) if lines else None
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self._trees[path] = None
        return self._trees[path]


def _own_ancestors() -> dict[int, str]:
    """This process and the processes that started it, by PID (the shell, the terminal...)."""
    found: dict[int, str] = {}
    try:
        proc: Any = psutil.Process()
        while proc is not None and proc.pid not in found and len(found) < 64:
            try:
                found[proc.pid] = proc.name()
            except psutil.Error:
                found[proc.pid] = "?"
            proc = proc.parent()
    except psutil.Error:
        pass
    return found


PF_KTHREAD = 0x00200000  # /proc/PID/stat's flags: a kernel thread


def kernel_thread(pid: int) -> str | None:
    """The name of ``pid`` when it is a kernel thread (kthreadd, kworker/...), else None."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as handle:
            stat = handle.read(4096)
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 6 and int(fields[6]) & PF_KTHREAD:
            return stat[stat.find(b"(") + 1:stat.rfind(b")")].decode("ascii", "replace")[:64]
    except (OSError, ValueError):
        pass
    return None


def _check_target(pid: int) -> None:
    if pid <= 0 or not process_exists(pid):
        raise pyspy.WhyError(pyspy.NO_SUCH_PROCESS, f"no process with PID {pid}")
    kernel = kernel_thread(pid)
    if kernel is not None:
        raise pyspy.WhyError(pyspy.NOT_PYTHON, f"PID {pid} is a kernel thread ({plain_text(kernel, limit=64)}), "
                             "not a Python process: give the training process's PID")
    ancestors = _own_ancestors()
    if pid in ancestors:
        who = "gpudoctor itself" if pid == os.getpid() else \
            f"{ancestors[pid] or 'a process'} that started this gpudoctor (its shell or launcher)"
        raise pyspy.WhyError(pyspy.NO_SUCH_PROCESS,
                             f"PID {pid} is {who}, not a training job: give the training process's PID "
                             "(nvidia-smi, or the Processes screen of `gpudoctor`, lists it)")
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            raise pyspy.WhyError(pyspy.NO_SUCH_PROCESS, f"process {pid} has ended (a zombie waiting for its parent)")
    except psutil.NoSuchProcess:
        raise pyspy.WhyError(pyspy.NO_SUCH_PROCESS, f"no process with PID {pid}") from None
    except psutil.AccessDenied:
        pass


def _read_output(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(pyspy.MAX_OUTPUT_BYTES)
    except OSError:
        return ""


def _gone(pid: int) -> bool:
    """Ended, or a zombie whose parent has not collected it yet (py-spy cannot tell that one)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


#: Seconds a process seen ending (its interpreter tearing down) is waited for to be gone.
ENDING_WAIT_S = 30.0


def _ends(pid: int) -> bool:
    """Whether ``pid``, seen ending, is gone within ENDING_WAIT_S (waited for, not guessed)."""
    deadline = time.monotonic() + ENDING_WAIT_S
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _wait(proc: subprocess.Popen, pid: int, readings: Readings | None, limit_s: float) -> bool:
    """Poll the readings until py-spy ends; True if interrupted (Ctrl-C or SIGTERM)."""
    deadline = time.monotonic() + limit_s
    try:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                break
            time.sleep(POLL_S)
            if readings is not None:
                readings.poll()
            if _gone(pid) and proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # py-spy writes what it has on SIGINT
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)  # py-spy writes what it has on SIGINT
        return True
    finally:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return False


def _failure(binary: str, pid: int, stderr: str) -> pyspy.WhyError:
    """The error behind a failed recording. With --subprocesses py-spy says "no python processes
    found" for a process it may not read too, so a plain dump of the one process tells which."""
    error = pyspy.error_from_stderr(stderr, pid, alive=process_exists(pid))
    if error.kind != pyspy.NOT_PYTHON or not process_exists(pid):
        return error
    dump = pyspy.start_record(pyspy.dump_command(binary, pid))
    try:
        _, dump_err = dump.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        dump.kill()
        return error
    return pyspy.error_from_stderr(dump_err or "", pid, alive=process_exists(pid)) if dump.returncode else error


def namespace_ids(pid: int, proc_root: str = "/proc") -> dict[int, int]:
    """The thread ids of ``pid`` as seen inside its own PID namespace -> as seen here (NSpid of
    /proc/PID/task/TID/status: this namespace's id first, the innermost last). Empty when the
    process shares this namespace or cannot be read."""
    found: dict[int, int] = {}
    try:
        tasks = os.listdir(f"{proc_root}/{int(pid)}/task")[:4096]
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"{proc_root}/{int(pid)}/task/{task}/status", encoding="ascii", errors="replace") as handle:
                row = next((r for r in handle.read(64 << 10).splitlines() if r.startswith("NSpid:")), "")
            ids = [int(word) for word in row.partition(":")[2].split()]
        except (OSError, ValueError):
            continue
        if len(ids) > 1 and ids[-1] != ids[0]:
            found[ids[-1]] = ids[0]
    return found


def to_this_namespace(stacks: list[CallStack], proc_root: str = "/proc") -> list[CallStack]:
    """py-spy names a thread by its id inside the process's PID namespace (a container's main
    thread is 1), while the process ids and the readings are this namespace's: the thread ids are
    mapped here, so that the main thread (its id equal to its process's) is known as such."""
    maps: dict[int, dict[int, int]] = {}
    out = []
    for stack in stacks:
        if stack.pid not in maps:
            maps[stack.pid] = namespace_ids(stack.pid, proc_root)
        mapped = maps[stack.pid].get(stack.tid) if stack.tid is not None else None
        out.append(dataclasses.replace(stack, tid=mapped) if mapped is not None else stack)
    return out


def sample(pid: int, seconds: float, *, rate: int = pyspy.DEFAULT_RATE_HZ,
           gpu_backend: GpuBackend | None = None) -> Sampled:
    """Sample ``pid`` and its subprocesses for ``seconds`` (less if it ends). Raises
    :class:`~gpudoctor.why.pyspy.WhyError` when it cannot be sampled at all."""
    _check_target(pid)
    binary = pyspy.find_py_spy()
    try:
        readings: Readings | None = Readings(pid, gpu_backend)
    except psutil.NoSuchProcess:
        raise pyspy.WhyError(pyspy.NO_SUCH_PROCESS, f"no process with PID {pid}") from None
    except psutil.AccessDenied:
        readings = None
    folder = tempfile.mkdtemp(prefix="gpudoctor-why-")
    try:
        output = os.path.join(folder, "stacks.txt")
        started = time.monotonic()
        proc = pyspy.start_record(pyspy.record_command(binary, pid, seconds, rate, output))
        interrupted = _wait(proc, pid, readings, seconds + 60)
        elapsed = time.monotonic() - started
        stderr = proc.stderr.read(pyspy.MAX_STDERR_CHARS) if proc.stderr else ""
        text = _read_output(output)
        if proc.returncode != 0 and not text and not interrupted:
            raise _failure(binary, pid, stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    ended = pyspy.stopped_because_exited(stderr) or (elapsed < seconds * 0.9 and _gone(pid))
    if readings is not None:
        try:
            readings.poll()
        except psutil.Error:
            pass
    result = readings.result() if readings is not None else {"processes": {}, "host": {}, "gpu": {
        "available": False, "reason": "no permission to read the process's figures", "devices": []}}
    return Sampled(to_this_namespace(list(parse_raw(text))), result, round(min(elapsed, seconds), 2), rate, ended=ended,
                   interrupted=interrupted)


def why(pid: int, seconds: float, *, rate: int = pyspy.DEFAULT_RATE_HZ, gpu_backend: GpuBackend | None = None,
        wait_start_s: float = 0.0, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Sample ``pid`` and diagnose it: the dict of docs/why.schema.json. ``wait_start_s``: first
    wait up to that long for start-up to end (:func:`wait_for_loop`); a process that ends
    meanwhile is diagnosed from what the waiting sampled."""
    credentials = process_credentials(pid)  # before sampling: the process may end meanwhile
    last = wait_for_loop(pid, wait_start_s, progress or (lambda line: None)) if wait_start_s > 0 else None
    # a Ctrl-C while waiting ends the sampling; so does a process seen ending (its interpreter's teardown)
    if last is not None and (last.ended or last.interrupted or analysis.interpreter_ending(last.stacks, pid)):
        sampled = last
    else:
        sampled = sample(pid, seconds, rate=rate, gpu_backend=gpu_backend)
    meta = {"sampled_s": sampled.seconds, "rate_hz": sampled.rate_hz, "ended": sampled.ended,
            "interrupted": sampled.interrupted}
    processes = sampled.readings.get("processes") or {}
    # a rank's children (DataLoader workers) inherit its RANK: the rank is the one whose parent has none
    ranks = {p: info for p, info in processes.items() if info.get("rank") is not None
             and (processes.get(info.get("ppid")) or {}).get("rank") != info["rank"]}
    if len(ranks) > 1:  # a distributed job: the flight recorder's dumps, where its settings put them
        sampled.readings["flight_recorder"] = flightrec.find(ranks)
    diagnosis = analysis.diagnose(sampled.stacks, sampled.readings, source_reader(pid, credentials), pid=pid,
                                  own=OWN_PREFIXES, meta=meta)
    ending = analysis.interpreter_ending(sampled.stacks, pid)
    if sampled.ended or _gone(pid) or ending:
        diagnosis["ended"] = sampled.ended or _ends(pid)  # gone now, or within ENDING_WAIT_S
        # it ended while start-up was waited out, or with no training work seen (its last samples
        # are a traceback being printed, the interpreter ending): there is no loop to judge
        if (sampled is last and (last.ended or ending)) or not analysis.saw_training(diagnosis["shares"]):
            diagnosis["verdict"] = analysis.ended_during_startup(diagnosis["verdict"], sampled.seconds)
            for record in diagnosis["processes"]:
                record.pop("verdict", None)
    sampled_pids = {p["pid"] for p in diagnosis["processes"]} | {pid}
    diagnosis["published"] = {str(p): record for p, record in _published.read_all().items() if p in sampled_pids}
    return diagnosis





STARTUP_PROBE_S = 2.0       # each look at a starting command's stacks
STARTUP_PROBE_HZ = 50
LOOP_STARTUP_SHARE = 0.25   # the loop runs once start-up is under this share of a probe's samples


def startup_share(stacks: list[CallStack], source: Callable[[str, int], str]) -> tuple[float | None, str]:
    """The share of start-up in the busiest trainer's main-thread samples (None: too few), and what."""
    views = [v for v in analysis.build_views(stacks, source, OWN_PREFIXES).values() if v.role == "trainer"]
    if not views:
        return None, ""
    view = max(views, key=lambda v: v.main_samples)
    if view.main_samples < analysis.MIN_SAMPLES:
        return None, ""
    return view.share(rules.STARTUP), analysis.startup_words(view)


def wait_for_loop(pid: int, limit_s: float, progress: Callable[[str], None]) -> Sampled | None:
    """Sample ``pid`` in short probes until start-up is a small share of one (the loop runs), at
    most ``limit_s``, with a progress line after each probe still in start-up. Returns the last
    probe (``ended`` when the process ended meanwhile), None when none could be taken."""
    started = time.monotonic()
    source = source_reader(pid)
    probe = None
    while time.monotonic() - started < limit_s:
        try:
            probe = sample(pid, min(STARTUP_PROBE_S, max(1.0, limit_s - (time.monotonic() - started))),
                           rate=STARTUP_PROBE_HZ)
        except pyspy.WhyError:
            break
        share, what = startup_share(probe.stacks, source)
        if probe.ended or probe.interrupted or analysis.interpreter_ending(probe.stacks, pid) or \
                (share is not None and share < LOOP_STARTUP_SHARE):
            break
        waited = time.monotonic() - started
        progress(f"gpudoctor why: pid {pid} is starting up ({f'{share:.0%} ' if share is not None else ''}"
                 f"{what or 'not yet sampled'}); waiting for the loop, {waited:.0f} of at most {limit_s:.0f} s")
    return probe


def python_target(pid: int, ended: Callable[[], bool], wait_s: float = 10.0) -> int | None:
    """The process to sample for a command just started as ``pid``: itself once its interpreter
    is up, or its first Python descendant when it is a shell or a wrapper; None if it ended.
    After ``wait_s`` with no Python in sight, ``pid`` itself (py-spy then says what it is)."""
    deadline = time.monotonic() + wait_s
    while not ended():
        try:
            proc = psutil.Process(pid)
            for candidate in [proc] + proc.children(recursive=True):
                python = "python" in os.path.basename(candidate.exe() or "") or \
                    any("libpython" in m for m in _mapped_files(candidate.pid))
                # py-spy reads the interpreter's state, which exists once start-up is done
                if python and time.time() - candidate.create_time() >= 0.5:
                    return candidate.pid
        except (psutil.Error, OSError):
            pass
        if time.monotonic() > deadline:
            return pid
        time.sleep(0.1)
    return None


def _mapped_files(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as handle:
            return [line.rsplit(" ", 1)[-1].strip() for line in handle.read(4 << 20).splitlines()]
    except OSError:
        return []
__all__ = ["wait_for_loop", "startup_share", "Sampled", "Credentials", "process_credentials", "sample", "why", "source_reader", "python_target", "OWN_PREFIXES"]
