"""`report --quick` as provisioning scripts run it (issue 33): the CUDA driver's start is asked in a
child started before the NVML probes and read after them, with a time limit; the quick path
imports only what it needs (a budget of modules, counted in a child process: no timing here;
the speed itself is measured by benchmarks/quick_vs_nvitop.py).

The CUDA child runs against benchmarks/fake_nvml's fake libcuda (FAKE_CUDA_INIT, FAKE_CUDA)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpudoctor.core import exitcodes
from gpudoctor.backends.cuda_driver import CudaTimeout, cuda_start_findings
from gpudoctor.core.model import Status

ROOT = Path(__file__).resolve().parents[2]
FAKE_NVML = ROOT / "benchmarks" / "fake_nvml"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_CUDA", "FAKE_NVML", "PYTEST"))}
    env.update(PYTHONPATH=str(FAKE_NVML), **extra)
    return env


def _child(code: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=_env(**extra), cwd=ROOT, timeout=120)


# --------------------------------------------------------------------------- the import budget
# What `report --quick --json` may load. These were loaded before issue 33 and are not needed
# for it: the text report (render, presentation), psutil, logging, pathlib (urllib, ipaddress),
# datetime, socket, platform, secrets (hashlib); torch, textual and the child-process machinery
# of the full report never. Nor dataclasses, which imports inspect (ast, dis, tokenize, linecache):
# about 5 ms of the quick report's start; its classes are gpudoctor.core._record records. Nor gpudoctor.why
# (its wording table was read for every code the probes' table holds).
NOT_ON_THE_QUICK_PATH = {
    "torch", "textual", "multiprocessing", "gpudoctor.workload", "gpudoctor.console.render", "gpudoctor.sampling.presentation",
    "gpudoctor.backends.busy", "gpudoctor.backends.replay", "gpudoctor.backends.recording", "psutil", "logging",
    "pathlib", "urllib", "ipaddress", "datetime", "socket", "platform", "secrets", "hashlib", "textwrap",
    "dataclasses", "inspect", "ast", "dis", "tokenize", "linecache", "gpudoctor.why",
}
# The number of modules (standard library included) that the quick path adds to the interpreter's
# start: 89 on 2026-11-27 in the development venv, 37 of them gpudoctor's (121 and 43 before
# issue 33), with a little room: a change that pulls a new import tree into the quick path fails
# here and has to say why it is worth every provisioning script's time. Since then the whole-stack
# checks (issue 34: the files below NVML, backends.stack and probes._stack; the peer-to-peer paths,
# backends.pcie_paths, probes.p2p and probes._p2p) and the process-tree helper every child is
# started through (_proc) joined the quick path by design: 100 and 46. Then dataclasses (with
# inspect, ast, dis, tokenize...) and gpudoctor.why left it: 86 and 44 on 2026-11-28. Then the
# modules moved into layer packages (issue 39): four package modules that hold only a docstring
# (gpudoctor.core, .system, .sampling, .report) joined the path, nothing else: 90 and 48.
MODULE_BUDGET = 94
GPUDOCTOR_MODULE_BUDGET = 50

_LOADED = """
    import io, json, sys, contextlib
    at_start = set(sys.modules)  # the interpreter's own start (an editable install's finder loads pathlib)
    from gpudoctor.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["report", "--quick", "--json"])
    document = json.loads(out.getvalue())
    print(json.dumps({"rc": rc, "modules": sorted(set(sys.modules) - at_start), "status": document["status"]}))
"""


def test_report_quick_json_stays_within_its_import_budget():
    proc = _child(_LOADED)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["rc"] == exitcodes.OK and answer["status"] == "pass", answer
    loaded = set(answer["modules"])
    assert "pynvml" in loaded and "gpudoctor.probes.devices" in loaded  # it did run the NVML probes
    roots = {name.split(".")[0] for name in loaded} | loaded
    assert not roots & NOT_ON_THE_QUICK_PATH, sorted(roots & NOT_ON_THE_QUICK_PATH)
    ours = sorted(m for m in loaded if m.startswith("gpudoctor"))
    assert len(ours) <= GPUDOCTOR_MODULE_BUDGET, ours
    assert len(loaded) <= MODULE_BUDGET, sorted(loaded)


# --------------------------------------------------------------------------- the early CUDA check
_BEGIN = """
    import json, threading, sys
    from gpudoctor.backends import cuda_driver
    if {threaded}:  # another thread: the check starts an interpreter instead of forking
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
    pending = cuda_driver.begin_cuda_start({limit})
    kind = type(pending).__name__
    answer = pending.answer()
    again = pending.answer()
    print(json.dumps({{"kind": kind, "same": answer == again, "na": getattr(answer, "reason", None),
                      "limit": getattr(answer, "limit_s", None),
                      "answer": None if getattr(answer, "reason", None) else answer.to_dict()}}))
"""


def _begin(threaded: bool, limit: float = 60.0, **extra: str) -> dict:
    proc = _child(_BEGIN.format(threaded=threaded, limit=limit), **extra)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("threaded, kind", [(False, "_Forked"), (True, "_Spawned")])
@pytest.mark.parametrize("fault, expected", [
    ({}, {"loaded": True, "code": 0, "device_count": 1}),
    ({"FAKE_CUDA_INIT": "802"}, {"loaded": True, "code": 802, "name": "CUDA_ERROR_SYSTEM_NOT_READY"}),
    ({"FAKE_CUDA": "missing"}, {"loaded": False}),
])
def test_both_children_give_the_answer_the_waiting_check_gives(threaded, kind, fault, expected):
    """The forked child (one-thread process) and the started interpreter (threads) answer alike,
    and alike to cuda_start(), which every other caller uses."""
    started = _begin(threaded, **fault)
    assert started["kind"] == kind and started["same"]
    answer = started["answer"]
    assert {k: answer[k] for k in expected} == expected, answer
    waited = _child("""
        import json
        from gpudoctor.backends.cuda_driver import cuda_start
        print(json.dumps(cuda_start(60).to_dict()))
    """, **fault)
    assert waited.returncode == 0, waited.stderr[-2000:]
    plain = json.loads(waited.stdout.strip().splitlines()[-1])
    timing = ("init_s", "elapsed_s")
    assert {k: v for k, v in answer.items() if k not in timing} == {k: v for k, v in plain.items() if k not in timing}
    if answer["loaded"]:  # the times the kit records: cuInit in the child, and the whole check
        assert isinstance(answer["init_s"], float) and isinstance(answer["elapsed_s"], float)
        assert 0 <= answer["init_s"] <= answer["elapsed_s"]


@pytest.mark.parametrize("threaded", [False, True])
def test_a_driver_that_never_answers_is_not_answered_in_the_limit(threaded):
    started = _begin(threaded, limit=0.5, FAKE_CUDA_INIT="hang")
    assert started["na"] == "Timeout" and started["limit"] == 0.5 and started["same"]


def test_the_hung_check_is_a_warning_that_names_its_limit():
    [finding] = cuda_start_findings(CudaTimeout(5.0), visible=1)
    assert (finding.status, finding.code) == (Status.WARN, "cuda_start_hung")
    assert "not answered in 5 s" in finding.summary


@pytest.mark.timeout(120)
def test_quick_report_with_a_hung_cuda_start_finishes_with_the_warning():
    """cuInit that never returns costs the quick report its time limit, then a warning; the
    report and its exit code still come, and the child does not outlive it."""
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "report", "--quick", "--json"], capture_output=True,
                          text=True, env=_env(FAKE_CUDA_INIT="hang"), cwd=ROOT, timeout=100)
    assert proc.returncode == exitcodes.WARN, proc.stderr[-2000:]
    document = json.loads(proc.stdout)
    devices = next(r for r in document["results"] if r["probe"] == "devices")
    [hung] = [f for f in devices["findings"] if f["code"] == "cuda_start_hung"]
    assert hung["status"] == "warn" and "not answered in 5 s" in hung["summary"]
    timing = {m["name"]: m for m in devices["measurements"]}
    assert timing["cuda_init_s"]["value"] is None and "not answered" in timing["cuda_init_s"]["note"]


def test_quick_report_json_carries_the_cuda_check_times():
    """What the GPU kit reads: devices' cuda_init_s (cuInit in the child) and cuda_start_check_s."""
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "report", "--quick", "--json"], capture_output=True,
                          text=True, env=_env(), cwd=ROOT, timeout=100)
    assert proc.returncode == exitcodes.OK, proc.stderr[-2000:]
    devices = next(r for r in json.loads(proc.stdout)["results"] if r["probe"] == "devices")
    timing = {m["name"]: m for m in devices["measurements"]}
    assert timing["cuda_init_s"]["unit"] == "s" and timing["cuda_init_s"]["value"] >= 0
    assert timing["cuda_start_check_s"]["value"] >= timing["cuda_init_s"]["value"]


def test_quick_report_ends_at_once_with_its_output_and_file_complete(tmp_path):
    """`report --quick` leaves without the interpreter's teardown (gpudoctor.cli._exit_now): its
    stdout, its -o file and its exit code are whole all the same."""
    out = tmp_path / "quick.json"
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "report", "--quick", "--json", "-o", str(out),
                           "--fail-on", "fail"], capture_output=True, text=True, env=_env(FAKE_CUDA_INIT="802"),
                          cwd=ROOT, timeout=100)
    assert proc.returncode == exitcodes.FAIL, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == json.loads(out.read_text())
    text = subprocess.run([sys.executable, "-m", "gpudoctor", "report", "--quick"], capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=100)
    assert text.returncode == exitcodes.OK and text.stdout.rstrip().splitlines()[-1].startswith("Verdict: PASS")


_EARLY = """
    import json, threading
    from gpudoctor.report.quick import begin_quick_report, quick_report, read_quick_report, verdict_of
    early = begin_quick_report()
    assert early is not None  # one thread: forked
    forked = verdict_of(read_quick_report(early))
    here = verdict_of(quick_report())
    threading.Thread(target=threading.Event().wait, daemon=True).start()
    print(json.dumps({"forked": [forked.status.value, forked.headline], "here": [here.status.value, here.headline],
                      "with_threads": begin_quick_report() is None}))
"""


@pytest.mark.parametrize("fault", [{}, {"FAKE_CUDA": "missing"}, {"FAKE_CUDA_INIT": "802"}])
def test_the_tuis_early_quick_report_gives_the_verdict_run_here_gives(fault):
    """The TUI starts the quick report in a fork before it imports Textual (its header's verdict);
    the verdict is the one the quick report run in-process gives. With other threads it does not
    fork (the caller runs it itself)."""
    proc = _child(_EARLY, **fault)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["forked"] == answer["here"] and answer["with_threads"]
    assert answer["here"][0] == ("pass" if not fault else "fail")


# --------------------------------------------------------------------------- the TUI's start
_FIRST_READING = """
    import json, os, threading
    from gpudoctor.backends.host import PsutilProcessInfo
    from gpudoctor.backends.nvml import NvmlBackend
    from gpudoctor.report.quick import quick_report, read_quick_report, verdict_of
    from gpudoctor.sampling.sampler import Sampler
    from gpudoctor.tui.early import begin_early_start, read_first_reading, take_reading
    forks, fork = [], os.fork
    os.fork = lambda: forks.append(1) or fork()  # counts this process's forks (the child's are its own)
    first, early = begin_early_start()
    assert first is not None and early is not None  # one thread: forked
    forked, report = read_first_reading(first), read_quick_report(early)
    os.fork = fork
    here = take_reading(Sampler(NvmlBackend(), lambda: {}), PsutilProcessInfo())
    verdict, verdict_here = verdict_of(report), verdict_of(quick_report())

    def facts(reading):
        snap, rows, notes, published = reading
        return {"status": repr(snap.nvml_status), "driver": snap.driver_version, "count": snap.count,
                "gpus": [[d.index, d.static.get("name"), d.static.get("uuid")] for d in snap.devices],
                "pids": sorted(r.pid for r in rows), "source": snap.source}
    threading.Thread(target=threading.Event().wait, daemon=True).start()
    print(json.dumps({"forked": facts(forked), "here": facts(here), "with_threads": begin_early_start() == (None, None),
                      "verdict": [verdict.status.value, verdict.headline],
                      "verdict_here": [verdict_here.status.value, verdict_here.headline], "forks": len(forks)}))
"""


@pytest.mark.parametrize("board", [{}, {"FAKE_NVML_BUSY": "1"}, {"FAKE_CUDA_INIT": "802"}])
def test_the_tuis_forked_first_reading_and_verdict_are_what_the_app_works_out_itself(board):
    """`gpudoctor` takes its first reading and its header's quick report in ONE fork while it imports
    Textual (gpudoctor.tui.early): the same GPUs, driver and processes as the app's own reading and
    the verdict the quick report run here gives; with other threads it does not fork (the app
    works both out itself)."""
    proc = _child(_FIRST_READING, **board)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["forked"] == answer["here"] and answer["with_threads"]
    assert answer["here"]["gpus"] and answer["here"]["driver"]
    assert answer["verdict"] == answer["verdict_here"]
    assert answer["verdict"][0] == ("fail" if "FAKE_CUDA_INIT" in board else "pass")
    assert answer["forks"] == 1, "one child answers both (one pynvml import and NVML start, not two)"


# What the TUI's first frame loads besides Textual: the reading and the quick report are taken in
# one fork (gpudoctor.tui.early), so NVML's and psutil's modules, NVML's backend, the probes, the
# workload's process machinery and the Processes screen's DataTable load after the first frame, if ever.
NOT_BEFORE_THE_TUIS_FIRST_FRAME = {
    "torch", "pynvml", "psutil", "multiprocessing", "gpudoctor.probes", "gpudoctor.report.runner", "gpudoctor.workload",
    "gpudoctor.backends.nvml", "gpudoctor.backends.plausible", "textual.widgets._data_table",
    "gpudoctor.backends.events", "gpudoctor.backends.replay", "gpudoctor.backends.recording", "gpudoctor.why",
    "gpudoctor.fleet", "gpudoctor.console.render",
}

_TUI_START = """
    import json, sys
    from gpudoctor.cli import build_parser
    args = build_parser(("tui",)).parse_args(["tui"])  # as `gpudoctor` registers it (gpudoctor.cli)
    from gpudoctor.tui.early import begin_early_start
    first, early = begin_early_start()
    from gpudoctor.tui.app import make_app
    app = make_app(early_report=early, first_reading=first)
    early.answer(), first.answer()
    print(json.dumps(sorted(sys.modules)))
"""


def test_the_tuis_first_frame_loads_no_nvml_psutil_or_probes():
    proc = _child(_TUI_START)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert "textual.app" in loaded and "gpudoctor.tui.screens" in loaded
    roots = {name.split(".")[0] for name in loaded} | loaded
    assert not roots & NOT_BEFORE_THE_TUIS_FIRST_FRAME, sorted(roots & NOT_BEFORE_THE_TUIS_FIRST_FRAME)
