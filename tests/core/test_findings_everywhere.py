"""A finding's words live once, in a wording table registered in ``gpudoctor.core.findings._TABLES``:
rewording a code there (in the test only) changes what every front end says, and no code that
gpudoctor emits is worded anywhere else.

The reworded code is the work verdict's ``busy_small_kernels`` (``work:busy_small_kernels``): the
report (its health finding, in JSON and text), ``watch`` (line and JSON), the TUI (headless),
the exporter (the last report's findings as ``gpudoctor_report_finding_info``), fleet (a row's
reason) and ``why`` (the launch-bound verdict, JSON and text) all show its new words. A fault's
code, ``gpu_lost``, is reworded too: the report, the exporter, fleet, ``watch``'s FAULT line and the
TUI's panel show it; and the no-GPU sentence and the event words (``watch``, the TUI).
"""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

import pytest
from support.fleet_doubles import gpu, make, view_of
from support.tui_support import DATA, make_test_app, run_async, screen_text, take_samples

from gpudoctor.core import exitcodes, findings
from gpudoctor.cli import main
from gpudoctor.core.findings import Wording
from gpudoctor.core.model import ProbeResult, Report, Status

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
GPM = DATA / "handmade_h100_gpm_small_kernels.json"
SMALL_KERNELS = {"gpu_util_pct": 100.0, "sm_active_pct": 9.0, "tensor_active_pct": 0.0}
REWORDED = Wording(Status.WARN, "kernels tiny (test words) at SM {sm:.0f}%", "", "batch them (test words)",
                   short="tiny kernels (test headline)")


@pytest.fixture
def reworded(monkeypatch):
    monkeypatch.setitem(findings.WORDING, "work:busy_small_kernels", REWORDED)


def _health_report(name: str, sample: dict) -> Report:
    """The report of the health probe's judgement of one GPU (``name``) on one ``sample``."""
    from gpudoctor.probes.health import check_device

    result = ProbeResult("health")
    check_device(result, 0, {"name": name}, sample)
    return Report(results=[result.settle()])


def _report() -> Report:
    return _health_report("NVIDIA H100 80GB HBM3", dict(SMALL_KERNELS))


def test_the_report_says_the_new_words_in_json_and_text(reworded):
    from gpudoctor.console.render import report_lines, report_to_json

    data = json.loads(report_to_json(_report()))
    [found] = [f for r in data["results"] for f in r["findings"] if f["code"] == "busy_small_kernels"]
    assert found["summary"] == "GPU 0 (NVIDIA H100 80GB HBM3): kernels tiny (test words) at SM 9%; batch them (test words)."
    text = "\n".join(str(getattr(line, "plain", line)) for line in report_lines(data, width=200, verbose=True))
    assert "kernels tiny (test words) at SM 9%" in text and "only 9% of SM cycles" not in text


def test_watch_says_the_new_words_in_its_line_and_json(reworded, capsys):
    assert main(["watch", "-n", "3", "-v", "--replay", str(GPM)]) == exitcodes.OK
    line = capsys.readouterr().out.splitlines()[2]
    assert line.endswith("| verdict tiny kernels (test headline)")
    assert main(["watch", "-n", "3", "--json", "--replay", str(GPM)]) == exitcodes.OK
    verdict = json.loads(capsys.readouterr().out.splitlines()[2])["verdict"]
    assert verdict == {"code": "busy_small_kernels", "headline": "tiny kernels (test headline)",
                       "words": "kernels tiny (test words) at SM 10%", "fix": "batch them (test words)",
                       "evidence": "gpm"}


@run_async
async def test_the_tui_says_the_new_words(reworded):
    app = make_test_app(GPM)
    async with app.run_test(size=(160, 50)) as pilot:
        await take_samples(pilot, app, 2)
        shown = screen_text(app)
        assert "kernels tiny (test words) at SM" in shown, shown
        assert "of SM cycles active" not in shown
        await pilot.press("q")


def _finding_series(recording: Path, produce) -> list[str]:
    """The exporter's ``gpudoctor_report_finding_info`` series, scraped once after one sample of
    ``recording`` and one report from ``produce``."""
    from prometheus_client import generate_latest

    from gpudoctor.backends import ReplayBackend
    from gpudoctor.exporter import GpudoctorCollector, GpuSampler, build_registry
    from gpudoctor.exporter.report_status import ReportStatus

    sampler = GpuSampler(ReplayBackend.from_file(recording), 1.0)
    sampler.sample_once()
    reports = ReportStatus(produce=produce)
    reports.refresh()
    text = generate_latest(build_registry(GpudoctorCollector(sampler, reports))).decode()
    return [line for line in text.splitlines() if line.startswith("gpudoctor_report_finding_info{")]


def test_the_exporter_shows_the_last_reports_finding_in_the_new_words(reworded):
    [series] = _finding_series(GPM, _report)
    assert 'code="busy_small_kernels"' in series and 'status="warn"' in series
    assert "kernels tiny (test words) at SM 9%; batch them (test words)." in series


def test_fleet_says_the_new_words(reworded):
    extra = [(dict(gpu("a:9402", 0), __name__="gpudoctor_gpu_sm_active_ratio"), 0.08),
             (dict(gpu("a:9402", 0), __name__="gpudoctor_gpu_tensor_active_ratio"), 0.0)]
    row = view_of(make([("a:9402", 1)], extra=extra)).rows[0]
    assert row.status == "warn" and "kernels tiny (test words) at SM 8%" in row.reason


def test_why_says_the_new_words_in_json_and_text(reworded):
    from gpudoctor.why import analysis
    from gpudoctor.why.stacks import parse_raw
    from gpudoctor.why.text import render_text

    site = "/usr/lib/python3.12/site-packages"
    frames = ["<module> (/w/train.py:30)", f"Linear.forward ({site}/torch/nn/modules/linear.py:116)"]
    raw = 'process 1:"python train.py";thread (1): MainThread;' + ";".join(frames) + " 100\n"
    readings = {"gpu": {"available": True, "devices": [
        {"index": 0, "util_mean_pct": 97.0, "sm_active_mean_pct": 6.0, "tensor_active_mean_pct": 0.0,
         "processes": [{"pid": 1}]}]}}
    d = analysis.diagnose(list(parse_raw(raw)), readings, lambda f, n: "", pid=1)
    assert d["verdict"]["code"] == "launch_bound", d["verdict"]
    assert d["verdict"]["message"] == "kernels tiny (test words) at SM 6%"
    assert d["verdict"]["fix"].startswith("batch them (test words)")
    assert "kernels tiny (test words) at SM 6%" in render_text(d, width=200)


# --------------------------------------------------------------------------- the guard
#: Files whose inline-worded findings move into wording tables in a change of their own (issue 39:
#: probes/, and these five); the guard covers every other file of gpudoctor/.
WORDED_ELSEWHERE: set[str] = set()  # every module of gpudoctor/ is held to it
#: Calls that take a finding code (or ``code:way``) first and look its words up in the tables.
WORDED_BY_KEY = {"finding", "words", "wording", "said", "worded"}


def _sources():
    for path in sorted((ROOT / "gpudoctor").rglob("*.py")):
        rel = path.relative_to(ROOT / "gpudoctor").as_posix()
        if rel not in WORDED_ELSEWHERE:
            yield rel, ast.parse(path.read_text(encoding="utf-8"))


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _worded_inline(call: ast.Call) -> bool:
    """A Finding(...) whose summary, why or fix is written at the call: a literal or an f-string."""
    texts = call.args[2:5] + [k.value for k in call.keywords if k.arg in ("summary", "why", "fix")]
    return any(isinstance(t, ast.JoinedStr) or (isinstance(t, ast.Constant) and isinstance(t.value, str) and t.value)
               for t in texts)


def test_every_finding_code_gpudoctor_emits_has_its_words_in_a_table():
    """No Finding is worded at the call (its words come from a table), and every code looked up by
    name (findings.finding("code"), said("code:way"), busy's _said("code", "way")) is in one."""
    inline, missing = [], []
    for rel, tree in _sources():
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            name = _name(call.func)
            if name == "Finding" and _worded_inline(call):
                inline.append(f"{rel}:{call.lineno}")
            first = call.args[0] if call.args else None
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            if name in WORDED_BY_KEY:
                key = first.value
            elif name == "_said" and rel == "backends/busy.py":
                way = call.args[1].value if len(call.args) > 1 and isinstance(call.args[1], ast.Constant) else ""
                key = f"work:{first.value}" + (f":{way}" if way else "")
            else:
                continue
            try:
                findings.wording(key)
            except KeyError:
                missing.append(f"{rel}:{call.lineno} {key}")
    assert not inline, f"findings worded at the call, not in a wording table: {inline}"
    assert not missing, f"finding codes with no words in any table: {missing}"


def test_every_code_of_the_work_verdict_and_of_why_is_worded():
    from gpudoctor.backends import busy
    from gpudoctor.why import CODES

    keys = {key for table in findings.tables().values() for key in table}
    assert {f"work:{code}" for code in busy.CODES} <= {k.rpartition(":")[0] if k.count(":") == 2 else k
                                                        for k in keys}
    assert {code for code in CODES} <= {k.partition(":")[0] for k in keys}


# --------------------------------------------------------------------------- a fault, a machine without NVML, an event
# What the live views say of a GPU lost, of a machine where NVML is unusable and of an ECC event is
# worded in core/findings.py too: the fault line is its code's entry (gpu_lost words the report's
# finding and, in its ``short``, watch's FAULT line and the TUI's panel), so one entry rewords all.
GPU_LOST = DATA / "handmade_gpu_lost_midsession.json"
NO_NVML = DATA / "handmade_no_nvml.json"
LOST = Wording(Status.FAIL, "{label} is gone (test words)", "Why (test words).", "Reseat it (test words).",
               short="lost for good (test words): reseat it.")


@pytest.fixture
def lost_reworded(monkeypatch):
    monkeypatch.setitem(findings.WORDING, "gpu_lost", LOST)


def _lost_report() -> Report:
    from gpudoctor.backends.na import NA

    return _health_report("NVIDIA GeForce RTX 3090", {"gpu_util_pct": NA("GpuIsLost")})


def test_a_reworded_fault_code_changes_the_report(lost_reworded):
    from gpudoctor.console.render import report_lines, report_to_json

    data = json.loads(report_to_json(_lost_report()))
    [found] = [f for r in data["results"] for f in r["findings"] if f["code"] == "gpu_lost"]
    assert (found["summary"], found["fix"]) == ("GPU 0 (NVIDIA GeForce RTX 3090) is gone (test words).",
                                                "Reseat it (test words).")
    text = "\n".join(str(getattr(line, "plain", line)) for line in report_lines(data, width=200, verbose=True))
    assert "is gone (test words)" in text and "fallen off the bus" not in text


def test_a_reworded_fault_code_changes_the_exporters_report_findings(lost_reworded):
    [series] = [line for line in _finding_series(GPU_LOST, _lost_report) if 'code="gpu_lost"' in line]
    assert "is gone (test words)" in series and "fallen off the bus" not in series


def test_a_reworded_fault_code_changes_fleet(lost_reworded):
    extra = [(dict(gpu("a:9402", 0), __name__="gpudoctor_gpu_up"), 0),
             (dict(gpu("a:9402", 0), __name__="gpudoctor_gpu_error_info", reason="GpuIsLost"), 1)]
    row = view_of(make([("a:9402", 1)], extra=extra)).rows[0]
    assert row.status == "fail" and row.reason == "is gone (test words): reseat it (test words)"


def test_a_reworded_fault_code_changes_watch(lost_reworded, capsys):
    assert main(["watch", "-n", "8", "--replay", str(GPU_LOST)]) == exitcodes.OK
    faults = [line for line in capsys.readouterr().out.splitlines() if " FAULT " in line]
    assert faults and all(line.endswith("FAULT GpuIsLost: lost for good (test words): reseat it.") for line in faults)


async def _shown(recording: Path, samples: int) -> str:
    """The TUI's screen on ``recording`` after ``samples`` readings."""
    app = make_test_app(recording)
    async with app.run_test(size=(160, 40)) as pilot:
        await take_samples(pilot, app, samples)
        shown = screen_text(app)
        await pilot.press("q")
    return shown


@run_async
async def test_a_reworded_fault_code_changes_the_tui(lost_reworded):
    shown = await _shown(GPU_LOST, 8)
    assert "lost for good (test words): reseat it." in shown and "fell off the bus" not in shown, shown


def _no_library_reworded(monkeypatch) -> None:
    code = findings.NVML_UNUSABLE["LibraryNotFound"]
    monkeypatch.setitem(findings.WORDING, code, replace(findings.WORDING[code], no_gpu="No driver here (test words)"))


def test_the_no_gpu_sentence_and_the_event_words_are_the_tables(monkeypatch, capsys):
    from gpudoctor.backends.events import DeviceEvents, GpuEvent
    from gpudoctor.sampling.presentation import event_line
    from gpudoctor.tui.widgets import event_lines

    _no_library_reworded(monkeypatch)
    assert main(["watch", "-n", "2", "--replay", str(NO_NVML)]) == exitcodes.NO_GPU
    assert "nothing to watch: No driver here (test words) (NVML: LibraryNotFound)" in capsys.readouterr().err
    monkeypatch.setitem(findings.GPU_EVENTS, "ecc_double_bit", "memory broke (test words)")
    event = GpuEvent(10.0, "ecc_double_bit")
    assert event_line(0, event).endswith("gpu0 EVENT memory broke (test words)")
    shown = "\n".join(line.plain for line in event_lines(DeviceEvents(counts={"ecc_double_bit": 1}, recent=[event]),
                                                           200, now=70.0))
    assert "memory broke (test words), 60 s ago" in shown


@run_async
async def test_a_reworded_no_gpu_sentence_changes_the_tui(monkeypatch):
    _no_library_reworded(monkeypatch)
    shown = await _shown(NO_NVML, 1)
    assert "No driver here (test words)." in shown, shown


# --------------------------------------------------------------------------- NVML unusable: one entry per reason
# A driver not loaded is one entry (findings.NVML_UNUSABLE's code): the environment probe's finding (summary, why,
# fix), the FAULT line when every reading of a GPU answers it mid-session (short, watch and the TUI's panel) and
# the no-GPU sentence of a machine where NVML cannot start (no_gpu, watch and the TUI).
NOT_LOADED = Wording(Status.FAIL, "the driver sleeps (test words).{pci}", "Why it sleeps (test words).",
                     "Wake it (test words).", short="the driver fell asleep (test words).",
                     no_gpu="The driver sleeps here (test words)")


@pytest.fixture
def not_loaded_reworded(monkeypatch):
    monkeypatch.setitem(findings.WORDING, findings.NVML_UNUSABLE["DriverNotLoaded"], NOT_LOADED)


def _answering(recording: Path, reason: str, tmp_path: Path) -> Path:
    """A copy of the hand-made ``recording`` whose NVML errors (GpuIsLost, LibraryNotFound) are ``reason``."""
    text = recording.read_text(encoding="utf-8")
    copy = tmp_path / f"{reason}_{recording.name}"
    copy.write_text(text.replace('"GpuIsLost"', f'"{reason}"').replace('"LibraryNotFound"', f'"{reason}"'),
                    encoding="utf-8")
    return copy


def test_a_reworded_driver_not_loaded_entry_changes_the_report(not_loaded_reworded):
    from gpudoctor.backends import NvmlBackend, NvmlGate
    from gpudoctor.backends.na import NA
    from gpudoctor.probes import ProbeContext, environment
    from support.nvml_fake import FakePynvml

    ctx = ProbeContext(NvmlBackend(NvmlGate(FakePynvml(init_error="DriverNotLoaded"))), level="quick",
                       _stack=NA("NotRead"), _host_facts={"python": "3.12"})
    [found] = [f for f in environment.run(ctx).findings if f.code == "nvidia_driver_unavailable"]
    assert (found.summary, found.why, found.fix) == ("the driver sleeps (test words).", "Why it sleeps (test words).",
                                                     "Wake it (test words).")


def test_a_reworded_driver_not_loaded_entry_changes_watch(not_loaded_reworded, capsys, tmp_path):
    assert main(["watch", "-n", "8", "--replay", str(_answering(GPU_LOST, "DriverNotLoaded", tmp_path))]) == exitcodes.OK
    faults = [line for line in capsys.readouterr().out.splitlines() if " FAULT " in line]
    assert faults and all(line.endswith("FAULT DriverNotLoaded: the driver fell asleep (test words).")
                          for line in faults), faults
    assert main(["watch", "-n", "2", "--replay", str(_answering(NO_NVML, "DriverNotLoaded", tmp_path))]) == exitcodes.NO_GPU
    assert "nothing to watch: The driver sleeps here (test words) (NVML: DriverNotLoaded)" in capsys.readouterr().err


@run_async
async def test_a_reworded_driver_not_loaded_entry_changes_the_tui(not_loaded_reworded, tmp_path):
    shown = await _shown(_answering(GPU_LOST, "DriverNotLoaded", tmp_path), 8)
    assert "the driver fell asleep (test words)." in shown and "NVML is gone" not in shown, shown
    shown = await _shown(_answering(NO_NVML, "DriverNotLoaded", tmp_path), 1)
    assert "The driver sleeps here (test words)." in shown, shown


def test_a_reason_both_faults_and_nvml_unusable_name_is_one_entry():
    """A driver not loaded or a library not found mid-session (the FAULT line) and at start (the no-GPU sentence,
    the report's finding) are one code's entry, not two wordings."""
    shared = set(findings.DEVICE_FAULTS) & set(findings.NVML_UNUSABLE)
    assert {"DriverNotLoaded", "LibraryNotFound"} <= shared
    for reason in shared:
        code = findings.DEVICE_FAULTS[reason]
        assert code == findings.NVML_UNUSABLE[reason], reason
        assert findings.wording(code).short and findings.wording(code).no_gpu, code


# --------------------------------------------------------------------------- why a reading is n/a
# The words of a reading's n/a reason live in findings.NA_REASONS (in full for watch -v and the TUI's wide cells,
# short for its narrow value cells): presentation keeps none of its own.
NOT_SUPPORTED = DATA / "handmade_notsupported_fields.json"


@pytest.fixture
def na_reworded(monkeypatch):
    monkeypatch.setitem(findings.NA_REASONS, "NotSupported", findings.ReasonWords("no such thing (test words)", "nope"))


def test_a_reworded_na_reason_changes_watch(na_reworded, capsys):
    assert main(["watch", "-n", "9", "-v", "--replay", str(NOT_SUPPORTED)]) == exitcodes.OK
    last = capsys.readouterr().out.splitlines()[-1]
    assert "power n/a (no such thing (test words))" in last and "not supported" not in last, last


@run_async
async def test_a_reworded_na_reason_changes_the_tui(na_reworded):
    shown = await _shown(NOT_SUPPORTED, 9)
    assert "power  n/a (nope)" in shown and "not sup." not in shown, shown
