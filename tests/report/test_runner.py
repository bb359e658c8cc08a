"""The runner turns every probe failure into one result and the report still completes."""

from __future__ import annotations

import os

import pytest

from support import fault_probes as fp
from gpudoctor.report import runner
from gpudoctor.core.model import Status


def _spec():
    return runner.RunSpec(level="standard")


def test_crashing_hanging_and_aborting_probes_each_cost_one_result():
    probes = [fp.OK, fp.RAISES, fp.HANGS, fp.ABORTS, fp.OK, fp.EXITS, fp.OK_INPROC]
    report = runner.run_probes(probes, _spec())
    by = [(r.probe, r.status) for r in report.results]
    assert [p for p, _ in by] == ["ok", "raises", "hangs", "aborts", "ok", "exits", "ok_inproc"]
    statuses = dict(by[1:4])
    assert statuses == {"raises": Status.ERROR, "hangs": Status.ERROR, "aborts": Status.ERROR}
    raises, hangs, aborts = report.results[1:4]
    assert raises.summary == "probe crashed: ValueError: deliberate failure"
    assert "timed out after 2 s" in hangs.summary
    assert "SIGABRT" in aborts.summary
    # probes after a killed child still ran, in a fresh child with another pid
    first_pid = report.results[0].measurements[0].value
    later_pid = report.results[4].measurements[0].value
    assert report.results[4].status == Status.PASS
    assert first_pid != later_pid and first_pid != os.getpid()
    assert report.results[5].status == Status.ERROR and "SystemExit" in report.results[5].summary
    # in-process probes run in this process
    assert report.results[6].measurements[0].value == os.getpid()
    assert report.status == Status.ERROR
    report.to_dict()  # schema-validated by conftest


def test_a_probe_that_poisons_its_child_is_kept_and_the_next_probe_runs_in_a_fresh_child():
    """A probe that returns but leaves GPU work that never finishes (a hung peer copy) says so; the runner
    keeps its result, ends that child and starts another, so later probes do not wait on the stuck work."""
    report = runner.run_probes([fp.OK, fp.POISONS, fp.OK, fp.OK], _spec())
    assert [r.status for r in report.results] == [Status.PASS] * 4
    pids = [r.measurements[0].value for r in report.results]
    assert pids[0] == pids[1], "a probe that poisons its child still ran in the running child"
    assert pids[2] != pids[1] and pids[2] == pids[3] and os.getpid() not in pids
    assert report.results[1].details["process_poisoned"] == "a peer copy never finished"


def test_in_process_probe_time_limit_and_bad_return_type():
    report = runner.run_probes([fp.HANGS_INPROC, fp.WRONG_TYPE, fp.RAISES_INPROC, fp.OK_INPROC], _spec())
    hangs, wrong, raises, ok = report.results
    assert hangs.status == Status.ERROR and "timed out after 1 s" in hangs.summary
    assert wrong.status == Status.ERROR and "ProbeResult" in wrong.summary
    assert raises.status == Status.ERROR and "traceback" in raises.details
    assert ok.status == Status.PASS


def test_keyboard_interrupt_keeps_finished_results():
    calls = []

    def on_start(probe):
        calls.append(probe.name)
        if len(calls) == 2:
            raise KeyboardInterrupt

    report = runner.run_probes([fp.OK_INPROC, fp.OK_INPROC, fp.OK_INPROC], _spec(), on_start=on_start)
    assert report.interrupted is True
    assert len(report.results) == 1 and report.results[0].status == Status.PASS
    assert report.to_dict()["interrupted"] is True


def test_selection_by_name_and_level():
    names = [p.name for p in runner.select_probes(level="quick")]
    assert names[:3] == ["environment", "devices", "health"]
    assert [p.name for p in runner.select_probes(["health", "environment"])] == ["environment", "health"]
    with pytest.raises(runner.ProbeSelectionError, match="unknown probe 'nope'"):
        runner.select_probes(["nope"])
    with pytest.raises(runner.ProbeSelectionError, match="unknown level"):
        runner.select_probes(level="extreme")
    standard = {p.name for p in runner.select_probes(level="standard")}
    full = {p.name for p in runner.select_probes(level="full")}
    assert standard <= full


def test_every_registered_probe_is_well_formed():
    from gpudoctor.probes import LEVELS, registry

    probes = registry()
    assert {"environment", "devices", "health"} <= set(probes)
    for name, probe in probes.items():
        assert name == probe.name and name.isidentifier() and name == name.lower()
        assert probe.level in LEVELS and probe.timeout_s > 0 and probe.title


def test_quiet_child_keeps_the_terminal_clean():
    import subprocess
    import sys

    code = ("import sys; sys.path.insert(0, 'tests')\n"
            "from support import fault_probes as fp\n"
            "from gpudoctor.report import runner\n"
            "quiet = sys.argv[1] == 'quiet'\n"
            "r = runner.run_probes([fp.NOISY], runner.RunSpec(quiet_child=quiet))\n"
            "assert r.results[0].summary == 'printed'\n")
    loud = subprocess.run([sys.executable, "-c", code, "loud"], capture_output=True, text=True, timeout=120)
    quiet = subprocess.run([sys.executable, "-c", code, "quiet"], capture_output=True, text=True, timeout=120)
    assert loud.returncode == quiet.returncode == 0, quiet.stderr
    assert "NOISY-STDOUT" in loud.stdout and "NOISY-STDERR" in loud.stderr
    assert "NOISY" not in quiet.stdout + quiet.stderr
