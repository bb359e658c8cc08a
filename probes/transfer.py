"""transfer: host<->device bandwidth (pageable and pinned) and device-to-device copy bandwidth.

Each figure stands next to its ceiling: the PCIe link's theoretical one-direction rate
(generation x width, as NVML reports the most this device and slot can train to) for
host transfers, the datasheet memory bandwidth for device-to-device copies (which read
and write every byte, so 2 x size moves per copy, the STREAM convention).

Timing: CUDA events around the copies, warm-up first, median of repeats, source and
destination rotated through several buffers, data random (never zeros).

Thresholds (ours): pinned host-to-device below 60 % of the link, or device-to-device
below 70 % of the datasheet, are warnings; a healthy machine does better than both.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from gpudoctor.core import findings
from gpudoctor.core.model import ProbeResult

from . import Probe, ProbeContext, _gpu, _wording
from ._measuring import measure_each_device
from ._datasheet import GpuSpec, lookup_gpu_spec
from ._pcie import LinkCeiling, host_link_is_c2c, link_ceiling
from ._timing import Clock, MiB, Timing, bandwidth_gbs, inner_count, percent_of, time_op

if TYPE_CHECKING:  # torch is an optional extra: imported for its types only
    import torch as _torch

HOST_SIZES = (1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB)
D2D_SIZES = (64 * MiB, 256 * MiB, 1024 * MiB)
PINNED_WARN_PCT = 60.0
D2D_WARN_PCT = 70.0
SLOTS_BYTES = 512 * MiB  # rotation area per buffer: two slots of the largest host size


def fill_random(torch: ModuleType, buffer: _torch.Tensor, generator: _torch.Generator | None = None) -> None:
    """Fill a uint8 buffer with random bytes quickly (1 MiB of noise, repeated), touching every page."""
    chunk = min(buffer.numel(), MiB)
    noise = torch.randint(1, 256, (chunk,), dtype=torch.uint8, generator=generator)
    full = buffer.numel() // chunk
    if full:
        buffer[: full * chunk].view(full, chunk).copy_(noise.to(buffer.device).expand(full, chunk))
    rest = buffer.numel() - full * chunk
    if rest:
        buffer[full * chunk:].copy_(noise[:rest].to(buffer.device))


def copy_timing(dst: _torch.Tensor, src: _torch.Tensor, nbytes: int, clock: Clock[Any], *, budget_s: float,
                repeats: int = 7, non_blocking: bool = True) -> Timing:
    """Median seconds of one ``nbytes`` copy from ``src`` to ``dst`` (1-D uint8 buffers).

    Copies rotate through the slots that fit in both buffers. Works for any pair of
    devices, CPU to CPU included (the tests use that with a CPU clock).
    """
    slots = max(1, min(8, dst.numel() // nbytes, src.numel() // nbytes))
    pairs = [(dst[s * nbytes:(s + 1) * nbytes], src[s * nbytes:(s + 1) * nbytes]) for s in range(slots)]

    def op(i: int) -> None:
        d, s = pairs[i % slots]
        d.copy_(s, non_blocking=non_blocking)

    # one untimed copy tells how many copies a timed sample needs to last ~2 ms
    first = clock.start()
    op(0)
    inner = inner_count(clock.stop(first))
    return time_op(op, clock, warmup=1, repeats=repeats, inner=inner, budget_s=budget_s)


def _row(kind: str, nbytes: int, timing: Timing, moved: int) -> dict[str, Any]:
    gbs = bandwidth_gbs(moved, timing.seconds)
    # pct_of_ceiling is filled in once the ceiling is known (after the copies: see link_ceiling)
    return {"kind": kind, "bytes": nbytes, "gb_per_s": round(gbs, 3), "pct_of_ceiling": None, **timing.to_dict()}


def _set_ceiling(rows: list[dict[str, Any]], ceiling: float | None) -> None:
    for row in rows:
        row["pct_of_ceiling"] = None if ceiling is None else round(percent_of(row["gb_per_s"], ceiling) or 0.0, 1)


def free_pinned_cache(torch: ModuleType) -> dict[str, Any]:
    """Give the pinned host memory torch's host allocator cached back to the system.

    Freed pinned tensors stay in the caching host allocator for the life of the process
    (the probe's 512 MiB rotation area would); ``host_empty_cache`` releases them. Returns
    the allocator's bytes before and after, where torch reports them.
    """
    def held() -> int | None:
        try:
            stats = torch.cuda.host_memory_stats()
        except Exception:  # older torch, or no CUDA
            return None
        value = stats.get("allocated_bytes.current", stats.get("allocated_bytes.all.current"))
        return int(value) if isinstance(value, (int, float)) else None

    before = held()
    empty = getattr(torch.cuda, "host_empty_cache", None) or getattr(torch._C, "_host_emptyCache", None)
    if empty is None:
        return {"cached_before": before, "cached_after": before, "freed": False}
    empty()
    return {"cached_before": before, "cached_after": held(), "freed": True}


def _host_rows(torch: ModuleType, device: _torch.device, area: int, clock: Clock[Any], budget_s: float,
               rng: _torch.Generator) -> list[dict[str, Any]]:
    """Pageable and pinned copies both ways at each size that fits in ``area``."""
    sizes = [s for s in HOST_SIZES if s <= area // 2] or [area // 2]
    pageable = torch.empty(area, dtype=torch.uint8)
    pinned = _gpu.pinned_empty(torch, area)
    on_device = torch.empty(area, dtype=torch.uint8, device=device)
    for buffer in (pageable, pinned, on_device):
        fill_random(torch, buffer, rng)
    per_copy_budget = budget_s * 0.7 / (4 * len(sizes))
    rows = []
    for nbytes in sizes:
        for kind, dst, src, non_blocking in (("pageable_h2d", on_device, pageable, False),
                                             ("pinned_h2d", on_device, pinned, True),
                                             ("pageable_d2h", pageable, on_device, False),
                                             ("pinned_d2h", pinned, on_device, True)):
            timing = copy_timing(dst, src, nbytes, clock, budget_s=per_copy_budget, non_blocking=non_blocking)
            rows.append(_row(kind, nbytes, timing, nbytes))
    return rows


def _d2d_rows(torch: ModuleType, device: _torch.device, clock: Clock[Any], budget_s: float,
              rng: _torch.Generator) -> list[dict[str, Any]]:
    """Device-to-device copies at sizes beyond the L2 cache; each copy reads and writes nbytes."""
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info(device)
    sizes = [s for s in D2D_SIZES if 4 * s <= free // 2] or [max(MiB, (free // 16) // MiB * MiB)]
    src = torch.empty(2 * sizes[-1], dtype=torch.uint8, device=device)
    dst = torch.empty(2 * sizes[-1], dtype=torch.uint8, device=device)
    fill_random(torch, src, rng)
    dst.fill_(7)
    rows = [_row("d2d", nbytes, copy_timing(dst, src, nbytes, clock, budget_s=budget_s * 0.3 / len(sizes)),
                 2 * nbytes) for nbytes in sizes]
    del src, dst
    torch.cuda.empty_cache()
    return rows


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _probe_device(ctx: ProbeContext, r: ProbeResult, torch: ModuleType, dev: _gpu.Device, budget_s: float) -> None:
    d = dev.index
    device = _gpu.torch_device(torch, dev)
    torch.cuda.set_device(device)
    clock = _gpu.event_clock(torch, device)
    static = _gpu.nvml_static(ctx, dev)
    spec = lookup_gpu_spec(dev.name)
    free, _total = torch.cuda.mem_get_info(device)
    rng = torch.Generator().manual_seed(0x5EED + d)
    area = min(SLOTS_BYTES, max(2 * MiB, (free // 8) // MiB * MiB))
    rows = _host_rows(torch, device, area, clock, budget_s, rng)
    after_load = _gpu.nvml_sample(ctx, dev)  # right after pinned traffic: the link is trained up
    r.details.setdefault("pinned_host_cache", {})[str(d)] = free_pinned_cache(torch)
    gen_now = _int_or_none(after_load.get("pcie_gen_current"))
    width_now = _int_or_none(after_load.get("pcie_width_current"))
    link = link_ceiling(static.get("pcie_gen_max"), static.get("pcie_width_max"), gen_now, width_now)
    _set_ceiling(rows, link.gb_per_s)
    d2d = _d2d_rows(torch, device, clock, budget_s, rng)
    _set_ceiling(d2d, spec.memory_bandwidth_gbs if spec else None)
    rows += d2d

    r.details.setdefault("rows", {})[str(d)] = rows
    r.details.setdefault("pcie", {})[str(d)] = {
        "gen_max": _int_or_none(static.get("pcie_gen_max")), "width_max": _int_or_none(static.get("pcie_width_max")),
        "gen_after_load": gen_now, "width_after_load": width_now, "ceiling_gb_per_s": link.gb_per_s,
        "ceiling_note": link.note or None, "host_link": "nvlink-c2c" if host_link_is_c2c(dev.name) else "pcie"}
    r.details.setdefault("datasheet", {})[str(d)] = (
        {"model": spec.model, "memory_bandwidth_gb_per_s": spec.memory_bandwidth_gbs, "source": spec.source}
        if spec else None)
    largest = {row["kind"]: row for row in rows}  # rows are in increasing size: the last one is the largest
    for kind in ("pinned_h2d", "pinned_d2h", "pageable_h2d", "pageable_d2h"):
        row = largest[kind]
        r.measure(f"{kind}_bandwidth", row["gb_per_s"], "GB/s", device=d, reference=link.gb_per_s,
                  note=f"{row['bytes'] // MiB} MiB copies; ceiling {link.label}" +
                       (f"; {row['pct_of_ceiling']:.0f} %" if row["pct_of_ceiling"] is not None else ""))
    _host_link_findings(r, dev, largest["pinned_h2d"], link, gen_now, width_now)
    _pin_memory_finding(r, dev, largest["pinned_h2d"], largest["pageable_h2d"])
    _d2d_findings(r, dev, largest["d2d"], spec)


def _host_link_findings(r: ProbeResult, dev: _gpu.Device, pinned_h2d: dict[str, Any], link: LinkCeiling,
                        gen_now: int | None, width_now: int | None) -> None:
    """Pinned host-to-device bandwidth against the link's rate (the link's training itself is
    the health probe's judgement: pcie_gen_degraded, pcie_width_degraded)."""
    d, gbs, pct = dev.index, pinned_h2d["gb_per_s"], pinned_h2d["pct_of_ceiling"]
    trained = _wording.LINK_TRAINED.format(gen=gen_now, width=width_now) if gen_now and width_now else ""
    if link.note:
        trained += _wording.LINK_NOTE.format(note=link.note)
    said: dict[str, Any] = {"gbs": gbs, "gpu": dev.label, "link": link.label, "ceiling": link.gb_per_s, "trained": trained}
    if host_link_is_c2c(dev.name) and (pct is None or pct > 110):
        r.findings.append(findings.finding("host_link_not_pcie", device=d, **said))
    elif pct is None:
        r.findings.append(findings.finding("pcie_ceiling_unknown", device=d, **said))
    elif pct > 110:
        r.findings.append(findings.finding("pcie_link_misreported", device=d, **said))
    elif pct < PINNED_WARN_PCT:
        r.findings.append(findings.finding("pinned_h2d_slow", device=d, pct=pct, **said))
    else:
        r.findings.append(findings.finding("pinned_h2d_ok", device=d, pct=pct, **said))


def _pin_memory_finding(r: ProbeResult, dev: _gpu.Device, pinned_h2d: dict[str, Any],
                        pageable_row: dict[str, Any]) -> None:
    pinned, pageable = pinned_h2d["gb_per_s"], pageable_row["gb_per_s"]
    if pageable > 0 and pinned >= 1.3 * pageable:
        r.findings.append(findings.finding("pin_memory_helps", device=dev.index, speedup=pinned / pageable,
                                           pinned=pinned, pageable=pageable))


def _d2d_findings(r: ProbeResult, dev: _gpu.Device, d2d: dict[str, Any], spec: GpuSpec | None) -> None:
    d = dev.index
    r.measure("d2d_bandwidth", d2d["gb_per_s"], "GB/s", device=d,
              reference=spec.memory_bandwidth_gbs if spec else None,
              note=(f"{d2d['bytes'] // MiB} MiB copies (read+write); {d2d['pct_of_ceiling']:.0f} % of "
                    f"{spec.model} datasheet" if spec else f"no datasheet figure for {dev.name}"))
    if spec is None:
        r.findings.append(findings.finding("no_datasheet:transfer", device=d, name=dev.name, gbs=d2d["gb_per_s"]))
    else:
        said: dict[str, Any] = {"gbs": d2d["gb_per_s"], "gpu": dev.label, "pct": d2d["pct_of_ceiling"], "model": spec.model,
                "ceiling": spec.memory_bandwidth_gbs}
        slow = d2d["pct_of_ceiling"] is not None and d2d["pct_of_ceiling"] < D2D_WARN_PCT
        r.findings.append(findings.finding("d2d_slow" if slow else "d2d_ok", device=d, **said))


def _summary(r: ProbeResult) -> str:
    return ", ".join(f"cuda:{m.device} {m.name.replace('_bandwidth', '')} {m.value:.1f} GB/s" for m in r.measurements
                     if m.name in ("pinned_h2d_bandwidth", "d2d_bandwidth"))


def run(ctx: ProbeContext) -> ProbeResult:
    return measure_each_device(ctx, "transfer", _probe_device, _summary, target_s=6.0, reserve_s=4.0)


PROBE = Probe.define(__name__, run, "Host<->device (pageable, pinned) and device-to-device bandwidth against their ceilings",
                     level="full", uses_torch=True, timeout_s=25, order=50)
