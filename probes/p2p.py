"""p2p: peer-to-peer paths between GPUs: NVML's topology and P2P status, ACS on the PCIe bridges, the IOMMU.

NCCL jobs on one node hang at their first all-reduce, or return wrong sums, when ACS on a PCIe
switch or root port redirects the GPUs' peer traffic to the root complex, or when the IOMMU
translates it; NVML sees neither. For every pair of GPUs this probe reads:

* NVML's common ancestor (``nvidia-smi topo -m``: PIX, PXB, PHB, NODE, SYS) and P2P status for
  reads, writes and NVLink (``nvidia-smi topo -p2p``), through the NVML gate;
* the PCIe bridges between them (the GPUs' sysfs paths) and each bridge's ACS control register
  (configuration space beyond 256 bytes: root only);
* the IOMMU: /sys/class/iommu, each GPU's IOMMU group type, the kernel command line.

Judgement: ACS request/completion redirect or egress control on a bridge between two GPUs that
copy over PCIe: fail (``p2p_acs_redirect``); the IOMMU translating their DMA: warn
(``p2p_iommu_translates``); NVML refusing peer-to-peer: a pass note (copies go through host
memory: correct, slower); anything that cannot be read (not root, a VM, no sysfs, a replay): a
skip that says what and why (``p2p_unreadable``), never a pass. Pairs over NVLink have no PCIe
bridge or IOMMU on the way. With ``--full`` a 64 MiB copy between each pair (torch, in the runner's
child process) checks the bytes, then a batch of copies timed by CUDA events on the source GPU's
stream (>= 20 ms at the link's ceiling) checks the rate against the link (NVLink, or the narrower
PCIe link). A copy that never finishes leaves the child process poisoned: the runner starts another.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable

from gpudoctor.backends.nvml import normalise_bus_id
from gpudoctor.core.model import ProbeResult, Status

from . import Probe, ProbeContext, _gpu

if TYPE_CHECKING:
    from . import _p2p

COPY_BYTES = 64 * 1024 * 1024
COPY_TIMEOUT_S = 10.0


def host_paths(ctx: ProbeContext, root: str) -> _p2p.HostPaths:
    from gpudoctor.backends import pcie_paths

    from . import _p2p

    """What this machine's sysfs says of the PCIe paths (nothing for a replay: not this machine's)."""
    if ctx.replay:
        return _p2p.HostPaths(False, "a replayed recording holds no sysfs readings")
    if not os.path.isdir(os.path.join(root, "sys/bus/pci/devices")):
        return _p2p.HostPaths(False, "/sys/bus/pci is not here (a container without sysfs, or not Linux)")
    return _p2p.HostPaths(True, "", pcie_paths.in_virtual_machine(root))


def _cuda_wait(torch: Any, devices: list[Any]) -> Callable[[float], bool]:
    """Wait until the work queued so far on ``devices`` is done, or the deadline: polls CUDA events
    (a stuck peer copy never blocks this thread)."""
    def wait(deadline: float) -> bool:
        events = []
        for device in devices:
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(device))
            events.append(event)
        while not all(e.query() for e in events):
            if time.perf_counter() > deadline:
                return False
            time.sleep(0.001)
        return True
    return wait


def _copies(ctx: ProbeContext, r: ProbeResult, pairs: list[_p2p.PairPath]) -> None:
    from . import _p2p

    """--full: a direct copy each way between every pair, bytes checked, rate against the link."""
    from ._measuring import torch_and_devices

    found = torch_and_devices(ctx, "p2p")
    if isinstance(found, ProbeResult):
        r.details["copies"] = f"not run: {found.summary}"
        return
    torch, devices = found
    by_nvml = {d.nvml_index: d for d in devices if d.nvml_index is not None}
    for pair in pairs:
        first, second = by_nvml.get(pair.a), by_nvml.get(pair.b)
        if first is None or second is None:
            continue
        for src, dst in ((first, second), (second, first)):
            if ctx.time_left() < COPY_TIMEOUT_S + 2:
                r.details["copies"] = "cut short by the probe's time limit"
                return
            where = [_gpu.torch_device(torch, src), _gpu.torch_device(torch, dst)]
            peer = bool(torch.cuda.can_device_access_peer(src.index, dst.index))
            link = (_p2p.link_of(pair, ctx.gpu.static(pair.a), ctx.gpu.static(pair.b), ctx.gpu.nvlink(pair.a))
                    if peer else _p2p.Link("host memory (torch has no peer access between them)", None))
            copy = _p2p.copy_between(torch, where[0], where[1], COPY_BYTES, timeout_s=COPY_TIMEOUT_S,
                                     wait=_cuda_wait(torch, where), clock_s=time.perf_counter,
                                     ceiling_gbs=link.gb_per_s)
            _p2p.judge_copy(r, pair, copy, link, f"cuda:{src.index} -> cuda:{dst.index}")
            if copy.seconds is None:
                # a stuck copy holds both devices' streams: no further copy, nor any later probe's work on
                # them, would finish in this process
                r.poison_process(f"a peer copy cuda:{src.index} -> cuda:{dst.index} never finished")
                return


def _summary(r: ProbeResult, pairs: list[_p2p.PairPath]) -> str:
    problems = sorted({f.code for f in r.findings if f.status.value in ("fail", "warn")})
    unread = any(f.code == "p2p_unreadable" for f in r.findings)
    text = f"{len(pairs)} GPU pair(s)"
    if problems:
        return f"{text}: {', '.join(problems)}"
    return f"{text}: no ACS redirect or translating IOMMU found" + ("; some of the path not readable" if unread else "")


def run(ctx: ProbeContext) -> ProbeResult:
    gpu = ctx.gpu
    count = ctx.nvml_count("p2p", at_least=2, fewer="p2p_single_gpu")
    if isinstance(count, ProbeResult):
        return count
    # the path readers only where there is a pair (a one-GPU node's --quick loads neither)
    from gpudoctor.backends import pcie_paths

    from . import _p2p

    indices = list(range(count))
    bus_ids = {i: normalise_bus_id(gpu.identity(i).pci_bus_id) for i in indices}
    root = pcie_paths.ROOT
    host = host_paths(ctx, root)
    if host.readable:
        host.iommu = pcie_paths.read_iommu([b for b in bus_ids.values() if b], root)
    pairs = _p2p.read_pairs(gpu, indices, bus_ids, host, root)
    r = ProbeResult("p2p")
    r.details["pairs"] = [p.to_dict() for p in pairs]
    if host.iommu is not None:
        r.details["iommu"] = {"units": host.iommu.units, "cmdline": host.iommu.cmdline,
                              "group_types": host.iommu.group_types}
    _p2p.judge(r, pairs, host)
    if ctx.level == "full" and not ctx.replay:
        _copies(ctx, r, pairs)
    r.settle(_summary(r, pairs))
    if r.status == Status.PASS and any(f.code == "p2p_unreadable" for f in r.findings):
        r.status = Status.SKIP  # part of the path unknown: not a pass
    return r


PROBE = Probe.define(__name__, run, "Peer-to-peer paths between GPUs: NVML topology and P2P status, PCIe ACS, the IOMMU",
                     level="quick", uses_torch=True, timeout_s=60, order=36)
