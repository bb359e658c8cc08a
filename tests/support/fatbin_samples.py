"""Small ELF64 shared objects with CUDA fat binaries, built byte by byte for the fat-binary reader's
tests (the layout gpudoctor/backends/fatbin.py's docstring describes)."""

from __future__ import annotations

import struct

FATBIN_MAGIC = 0xBA55ED50
PTX, ELF = 1, 2
COMPRESSED = 0x8000
ARCH_SPECIFIC = 0x100000
FAMILY_SPECIFIC = 0x200000


def entry(kind: int, arch: int, flags: int = 0x11, payload: bytes = b"\0" * 24, header_size: int = 64) -> bytes:
    """One fat-binary entry: its header (kind, header size, payload size, architecture, flags) and payload."""
    head = struct.pack("<HHIQIIHHIIIQQQ", kind, 0x0101, header_size, len(payload), 0, 0, 8, 1, arch, 0, 0,
                       flags, 0, len(payload) if flags & COMPRESSED else 0)
    return head + b"\0" * (header_size - len(head)) + payload


def container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


def sm(*archs: int, flags: int = 0x11) -> list[bytes]:
    return [entry(ELF, a, flags) for a in archs]


def elf(sections: dict[str, bytes], nobits: tuple[str, ...] = ()) -> bytes:
    """A little-endian ELF64 shared object with these sections (and a null section and .shstrtab)."""
    names = [""] + list(sections) + [".shstrtab"]
    strtab = b""
    name_at = []
    for name in names:
        name_at.append(len(strtab))
        strtab += name.encode() + b"\0"
    body = bytearray(b"\0" * 64)
    placed = [(0, 0)]
    for name, data in sections.items():
        while len(body) % 8:
            body += b"\0"
        placed.append((len(body), len(data)))
        if name not in nobits:
            body += data
    placed.append((len(body), len(strtab)))
    body += strtab
    while len(body) % 8:
        body += b"\0"
    shoff = len(body)
    for i, (name, (offset, size)) in enumerate(zip(names, placed)):
        kind = 0 if i == 0 else 8 if name in nobits else 3 if name == ".shstrtab" else 1
        body += struct.pack("<IIQQQQIIQQ", name_at[i], kind, 0, 0, offset, size, 0, 0, 8 if i else 0, 0)
    head = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    head += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(names), len(names) - 1)
    body[:64] = head
    return bytes(body)


def extension(*containers: bytes, section: str = ".nv_fatbin") -> bytes:
    return elf({".text": b"\xc3" * 16, section: b"".join(containers)})
