"""The diagnosis in words, for a terminal or a log: plain text, wrapped, foreign text made safe."""

from __future__ import annotations

import os
from typing import Any

from gpudoctor.sampling.presentation import fmt_bytes, plain_text, wrap_hanging

_SHOWN = ("startup", "data_wait", "data_loading", "collective", "host_sync", "forward", "backward", "optimizer", "evaluation",
          "checkpoint_io", "idle", "other")


def _name(command: str) -> str:
    parts = command.split()
    if len(parts) > 1 and parts[1] in ("-c", "-m"):
        return os.path.basename(parts[0]) + (" -c" if parts[1] == "-c" else f" -m {parts[2] if len(parts) > 2 else ''}")
    for part in parts[1:] if len(parts) > 1 and "python" in os.path.basename(parts[0]) else parts:
        if not part.startswith("-"):
            return os.path.basename(part)
    return os.path.basename(parts[0]) if parts else "?"


def _gpu_words(d: dict[str, Any]) -> str:
    gpu = d.get("gpu") or {}
    devices = gpu.get("devices") or []
    if not gpu.get("available") or not devices:
        use = {"yes": "in use", "no": "not in use", "unknown": "use unknown"}.get(gpu.get("in_use") or "")
        read = f"not read ({gpu.get('reason')})" if not gpu.get("available") else (gpu.get("reason") or "")
        if use is None:
            return f"GPU: not read ({gpu.get('reason') or 'no GPU'})"
        return f"GPU: {use} ({gpu.get('evidence') or '?'}); NVML: {read or 'no figures'}"
    parts = []
    for dev in devices:
        util = dev.get("util_mean_pct")
        mem = sum(p.get("gpu_memory_bytes") or 0 for p in dev.get("processes", []))
        parts.append(f"GPU {dev['index']} {dev.get('name') or ''}: busy "
                     f"{'?' if util is None else f'{util:.0f}%'}, {fmt_bytes(mem)} held".replace("  ", " "))
    return "; ".join(parts)


def _live_words(live: dict[str, Any]) -> str:
    """The published figures that are there; a missing one is left out or says why, never "?"."""
    parts = [str(live.get("verdict") or "no verdict yet")]
    step = live.get("step_time_p50_s")
    if isinstance(step, (int, float)):
        parts.append(f"step {step * 1000:.1f} ms (median)")
    else:
        parts.append("no step timed yet (warming up)")
    wait = live.get("data_wait_share")
    if isinstance(wait, (int, float)):
        parts.append(f"data wait {wait * 100:.0f}%")
    rate = live.get("samples_per_s")
    if isinstance(rate, (int, float)):
        parts.append(f"{rate:.0f} samples/s")
    syncs = live.get("host_syncs_per_step")
    parts.append(f"{syncs:.1f} host syncs/step" if isinstance(syncs, (int, float))
                 else "host syncs not counted (no CUDA device)")
    return "; ".join(parts[:2]) + (", " + ", ".join(parts[2:]) if parts[2:] else "")


def headline(d: dict[str, Any]) -> str:
    v = d["verdict"]
    processes = d.get("processes", [])
    target = next((p for p in processes if p["pid"] == v.get("pid", d["pid"])), None)
    parent = next((p for p in processes if target and p["pid"] == target.get("parent_pid") and p["role"] == "parent"),
                  None)
    named = parent or target  # a trainer that a parent started (hogwild's, mp.spawn's): the parent's script
    name = _name(named["command"]) if named and named.get("command") else "process"
    devices = [f"GPU {dev['index']}" for dev in (d.get("gpu") or {}).get("devices", [])]
    where = ", ".join([f"pid {v.get('pid', d['pid'])}"] + devices)
    return plain_text(f"{name} ({where}): {v['words']}")


def _process_line(p: dict[str, Any]) -> str:
    cpu = "?" if p.get("cpu_pct") is None else f"{p['cpu_pct']:.0f}%"
    top = sorted(((s, c) for c, s in p["shares"].items() if s >= 0.05), reverse=True)[:3]
    doing = ", ".join(f"{c} {s:.0%}" for s, c in top) or "no main-thread samples"
    verdict = f" -> {p['verdict']['words']}" if p.get("verdict") else ""
    rank = f" rank {p['rank']}" if p.get("rank") is not None else ""
    return f"pid {p['pid']}{rank} {p['role']} (CPU {cpu}): {doing}{verdict}"


def render_text(d: dict[str, Any], width: int | None = 100) -> str:
    """The diagnosis as lines: the verdict, the message, the fix, the lines, the figures."""
    v = d["verdict"]
    out = [headline(d)]
    out += wrap_hanging(plain_text(v["message"], limit=2000), width or 0, "  ")
    out += wrap_hanging(plain_text(v["fix"], limit=2000), width or 0, "  fix: ")
    for i, line in enumerate(v.get("lines", [])[:3]):
        if i and (line.get("share") or 0) < 0.05:
            continue
        code = f"  `{line['code']}`" if line.get("code") else ""
        line_share = f" ({line['share']:.0%})" if line.get("share") is not None else ""
        out.append(plain_text(f"  at {line['file']}:{line['line']} {line['function']}{code}{line_share}", limit=300))
    details = d.get("details") or {}

    def share(c: str) -> str:
        detail = details.get(c) if c in ("idle", "startup", "collective") else None
        return f"{c} {d['shares'][c]:.0%}" + (f" ({detail})" if detail else "")

    shares = ", ".join(share(c) for c in _SHOWN if d["shares"].get(c, 0) >= 0.01)
    out += wrap_hanging(f"main thread: {shares or 'no samples'}", width or 0, "  ")
    startup = v.get("startup")
    if startup and v.get("words") != "starting up":
        took = f" ({startup['seconds']:.1f} s)" if startup.get("seconds") is not None else ""
        out += wrap_hanging(plain_text(f"start-up: {startup['share']:.0%} of the window{took}, {startup['what']}; "
                                       "left out of the verdict", limit=500), width or 0, "  ")
    host = d.get("host") or {}
    if host.get("idle_cpus") is not None:
        usable = host.get("usable_cpus")
        mine = f", {usable:g} usable by the job" if usable is not None and usable != host["cpus"] else ""
        load = f", load {host['load_1m']:.1f}" if host.get("load_1m") is not None else ""
        others = host.get("others") or []
        busy = ("; others: " + ", ".join(f"{e['name']} (pid {e['pid']}) {e['cpu_pct']:.0f}%" for e in others[:3])
                if others else "")
        out += wrap_hanging(plain_text(f"host: {host['idle_cpus']:g} of {host['cpus']} CPUs idle{mine}{load}{busy}",
                                       limit=500), width or 0, "  ")
    out.append("  " + plain_text(_gpu_words(d), limit=500))
    for pid, live in sorted((d.get("published") or {}).items()):
        out += wrap_hanging(plain_text(_live_words(live), limit=500), width or 0, f"  TrainingMonitor (pid {pid}): ")
    hang = d.get("hang")
    if hang:
        out += wrap_hanging(plain_text(hang["gpu"]["words"], limit=500), width or 0, "  GPU while they wait: ")
        out += wrap_hanging(plain_text(hang["flight_recorder"]["words"], limit=1000), width or 0, "  ")
    elif d.get("straggler"):
        out += wrap_hanging(plain_text(d["straggler"]["message"], limit=1000), width or 0, "  straggler: ")
    for p in d.get("processes", [])[:32]:
        if p["role"] != "launcher":
            out.append("  " + plain_text(_process_line(p), limit=300))
    out.append(f"  sampled {d.get('sampled_s', 0):.1f} s at {d.get('rate_hz', 0)} Hz, {d.get('samples', 0)} samples"
               + ("; the process ended while sampled" if d.get("ended") else "")
               + ("; interrupted" if d.get("interrupted") else ""))
    return "\n".join(out) + "\n"


__all__ = ["render_text", "headline"]
