"""The PCIe link's ceiling for host<->device copies, and what a copy above it means.

NVML reports the most a device and its slot can train to (``pcie_gen_max``,
``pcie_width_max``) and what the link runs at now (``..._current``; an idle link trains
down to save power, so "now" is read right after the copies). The theoretical
one-direction rate of gen x width is the ceiling a pinned copy is compared with.

Two ways a copy can beat that ceiling, and they mean different things:
- the host link is not PCIe: GH200/GB200-class superchips join CPU and GPU with
  NVLink-C2C, far faster than any PCIe link;
- the ceiling is wrong: in a virtual machine the GPU sits behind a virtual root port that
  may report a low generation or width, while the physical link runs faster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Per lane and direction, after line encoding (8b/10b up to gen 2, 128b/130b for gen 3-5,
# 242/256 FLIT payload for gen 6), in GB/s. Source: PCI-SIG base specifications 1.0-6.0
# (transfer rates 2.5, 5, 8, 16, 32, 64 GT/s).
PCIE_LANE_GBS: dict[int, float] = {
    1: 2.5 * 8 / 10 / 8,
    2: 5.0 * 8 / 10 / 8,
    3: 8.0 * 128 / 130 / 8,
    4: 16.0 * 128 / 130 / 8,
    5: 32.0 * 128 / 130 / 8,
    6: 64.0 * 242 / 256 / 8,
}


def pcie_ceiling_gbs(generation: object, width: object) -> float | None:
    """Theoretical one-direction data rate of a PCIe link (e.g. gen 4 x16: 31.5 GB/s).

    Packet headers and flow control cost a further 5-15 %, so no transfer reaches it.
    None when the generation or width is unknown (NVML said NotSupported, a virtual GPU).
    """
    if not isinstance(generation, int) or not isinstance(width, int) or isinstance(generation, bool):
        return None
    lane = PCIE_LANE_GBS.get(generation)
    if lane is None or width <= 0:
        return None
    return lane * width



def _known(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class LinkCeiling:
    """The link a host copy is judged against: generation, width, rate, and how it was found."""

    generation: int | None
    width: int | None
    gb_per_s: float | None
    #: "" when NVML's maximum was used as read; else why another figure was taken
    note: str = ""

    @property
    def label(self) -> str:
        return f"PCIe gen {self.generation} x{self.width}" if self.gb_per_s else "PCIe link unknown"


def link_ceiling(gen_max: object, width_max: object, gen_now: object = None, width_now: object = None) -> LinkCeiling:
    """The ceiling from NVML's maximum link, cross-checked against the link trained now.

    A link cannot run above its maximum: when the current generation or width is higher
    than the reported maximum, the maximum is wrong (a virtual root port in a VM), and
    the larger of each is used.
    """
    g_max, w_max, g_now, w_now = _known(gen_max), _known(width_max), _known(gen_now), _known(width_now)
    gen = max(g for g in (g_max, g_now) if g is not None) if (g_max or g_now) else None
    width = max(w for w in (w_max, w_now) if w is not None) if (w_max or w_now) else None
    note = ""
    if (g_max and g_now and g_now > g_max) or (w_max and w_now and w_now > w_max):
        note = (f"NVML's maximum link (gen {g_max} x{w_max}) is below the link trained now "
                f"(gen {g_now} x{w_now}): the maximum is misreported, as behind a VM's virtual root port; "
                f"gen {gen} x{width} is used")
    elif g_max is None or w_max is None:
        gen, width = g_max, w_max  # no maximum: no ceiling (the current link may be trained down)
    return LinkCeiling(gen, width, pcie_ceiling_gbs(gen, width), note)


#: Device names whose host link is NVLink-C2C, not PCIe: the Grace superchips
#: ("NVIDIA GH200 480GB", "NVIDIA GB200").
C2C_NAME = re.compile(r"\bg[hb]\d{3}\b", re.IGNORECASE)


def host_link_is_c2c(device_name: object) -> bool:
    return isinstance(device_name, str) and bool(C2C_NAME.search(device_name))
