"""The p2p probe's readings and judgements, apart from its run (tests and the real-case corpus call them).

A pair of GPUs is judged from three sources: NVML's topology and P2P status (the driver's view),
the host's PCIe bridges between them with their ACS control, and the IOMMU's mode for each GPU
(gpudoctor.backends.pcie_paths). In ``--full`` a copy between them checks the bytes and the rate.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from gpudoctor.core._record import field, record

from gpudoctor.core import findings
from gpudoctor.backends import pcie_paths
from gpudoctor.backends.na import is_na
from gpudoctor.backends.nvml import nvlink_version_words
from gpudoctor.backends.base import DeviceStatic
from gpudoctor.core.model import ProbeResult

from . import _wording
from ._pcie import pcie_ceiling_gbs

if TYPE_CHECKING:
    from gpudoctor.backends.base import GpuBackend, IntOrNA

#: NVML's topology levels and peer-to-peer statuses in words (probes/_wording.py).
TOPOLOGY, P2P_STATUS = _wording.TOPOLOGY, _wording.P2P_STATUS

#: NVLink's rate per link and direction by version, "major.minor" as NVML names it (its
#: NVML_NVLINK_VERSION_* constants), in GB/s: NVIDIA's NVLink generations (1.0: 20; 2.0 to 4.0: 25;
#: 5.0: 50). 3.1 is GA102's (RTX 3090, RTX A6000, A40 bridges): 112.5 GB/s both ways over 4 links,
#: 14.0625 per link and direction. 2.2 (Turing's bridges): 25. Another minor version: not known.
NVLINK_LINK_GBS = {"1.0": 20.0, "2.0": 25.0, "2.2": 25.0, "3.0": 25.0, "3.1": 14.0625, "4.0": 25.0, "5.0": 50.0}
#: The NVLink generations each GPU architecture has (nvmlDeviceGetArchitecture's number: 4 Pascal,
#: 5 Volta, 6 Turing, 7 Ampere, 9 Hopper, 10 Blackwell). nvml.h answers a link's version as a plain
#: unsigned int, which the binding's nvmlNvlinkVersion_t names; H100 links have answered 7, named 5.0
#: (public NCCL benchmark scripts give Hopper 25 GB/s per link over that name). A name its GPU's
#: architecture has no such generation of is not judged: the ceiling waits for a GPU run to settle it.
NVLINK_GENERATIONS = {4: {"1.0"}, 5: {"2.0", "2.2"}, 6: {"2.0", "2.2"}, 7: {"3.0", "3.1"}, 9: {"4.0"},
                      10: {"5.0"}}
# Ours: a peer copy below this share of its link is slow. A direct copy reaches 70-90 % of the
# link; one sent through the root complex (ACS redirect, or GPUs on different sockets) far less.
SLOW_PCT = 40.0
# How many GPU pairs a grouped finding names before "and N more".
PAIRS_NAMED = 6


@record
class HostPaths:
    """What the host says of the PCIe paths: sysfs readable, a virtual machine, the IOMMU."""

    readable: bool
    reason: str = ""
    vm: bool = False
    iommu: pcie_paths.IommuState | None = None


@record
class PairPath:
    """Two GPUs (NVML indices), NVML's answer for them (``GpuBackend.p2p``'s P2PReading; a real
    case may post only some of its fields), the PCIe bridges between them (None: not known here)
    and each bridge's ACS control (an AcsControl, None for a bridge without ACS, or why it cannot
    be read)."""

    a: int
    b: int
    nvml: Mapping[str, IntOrNA]
    bus_ids: tuple[str | None, str | None] = (None, None)
    bridges: list[str] | None = None
    acs: dict[str, pcie_paths.AcsControl | None | str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"GPU {self.a} and GPU {self.b}"

    def status(self, key: str) -> int | None:
        value = self.nvml.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def over_nvlink(self) -> bool:
        return self.status("nvlink") == 0

    def pcie_p2p(self) -> bool | None:
        """True: NVML allows direct reads and writes; False: it does not (copies go through host
        memory); None: NVML did not say."""
        read, write = self.status("read"), self.status("write")
        if read is None and write is None:
            return None
        return read == 0 and write in (0, None)

    def refusal(self) -> str:
        code = next((c for c in (self.status("read"), self.status("write")) if c not in (None, 0)), 6)
        return P2P_STATUS.get(code, f"status {code}")

    def to_dict(self) -> dict[str, Any]:
        level = self.status("topology")
        return {"gpus": [self.a, self.b], "topology": TOPOLOGY.get(level, level) if level is not None else None,
                "p2p": {k: P2P_STATUS.get(v, v) if isinstance(v, int) else str(v) for k, v in self.nvml.items()
                        if k != "topology"},
                "bridges": self.bridges,
                "acs": {bdf: (a.text() if isinstance(a, pcie_paths.AcsControl) else a) for bdf, a in self.acs.items()}}


def bridges_between(above_a: list[str], above_b: list[str]) -> list[str]:
    """The bridges peer traffic between two devices passes and that decide its route: those above
    one and not the other (a shared switch's downstream ports; the root ports where they differ)."""
    return [bdf for bdf in above_a if bdf not in above_b] + [bdf for bdf in above_b if bdf not in above_a]


def read_pairs(gpu: GpuBackend, indices: list[int], bus_ids: dict[int, str | None], host: HostPaths,
               root: str = "/") -> list[PairPath]:
    """Every pair of ``indices``: NVML's view, and where sysfs is readable the bridges and their ACS."""
    chains: dict[int, list[str] | None] = {}
    for i in indices:
        bus = bus_ids.get(i)
        chains[i] = pcie_paths.upstream_bridges(bus, root) if host.readable and bus else None
    acs_cache: dict[str, pcie_paths.AcsControl | None | str] = {}
    pairs = []
    for n, a in enumerate(indices):
        for b in indices[n + 1:]:
            pair = PairPath(a, b, gpu.p2p(a, b), (bus_ids.get(a), bus_ids.get(b)))
            chain_a, chain_b = chains[a], chains[b]
            if chain_a is not None and chain_b is not None:
                pair.bridges = bridges_between(chain_a, chain_b)
                for bdf in pair.bridges:
                    if bdf not in acs_cache:
                        acs_cache[bdf] = pcie_paths.read_acs(bdf, root)
                    pair.acs[bdf] = acs_cache[bdf]
            pairs.append(pair)
    return pairs


def _named(pairs: list[PairPath]) -> str:
    if len(pairs) == 1:
        return pairs[0].label
    shown = ", ".join(f"{p.a}-{p.b}" for p in pairs[:PAIRS_NAMED])
    more = f" and {len(pairs) - PAIRS_NAMED} more" if len(pairs) > PAIRS_NAMED else ""
    return f"GPU pairs {shown}{more}"


def _acs_redirects(pair: PairPath) -> list[pcie_paths.AcsControl]:
    return [a for a in pair.acs.values() if isinstance(a, pcie_paths.AcsControl) and a.redirects]


def _acs_unknown(pair: PairPath, host: HostPaths) -> tuple[str, str, str] | None:
    """(what, reason, fix) when ACS on this pair's path cannot be read here; None when it was read."""
    words, by_hand = _wording.P2P_UNKNOWN, _wording.ACS_BY_HAND
    if host.vm:
        what, reason, fix = words["vm"]
        return what, reason, fix.format(by_hand=by_hand)
    if pair.bridges is None:
        what, reason, fix = words["not_in_sysfs"]
        return what, host.reason or reason, fix.format(by_hand=by_hand)
    closed = [bdf for bdf, a in pair.acs.items() if isinstance(a, str)]
    if closed:
        what, reason, fix = words["closed"]
        return (what.format(bridges=", ".join(closed)), reason.format(reason=pair.acs[closed[0]]),
                fix.format(bridge=closed[0]))
    return None


def judge(r: ProbeResult, pairs: list[PairPath], host: HostPaths) -> None:
    """The findings for every pair, grouped: ACS redirecting peer traffic (fail), the IOMMU translating
    it (warn), NVML refusing peer-to-peer (a pass note: copies go through host memory), and what
    cannot be read (skip)."""
    redirected: dict[tuple[str, ...], list[PairPath]] = {}
    translated: list[PairPath] = []
    refused: dict[str, list[PairPath]] = {}
    unknown: dict[tuple[str, str, str], list[PairPath]] = {}
    translating = set(host.iommu.translating()) if host.iommu else set()
    for pair in pairs:
        if pair.over_nvlink:
            continue  # NVLink: no PCIe bridge or IOMMU on the way
        direct = pair.pcie_p2p()
        if direct is False:
            refused.setdefault(pair.refusal(), []).append(pair)
            continue
        if direct is None:
            reason = next((str(v.reason) for v in pair.nvml.values() if is_na(v)), "no answer")
            what, why_unread, fix = _wording.P2P_UNKNOWN["nvml_status"]
            unknown.setdefault((what, why_unread.format(reason=reason), fix), []).append(pair)
        bad = [] if host.vm else _acs_redirects(pair)  # a VM's bridges are virtual: their ACS says nothing
        if bad:
            redirected.setdefault(tuple(sorted({a.bdf for a in bad})), []).append(pair)
        elif (why := _acs_unknown(pair, host)) is not None:
            unknown.setdefault(why, []).append(pair)
        if translating & {b for b in pair.bus_ids if b}:
            translated.append(pair)
    for bridges, group in redirected.items():
        flags = "; ".join(sorted({f"{a.bdf}: ACSCtl {a.text()}" for p in group for a in _acs_redirects(p)}))
        p2p = "OK" if all(p.pcie_p2p() for p in group) else "not known"
        r.findings.append(findings.finding("p2p_acs_redirect", label=_named(group), bridges=", ".join(bridges), flags=flags,
                               p2p=p2p, evidence={"pairs": [[p.a, p.b] for p in group]}))
    if translated and host.iommu is not None:
        types = ", ".join(sorted({str(host.iommu.group_types.get(b)) for p in translated for b in p.bus_ids if b}
                                 & pcie_paths.TRANSLATING))
        r.findings.append(findings.finding("p2p_iommu_translates", label=_named(translated), types=types,
                               cmdline=" ".join(host.iommu.cmdline) or "no IOMMU words"))
    for reason, group in refused.items():
        r.findings.append(findings.finding("p2p_not_supported", label=_named(group), reason=reason))
    for (what, reason, fix), group in unknown.items():
        r.findings.append(findings.finding("p2p_unreadable", label=_named(group), what=what, reason=reason, fix=fix))
    if host.iommu is None and any(not p.over_nvlink and p.pcie_p2p() is not False for p in pairs):
        r.findings.append(findings.finding("p2p_unreadable:iommu", label=_named(pairs),
                                           reason=host.reason or "sysfs is not readable here"))


# --------------------------------------------------------------------------- --full: copies
@record(frozen=True)
class PeerCopy:
    """One direct copy between two GPUs: ``seconds`` per copy (None: it did not finish in time),
    ``wrong`` bytes of ``total`` that differ from the source."""

    nbytes: int
    seconds: float | None
    wrong: int
    total: int
    waited_s: float = 0.0

    @property
    def gb_per_s(self) -> float | None:
        return self.nbytes / self.seconds / 1e9 if self.seconds else None


@record(frozen=True)
class Link:
    label: str
    gb_per_s: float | None


def _nvlink_version(name: object) -> str:
    """An NVLink version as NVLINK_LINK_GBS keys it: "4.0" (a bare "4" read as "4.0"), "" if none."""
    text = str(name or "").strip()
    return f"{text}.0" if text.isdigit() else text


def link_of(pair: PairPath, static_a: DeviceStatic, static_b: DeviceStatic,
            nvlinks: Any = None) -> Link:
    """The link a copy between the pair runs over: NVLink (active links to the peer or to a switch,
    times the version's rate) where NVML says peer-to-peer goes over NVLink; else the narrower of
    the two GPUs' PCIe links (generation x width as NVML reports their maximum)."""
    if pair.over_nvlink and isinstance(nvlinks, list):
        peer = pair.bus_ids[1]
        used = [link for link in nvlinks if link.get("active") and
                (link.get("remote_type") == "switch" or link.get("remote_pci_bus_id") == peer)]
        versions = {_nvlink_version(link.get("version_name")) for link in used}
        version = versions.pop() if len(versions) == 1 else ""
        architecture = static_a.get("architecture")
        if isinstance(architecture, int) and architecture in NVLINK_GENERATIONS and \
                version not in NVLINK_GENERATIONS[architecture]:
            version = ""  # named as a generation this GPU has none of: not judged (NVLINK_GENERATIONS)
        rate = NVLINK_LINK_GBS.get(version)
        if used:
            raw = ", ".join(sorted({nvlink_version_words(link.get("version"), link.get("version_name"))
                                    for link in used}))
            return Link(f"NVLink ({len(used)} link(s), version {raw})", rate * len(used) if rate else None)
    if pair.over_nvlink:
        return Link("NVLink", None)
    gens = [v for v in (s.get("pcie_gen_max") for s in (static_a, static_b)) if isinstance(v, int)]
    widths = [v for v in (s.get("pcie_width_max") for s in (static_a, static_b)) if isinstance(v, int)]
    if len(gens) == 2 and len(widths) == 2:
        gen, width = min(gens), min(widths)
        return Link(f"PCIe gen {gen} x{width}", pcie_ceiling_gbs(gen, width))
    return Link("PCIe (link not reported)", None)


def judge_copy(r: ProbeResult, pair: PairPath, copy: PeerCopy, link: Link, direction: str) -> None:
    label = f"{pair.label} ({direction})"
    size = f"{copy.nbytes >> 20} MiB"
    if copy.seconds is None:
        r.findings.append(findings.finding("p2p_copy_hung", label=label, seconds=copy.waited_s,
                               evidence={"pair": [pair.a, pair.b]}))
        return
    if copy.wrong:
        r.findings.append(findings.finding("p2p_copy_corrupt", label=label, size=size, wrong=copy.wrong, total=copy.total,
                               evidence={"pair": [pair.a, pair.b]}))
        return
    gbs = copy.gb_per_s or 0.0
    r.measure("p2p_bandwidth", round(gbs, 2), "GB/s", device=pair.a, reference=link.gb_per_s,
              note=f"{direction}, {size} copies over {link.label}")
    pct = 100.0 * gbs / link.gb_per_s if link.gb_per_s else None
    if pct is not None and pct < SLOW_PCT:
        r.findings.append(findings.finding("p2p_copy_slow", label=label, gbs=gbs, pct=pct, link=link.label,
                               ceiling=link.gb_per_s))
    else:
        r.findings.append(findings.finding("p2p_copy_ok", label=label, gbs=gbs, link=link.label))


#: A timed batch of copies lasts at least this long at the link's ceiling (seconds): long against the
#: GPU's clock and the launch of the first copy (CUDA events time it, not the host's clock).
BATCH_S = 0.020
#: The fewest and the most copies in a timed batch.
MIN_REPEATS, MAX_REPEATS = 5, 2000


def batch_repeats(nbytes: int, ceiling_gbs: float | None, first_s: float) -> int:
    """How many copies of ``nbytes`` make a batch of >= BATCH_S at ``ceiling_gbs`` (or, where the
    ceiling is not known, at the rate of the first copy, ``first_s``)."""
    rate = ceiling_gbs * 1e9 if ceiling_gbs else nbytes / max(first_s, 1e-9)
    return max(MIN_REPEATS, min(MAX_REPEATS, -(-int(BATCH_S * rate) // nbytes)))


def _timed(torch: Any, stream: Any, launch: Callable[[], None], deadline: float,
           clock_s: Callable[[], float], pause: Callable[[], None]) -> float | None:
    """Seconds the GPU took for the work ``launch`` queues on ``stream``, between two CUDA timing
    events recorded there (None: the second event did not complete by ``deadline``: a hang)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    launch()
    end.record(stream)
    while not end.query():
        if clock_s() > deadline:
            return None
        pause()
    return max(float(start.elapsed_time(end)) / 1e3, 1e-9)


def copy_between(torch: Any, src_device: Any, dst_device: Any, nbytes: int, *, timeout_s: float,
                 wait: Callable[[float], bool], clock_s: Callable[[], float], ceiling_gbs: float | None = None,
                 copy: Callable[[Any, Any], Any] | None = None,
                 pause: Callable[[], None] = lambda: time.sleep(0.001)) -> PeerCopy:
    """Copy ``nbytes`` of random bytes from one device to the other (``copy(dst, src)``, by default
    ``dst.copy_(src, non_blocking=True)``: a direct peer copy where the driver allows it), wait for it
    with ``wait(deadline)`` (False: not done by the deadline: a hang), compare the bytes on the host
    (through host memory, not the peer path), then time a batch of copies with CUDA events on the
    source device's current stream (where torch runs a peer copy), sized to last >= BATCH_S at
    ``ceiling_gbs``. ``clock_s`` (the host's) only sets the deadlines."""
    do_copy = copy or (lambda dst, src: dst.copy_(src, non_blocking=True))
    generator = torch.Generator().manual_seed(0x9E37)
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=generator).to(src_device)
    dst = torch.zeros(nbytes, dtype=torch.uint8, device=dst_device)
    stream = torch.cuda.current_stream(src_device)
    start = clock_s()
    first = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    first[0].record(stream)
    do_copy(dst, src)
    first[1].record(stream)
    if not wait(start + timeout_s):
        return PeerCopy(nbytes, None, 0, nbytes, clock_s() - start)
    wrong = int((dst.cpu() != src.cpu()).sum())
    if wrong:
        return PeerCopy(nbytes, clock_s() - start, wrong, nbytes)
    repeats = batch_repeats(nbytes, ceiling_gbs, float(first[0].elapsed_time(first[1])) / 1e3)

    def batch() -> None:
        for _ in range(repeats):
            do_copy(dst, src)
    start = clock_s()
    seconds = _timed(torch, stream, batch, start + timeout_s, clock_s, pause)
    if seconds is None:
        return PeerCopy(nbytes, None, 0, nbytes, clock_s() - start)
    return PeerCopy(nbytes, seconds / repeats, 0, nbytes)
