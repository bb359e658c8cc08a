"""Report renderers: rich text for people, JSON for scripts (anonymised on request).

Rendering only reads a :class:`~gpudoctor.core.model.Report`; it never runs probes.
"""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

from gpudoctor.backends.catalogue import identifying_keys
from gpudoctor.core.anonymize import REDACTED, anonymize_dict, anonymize_report_dict  # noqa: F401  (re-exported)
from gpudoctor.core.findings import REPORT_VERDICT
from gpudoctor.core.model import Report, Status
from gpudoctor.sampling.presentation import (
    fmt_bytes, plain_text, status_style, wrap_hanging,
)
from gpudoctor.sampling.presentation import status_word as _status_word


def report_to_json(report: Report, anonymize: bool = False, indent: int | None = 2) -> str:
    return report.to_json(indent=indent, anonymize=identifying_keys() if anonymize else False)


# --------------------------------------------------------------------------- text
#: Longest prose field (a finding's summary, why or fix) shown; driver text inside is bounded too.
MAX_PROSE = 2000


def _prose(value: object) -> str:
    """Probe-written prose that may quote driver text: plain, one paragraph, bounded."""
    if value is None:
        return ""
    return " ".join(plain_text(part, limit=MAX_PROSE) for part in str(value).splitlines() if part.strip())


def _fmt_value(value: object, unit: str) -> str:
    if value is None:
        return "n/a"
    unit = plain_text(unit or "", limit=20)
    if isinstance(value, float):
        text = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, int) and unit in ("B", "bytes"):
        return fmt_bytes(value)
    else:
        text = plain_text(value)
    return f"{text} {unit}".rstrip()


#: The report's width when stdout is not a terminal: no hard wrap. A pipe or a log file gets
#: each finding on one line (grep finds it whole, a pager or editor wraps for its reader),
#: so no sentence is ever broken at a width the reader does not have.
PIPE_WIDTH = 0
#: Narrowest terminal width the report lays out for; narrower terminals wrap again themselves.
MIN_WIDTH = 40


def _styled(line: str, spans: list[tuple[int, int, str]]) -> Any:
    from rich.text import Text

    text = Text(line, no_wrap=True, overflow="ignore")
    for begin, finish, style in spans:
        if style and begin < len(line):
            text.stylize(style, begin, min(finish, len(line)))
    return text


class _Lines(list):
    """Report lines being built at one width."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width

    def para(self, text: str, first: str, first_style: str = "", style: str = "", indent: int | None = None) -> None:
        for k, line in enumerate(wrap_hanging(text, self.width, first, indent)):
            spans = [(len(first) - len(first.lstrip()), len(first), first_style)] if k == 0 else []
            if style:
                spans.insert(0, (0, len(line), style))
            self.append(_styled(line, spans))


def report_lines(data: dict[str, Any], *, width: int, verbose: bool = False,
                 title: str = "gpudoctor report") -> list[Any]:
    """The text report as Rich ``Text`` lines, each already fitted to ``width`` (0: no wrap).
    ``title`` heads it: the command that made the report (``gpudoctor distributed``)."""
    out = _Lines(width)
    host = data.get("host") or {}
    meta = "  ".join(x for x in (plain_text(data.get("created") or "", limit=40),
                                 plain_text(host.get("hostname") or "", limit=80)) if x)
    source = plain_text(data.get("source") or "", limit=80)
    tail = f"  {meta}" + (f"  ({source})" if source else "")
    out.append(_styled(title + tail, [(0, len(title), "bold"), (len(title), len(title) + len(tail), "dim")]))
    groups = _skip_groups(data["results"])
    for k, result in enumerate(data["results"]):
        group = groups.get(k)
        if group == []:
            continue  # said with the first check of its group
        if group:
            summary = _group_head(out, [data["results"][j] for j in group])
        else:
            summary = _result_head(out, result)
            if verbose or result["status"] != "pass":
                _measurement_lines(out, result.get("measurements") or [], verbose)
        _finding_lines(out, result, summary, verbose)
    _verdict_lines(out, data)
    return list(out)


def _skip_key(result: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a skipped check says (its summary, and each finding's status, summary, why and fix),
    or None for a check that is not a plain skip (it ran, or it has readings to show)."""
    if result["status"] != "skip" or result.get("measurements"):
        return None
    findings = tuple((f["status"], _prose(f.get("summary")), _prose(f.get("why")), _prose(f.get("fix")))
                     for f in result.get("findings") or [])
    if any(status != "skip" for status, *_ in findings):
        return None
    return _prose(result.get("summary")), findings


def _skip_groups(results: list[dict[str, Any]]) -> dict[int, list[int]]:
    """Skipped checks that say the same thing (six torch checks without torch), said once.

    For the first check of each group of two or more: the indexes of the group; for the others:
    an empty list (nothing to print there)."""
    by_key: dict[tuple[Any, ...], list[int]] = {}
    for k, result in enumerate(results):
        key = _skip_key(result)
        if key is not None:
            by_key.setdefault(key, []).append(k)
    groups: dict[int, list[int]] = {}
    for members in by_key.values():
        if len(members) > 1:
            groups[members[0]] = members
            groups.update({k: [] for k in members[1:]})
    return groups


def _group_head(out: _Lines, results: list[dict[str, Any]]) -> str:
    """``[SKIP] memory, transfer, compute: torch is not installed ...``; returns the summary."""
    label, style = status_style("skip")
    names = ", ".join(plain_text(r["probe"], limit=60) for r in results)
    summary = _prose(results[0].get("summary"))
    first = f"[{label}] "
    for k, line in enumerate(wrap_hanging(f"{names}: {summary}" if summary else names, out.width, first)):
        spans = [(0, len(first), style), (len(first), min(len(line), len(first) + len(names)), "bold")] if k == 0 else []
        out.append(_styled(line, spans))
    return summary


def _result_head(out: _Lines, result: dict[str, Any]) -> str:
    """A probe's status line; returns its summary (as shown)."""
    label, style = status_style(result["status"])
    name = plain_text(result["probe"], limit=60)
    summary = _prose(result.get("summary"))
    duration = f"({result['duration_s']:.1f} s)" if isinstance(result.get("duration_s"), (int, float)) else ""
    first = f"[{label}] "
    body = "  ".join(x for x in (summary, duration) if x)
    lines = wrap_hanging(f"{name}  {body}" if body else name, out.width, first)
    for k, line in enumerate(lines):
        spans = [(0, len(first), style), (len(first), len(first) + len(name), "bold")] if k == 0 else []
        if duration and k == len(lines) - 1 and line.endswith(duration):
            spans.append((len(line) - len(duration), len(line), "dim"))
        out.append(_styled(line, spans))
    return summary


#: Notes of a measurement with no value because this run did not measure it (a quick report
#: starts no torch; no torch to start): not a reading, so the default text leaves it out
#: (``-v`` and JSON keep it), where ``n/a  QuickMode`` would read as a failed reading.
NOT_MEASURED_NOTES = frozenset({"QuickMode", "TorchNotInstalled"})


def _not_measured(m: dict[str, Any]) -> bool:
    return m.get("value") is None and m.get("note") in NOT_MEASURED_NOTES


def _measurement_lines(out: _Lines, measurements: list[dict[str, Any]], verbose: bool) -> None:
    if not verbose:
        measurements = [m for m in measurements if not _not_measured(m)]
    if not measurements:
        return
    shown = measurements if verbose else [m for m in measurements if not str(m["name"]).startswith("_")][:12]
    names = [plain_text(m["name"], limit=60) + ("" if m.get("device") is None else f" [gpu {m['device']}]")
             for m in shown]
    col = min(max((len(n) for n in names), default=0), 40)
    for m, n in zip(shown, names):
        value = _fmt_value(m["value"], m.get("unit", ""))
        if m.get("reference") is not None:
            value += f"  (of {_fmt_value(m['reference'], m.get('unit', ''))})"
        if m.get("note"):
            value += f"  {_prose(m['note'])}"
        first = f"  {n.ljust(col)}  "
        out.para(value, first, "cyan", indent=len(first) if len(first) < 46 else 6)
    hidden = len(measurements) - len(shown)
    if hidden > 0:
        out.append(_styled(f"    ... {hidden} more (use -v)", [(0, 1000, "dim")]))


def _finding_lines(out: _Lines, result: dict[str, Any], summary: str, verbose: bool) -> None:
    status = result["status"]
    seen: set[str] = {summary}
    for f in result.get("findings") or []:
        fstatus = f["status"]
        if fstatus == "pass" and not verbose:
            continue
        fsummary = _prose(f.get("summary"))
        if fstatus == "skip" and fsummary.lower().startswith("skipped: "):
            fsummary = fsummary[len("skipped: "):]
        why, fix = _prose(f.get("why")), _prose(f.get("fix"))
        if fsummary in seen or fsummary.lower() in summary.lower() and fstatus == status:
            fsummary = ""  # the result's own line already says it
        else:
            seen.add(fsummary)
        flabel, fstyle = status_style(fstatus)
        if fsummary:
            out.para(fsummary, f"    {flabel.lower()}: ", fstyle)
        if why:
            out.para(why, "      why: ", style="dim")
        if fix:
            out.para(fix, "      fix: ", "bold")


def verdict_sentence(data: dict[str, Any]) -> str:
    """The verdict in words. A verdict that calls the GPU stack usable (pass, warn) while checks
    were skipped says which: it holds for what was checked (``Healthy in what was checked; 7
    checks skipped: memory, ...``), never a bare "Healthy". A failure needs no such list: it is
    not usable whatever the skipped checks would say."""
    status = data["status"]
    sentence = REPORT_VERDICT.get(status, "")
    skipped = [plain_text(r["probe"], limit=60) for r in data.get("results") or [] if r.get("status") == "skip"]
    if skipped and status in ("pass", "warn"):
        told = f"{len(skipped)} check{'s' if len(skipped) != 1 else ''} skipped: {', '.join(skipped)}."
        sentence = f"Healthy in what was checked; {told}" if status == "pass" else f"{sentence} {told}"
    return sentence


def _verdict_lines(out: _Lines, data: dict[str, Any]) -> None:
    status = data["status"]
    label, style = status_style(status)
    counts = ", ".join(f"{n} {k}" for k, n in (data.get("counts") or {}).items() if n)
    sentence = verdict_sentence(data)
    if data.get("interrupted") and not data["results"]:
        sentence = "Interrupted before any check finished."
    first = f"Verdict: {label}  "
    tails = [f"({counts})"] if counts else []
    if data.get("interrupted") and data["results"]:
        tails.append("[interrupted: partial report]")
    lines = wrap_hanging(sentence, out.width, first)
    for tail in tails:  # kept whole: "(1 pass, 2 fail)" is never split over two lines
        if not out.width or len(lines[-1]) + 2 + len(tail) <= out.width:
            lines[-1] += "  " + tail
        else:
            lines.append(" " * len(first) + tail)
    for k, line in enumerate(lines):
        out.append(_styled(line, [(0, len(first), style)] if k == 0 else []))


def terminal_width(stream: TextIO | None) -> int:
    """The width the report wraps at on ``stream``: its terminal's, or :data:`PIPE_WIDTH`."""
    import shutil

    target = stream or sys.stdout
    try:
        is_tty = bool(target.isatty())
    except (AttributeError, ValueError, OSError):
        is_tty = False
    if not is_tty:
        return PIPE_WIDTH
    return max(MIN_WIDTH, shutil.get_terminal_size((80, 24)).columns)


def render_text(report: Report, stream: TextIO | None = None, *, verbose: bool = False,
                color: bool | None = None, anonymize: bool = False, width: int | None = None,
                title: str = "gpudoctor report") -> None:
    """Print a report for people: a line per probe, findings with why and fix, a verdict.

    A passing probe is one line (its measurements with ``verbose``). Lines wrap at the
    terminal's width with hanging indents; when not a terminal they are not wrapped
    (:data:`PIPE_WIDTH`). Every string from a driver, a process or a file is printed as
    plain text (:func:`~gpudoctor.sampling.presentation.plain_text`).
    """
    from rich.console import Console

    data = report.to_dict()
    if anonymize:
        data = anonymize_report_dict(data, identifying_keys())
    if width is None:
        width = terminal_width(stream)
    console = Console(file=stream, force_terminal=color, no_color=(color is False), highlight=False,
                      soft_wrap=True, width=max(width, 80) if width else 10_000)
    for line in report_lines(data, width=width, verbose=verbose, title=plain_text(title, limit=80)):
        console.print(line, soft_wrap=True)


def status_word(status: Status | str) -> str:
    return _status_word(Status(status))


# --------------------------------------------------------------------------- markdown
# What can change the meaning of a table cell or a line: emphasis, code, links, pipes, strike.
# (<, > and & are HTML-escaped, so driver text cannot close the <details> block.)
_MD_SPECIAL = re.compile(r"([\\*_\[\]|~])")
#: Code spans (`nvidia-smi -r`): kept as code where they are balanced in a text; a lone backtick is
#: escaped, so it cannot open a span that runs over the rest of a row.
_CODE_SPAN = re.compile(r"`([^`]+)`")
#: Measurements of the environment probe quoted as the versions line, in this order.
MARKDOWN_VERSIONS = (("gpudoctor", None), ("python", "python"), ("os", "os"), ("driver", "nvidia_driver"),
                     ("driver CUDA", "driver_cuda_version"), ("torch", "torch"),
                     ("torch CUDA build", "torch_cuda_build"), ("cuDNN", "cudnn"))


def md_text(value: object, limit: int = 500) -> str:
    """Driver or probe text for markdown: plain (one line, no escapes), HTML-escaped so it
    cannot close the ``<details>`` block, markdown characters backslash-escaped."""
    import html

    text = html.escape(plain_text(value if value is not None else "", limit=limit), quote=False)
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return text if text.count("`") % 2 == 0 else text.replace("`", "\\`")


def md_html(value: object, limit: int = 500) -> str:
    """Text for an HTML element of the markdown (``<summary>``, where GitHub renders no markdown):
    HTML-escaped, its code spans as ``<code>``, nothing backslash-escaped (it would show)."""
    import html

    text = html.escape(plain_text(value if value is not None else "", limit=limit), quote=False)
    return _CODE_SPAN.sub(r"<code>\1</code>", text)


def report_to_markdown(report: Report, anonymize: bool = True) -> str:
    """A short, collapsible summary to paste into a GitHub issue: the verdict line, versions,
    GPUs and every finding that is not a pass, inside one ``<details>`` block.

    ``anonymize`` (the default here) strips GPU UUIDs, serials and host names first.
    """
    data = report.to_dict()
    if anonymize:
        data = anonymize_report_dict(data, identifying_keys())
    status = data["status"]
    counts = ", ".join(f"{n} {k}" for k, n in (data.get("counts") or {}).items() if n)
    verdict = f"{status_word(status)}: {verdict_sentence(data)}" + (f" ({counts})" if counts else "")
    if data.get("interrupted"):
        verdict += " (interrupted: partial report)"
    lines = ["<details>", f"<summary>gpudoctor report: {md_html(verdict)}</summary>", ""]

    env = next((r for r in data["results"] if r["probe"] == "environment"), None)
    values = {m["name"]: m["value"] for m in (env or {}).get("measurements", []) if m.get("device") is None}
    versions = []
    for label, key in MARKDOWN_VERSIONS:
        value = (data.get("tool") or {}).get("version") if key is None else values.get(key)
        if value not in (None, ""):
            versions.append(f"{label} {md_text(value, 80)}")
    if versions:
        lines.append("- versions: " + ", ".join(versions))
    devices = next((r for r in data["results"] if r["probe"] == "devices"), None)
    if devices is not None and devices.get("summary"):
        lines.append(f"- GPUs: {md_text(devices['summary'])}")
    lines.append(f"- source: {md_text(data.get('source') or '', 120)}, created {md_text(data.get('created') or '', 40)}"
                 + (", anonymized" if anonymize else ""))
    lines.append("")
    findings = [(r, f) for r in data["results"] for f in (r.get("findings") or []) if f["status"] != "pass"]
    if findings:
        lines.append("| status | check | finding | fix |")
        lines.append("|---|---|---|---|")
        rows: dict[tuple[str, str, str], list[str]] = {}  # the same finding of several checks: one row
        for result, f in findings:
            row = (status_word(f["status"]), md_text(f.get("summary")), md_text(f.get("fix")))
            rows.setdefault(row, []).append(md_text(result["probe"], 60))
        for (word, summary, fix), checks in rows.items():
            lines.append(f"| {word} | {', '.join(checks)} | {summary} | {fix} |")
    else:
        lines.append("Every finding passed.")
    lines += ["", "</details>", ""]
    return "\n".join(lines)
