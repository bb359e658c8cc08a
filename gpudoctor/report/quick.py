"""The quick check, as one call: the verdict `report --quick`, the exporter and the TUI header share.

It runs the quick-level probes (NVML, host facts, and torch's build read from
``torch/version.py`` as text): no torch import, no CUDA context, well under a second.
A driver too old for torch's CUDA build fails here exactly as in the full report, because
both use :func:`gpudoctor.backends.cuda_compat.driver_build_findings`.

    from gpudoctor.report.quick import quick_verdict
    verdict = quick_verdict()            # or quick_verdict(gpu=backend) in the TUI
    verdict.status                       # Status.FAIL
    verdict.line()                       # "FAIL: The driver (470.57.02) supports CUDA up to 11.4, ..."
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudoctor.core._text import plain_text
from gpudoctor.core.model import Finding, Report, Status

if TYPE_CHECKING:
    from gpudoctor.system._fork import ForkedCall
    from gpudoctor.backends.base import GpuBackend
    from gpudoctor.backends.events import EventSource

# A headline is one line of plain text, bounded (it comes from driver and file data).
HEADLINE_MAX = 160


@dataclass(frozen=True)
class QuickVerdict:
    """``finding``: the worst finding, its summary on one line and bounded (``headline``), its status
    the quick report's overall status; or the all-clear (``quick_all_clear``). ``probe``: the probe
    that said it (None: all clear). ``report``: the whole quick report, for a screen that shows more."""

    finding: Finding
    probe: str | None
    report: Report

    @property
    def status(self) -> Status:
        return self.finding.status

    @property
    def headline(self) -> str:
        return self.finding.summary

    def line(self, width: int | None = None) -> str:
        """'FAIL: <headline>', cut to ``width`` characters with an ellipsis."""
        text = f"{self.status.value.upper()}: {self.headline}"
        if width is not None and len(text) > width:
            text = text[:max(0, width - 1)] + "…"
        return text


def quick_report(replay: str | None = None, python: str | None = None, gpu: GpuBackend | None = None,
                 events: EventSource | None = None) -> Report:
    """Run the quick-level probes in this process (no torch import) and return the report.

    ``replay``: a recording instead of live NVML. ``python``: read the torch build of that
    interpreter (``report --python``). ``gpu``: an open GPU backend to use (the caller
    keeps it open), e.g. the TUI's. ``events``: the caller's running event watcher, whose NVML
    stream the events probe reads (a critical event seen there fails the verdict).
    """
    from gpudoctor.report import runner

    probes = runner.select_probes(None, "quick")
    spec = runner.RunSpec(level="quick", replay=replay, python=python)
    return runner.run_probes(probes, spec, gpu=gpu, isolate=False, events=events)


def begin_quick_report(replay: str | None = None) -> ForkedCall | None:
    """Start the quick report in a fork of this process, to read later with :func:`read_quick_report`:
    the TUI starts it before it imports Textual, so the header's verdict is worked out on another
    core while the first frame is built. None where forking is not safe (other threads) or
    possible (not Linux): the caller runs :func:`quick_report` itself."""
    import sys

    from gpudoctor.system._fork import ForkedCall, one_thread

    if not sys.platform.startswith("linux") or not one_thread():
        return None
    return ForkedCall(lambda: quick_report(replay=replay).to_json(indent=None))


def read_quick_report(call: ForkedCall) -> Report | None:
    """The report a :func:`begin_quick_report` child made (waits for it); None if it made none."""
    import json

    text, why = call.answer()
    if why:
        return None
    try:
        return Report.from_dict(json.loads(text))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def verdict_of(report: Report) -> QuickVerdict:
    """The headline of a finished report (quick or not): its worst finding, in report order."""
    from gpudoctor.core import findings

    status = report.status
    if status in (Status.PASS,):
        return QuickVerdict(findings.finding("quick_all_clear"), None, report)
    for result in report.results:
        if result.status != status:
            continue
        for f in result.findings:
            if f.status == status:
                return QuickVerdict(Finding(status, f.code, _one_line(f.summary), f.why, f.fix, f.device, f.evidence),
                                    result.probe, report)
        return QuickVerdict(findings.finding("quick_result", status=status, summary=_one_line(result.summary)),
                            result.probe, report)
    return QuickVerdict(findings.finding("quick_nothing_checked", status=status), None, report)


def quick_verdict(replay: str | None = None, python: str | None = None,
                  gpu: GpuBackend | None = None) -> QuickVerdict:
    """Run the quick check and return its verdict (see :func:`quick_report`)."""
    return verdict_of(quick_report(replay=replay, python=python, gpu=gpu))


def once_lines(gpu: GpuBackend, width: int, replay: str | None = None, doctor: bool = True) -> list[str]:
    """``gpudoctor --once``: the TUI's compact view once, as plain lines of at most ``width``
    columns (:func:`gpudoctor.sampling.presentation.once_lines`), with the quick doctor's verdict.

    GPM (SM activity) needs two samples at least nvml.GPM_MIN_INTERVAL_S apart: where the first reading is still
    warming, a live GPU is read again once the sampler's next full read is due."""
    import time

    from gpudoctor.backends.host import PsutilProcessInfo, default_host_sampler
    from gpudoctor.sampling.presentation import busy_verdict, once_lines as lines_of, process_rows, recorded_process_info
    from gpudoctor.sampling.sampler import Sampler, recorded_snapshot

    sampler = Sampler(gpu, default_host_sampler())
    snap = sampler.read()
    if any(busy_verdict(d).code == "warming" for d in snap.devices):
        if gpu.kind != "replay":
            time.sleep(1.0)  # the sampler reads GPM in full reads, at most once a second
        snap = sampler.read()
    snap = recorded_snapshot(gpu, snap)
    info = recorded_process_info if gpu.kind == "replay" else PsutilProcessInfo()
    rows, _ = process_rows(snap, info)
    headline = reason = ""
    if doctor:
        verdict = verdict_of(quick_report(replay=replay, gpu=gpu))
        headline = f"Doctor: {verdict.status.value.upper()}"
        reason = "" if verdict.status is Status.PASS else verdict.headline
    return lines_of(snap, rows, width, headline, reason)


def _one_line(text: str) -> str:
    """One bounded line: line breaks become spaces, escapes and other control characters are marked
    (``␛``), never silently dropped (core._text.plain_text)."""
    return plain_text(" ".join(str(text).split()), limit=HEADLINE_MAX)


__all__ = ["QuickVerdict", "begin_quick_report", "once_lines", "quick_report", "quick_verdict", "read_quick_report",
           "verdict_of"]
