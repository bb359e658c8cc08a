"""Live training summaries published by processes that use TrainingMonitor, one file per PID.

The directory is per user: ``$XDG_RUNTIME_DIR/gpudoctor`` when that runtime directory exists
and is the user's, else ``/tmp/gpudoctor-UID`` created 0700. A directory that is not the
user's own, not a real directory, or open to others is refused (nothing is published or read
there), so another user can neither plant nor read summaries. Each file is replaced
atomically (gpudoctor.system.fileio: a temporary name, then a rename) and removed when the process exits; a file
whose process is gone is stale and skipped (and removed when it is ours).

The reader is here, below every front end, so the TUI, the exporter and ``gpudoctor why``
read the same files without importing the training hooks or torch.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time
from typing import Any

from gpudoctor.system import fileio, safejson

FORMAT = "gpudoctor-live"
FORMAT_VERSION = 1
ENV_SWITCH = "GPUDOCTOR_PUBLISH"      # "0" turns publishing off for every monitor in the process
ENV_DIR = "GPUDOCTOR_RUNTIME_DIR"     # another directory (tests, a shared scratch space)
MAX_FILE_BYTES = 256 << 10
MAX_FILES = 4096
MAX_DEPTH = 16          # a summary is a few levels deep
MAX_CONTAINERS = 20_000


def publishing_enabled(argument: bool | None = None) -> bool:
    """The one switch: an explicit argument wins, else the environment variable (default on)."""
    if argument is not None:
        return bool(argument)
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def _safe_dir(path: str) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    getuid = getattr(os, "getuid", None)
    return stat.S_ISDIR(info.st_mode) and (getuid is None or info.st_uid == getuid()) \
        and not info.st_mode & 0o022


def runtime_dir(create: bool = False) -> str | None:
    """The per-user directory of published summaries, or None when there is no safe one."""
    explicit = os.environ.get(ENV_DIR)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if explicit:
        path = explicit
    elif runtime and _safe_dir(runtime):
        path = os.path.join(runtime, "gpudoctor")
    else:
        uid = os.getuid() if hasattr(os, "getuid") else os.getpid()
        path = os.path.join(tempfile.gettempdir(), f"gpudoctor-{uid}")
    if create and not os.path.lexists(path):
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError:
            return None
    return path if _safe_dir(path) else None


def path_for(pid: int, directory: str) -> str:
    return os.path.join(directory, f"{int(pid)}.json")


def write(record: dict[str, Any], directory: str) -> None:
    """Replace this process's file atomically (a reader never sees half a file)."""
    data = json.dumps(record, allow_nan=False, separators=(",", ":")).encode("utf-8")
    fileio.write_bytes(path_for(record["pid"], directory), data, mode=0o600)  # private, whatever the umask


def remove(pid: int, directory: str | None) -> None:
    if directory:
        try:
            os.unlink(path_for(pid, directory))
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def read_one(path: str) -> dict[str, Any] | None:
    """One published record, or None when it is missing, too large, not a regular file, nested
    deeper than a summary ever is, or not ours to trust. Never raises: one bad file in the folder
    must not cost every scrape of the exporter (it made each one an HTTP 500)."""
    try:
        record = safejson.read_json_file(path, max_bytes=MAX_FILE_BYTES, max_depth=MAX_DEPTH,
                                         max_containers=MAX_CONTAINERS, allow_nan=False)
    except ValueError:  # JsonFileError: missing, too large, not regular, not bounded JSON
        return None
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("pid"), int):
        return None
    return record


def read_all(directory: str | None = None, *, max_age_s: float = 120.0) -> dict[int, dict[str, Any]]:
    """Every live process's record by PID: a file whose process is gone or which was not
    refreshed for ``max_age_s`` is left out (a gone process's file is removed)."""
    directory = directory or runtime_dir()
    if not directory:
        return {}
    try:
        names = sorted(os.listdir(directory))[:MAX_FILES]
    except OSError:
        return {}
    now = time.time()
    found: dict[int, dict[str, Any]] = {}
    for name in names:
        stem = name[:-5] if name.endswith(".json") else ""
        if not (stem.isascii() and stem.isdigit() and len(stem) <= 10):  # "².json" is no PID
            continue
        pid = int(stem)
        if not _alive(pid):
            remove(pid, directory)
            continue
        record = read_one(os.path.join(directory, name))
        if record is None or record["pid"] != pid:
            continue
        if isinstance(record.get("t"), (int, float)) and now - record["t"] > max_age_s:
            continue
        found[pid] = record
    return found


__all__ = ["FORMAT", "FORMAT_VERSION", "ENV_SWITCH", "ENV_DIR", "publishing_enabled", "runtime_dir", "path_for",
           "write", "remove", "read_one", "read_all"]
