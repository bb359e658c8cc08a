"""A host's PCIe tree and IOMMU laid out as the kernel lays them out, under a temporary root.

    root = pcie_tree.lay_out(tmp_path, acs=0x1d)   # two GPUs under one switch, ACS redirect on
    pcie_paths.read_acs("0000:02:08.0", str(root))

The tree: root port 0000:00:01.0 -> switch upstream port 0000:01:00.0 -> downstream ports
0000:02:08.0 and 0000:02:10.0 -> GPUs 0000:03:00.0 and 0000:04:00.0 (``/sys/devices/pci0000:00/...``,
with ``/sys/bus/pci/devices/<bdf>`` links to them, as sysfs has). Each bridge's ``config`` holds
an AER extended capability at 0x100 and ACS (id 0x000D) at 0x148 with the control register given;
``readable=False`` writes the 64 bytes a user other than root reads. ``iommu_type`` gives each GPU an
IOMMU group with that default domain type (None: no IOMMU group at all).
"""

from __future__ import annotations

import os
from pathlib import Path

GPUS = ("0000:03:00.0", "0000:04:00.0")
ROOT_PORT = "0000:00:01.0"
SWITCH_UP = "0000:01:00.0"
DOWNSTREAM = ("0000:02:08.0", "0000:02:10.0")
ACS_AT = 0x148


def config_space(acs_control: int | None, readable: bool = True) -> bytes:
    """A bridge's configuration space: 4096 bytes (root) with AER at 0x100 and, unless ``acs_control``
    is None, ACS at 0x148; or the first 64 bytes (another user)."""
    space = bytearray(4096)
    space[0:4] = (0x10B5 | 0x8747 << 16).to_bytes(4, "little")  # a PLX switch's vendor and device id
    next_cap = ACS_AT if acs_control is not None else 0
    space[0x100:0x104] = (0x0001 | 1 << 16 | next_cap << 20).to_bytes(4, "little")  # AER, version 1
    if acs_control is not None:
        space[ACS_AT:ACS_AT + 4] = (0x000D | 1 << 16).to_bytes(4, "little")  # ACS, version 1, last
        space[ACS_AT + 4:ACS_AT + 6] = (0x005F).to_bytes(2, "little")  # capabilities: V B R C U T
        space[ACS_AT + 6:ACS_AT + 8] = acs_control.to_bytes(2, "little")
    return bytes(space if readable else space[:64])


def lay_out(base: Path, acs: int | None = 0, *, readable: bool = True, iommu_type: str | None = "identity",
            cmdline: str = "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet", vm: bool = False) -> Path:
    root = base / "host"
    devices = root / "sys" / "devices" / "pci0000:00"
    bus = root / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True)
    port = devices / ROOT_PORT
    switch = port / SWITCH_UP
    placed = {ROOT_PORT: port, SWITCH_UP: switch}
    for down, gpu in zip(DOWNSTREAM, GPUS):
        placed[down] = switch / down
        placed[gpu] = switch / down / gpu
    for bdf, path in placed.items():
        path.mkdir(parents=True, exist_ok=True)
        bridge = bdf not in GPUS
        (path / "config").write_bytes(config_space(acs if bridge else None, readable))
        os.symlink(os.path.relpath(path, bus), bus / bdf)
    for n, gpu in enumerate(GPUS):
        if iommu_type is not None:
            group = root / "sys" / "kernel" / "iommu_groups" / str(20 + n)
            group.mkdir(parents=True)
            (group / "type").write_text(iommu_type + "\n")
            os.symlink(os.path.relpath(group, placed[gpu]), placed[gpu] / "iommu_group")
    if iommu_type is not None:
        (root / "sys" / "class" / "iommu" / "dmar0").mkdir(parents=True)
    (root / "proc").mkdir()
    (root / "proc" / "cmdline").write_text(cmdline + "\n")
    flags = "fpu vme de pse tsc msr pae" + (" hypervisor" if vm else "")
    (root / "proc" / "cpuinfo").write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    return root
