"""Helpers to run one probe against a recording, in-process (the runner's isolation is tested elsewhere)."""

from __future__ import annotations

from gpudoctor.report import runner
from gpudoctor.core.model import ProbeResult


def run_probe(name: str, recording=None, level: str = "standard", device=None) -> ProbeResult:
    probe = runner.all_probes()[name]
    spec = runner.RunSpec(level=level, replay=str(recording) if recording else None, device=device)
    return runner.call_probe(probe, runner.build_context(spec))


def codes(result: ProbeResult) -> set[str]:
    return {f.code for f in result.findings}
