"""The NCCL flight recorder's dumps: found, read without trusting them, and summed up per rank.

PyTorch keeps a ring buffer of each rank's collectives when ``TORCH_NCCL_TRACE_BUFFER_SIZE``
(``TORCH_FR_BUFFER_SIZE``) is above 0, and with ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` its watchdog
writes the buffer to ``<prefix><rank>`` when a collective times out; the prefix is
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` (``TORCH_FR_DUMP_TEMP_FILE`` in newer releases), by default
``/tmp/nccl_trace_rank_``. A dump is a pickle of plain data (torch 2.14 writes version "2.10"):
``version``, ``pg_config``, ``pg_status`` (per process group: ``last_enqueued_collective``,
``last_started_collective``, ``last_completed_collective``) and ``entries``, one dict per
collective in the order recorded: ``record_id``, ``pg_id``, ``process_group``,
``collective_seq_id``, ``profiling_name`` (``nccl:all_reduce``), ``input_sizes``, ``state``
(``scheduled``, ``started``, ``completed``), ``time_created_ns``, ``frames`` (innermost first,
each ``name``/``filename``/``line``), ``is_p2p`` ...

A file found there is data from another process, perhaps another user's: it is opened as a
regular file only (never a FIFO or a device), must belong to the job's user, is read up to
:data:`MAX_DUMP_BYTES`, and is decoded by :mod:`gpudoctor.system._plainpickle`, a strict decoder of
its own that accepts only the opcodes plain data needs (no globals: only dicts, lists, tuples,
strings, numbers, booleans, None and bytes come out of it), with a bounded memo, nesting and
dict keys whose hashes cannot collide, so its work is linear in the dump's size. What is kept
is bounded and checked field by field, and comparing the ranks' dumps is linear too.
"""

from __future__ import annotations

import os
from typing import Any

from gpudoctor.system import _plainpickle, fileio
from gpudoctor.core._text import plain_text
from gpudoctor.why import rules

MAX_DUMP_BYTES = 64 << 20
MAX_ENTRIES = 20_000            # entries looked at per dump (the last ones: a ring buffer's newest)
MAX_FRAMES = 64
DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"
PREFIX_VARIABLES = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
SETTINGS = ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT",
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE")
STATES = ("scheduled", "started", "completed")

#: What to set before the next run, when no dump was found (docs/why.md, "A hung job").
ADVICE = ("TORCH_NCCL_TRACE_BUFFER_SIZE=2000", "TORCH_NCCL_DUMP_ON_TIMEOUT=1",
          "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=<a folder of your own>/nccl_trace_rank_",
          "a shorter timeout: init_process_group(..., timeout=datetime.timedelta(minutes=10))")


class DumpError(ValueError):
    """A dump that was not read: the one-line reason."""


def loads(data: bytes) -> Any:
    """The plain data of a dump, decoded by the strict decoder (:mod:`gpudoctor.system._plainpickle`:
    no globals, bounded memo, depth and keys, work linear in its size); :class:`DumpError` with
    one line otherwise."""
    try:
        return _plainpickle.loads(data)
    except _plainpickle.PlainPickleError as exc:
        raise DumpError(plain_text(str(exc), limit=200)) from None


def read_file(path: str, owner_uid: int | None) -> tuple[Any, float]:
    """(the unpickled dump, its modification time) of ``path``: a regular file owned by
    ``owner_uid`` (when known) of at most :data:`MAX_DUMP_BYTES`. Raises :class:`DumpError`
    for a file that is there but refused, OSError for one that cannot be opened."""
    fd, info = fileio.open_regular(path)
    try:
        if owner_uid is not None and info.st_uid != owner_uid:
            raise DumpError(f"owned by uid {info.st_uid}, not by the job's user (uid {owner_uid})")
        if info.st_size > MAX_DUMP_BYTES:
            raise DumpError(f"{info.st_size} bytes, over the {MAX_DUMP_BYTES >> 20} MiB read at most")
    except BaseException:
        os.close(fd)
        raise
    try:
        data = fileio.read_fd(fd, MAX_DUMP_BYTES)  # closes fd
    except fileio.TooLargeError:
        raise DumpError(f"grew past the {MAX_DUMP_BYTES >> 20} MiB read at most while read") from None
    return loads(data), info.st_mtime


def _int(value: object) -> int | None:
    """An integer field of a dump, or None: a bool, another type, or one outside 64 bits (a dump's
    ids, sizes and nanosecond times fit; a larger one would overflow the arithmetic on it)."""
    if isinstance(value, int) and not isinstance(value, bool) and -2 ** 63 <= value < 2 ** 63:
        return value
    return None


def _text(value: object, limit: int = 200) -> str:
    return plain_text(value, limit=limit) if isinstance(value, str) else ""


def _user_line(frames: object) -> dict[str, Any] | None:
    """The innermost frame of the user's code in an entry's stack (frames innermost first)."""
    if not isinstance(frames, list):
        return None
    for frame in frames[:MAX_FRAMES]:
        if not isinstance(frame, dict):
            continue
        file = _text(frame.get("filename"), 1000)
        if file and not rules.is_library(file):
            return {"file": file, "line": _int(frame.get("line")), "function": _text(frame.get("name"))}
    return None


def _op(name: str) -> str:
    """``nccl:all_reduce`` -> ``all_reduce``."""
    return name.rpartition(":")[2] or name or "?"


def _entry(raw: object) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    seq = _int(raw.get("collective_seq_id"))
    state = raw.get("state")
    if seq is None or state not in STATES:
        return None
    sizes = raw.get("input_sizes")
    shown = [[d for d in s[:8] if _int(d) is not None] for s in sizes[:4] if isinstance(s, list)] \
        if isinstance(sizes, list) else []
    return {"seq": seq, "pg_id": _int(raw.get("pg_id")) or 0, "op": _op(_text(raw.get("profiling_name"), 100)),
            "state": state, "sizes": shown, "p2p": raw.get("is_p2p") is True,
            "created_ns": _int(raw.get("time_created_ns")), "line": _user_line(raw.get("frames"))}


def summarise(dump: object, rank: int | None) -> dict[str, Any]:
    """What one rank's dump says: per process group, its last collective and its last
    completed one (the default group, pg 0, first). Raises :class:`DumpError` for a dump of
    another shape."""
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list):
        raise DumpError("not a flight recorder dump (no dict with a list of entries)")
    version = _text(dump.get("version"), 20)
    entries = [e for e in map(_entry, dump.get("entries", [])[-MAX_ENTRIES:]) if e is not None and not e["p2p"]]
    groups: dict[int, dict[str, Any]] = {}
    for entry in entries:
        group = groups.setdefault(entry["pg_id"], {"pg_id": entry["pg_id"], "last": None, "last_completed": None})
        if group["last"] is None or entry["seq"] >= group["last"]["seq"]:
            group["last"] = entry
        if entry["state"] == "completed" and (group["last_completed"] is None
                                              or entry["seq"] >= group["last_completed"]["seq"]):
            group["last_completed"] = entry
    status = dump.get("pg_status")
    if isinstance(status, dict):
        for key, value in list(status.items())[:64]:
            pg = _int(key) if not isinstance(key, str) else (
                int(key) if key.isascii() and key.isdigit() and len(key) < 10 else None)
            if pg is None or not isinstance(value, dict):
                continue
            seen = {k: _int(value.get(f"last_{k}_collective")) for k in ("enqueued", "started", "completed")}
            groups.setdefault(pg, {"pg_id": pg, "last": None, "last_completed": None})["status"] = seen
    return {"rank": rank, "version": version, "entries": len(entries),
            "groups": [groups[k] for k in sorted(groups)]}


def _last_seq(group: dict[str, Any]) -> int | None:
    enqueued = (group.get("status") or {}).get("enqueued")
    last = group["last"]["seq"] if group.get("last") else None
    values = [v for v in (enqueued, last) if v is not None and v >= 0]
    return max(values) if values else None


def behind(dumps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rank(s) whose last collective in a process group all the dumps share is behind the
    others': they never issued the collective the others wait in. None when all agree.
    Linear in the dumps' groups: each dump's groups are indexed by process group once."""
    indexed = [(dump["rank"], {g["pg_id"]: g for g in dump["groups"]}) for dump in dumps if dump["rank"] is not None]
    for pg in sorted({pg for _, groups in indexed for pg in groups}):
        seqs = {}
        last = {}
        for rank, groups in indexed:
            group = groups.get(pg)
            seq = _last_seq(group) if group is not None else None
            if seq is not None:
                seqs[rank] = seq
                last[rank] = group["last"] if group else None
        if len(seqs) < 2 or min(seqs.values()) == max(seqs.values()):
            continue
        top = max(seqs.values())
        ahead = sorted(r for r, s in seqs.items() if s == top)
        return {"pg_id": pg, "behind": sorted(r for r, s in seqs.items() if s < top), "ahead": ahead,
                "seqs": {str(r): s for r, s in sorted(seqs.items())},
                "waiting_in": last[ahead[0]],
                "last_of": {str(r): last[r] for r, s in sorted(seqs.items()) if s < top}}
    return None


def dump_path(env: dict[str, str], rank: int) -> str:
    prefix = next((env[k] for k in PREFIX_VARIABLES if env.get(k)), DEFAULT_PREFIX)
    return f"{prefix}{rank}"


def find(processes: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Look for each rank's dump where its own settings say it would be, in its own view of
    the files (/proc/PID/root). A dump older than its process is another job's, and is left out."""
    dumps, errors, settings = [], [], {}
    for pid, info in sorted(processes.items()):
        rank = info.get("rank")
        env = info.get("env") or {}
        if rank is None or str(rank) in settings:  # one look per rank
            continue
        settings[str(rank)] = {k: plain_text(env[k], limit=200) for k in SETTINGS if k in env}
        path = dump_path(env, rank)
        root, cwd = f"/proc/{pid}/root", f"/proc/{pid}/cwd"
        if not path.startswith("/"):  # relative to the rank's working folder, not gpudoctor's
            seen_as = os.path.join(cwd, path)
        else:  # ".." folded lexically: it would climb out of a container's root
            seen_as = root + os.path.normpath(path) if os.path.isdir(root) else path
        try:
            dump, mtime = read_file(seen_as, info.get("uid"))
        except FileNotFoundError:
            continue
        except (DumpError, OSError) as exc:
            errors.append({"rank": rank, "path": plain_text(path, limit=300),
                           "error": plain_text(str(exc) or type(exc).__name__, limit=300)})
            continue
        started = info.get("create_time")
        if isinstance(started, (int, float)) and mtime < started:
            errors.append({"rank": rank, "path": plain_text(path, limit=300),
                           "error": "written before this rank started (another job's): left out"})
            continue
        try:
            summary = summarise(dump, rank)
        except (DumpError, ValueError, OverflowError) as exc:  # a dump that does not parse costs itself
            errors.append({"rank": rank, "path": plain_text(path, limit=300),
                           "error": plain_text(str(exc) or type(exc).__name__, limit=300)})
            continue
        summary["path"] = plain_text(path, limit=300)
        summary["written"] = mtime
        dumps.append(summary)
    return {"dumps": dumps, "errors": errors, "settings": settings}


__all__ = ["DumpError", "loads", "read_file", "summarise", "behind", "find", "dump_path", "ADVICE", "SETTINGS",
           "MAX_DUMP_BYTES", "DEFAULT_PREFIX"]
