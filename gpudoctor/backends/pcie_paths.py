"""The host side of peer-to-peer paths between GPUs: the IOMMU and PCIe ACS, read from sysfs.

NCCL and CUDA copy between two GPUs on one PCIe tree directly (peer-to-peer). Two host settings
break that path, and neither is visible to NVML:

* **ACS** (PCIe Access Control Services) on a switch's downstream port or a root port. With its
  P2P request redirect (``ReqRedir``), completion redirect (``CmpltRedir``) or egress control
  (``EgressCtrl``) on, every peer-to-peer request is sent up to the root complex, where it is slow
  or, through an IOMMU, dropped: NCCL's collectives hang or return wrong data (NCCL's
  troubleshooting guide, "PCI Access Control Services"). ACS is extended capability 0x000D of a
  bridge's configuration space; its control register is the 16 bits at capability + 6
  (``lspci -vvv``'s "ACSCtl:" line). The extended space (beyond 256 bytes) of
  ``/sys/bus/pci/devices/<bdf>/config`` is readable by root only: for others the file is 64 bytes.
* **The IOMMU in translation mode**: each GPU's IOMMU group has a default domain type
  (``/sys/kernel/iommu_groups/<n>/type``: ``DMA`` or ``DMA-FQ`` translate, ``identity`` passes
  through), set by the kernel command line (``iommu=pt``, ``intel_iommu=on``, ``amd_iommu=``,
  ``iommu.passthrough=``).

Every reader takes ``root`` (``"/"`` live) so that tests lay out the files as the kernel does.
What cannot be read (not root, no sysfs in a container, a virtual machine whose bridges are
virtual) is said as such, never as "no problem".
"""

from __future__ import annotations

import os
import re

from gpudoctor.core._record import field, record

#: The file system root the live probe reads (benchmarks/fake_nvml points it at a laid-out tree).
ROOT = "/"
#: PCIe extended capability id of ACS, and where its control register sits in it.
ACS_CAP_ID = 0x000D
ACS_CTRL_OFFSET = 6
EXTENDED_START = 0x100
CONFIG_MAX = 4096
#: ACS control bits in the order lspci names them ("ACSCtl: SrcValid+ TransBlk- ...").
ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
#: The bits that send peer-to-peer traffic away from the direct path (to the root complex or nowhere).
REDIRECT_BITS = ("ReqRedir", "CmpltRedir", "EgressCtrl")
#: IOMMU default domain types that translate every DMA address (peer-to-peer included).
TRANSLATING = frozenset({"DMA", "DMA-FQ"})

_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_ACSCTL = re.compile(r"ACSCtl:\s*((?:\w+[+-]\s*)+)")


@record(frozen=True)
class AcsControl:
    """One bridge's ACS control: ``bits`` maps each of :data:`ACS_BITS` to on/off; ``raw`` the register."""

    bdf: str
    bits: dict[str, bool]
    raw: int | None = None

    @property
    def redirects(self) -> list[str]:
        return [name for name in REDIRECT_BITS if self.bits.get(name)]

    def text(self) -> str:
        """As lspci writes it: 'SrcValid+ TransBlk- ReqRedir+ ...'."""
        return " ".join(f"{name}{'+' if self.bits.get(name) else '-'}" for name in ACS_BITS)


def acs_from_register(bdf: str, value: int) -> AcsControl:
    return AcsControl(bdf, {name: bool(value >> bit & 1) for bit, name in enumerate(ACS_BITS)}, value & 0xFFFF)


def acs_from_config(bdf: str, config: bytes) -> AcsControl | None | str:
    """The ACS control of a bridge from its configuration space bytes: an :class:`AcsControl`,
    None when the bridge has no ACS capability, or a reason string when the extended space is
    not in ``config`` (256 bytes or fewer: read without root)."""
    if len(config) <= EXTENDED_START:
        return "its configuration space beyond 64 bytes is readable by root only (CAP_SYS_ADMIN)"
    offset, seen = EXTENDED_START, 0
    while EXTENDED_START <= offset <= len(config) - 8 and seen < 96:
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ACS_CAP_ID:
            return acs_from_register(bdf, int.from_bytes(config[offset + ACS_CTRL_OFFSET:offset + 8], "little"))
        offset, seen = (header >> 20) & 0xFFC, seen + 1
    return None


def acs_from_lspci(text: str, bdf: str = "") -> list[AcsControl]:
    """Every "ACSCtl:" line of ``lspci -vvv`` output, in order (``bdf`` names them when the text is
    one device's, ``lspci -vvv -s <bdf>``)."""
    found = []
    for match in _ACSCTL.finditer(text):
        bits = {}
        for word in match.group(1).split():
            name, sign = word[:-1], word[-1]
            if name in ACS_BITS:
                bits[name] = sign == "+"
        found.append(AcsControl(bdf, bits))
    return found


# --------------------------------------------------------------------------- sysfs
def _path(root: str, *parts: str) -> str:
    return os.path.join(root, *(p.lstrip("/") for p in parts))


def _read_text(path: str, limit: int = 8192) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def upstream_bridges(bdf: str, root: str = "/") -> list[str] | None:
    """The PCIe bridges above a device, from the root port down (its sysfs path's parents); None
    when the device is not in sysfs here (no /sys, a container without it, another machine)."""
    link = _path(root, "sys/bus/pci/devices", bdf)
    if not os.path.exists(link):
        return None
    parts = os.path.realpath(link).split(os.sep)
    chain = [p for p in parts if _BDF.match(p)]
    return chain[:-1] if chain and chain[-1] == bdf else chain


def read_acs(bdf: str, root: str = "/") -> AcsControl | None | str:
    """A bridge's ACS control from its sysfs config file (see :func:`acs_from_config`)."""
    try:
        with open(_path(root, "sys/bus/pci/devices", bdf, "config"), "rb") as fh:
            config = fh.read(CONFIG_MAX)
    except OSError as exc:
        return f"its configuration space cannot be read ({exc.strerror})"
    return acs_from_config(bdf, config)


@record
class IommuState:
    """The IOMMU as the kernel set it up. ``units``: /sys/class/iommu entries (empty: no IOMMU
    driver active); ``cmdline``: the IOMMU-related words of /proc/cmdline; ``group_types``: each
    GPU's IOMMU group default domain type (bdf -> 'DMA-FQ'; None: no group, so no translation)."""

    readable: bool
    units: list[str] = field(default_factory=list)
    cmdline: list[str] = field(default_factory=list)
    group_types: dict[str, str | None] = field(default_factory=dict)
    reason: str = ""

    def translating(self) -> list[str]:
        """The GPUs whose DMA (peer-to-peer included) the IOMMU translates."""
        return [bdf for bdf, kind in self.group_types.items() if kind in TRANSLATING]


_CMDLINE_WORDS = re.compile(r"^(iommu|intel_iommu|amd_iommu|iommu\.passthrough|iommu\.strict|pci)=")


def cmdline_words(cmdline: str) -> list[str]:
    """The IOMMU and PCI words of a kernel command line (``iommu=pt``, ``intel_iommu=on``, ``pci=noacs``)."""
    return [w for w in cmdline.split() if _CMDLINE_WORDS.match(w)][:16]


def group_type_from_cmdline(words: list[str], units: list[str]) -> str | None:
    """The default domain type a kernel without the ``type`` file (before 5.11) would use: identity
    with ``iommu=pt`` or ``iommu.passthrough=1``, else DMA where an IOMMU is active."""
    if not units or any(w in ("intel_iommu=off", "amd_iommu=off", "iommu=off") for w in words):
        return None
    if any(w in ("iommu=pt", "iommu.passthrough=1", "iommu.passthrough=y") for w in words):
        return "identity"
    return "DMA"


def read_iommu(bdfs: list[str], root: str = "/") -> IommuState:
    """The IOMMU state for the GPUs ``bdfs`` (sysfs names: '0000:17:00.0')."""
    sys_pci = _path(root, "sys/bus/pci/devices")
    if not os.path.isdir(sys_pci):
        return IommuState(False, reason="/sys/bus/pci is not here (a container without sysfs, or not Linux)")
    try:
        units = sorted(os.listdir(_path(root, "sys/class/iommu")))[:32]
    except OSError:
        units = []
    words = cmdline_words(_read_text(_path(root, "proc/cmdline")) or "")
    state = IommuState(True, units, words)
    for bdf in bdfs:
        group = _path(sys_pci, bdf, "iommu_group")
        if not os.path.exists(group):
            state.group_types[bdf] = None
            continue
        kind = _read_text(os.path.join(os.path.realpath(group), "type"), 64)
        state.group_types[bdf] = kind.strip() if kind else group_type_from_cmdline(words, units)
    return state


def in_virtual_machine(root: str = "/") -> bool:
    """The CPU flags say a hypervisor runs this machine: its PCIe bridges are then virtual."""
    text = _read_text(_path(root, "proc/cpuinfo"), 65536) or ""
    return any(line.startswith("flags") and " hypervisor" in line for line in text.splitlines())


__all__ = ["ACS_BITS", "ROOT", "REDIRECT_BITS", "AcsControl", "IommuState", "acs_from_config", "acs_from_lspci",
           "acs_from_register", "cmdline_words", "in_virtual_machine", "read_acs", "read_iommu",
           "upstream_bridges"]
