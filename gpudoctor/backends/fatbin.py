"""Which GPU architectures a shared object's CUDA kernels were compiled for, read from its fat binaries.

A PyTorch C++/CUDA extension (torchvision's ops, flash-attn, xformers, apex, bitsandbytes, a
``setup.py`` CUDAExtension) carries its kernels in the ``.nv_fatbin`` section of its ``.so``: one or
more fat-binary containers, each holding entries of machine code (SASS, an ELF "cubin" for one
``sm_XY``) and PTX (for one ``compute_XY``, JIT-compiled by the driver). A GPU runs a cubin of its
own major version and an equal or lower minor; PTX of an equal or lower version is JIT-compiled at
start-up; nothing else runs, and every kernel launch fails with "no kernel image is available for
execution on the device". This module reads the architectures without CUDA, torch or cuobjdump.

Only headers are read, with positioned reads (``os.pread``): the ELF header, the section header
table, the section-name table and each container's and entry's header, never the code itself, so
a 500 MB library costs a few thousand small reads. Every size is checked against the section and
the file before it is used; anything malformed is an answer, ``could not read: <reason>``, never an
exception or an unbounded read. Files are opened with :func:`gpudoctor.system.fileio.open_regular` (a FIFO
or a device named ``x.so`` is refused, not read).

The layout relied on (all little-endian):

* ELF64: ``e_ident`` ``\\x7fELF``, class 2 (64-bit), data 1 (little-endian); ``e_shoff`` (u64 at
  0x28), ``e_shentsize`` (u16 at 0x3A, 64), ``e_shnum`` (0x3C; 0 means the count is section 0's
  ``sh_size``), ``e_shstrndx`` (0x3E; 0xFFFF means it is section 0's ``sh_link``). A section header:
  ``sh_name`` u32, ``sh_type`` u32 (8 = NOBITS, no bytes in the file), ``sh_offset`` u64 at 24,
  ``sh_size`` u64 at 32.
* Sections ``.nv_fatbin`` (the executable's fat binaries) and ``__nv_relfatbin`` (relocatable
  device code, ``-rdc``): fat-binary containers one after another.
* Container header, 16 bytes (NVIDIA's ``fatBinaryHeader`` in fatbinary_section.h): magic u32
  0xBA55ED50, version u16 (1), header size u16 (16), fat size u64 (bytes of entries after the
  header).
* Entry header, at least 64 bytes (as the open readers n-eiling/cuda-fatbin-decompression,
  jiegec/fatbinary and nvopen-tools' FORMAT_SPECIFICATION describe it): kind u16 (1 PTX, 2 ELF
  cubin) at 0, header size u32 at 4 (64; 80 or 112 for the newer architectures' extended headers),
  payload size u64 at 8, architecture u32 at 28 (``90`` for sm_90/compute_90), flags u64 at 40.
  The next entry starts at entry + header size + payload size.
* Flags: 0x2000 (an LZ-style compressed payload) and 0x8000 (a zstd payload, CUDA 12.8 on) mark a
  compressed entry; the header itself is never compressed, so its architecture is still read.
  0x100000 marks an arch-specific target (``sm_90a``) and 0x200000 a family-specific one
  (``sm_103f``): not in those write-ups, but established on torch 2.14.1+cu130's libtorch_cuda.so,
  whose entries with these flags are cubins whose own string tables (after zstd decompression)
  name ``sm_90a``, ``sm_100a``, ``sm_120a``, ``sm_121a`` and ``sm_103f``.

Compatibility (NVIDIA's CUDA C++ Programming Guide, "Application Compatibility", and the
arch-specific/family-specific feature sets of CUDA 12.0/12.9): a cubin for sm_XY runs on compute
capability X.Z with Z >= Y (never across majors); an ``a`` cubin only on exactly X.Y; an ``f`` cubin
on the family, X.Z with Z >= Y. PTX for compute_XY is JIT-compiled for any capability >= X.Y
(``a`` PTX only for X.Y, ``f`` PTX for its family).
"""

from __future__ import annotations

import os
import struct
import time
from typing import Callable, Iterator

from gpudoctor.system.fileio import open_regular

FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
KIND_PTX, KIND_ELF = 1, 2
FLAGS_COMPRESSED = 0x2000 | 0x8000
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY_SPECIFIC = 0x200000

_CONTAINER = struct.Struct("<IHHQ")
_ENTRY_HEAD = struct.Struct("<HHIQ")  # kind, (unknown), header size, payload size
_ENTRY_MIN = 64
_SHDR = struct.Struct("<IIQQQQIIQQ")

# Bounds: far above any real library (libcublasLt.so.13: 2,775 containers, ~5,400 entries;
# libtorch_cuda.so 2.14: 475 containers, 2,975 entries), far below what would hang a report.
MAX_SECTIONS = 200_000
MAX_SECTION_NAMES_BYTES = 16 * 2 ** 20
MAX_ENTRY_HEADER_BYTES = 4096
MAX_ENTRIES = 200_000
MAX_ARCH = 2000  # sm_1200 would be a capability 120.0: anything above is not an architecture

Reader = Callable[[int, int], bytes]


class Malformed(ValueError):
    """The file is not what its headers say (the reason is one line of our own words)."""


class FatbinArchs:
    """What one shared object's fat binaries hold.

    ``sass``: the cubin targets ('sm_90', 'sm_90a'); ``ptx``: the PTX targets ('compute_120').
    ``containers``/``entries``/``compressed``: counts. ``has_fatbin``: a fat-binary section exists.
    ``error``: ``could not read: <reason>`` (the sets then hold what was read before it), else None.
    ``cubins_at``: None, or a list a caller sets to learn where each cubin lies: (file offset of its
    payload, payload size, architecture name, flags) are appended to it.
    """

    __slots__ = ("sass", "ptx", "containers", "entries", "compressed", "has_fatbin", "error", "cubins_at")

    def __init__(self) -> None:
        self.sass: set[str] = set()
        self.ptx: set[str] = set()
        self.containers = 0
        self.entries = 0
        self.compressed = 0
        self.has_fatbin = False
        self.error: str | None = None
        self.cubins_at: list[tuple[int, int, str, int]] | None = None

    def __repr__(self) -> str:
        return "FatbinArchs(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"

    def describe(self) -> str:
        """'sm_75 sm_80 compute_120' in architecture order."""
        return " ".join(sorted(self.sass | self.ptx, key=arch_order)) or "(none)"


def arch_order(name: str) -> tuple[int, int, str]:
    """Sort key: 'sm_90a' -> (90, 0, 'sm_90a'), PTX after SASS of the same number."""
    kind, _, rest = name.partition("_")
    digits = rest.rstrip("af")
    return (int(digits) if digits.isdigit() else 0, 1 if kind == "compute" else 0, name)


def _arch_name(kind: int, arch: int, flags: int) -> str:
    suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY_SPECIFIC else ""
    return f"{'compute' if kind == KIND_PTX else 'sm'}_{arch}{suffix}"


# --------------------------------------------------------------------------- reading
def _read_exact(read: Reader, offset: int, size: int, what: str) -> bytes:
    data = read(offset, size)
    if len(data) != size:
        raise Malformed(f"{what} is cut short (file truncated)")
    return data


def parse_container(read: Reader, start: int, end: int, out: FatbinArchs) -> int:
    """Read the container at ``start`` (within a section ending at ``end``) into ``out``; returns the
    offset just after it."""
    if start + _CONTAINER.size > end:
        raise Malformed("a fat-binary header is cut short")
    magic, _version, header_size, fat_size = _CONTAINER.unpack(_read_exact(read, start, _CONTAINER.size,
                                                                           "a fat-binary header"))
    if magic != FATBIN_MAGIC:
        raise Malformed(f"no fat-binary magic at section offset {start} (0x{magic:08x})")
    if not _CONTAINER.size <= header_size <= MAX_ENTRY_HEADER_BYTES:
        raise Malformed(f"a fat-binary header size of {header_size} bytes")
    stop = start + header_size + fat_size
    if stop > end:
        raise Malformed(f"a fat binary of {fat_size} bytes runs past its section")
    out.containers += 1
    pos = start + header_size
    while pos < stop:
        pos = _parse_entry(read, pos, stop, out)
    return stop


def _parse_entry(read: Reader, pos: int, stop: int, out: FatbinArchs) -> int:
    if pos + _ENTRY_MIN > stop:
        raise Malformed("an entry header runs past its fat binary")
    head = _read_exact(read, pos, _ENTRY_MIN, "an entry header")
    kind, _unknown, header_size, payload = _ENTRY_HEAD.unpack_from(head)
    arch, = struct.unpack_from("<I", head, 28)
    flags, = struct.unpack_from("<Q", head, 40)
    if not _ENTRY_MIN <= header_size <= MAX_ENTRY_HEADER_BYTES:
        raise Malformed(f"an entry header size of {header_size} bytes")
    after = pos + header_size + payload
    if after > stop:
        raise Malformed(f"an entry of {payload} bytes runs past its fat binary")
    out.entries += 1
    if out.entries > MAX_ENTRIES:
        raise Malformed(f"more than {MAX_ENTRIES} entries")
    if flags & FLAGS_COMPRESSED:
        out.compressed += 1
    if kind in (KIND_PTX, KIND_ELF):
        if not 0 < arch <= MAX_ARCH:
            raise Malformed(f"an entry for architecture {arch}")
        name = _arch_name(kind, arch, flags)
        (out.ptx if kind == KIND_PTX else out.sass).add(name)
        if kind == KIND_ELF and out.cubins_at is not None:
            out.cubins_at.append((pos + header_size, payload, name, flags))
    return after


def parse_section(read: Reader, offset: int, size: int, out: FatbinArchs) -> None:
    """Every container of one fat-binary section (zero padding between containers is skipped)."""
    pos, end = offset, offset + size
    while pos + _CONTAINER.size <= end:
        first = read(pos, 8)
        if first == b"\0" * 8:  # alignment padding
            pos += 8
            continue
        pos = parse_container(read, pos, end, out)


def _elf_sections(read: Reader, file_size: int) -> Iterator[tuple[str, int, int, int]]:
    """(name, type, offset, size) of each section of a little-endian ELF64 file."""
    ident = read(0, 64)
    if len(ident) < 64:
        raise Malformed("shorter than an ELF header")
    if ident[:4] != b"\x7fELF":
        raise Malformed("not an ELF file")
    if ident[4] != 2 or ident[5] != 1:
        raise Malformed("not a little-endian 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", ident, 0x28)
    entsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    if shoff == 0:
        raise Malformed("no section header table (stripped of its sections)")
    if entsize != _SHDR.size:
        raise Malformed(f"a section header size of {entsize} bytes")
    if shoff + _SHDR.size > file_size:
        raise Malformed("the section header table lies past the end of the file")
    zero = _SHDR.unpack(_read_exact(read, shoff, _SHDR.size, "the section header table"))
    shnum = shnum or zero[5]
    shstrndx = zero[7] if shstrndx == 0xFFFF else shstrndx
    if not 0 < shnum <= MAX_SECTIONS:
        raise Malformed(f"{shnum} sections")
    if shoff + shnum * _SHDR.size > file_size:
        raise Malformed("the section header table runs past the end of the file")
    table = _read_exact(read, shoff, shnum * _SHDR.size, "the section header table")
    headers = [_SHDR.unpack_from(table, i * _SHDR.size) for i in range(shnum)]
    if shstrndx >= shnum:
        raise Malformed("the section-name table's index is out of range")
    names_at, names_size = headers[shstrndx][4], headers[shstrndx][5]
    if names_size > MAX_SECTION_NAMES_BYTES or names_at + names_size > file_size:
        raise Malformed("the section-name table runs past the end of the file")
    names = _read_exact(read, names_at, names_size, "the section-name table")
    for h in headers:
        name_at = h[0]
        end = names.find(b"\0", name_at, name_at + 64)
        name = names[name_at:end].decode("ascii", "replace") if 0 <= name_at < len(names) and end >= 0 else ""
        yield name, h[1], h[4], h[5]


def parse_elf(read: Reader, file_size: int, out: FatbinArchs | None = None) -> FatbinArchs:
    """The fat-binary architectures of the ELF file that ``read(offset, size)`` reads; never raises
    for a malformed file (``error`` says why)."""
    out = FatbinArchs() if out is None else out
    try:
        for name, kind, offset, size in list(_elf_sections(read, file_size)):
            if name not in FATBIN_SECTIONS or kind == 8:  # SHT_NOBITS: no bytes in the file
                continue
            if offset + size > file_size:
                raise Malformed(f"section {name} runs past the end of the file")
            out.has_fatbin = True
            parse_section(read, offset, size, out)
    except Malformed as exc:
        out.error = f"could not read: {exc}"
    return out


def parse_bytes(data: bytes) -> FatbinArchs:
    """:func:`parse_elf` over an ELF file held in memory."""
    return parse_elf(lambda offset, size: data[offset:offset + max(size, 0)], len(data))


def read_file(path: str | os.PathLike[str]) -> FatbinArchs:
    """The fat-binary architectures of the shared object at ``path`` (a regular file; headers only)."""
    out = FatbinArchs()
    try:
        fd, info = open_regular(path)
    except OSError as exc:
        out.error = f"could not read: {exc.strerror or type(exc).__name__}"
        return out
    try:
        return parse_elf(lambda offset, size: os.pread(fd, size, offset), info.st_size, out)
    except OSError as exc:  # an I/O error in the middle (a file on a failing disk, a vanished mount)
        out.error = f"could not read: {exc.strerror or type(exc).__name__}"
        return out
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- compatibility
def _split(name: str) -> tuple[str, int, int, str] | None:
    """'sm_103f' -> ('sm', 10, 3, 'f'); None for a name that is not an architecture."""
    kind, _, rest = name.partition("_")
    suffix = rest[-1] if rest[-1:] in ("a", "f") else ""
    digits = rest[:-1] if suffix else rest
    if kind not in ("sm", "compute") or not digits.isdigit() or len(digits) < 2:
        return None
    return kind, int(digits[:-1]), int(digits[-1]), suffix


def _capability(capability: str) -> tuple[int, int] | None:
    major, _, minor = (capability or "").partition(".")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None


def runs_on(name: str, capability: str) -> bool:
    """Whether the target ``name`` (sm_86, sm_90a, compute_120, ...) runs on a GPU of ``capability``
    ('8.6'): a cubin natively, PTX through the driver's JIT."""
    arch, cc = _split(name), _capability(capability)
    if arch is None or cc is None:
        return False
    kind, major, minor, suffix = arch
    if suffix == "a":
        return (major, minor) == cc
    if kind == "sm" or suffix == "f":
        return major == cc[0] and minor <= cc[1]
    return (major, minor) <= cc


def verdict(archs: FatbinArchs, capability: str) -> str:
    """'sass' (a cubin runs), 'ptx' (only JIT-compiled PTX runs) or 'none' on a GPU of ``capability``."""
    if any(runs_on(a, capability) for a in archs.sass):
        return "sass"
    if any(runs_on(a, capability) for a in archs.ptx):
        return "ptx"
    return "none"


# --------------------------------------------------------------------------- finding the extensions
# Top-level entries of site-packages left out: torch itself (its arch list is judged by the
# environment probe), NVIDIA's CUDA libraries (cuBLAS, cuDNN, NCCL: pinned by torch's build), triton
# (compiles its kernels at run time) and auditwheel's vendored libraries (``<pkg>.libs``).
SKIPPED_TOP = frozenset({"torch", "nvidia", "triton", "__pycache__"})
MAX_FILES = 3000
MAX_DEPTH = 8


def _shared_objects(site_dir: str, deadline: float) -> Iterator[str]:
    """Paths of the shared objects under ``site_dir`` (not following symlinks), top entries skipped as
    above, to MAX_DEPTH folders deep; the walk ends at ``deadline`` (monotonic) however many folders
    are left."""
    stack: list[tuple[str, int]] = [(site_dir, 0)]
    while stack and time.monotonic() <= deadline:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError:
            continue
        for entry in listed:
            name = entry.name
            if depth == 0 and (name in SKIPPED_TOP or name.endswith((".dist-info", ".egg-info", ".libs"))):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth + 1 < MAX_DEPTH and name != "__pycache__":
                        stack.append((entry.path, depth + 1))
                elif entry.is_file(follow_symlinks=False) and (name.endswith(".so") or ".so." in name):
                    yield entry.path
            except OSError:
                continue


class ExtensionScan:
    """The CUDA shared objects found under one site-packages folder: ``found`` maps each one's path
    relative to it to its :class:`FatbinArchs`; ``examined`` counts the shared objects read;
    ``stopped`` says why the scan ended early (file count or time), else ''."""

    __slots__ = ("site_dir", "found", "examined", "stopped", "seconds", "distributions")

    def __init__(self, site_dir: str) -> None:
        self.site_dir = site_dir
        self.found: dict[str, FatbinArchs] = {}
        self.examined = 0
        self.stopped = ""
        self.seconds = 0.0
        #: path -> the distribution (pip's name) that installed it, filled by :meth:`distribution`
        self.distributions: dict[str, str] = {}

    def distribution(self, path: str) -> str:
        """The distribution that installed ``path`` (from the RECORD files of site-packages' .dist-info
        folders: 'flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so' -> 'flash_attn'); the path's first
        component where no RECORD names it."""
        if not self.distributions and self.found:
            self.distributions = _record_owners(self.site_dir, set(self.found))
        return self.distributions.get(path) or path.split(os.sep, 1)[0].split(".", 1)[0]


MAX_RECORD_BYTES = 8 * 2 ** 20


def _record_owners(site_dir: str, paths: set[str]) -> dict[str, str]:
    """path -> distribution name, for the ``paths`` (relative to ``site_dir``) that a RECORD lists."""
    owners: dict[str, str] = {}
    try:
        with os.scandir(site_dir) as entries:
            folders = sorted(e.name for e in entries if e.name.endswith(".dist-info"))
    except OSError:
        return owners
    for folder in folders:
        name = folder[:-len(".dist-info")].split("-", 1)[0]
        try:
            fd, info = open_regular(os.path.join(site_dir, folder, "RECORD"))
        except OSError:
            continue
        try:
            text = os.read(fd, min(info.st_size, MAX_RECORD_BYTES)).decode("utf-8", "replace")
        except OSError:
            continue
        finally:
            os.close(fd)
        for line in text.splitlines():
            listed = os.path.normpath(line.split(",", 1)[0])
            if listed in paths:
                owners.setdefault(listed, name)
        if len(owners) == len(paths):
            break
    return owners


def scan_site_packages(site_dir: str, time_budget_s: float = 3.0, max_files: int = MAX_FILES) -> ExtensionScan:
    """Read the fat-binary headers of every shared object of ``site_dir``'s packages (see
    SKIPPED_TOP), within ``time_budget_s`` and ``max_files``; keeps those that carry GPU code."""
    scan = ExtensionScan(site_dir)
    started = time.monotonic()
    deadline = started + time_budget_s
    for path in _shared_objects(site_dir, deadline):
        if scan.examined >= max_files:
            scan.stopped = f"stopped after {max_files} shared objects"
            break
        if time.monotonic() > deadline:
            break
        scan.examined += 1
        archs = read_file(path)
        if archs.has_fatbin:
            scan.found[os.path.relpath(path, site_dir)] = archs
    scan.seconds = time.monotonic() - started
    if not scan.stopped and time.monotonic() > deadline:
        scan.stopped = f"stopped after {time_budget_s:g} s ({scan.examined} shared objects read)"
    return scan


# Time the scan may take: `report --quick` (and the exporter's and the TUI's quick verdict) must stay
# well under a second; this site-packages (332 shared objects, torch and NVIDIA's libraries left out)
# takes 0.13 s with its files in the page cache (0.34 s on the first scan of this session). The full
# report allows more.
QUICK_SCAN_S = 0.5
FULL_SCAN_S = 3.0
_CACHE: dict[tuple[str, int], ExtensionScan] = {}


def cached_scan(site_dir: str, time_budget_s: float) -> ExtensionScan:
    """:func:`scan_site_packages`, kept for this process while ``site_dir`` is unchanged (a package
    installed or removed changes the folder's mtime); a scan that stopped early is not kept."""
    try:
        key = (site_dir, os.stat(site_dir).st_mtime_ns)
    except OSError:
        return scan_site_packages(site_dir, time_budget_s)
    if key not in _CACHE:
        scan = scan_site_packages(site_dir, time_budget_s)
        if scan.stopped:
            return scan
        _CACHE.clear()
        _CACHE[key] = scan
    return _CACHE[key]
