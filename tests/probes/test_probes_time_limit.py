"""A measuring probe that overruns its time limit is killed and reported as ``error``.

The probe child is started by the runner with ``spawn``, so the hang is planted with a
``sitecustomize`` module on PYTHONPATH that replaces the memory probe's run in the child
only. The report must still be complete and valid, and the next probe must run in a
fresh child (compute still gives its CPU figure).
"""

from __future__ import annotations

import dataclasses
import json
import os
import textwrap
import time

import pytest

pytest.importorskip("torch")

from gpudoctor.report import runner  # noqa: E402
from gpudoctor.core.model import Status  # noqa: E402
from support.nvml_fake import no_driver  # noqa: E402

HANG = textwrap.dedent("""
    import dataclasses, time
    import gpudoctor.probes.memory as m

    def _hang(ctx):
        time.sleep(600)  # past pytest's own limit: a runner that waits for it fails

    # The runner pickles a Probe by reference to its run function, so the child resolves
    # gpudoctor.probes.memory.run here: replace that (and PROBE, for registry look-ups).
    m.run = _hang
    m.PROBE = dataclasses.replace(m.PROBE, run=_hang)
""")


def test_probe_over_time_limit_is_killed_and_report_stays_valid(tmp_path, monkeypatch):
    psutil = pytest.importorskip("psutil")
    (tmp_path / "sitecustomize.py").write_text(HANG)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    probes = runner.select_probes(["memory", "compute"], "full")
    memory = dataclasses.replace(probes[0], timeout_s=3.0)  # the parent enforces this limit
    started = time.monotonic()
    report = runner.run_probes([memory, probes[1]], runner.RunSpec(level="full"), gpu=no_driver())
    elapsed = time.monotonic() - started

    assert elapsed < 200  # not the hang's 600 s: the limit ended it (two fresh children on a busy machine fit)
    first, second = report.results
    assert first.probe == "memory" and first.status is Status.ERROR
    assert "timed out after 3 s" in first.summary
    assert first.findings[0].code == "probe_error"
    # the next probe ran in a fresh child and still measured the CPU
    assert second.probe == "compute" and second.status in (Status.SKIP, Status.PASS, Status.WARN)
    assert any(m.name == "cpu_fp32_matmul" and m.value > 0 for m in second.measurements)
    assert report.status is Status.ERROR
    # no probe process left behind
    def alive() -> list:
        found = []
        for c in psutil.Process().children(recursive=True):
            try:
                if c.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(c.cmdline()):
                    found.append(c)  # (multiprocessing's resource tracker is its own helper)
            except psutil.Error:  # ended in between
                pass
        return found

    deadline = time.monotonic() + 30  # a kill already sent lands: waited for, not guessed
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive() == [], [c.cmdline() for c in alive()]
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    schema = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "docs", "report.schema.json")
    if os.path.exists(schema):
        jsonschema = pytest.importorskip("jsonschema")
        with open(schema, encoding="utf-8") as fh:
            jsonschema.validate(data, json.load(fh))
    assert data["counts"]["error"] == 1
