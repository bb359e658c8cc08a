"""The diagnosis in words, for a terminal or a log: plain text, wrapped, foreign text made safe."""

from __future__ import annotations

import os
from typing import Any

from gpudoctor.sampling.presentation import fmt_bytes, plain_text, wrap_hanging
from gpudoctor.why.wording import WORDING, phrase

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
        use = {"yes": "text_gpu_in_use", "no": "text_gpu_not_in_use", "unknown": "text_gpu_use_unknown"}.get(
            gpu.get("in_use") or "")
        read = phrase("text_nvml_not_read", reason=gpu.get("reason")) if not gpu.get("available") \
            else (gpu.get("reason") or "")
        if use is None:
            return phrase("text_gpu_not_read", reason=gpu.get("reason") or phrase("text_no_gpu"))
        return phrase("text_gpu_use", use=phrase(use), evidence=gpu.get("evidence") or "?",
                      read=read or phrase("text_no_figures"))
    parts = []
    for dev in devices:
        util = dev.get("util_mean_pct")
        mem = sum(p.get("gpu_memory_bytes") or 0 for p in dev.get("processes", []))
        parts.append(phrase("text_gpu_device", index=dev["index"], model=dev.get("name") or "",
                            util="?" if util is None else f"{util:.0f}%", held=fmt_bytes(mem)).replace("  ", " "))
    return "; ".join(parts)


def _live_words(live: dict[str, Any]) -> str:
    """The published figures that are there; a missing one is left out or says why, never "?"."""
    parts = [str(live.get("verdict") or phrase("text_no_verdict"))]
    step = live.get("step_time_p50_s")
    if isinstance(step, (int, float)):
        parts.append(phrase("text_step", ms=step * 1000))
    else:
        parts.append(phrase("text_no_step"))
    wait = live.get("data_wait_share")
    if isinstance(wait, (int, float)):
        parts.append(phrase("text_data_wait", pct=wait * 100))
    rate = live.get("samples_per_s")
    if isinstance(rate, (int, float)):
        parts.append(phrase("text_samples_per_s", rate=rate))
    syncs = live.get("host_syncs_per_step")
    parts.append(phrase("text_syncs", syncs=syncs) if isinstance(syncs, (int, float))
                 else phrase("text_syncs_uncounted"))
    return "; ".join(parts[:2]) + (", " + ", ".join(parts[2:]) if parts[2:] else "")


def headline(d: dict[str, Any]) -> str:
    v = d["verdict"]
    processes = d.get("processes", [])
    target = next((p for p in processes if p["pid"] == v.get("pid", d["pid"])), None)
    parent = next((p for p in processes if target and p["pid"] == target.get("parent_pid") and p["role"] == "parent"),
                  None)
    named = parent or target  # a trainer that a parent started (hogwild's, mp.spawn's): the parent's script
    name = _name(named["command"]) if named and named.get("command") else phrase("text_process")
    devices = [phrase("text_gpu", index=dev["index"]) for dev in (d.get("gpu") or {}).get("devices", [])]
    where = ", ".join([phrase("text_pid", pid=v.get("pid", d["pid"]))] + devices)
    return plain_text(phrase("text_headline", process=name, where=where, words=v["words"]))


def _process_line(p: dict[str, Any]) -> str:
    cpu = "?" if p.get("cpu_pct") is None else f"{p['cpu_pct']:.0f}%"
    top = sorted(((s, c) for c, s in p["shares"].items() if s >= 0.05), reverse=True)[:3]
    doing = ", ".join(phrase("text_share", category=c, share=s) for s, c in top) or phrase("text_no_main_thread")
    verdict = phrase("text_process_verdict", words=p["verdict"]["words"]) if p.get("verdict") else ""
    rank = phrase("text_rank", rank=p["rank"]) if p.get("rank") is not None else ""
    return phrase("text_process_line", pid=p["pid"], rank=rank, role=p["role"], cpu=cpu, doing=doing, verdict=verdict)


def _host_line(host: dict[str, Any]) -> str:
    usable = host.get("usable_cpus")
    mine = phrase("text_usable", usable=usable) if usable is not None and usable != host["cpus"] else ""
    load = phrase("load_1m", load=host["load_1m"]) if host.get("load_1m") is not None else ""
    others = host.get("others") or []
    busy = phrase("text_others", others=", ".join(phrase("text_other", process=e["name"], pid=e["pid"], cpu=e["cpu_pct"])
                                                  for e in others[:3])) if others else ""
    return phrase("text_host", idle=host["idle_cpus"], cpus=host["cpus"], usable=mine, load=load, others=busy)


def _top_lines(d: dict[str, Any], width: int) -> list[str]:
    """The verdict: its headline, message and fix, and the user's lines behind it."""
    v = d["verdict"]
    out = [headline(d)]
    out += wrap_hanging(plain_text(v["message"], limit=2000), width, "  ")
    out += wrap_hanging(plain_text(v["fix"], limit=2000), width, "  " + phrase("text_fix"))
    for i, line in enumerate(v.get("lines", [])[:3]):
        if i and (line.get("share") or 0) < 0.05:
            continue
        code = f"  `{line['code']}`" if line.get("code") else ""
        line_share = f" ({line['share']:.0%})" if line.get("share") is not None else ""
        out.append(plain_text("  " + phrase("text_at", file=line["file"], line=line["line"], function=line["function"],
                                            code=code, share=line_share), limit=300))
    return out


def render_text(d: dict[str, Any], width: int | None = 100) -> str:
    """The diagnosis as lines: the verdict, the message, the fix, the lines, the figures."""
    v = d["verdict"]
    width = width or 0
    out = _top_lines(d, width)
    details = d.get("details") or {}

    def share(c: str) -> str:
        detail = details.get(c) if c in ("idle", "startup", "collective") else None
        return phrase("text_share", category=c, share=d["shares"][c]) + (phrase("text_detail", detail=detail)
                                                                         if detail else "")

    shares = ", ".join(share(c) for c in _SHOWN if d["shares"].get(c, 0) >= 0.01)
    out += wrap_hanging(phrase("text_main_thread", shares=shares or phrase("text_no_samples")), width, "  ")
    startup = v.get("startup")
    if startup and v.get("words") != WORDING["unknown:starting"].short:
        took = phrase("startup_took", seconds=startup["seconds"]) if startup.get("seconds") is not None else ""
        out += wrap_hanging(plain_text(phrase("text_startup", share=startup["share"], took=took, what=startup["what"]),
                                       limit=500), width, "  ")
    host = d.get("host") or {}
    if host.get("idle_cpus") is not None:
        out += wrap_hanging(plain_text(_host_line(host), limit=500), width, "  ")
    out.append("  " + plain_text(_gpu_words(d), limit=500))
    for pid, live in sorted((d.get("published") or {}).items()):
        out += wrap_hanging(plain_text(_live_words(live), limit=500), width, "  " + phrase("text_monitor", pid=pid))
    hang = d.get("hang")
    if hang:
        out += wrap_hanging(plain_text(hang["gpu"]["words"], limit=500), width, "  " + phrase("text_gpu_while_waiting"))
        out += wrap_hanging(plain_text(hang["flight_recorder"]["words"], limit=1000), width, "  ")
    elif d.get("straggler"):
        out += wrap_hanging(plain_text(d["straggler"]["message"], limit=1000), width, "  " + phrase("text_straggler"))
    for p in d.get("processes", [])[:32]:
        if p["role"] != "launcher":
            out.append("  " + plain_text(_process_line(p), limit=300))
    out.append("  " + phrase("text_sampled", seconds=d.get("sampled_s", 0), rate=d.get("rate_hz", 0),
                             samples=d.get("samples", 0), ended=phrase("text_ended") if d.get("ended") else "",
                             interrupted=phrase("text_interrupted") if d.get("interrupted") else ""))
    return "\n".join(out) + "\n"


__all__ = ["render_text", "headline"]
