"""Lay a machine's files out under a folder as the kernel and the distribution lay them out, for
gpudoctor.backends.stack's readers (which take that folder as their root): the tests and the
real-case corpus describe a machine as ``{path: content}``.

A value is the file's text; ``{"link": target}`` a symlink (relative or absolute, as ``ldconfig``
and the driver packages make them); ``{"dir": true}`` an empty folder; ``{"file": true}`` an empty
file (a marker such as /.dockerenv, or a library whose bytes do not matter); ``{"bytes": b"..."}``
a file of those bytes (a library's ELF header: :func:`elf_header`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping


def lay_out(root: Path, files: Mapping[str, Any]) -> Path:
    for name, what in files.items():
        path = root / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(what, str):
            path.write_text(what)
        elif what.get("link"):
            os.symlink(what["link"], path)
        elif what.get("dir"):
            path.mkdir(exist_ok=True)
        elif "bytes" in what:
            path.write_bytes(what["bytes"])
        else:
            path.write_bytes(b"")
    return root


def pci_device(address: str, vendor: str) -> dict[str, str]:
    """One PCI function's vendor file: ``pci_device("0000:65:00.0", "0x10de")``."""
    return {f"sys/bus/pci/devices/{address}/vendor": vendor + "\n"}


def elf_header(bits: int) -> bytes:
    """The first 64 bytes of a little-endian shared object (ET_DYN) of ``bits`` 32 or 64: e_ident's
    EI_CLASS (byte 4) is 1 (ELFCLASS32) or 2 (ELFCLASS64), then the machine (i386: 3, x86-64: 62)."""
    elf_class, machine = {32: (1, 3), 64: (2, 62)}[bits]
    ident = b"\x7fELF" + bytes([elf_class, 1, 1, 0]) + bytes(8)
    return (ident + (3).to_bytes(2, "little") + machine.to_bytes(2, "little") + (1).to_bytes(4, "little")).ljust(64, b"\0")


def driver_library(folder: str, name: str, version: str, bits: int | None = None) -> dict[str, Any]:
    """A driver library as its package installs it: the real file ``name.so.<version>`` and the
    ``name.so.1`` link to it (``driver_library("usr/lib/x86_64-linux-gnu", "libnvidia-ml", "550.90.07")``);
    with ``bits`` the real file starts with that ELF class's header (:func:`elf_header`)."""
    real: dict[str, Any] = {"file": True} if bits is None else {"bytes": elf_header(bits)}
    return {f"{folder}/{name}.so.{version}": real, f"{folder}/{name}.so.1": {"link": f"{name}.so.{version}"}}


def module_version_file(version: str, open_module: bool = False) -> dict[str, str]:
    """/proc/driver/nvidia/version as the proprietary or the open kernel module writes it."""
    kind = "NVIDIA UNIX Open Kernel Module for x86_64" if open_module else "NVIDIA UNIX x86_64 Kernel Module"
    return {"proc/driver/nvidia/version": f"NVRM version: {kind}  {version}  Release Build  (dvs-builder@U16)  "
                                          "Thu Jan  1 00:00:00 UTC 2026\nGCC version:  gcc version 12.3.0\n"}
