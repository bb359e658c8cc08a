"""A finding's words are written once (gpudoctor/core/findings.py) and every front end takes them from there.

Each test rewords one code in the table, in the test only, and finds the new words in the health
probe's finding, in fleet's row (built from Prometheus series) and in the text the TUI and `watch`
show: no other file holds a copy that would keep the old words.
"""

from __future__ import annotations

import pytest
from support.fleet_doubles import NOW, gpu, make, view_of

from gpudoctor.core import findings
from gpudoctor.backends.nvml import THROTTLE_REASONS
from gpudoctor.core.findings import ReasonWords, Wording
from gpudoctor.core.model import ProbeResult, Status
from gpudoctor.sampling.presentation import throttle_text
from gpudoctor.probes.health import check_device


def _health(sample):
    r = ProbeResult("health")
    check_device(r, 0, {"name": "NVIDIA H100 80GB HBM3"}, {"gpu_util_pct": 97, **sample})
    return r


def _fleet_row(*series):
    view = view_of(make([("a:9402", 1)], extra=[(dict(gpu("a:9402", 0), __name__=name, **labels), value)
                                                for name, labels, value in series]))
    return view.rows[0]


def test_rewording_a_memory_finding_changes_the_health_probe_and_fleet(monkeypatch):
    monkeypatch.setitem(findings.WORDING, "row_remap_failure",
                        Wording(Status.FAIL, "{label} lost a row for good (test words)", "Why (test words).",
                                "Swap the board (test words)."))
    finding = next(f for f in _health({"remapped_rows_uncorrectable": 3, "remapped_rows_failure": True}).findings
                   if f.code == "row_remap_failure")
    assert finding.summary == "GPU 0 (NVIDIA H100 80GB HBM3) lost a row for good (test words)."
    assert (finding.why, finding.fix) == ("Why (test words).", "Swap the board (test words).")
    row = _fleet_row(("gpudoctor_gpu_remapped_rows_failure", {}, 1))
    assert row.status == "fail" and row.reason == "lost a row for good (test words): swap the board (test words)"


def test_rewording_a_clock_event_changes_the_health_probe_fleet_and_the_tui(monkeypatch):
    monkeypatch.setitem(findings.CLOCK_EVENTS, "hw_thermal_slowdown",
                        ReasonWords("scorching (test words)", "scorching (short test words)"))
    hw_thermal = 0x40
    finding = next(f for f in _health({"throttle_reasons": hw_thermal}).findings
                   if f.code == "throttle_hw_thermal_slowdown")
    assert finding.summary == "GPU 0 (NVIDIA H100 80GB HBM3): scorching (test words)." and finding.status == Status.FAIL
    row = _fleet_row(("gpudoctor_gpu_throttled", {"reason": "hw_thermal_slowdown"}, 1))
    assert row.status == "warn" and row.reason == "clocks held down: scorching (short test words)"
    assert throttle_text(hw_thermal) == "scorching (test words)"  # the TUI's clocks line and watch's words


def test_every_code_the_front_ends_name_has_its_words_in_the_table():
    """The codes produced from the table are worded there (a missing entry would raise at run time)."""
    for code, wording in findings.WORDING.items():
        assert wording.summary and isinstance(wording.status, Status), code
    assert {f"throttle_{c}" for c in findings.HELD_DOWN | {"sw_power_cap"}} <= set(findings.WORDING)
    assert set(findings.CLOCK_EVENTS) == {code for code, _words in THROTTLE_REASONS.values()}


def test_a_report_that_errored_is_a_warning_in_fleet_not_a_stale_row():
    """The verdict word fills the template; it is not the finding's status."""
    view = view_of(make([("a:9402", 1)], extra=[
        ({"__name__": "gpudoctor_report_status", "instance": "a:9402", "job": "gpudoctor", "status": "error"}, 1),
        ({"__name__": "gpudoctor_report_timestamp_seconds", "instance": "a:9402", "job": "gpudoctor"}, NOW - 60)]))
    assert view.rows[0].status == "warn" and view.rows[0].reason == "the node's last report: error"


def test_rewording_a_training_loop_finding_changes_the_hooks_summary(monkeypatch):
    from gpudoctor.hooks.summary import Summary, diagnose

    monkeypatch.setitem(findings.WORDING, "fragmentation",
                        Wording(Status.WARN, "Shattered memory (test words): {seen}.", "", "Defragment (test words)."))
    summary = Summary(steps=10, device="cuda:0", memory={"peak_allocated_bytes": 1, "alloc_retries": 2})
    summary.diagnosis = diagnose(summary)
    item = next(i for i in summary.to_dict()["diagnosis"] if i["code"] == "fragmentation")
    assert item["message"].startswith("Shattered memory (test words): the allocator had to free its cache and retry 2")
    assert item["advice"] == "Defragment (test words)." and item["severity"] == Status.WARN


def test_the_index_finds_a_code_in_any_registered_table_and_no_code_twice(monkeypatch):
    """A package's table is registered with one line in findings._TABLES; findings.wording() and
    findings.finding() then find its codes, and no code is worded in two tables."""
    import sys
    import types

    table = types.ModuleType("gpudoctor_test_wording_table")
    table.WORDING = {"test_only_code": Wording(Status.WARN, "{label} is a test ({n})", "Why.", "Fix.")}
    monkeypatch.setitem(sys.modules, table.__name__, table)
    monkeypatch.setattr(findings, "_TABLES", (*findings._TABLES, table.__name__))
    assert findings.wording("test_only_code") is table.WORDING["test_only_code"]
    made = findings.finding("test_only_code", label="GPU 0", n=3)
    assert (made.code, made.summary, made.status) == ("test_only_code", "GPU 0 is a test (3).", Status.WARN)
    seen: dict[str, str] = {}
    for name, words in findings.tables().items():
        for code in words:
            assert code not in seen, f"{code} is worded in {seen[code]} and in {name}"
            seen[code] = name
    with pytest.raises(KeyError, match="no_such_code_anywhere"):
        findings.wording("no_such_code_anywhere")
