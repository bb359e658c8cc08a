"""Writing output files (``-o``, ``--csv``, ``record``): atomic for regular files only.

* A regular file, or a path that does not exist yet, is written atomically: a temporary
  file in the same directory, fsync, then a rename over the target, so a reader never sees
  half a file and an interrupted write leaves the old one.
* Anything else that exists (a character device such as /dev/null, a FIFO, a terminal, a
  socket, ``/proc/self/fd/1``) is opened and written directly. Renaming over it would
  replace the device node or the pipe with a regular file.
* A symlink is followed: the file it points at is written (replaced atomically if it is a
  regular file); the link itself stays.
* New files get the mode ``open()`` would give them (0666 less the umask); a regular file
  that is replaced keeps its permission bits (rwx) but never a setuid, setgid or sticky bit,
  and keeps its owner: root gives the new file the old owner, and another user's file that we
  may write is written in place (truncated), since a rename would make it ours.

Errors are ``OSError`` (disk full, directory gone, permission): callers report them in one
line (``gpudoctor.commands.output``), never as a traceback.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pathlib costs `report --quick` its import (urllib.parse, ipaddress...)
    from pathlib import Path

# Linux and macOS limit one path component to 255 bytes: the temporary name must fit
# beside a target name that is itself legal.
_NAME_MAX = 255
_TMP_SUFFIX = ".tmp"
_TMP_RANDOM_CHARS = 8


class NotRegularFileError(OSError):
    """A path that names a FIFO, a device or a socket where a file's content is to be read."""


_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


def open_regular(path: str | os.PathLike[str]) -> tuple[int, os.stat_result]:
    """Open ``path`` to read it, without blocking, and check on the descriptor that it is a
    regular file: (descriptor, its stat). A FIFO with no writer, a terminal or /dev/zero named as
    a file to read would otherwise hang the reader or feed it for ever, and a check before the
    open could be of another file than the one read. The caller closes the descriptor.
    Raises FileNotFoundError, IsADirectoryError, :class:`NotRegularFileError` or another OSError."""
    fd = os.open(path, _READ_FLAGS)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError(errno.EINVAL, "not a regular file (a FIFO, a device or a socket)")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


class TooLargeError(OSError):
    """A file (or what it inflates to) larger than the bound its reader set."""


_CHUNK = 1 << 20


def read_fd(fd: int, max_bytes: int) -> bytes:
    """At most ``max_bytes`` bytes of ``fd`` (closed after); :class:`TooLargeError` beyond."""
    chunks: list[bytes] = []
    size = 0
    try:
        while size <= max_bytes:
            chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > max_bytes:
        raise TooLargeError(errno.EFBIG, f"larger than the {_mib(max_bytes)} read at most")
    return b"".join(chunks)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n} bytes"


def read_regular(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The content of the regular file ``path``, read through :func:`open_regular` (a FIFO or a
    device is refused, never waited on), at most ``max_bytes`` bytes: :class:`TooLargeError`
    beyond, however the file grows while read."""
    fd, _info = open_regular(path)
    return read_fd(fd, max_bytes)


def read_gzip_regular(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The inflated content of the gzip file ``path`` (a regular file), at most ``max_bytes``
    bytes inflated: the bound is checked while inflating, chunk by chunk, so a small file that
    inflates to gigabytes costs at most ``max_bytes`` (plus one chunk) of memory. Raises
    :class:`TooLargeError`, ``zlib.error`` or ``EOFError`` (a truncated stream)."""
    import zlib

    fd, _info = open_regular(path)
    out: list[bytes] = []
    size = 0
    inflater = zlib.decompressobj(wbits=31)  # 31: with the gzip header and trailer
    started = False
    try:
        while True:
            if inflater.eof:  # a member ended: another may follow (gzip allows several)
                data = inflater.unused_data or os.read(fd, _CHUNK)
                if not data:
                    break
                inflater = zlib.decompressobj(wbits=31)
            else:
                data = inflater.unconsumed_tail or os.read(fd, _CHUNK)
                if not data:
                    raise EOFError("the gzip stream ends early" if started else "an empty file, not gzip")
            started = True
            piece = inflater.decompress(data, min(_CHUNK, max_bytes + 1 - size))  # memory: one chunk at a time
            out.append(piece)
            size += len(piece)
            if size > max_bytes:
                raise TooLargeError(errno.EFBIG, f"inflates to more than the {_mib(max_bytes)} read at most")
    finally:
        os.close(fd)
    return b"".join(out)


def _umask() -> int:
    """The process umask, read without changing it where the system says it."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no other way to read it: set and restore at once
    os.umask(mask)
    return mask


def _temporary_name(target_name: str) -> str:
    """``.NAME.RANDOM.tmp``, with NAME shortened so the whole stays within 255 bytes."""
    room = _NAME_MAX - len(b".") - len(b".") - _TMP_RANDOM_CHARS - len(_TMP_SUFFIX)
    encoded = os.fsencode(target_name)[:room]
    stem = os.fsdecode(encoded)
    while len(os.fsencode(stem)) > room:  # a cut inside a multi-byte character
        stem = stem[:-1]
    return f".{stem}.{os.urandom(_TMP_RANDOM_CHARS // 2).hex()}{_TMP_SUFFIX}"


#: How long an output FIFO may wait for its reader (a `cat FIFO` started a moment later).
FIFO_READER_WAIT_S = 10.0


def _write_directly(path: str, data: bytes) -> None:
    """Write into an existing non-regular file (a device, a FIFO, a terminal). It is opened without
    blocking: a FIFO whose reader has not come within FIFO_READER_WAIT_S fails (ENXIO, "no reader
    on this FIFO") instead of hanging the command after its work is done; once open, it is written
    normally."""
    flags = os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    deadline = time.monotonic() + FIFO_READER_WAIT_S
    while True:
        try:
            fd = os.open(path, flags)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            if time.monotonic() >= deadline:
                raise OSError(errno.ENXIO, f"no reader on this FIFO within {FIFO_READER_WAIT_S:g} s",
                              path) from None
            time.sleep(0.05)
    try:
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a reader is there: wait for it as a pipe does
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _write_in_place(path: str, data: bytes) -> None:
    """Truncate and write an existing regular file, dropping setuid and setgid."""
    with open(path, "r+b") as fh:
        if hasattr(os, "fchmod"):
            mode = stat.S_IMODE(os.fstat(fh.fileno()).st_mode)
            if mode & 0o7000:
                os.fchmod(fh.fileno(), mode & 0o777)
        fh.truncate(0)
        fh.write(data)
        fh.flush()


def _write_atomically(target: str, data: bytes, mode: int, owner: tuple[int, int] | None = None) -> None:
    directory, name = os.path.split(target)
    for _ in range(100):
        tmp = os.path.join(directory or ".", _temporary_name(name))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 100 collisions of 32 random bits
        raise FileExistsError(f"no free temporary name beside {target}")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if owner is not None and hasattr(os, "fchown") and owner != (os.geteuid(), os.getegid()):
                try:  # root writing over another user's file: it stays theirs
                    os.fchown(fh.fileno(), *owner)
                except OSError:
                    pass
            if hasattr(os, "fchmod"):  # not on Windows before Python 3.13 (files there have no mode bits)
                os.fchmod(fh.fileno(), mode)  # after fchown, which clears setuid/setgid bits
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_bytes(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> Path:
    """Write ``data`` to ``path``: atomically for a regular file or a new path, directly otherwise.
    ``mode``: the file's mode bits (default: a replaced file keeps its mode, a new one follows the umask)."""
    from pathlib import Path

    text_path = os.fspath(path)
    if not text_path:
        raise FileNotFoundError(2, "empty file name", text_path)
    try:
        info = os.stat(text_path)  # follows symlinks: what a write would reach
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode):
        _write_directly(text_path, data)
        return Path(text_path)
    # A symlink (even a dangling one) stays a link: write the file it points at.
    target = os.path.realpath(text_path) if os.path.islink(text_path) else text_path
    if info is not None and hasattr(os, "geteuid") and info.st_uid != os.geteuid() and os.geteuid() != 0:
        # Someone else's file: a rename would make it ours (the owner changes), and we cannot
        # give it back. Written in place instead (not atomic), so its owner stays.
        _write_in_place(target, data)
        return Path(text_path)
    # A replaced file keeps its permission bits (unless the caller asks for others) but never
    # setuid, setgid or sticky: a report written over an executable must not become a setuid program.
    if mode is None:
        mode = (stat.S_IMODE(info.st_mode) & 0o777) if info is not None else 0o666 & ~_umask()
    owner = (info.st_uid, info.st_gid) if info is not None else None
    _write_atomically(target, data, mode & 0o777, owner)
    return Path(text_path)


def write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    return write_bytes(path, text.encode(encoding))


def write_json(path: str | os.PathLike[str], obj: object, indent: int | None = 2) -> Path:
    return write_text(path, json.dumps(obj, indent=indent, allow_nan=False) + "\n")


# The names every writer used so far: the same functions.
atomic_write_bytes = write_bytes
atomic_write_text = write_text
atomic_write_json = write_json

__all__ = ["write_bytes", "write_text", "write_json", "atomic_write_bytes", "atomic_write_text",
           "atomic_write_json"]
