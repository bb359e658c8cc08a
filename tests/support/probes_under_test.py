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


def health_on(nvml, level: str = "quick") -> tuple[ProbeResult, dict, str]:
    """The health probe on a fake NVML (``support.nvml_fake.FakePynvml``) through the real backend:
    its result, the report's measurements as the JSON gives them by (name, device), and the verbose
    text report."""
    import io
    import json

    from gpudoctor.backends import NvmlBackend, NvmlGate
    from gpudoctor.console.render import render_text
    from gpudoctor.core.model import Report
    from gpudoctor.probes import ProbeContext, health

    result = health.run(ProbeContext(gpu=NvmlBackend(NvmlGate(nvml)), level=level))
    data = json.loads(json.dumps(Report(results=[result]).to_dict()))
    measured = {(m["name"], m["device"]): m for m in data["results"][0]["measurements"]}
    text = io.StringIO()
    render_text(Report(results=[result]), text, color=False, width=120, verbose=True)
    return result, measured, text.getvalue()
