"""Report renderers: rich text for people, JSON for scripts, and anonymisation.

Rendering only reads a :class:`~gpudoctor.model.Report`; it never runs probes.
"""

from __future__ import annotations

import json
import re
import socket
import sys
from typing import Any, TextIO

from gpudoctor.model import Report, Status

STATUS_STYLE = {
    "pass": ("PASS", "bold green"),
    "skip": ("SKIP", "dim"),
    "warn": ("WARN", "bold yellow"),
    "fail": ("FAIL", "bold red"),
    "error": ("ERROR", "bold magenta"),
}

VERDICT = {
    "pass": "Healthy: no problem found by the checks that ran.",
    "skip": "Nothing could be checked.",
    "warn": "Usable, with warnings: read the findings above.",
    "fail": "Not usable as is: fix the failures above.",
    "error": "Incomplete: a check could not finish (see the errors above).",
}


def report_to_json(report: Report, anonymize: bool = False, indent: int | None = 2) -> str:
    data = report.to_dict()
    if anonymize:
        data = anonymize_report_dict(data)
    return json.dumps(data, indent=indent, allow_nan=False, default=str)


def anonymize_report_dict(data: dict[str, Any]) -> dict[str, Any]:
    """:func:`anonymize_dict`, also stripping every other host a result names
    (``details.hosts``: the ranks of a distributed check on other nodes)."""
    data = anonymize_dict(data)
    for result in data.get("results", []):
        for host in list((result.get("details") or {}).get("hosts") or []):
            if isinstance(host, str) and host not in ("", "?", REDACTED):
                data = anonymize_dict(data, hostname=host)
    return data


# --------------------------------------------------------------------------- anonymize
# A GPU or MIG UUID, whole or any prefix of it: CUDA_VISIBLE_DEVICES accepts a unique prefix
# ("GPU-0f0e0d0c-0b0a"), and a prefix identifies the board as well as the whole UUID does.
_UUID_RE = re.compile(r"\b(GPU|MIG)-[0-9a-fA-F]+(-[0-9a-fA-F]+)*\b")
_SECRET_KEYS = {"uuid", "serial", "hostname", "host_name", "board_serial"}
REDACTED = "<redacted>"


def anonymize_dict(data: Any, hostname: str | None = None) -> Any:
    """Strip GPU UUIDs, serial numbers and the host name, wherever they appear."""
    if hostname is None:
        found = _find_key(data, "hostname")
        hostname = found if isinstance(found, str) and found else socket.gethostname()
    return _anonymize(data, hostname)


def _find_key(data: Any, key: str) -> Any:
    if isinstance(data, dict):
        if key in data:
            return data[key]
        for v in data.values():
            found = _find_key(v, key)
            if found is not None:
                return found
    elif isinstance(data, list):
        for v in data:
            found = _find_key(v, key)
            if found is not None:
                return found
    return None


def _anonymize(data: Any, hostname: str) -> Any:
    if isinstance(data, dict):
        return {k: (REDACTED if k in _SECRET_KEYS and data[k] not in (None, "") else _anonymize(v, hostname))
                for k, v in data.items()}
    if isinstance(data, list):
        return [_anonymize(v, hostname) for v in data]
    if isinstance(data, str):
        text = _UUID_RE.sub(REDACTED, data)
        if hostname and len(hostname) >= 3:
            text = text.replace(hostname, REDACTED)
        elif hostname:
            # A short name ("n1", "g7") is replaced only as a whole token, not inside words.
            text = re.sub(rf"(?<![\w.-]){re.escape(hostname)}(?![\w-])", REDACTED, text)
        return text
    return data


# --------------------------------------------------------------------------- text
def _fmt_value(value: Any, unit: str) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        text = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, int) and unit in ("B", "bytes"):
        return format_bytes(value)
    else:
        text = str(value)
    return f"{text} {unit}".rstrip()


def format_bytes(n: float | int | None) -> str:
    if n is None:
        return "n/a"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def render_text(report: Report, stream: TextIO | None = None, *, verbose: bool = False,
                color: bool | None = None, anonymize: bool = False) -> None:
    """Print a report for people: a section per probe, findings with fixes, a verdict."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    data = report.to_dict()
    if anonymize:
        data = anonymize_report_dict(data)
    is_tty = bool(getattr(stream or sys.stdout, "isatty", lambda: False)())
    # Logs and pipes get long lines (grep-able findings); terminals wrap at their width.
    console = Console(file=stream, force_terminal=color, no_color=(color is False),
                      highlight=False, soft_wrap=False, width=None if is_tty else 160)
    host = data.get("host") or {}
    title = Text("gpudoctor report", style="bold")
    title.append(f"  {data['created']}  {host.get('hostname', '')}  ({data['source']})", style="dim")
    console.print(title)
    for result in data["results"]:
        label, style = STATUS_STYLE[result["status"]]
        head = Text(f"[{label}] ", style=style)
        head.append(result["probe"], style="bold")
        if result.get("summary"):
            head.append(f"  {result['summary']}")
        head.append(f"  ({result['duration_s']:.1f} s)", style="dim")
        console.print(head)
        shown = result["measurements"] if verbose else [m for m in result["measurements"] if not m["name"].startswith("_")][:12]
        if shown:
            table = Table(show_header=False, box=None, pad_edge=False, padding=(0, 2))
            table.add_column(style="cyan", no_wrap=True)
            table.add_column()
            for m in shown:
                name = m["name"] if m.get("device") is None else f"{m['name']} [gpu {m['device']}]"
                value = _fmt_value(m["value"], m.get("unit", ""))
                if m.get("reference") is not None:
                    value += f"  (of {_fmt_value(m['reference'], m.get('unit', ''))})"
                if m.get("note"):
                    value += f"  {m['note']}"
                table.add_row(Text("  " + name), Text(value))  # literal: values may contain [brackets]
            console.print(table)
            hidden = len(result["measurements"]) - len(shown)
            if hidden > 0:
                console.print(Text(f"    ... {hidden} more (use -v)", style="dim"))
        for f in result["findings"]:
            if f["status"] == "pass" and not verbose:
                continue
            flabel, fstyle = STATUS_STYLE[f["status"]]
            line = Text(f"    {flabel.lower()}: ", style=fstyle)
            line.append(f["summary"])
            console.print(line)
            if f.get("why"):
                console.print(Text(f"      why: {f['why']}", style="dim"))
            if f.get("fix"):
                console.print(Text("      fix: ", style="bold") + Text(f["fix"]))
    status = data["status"]
    label, style = STATUS_STYLE[status]
    counts = ", ".join(f"{n} {k}" for k, n in data["counts"].items() if n)
    verdict = Text(f"Verdict: {label}  ", style=style)
    verdict.append(VERDICT[status])
    verdict.append(f"  ({counts})", style="dim")
    if data.get("interrupted"):
        verdict.append("  [interrupted: partial report]", style="bold yellow")
    console.print(verdict)


def status_word(status: Status | str) -> str:
    return STATUS_STYLE[Status(status).value][0]
