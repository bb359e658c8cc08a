"""The hang guard: every long-running front end starts, shows something and quits within
seconds while any one NVML entry point it calls never returns.

A failing GPU can hold one driver call for minutes. Each case runs a real ``gpudoctor`` process
on the fake NVML of ``benchmarks/fake_nvml`` with ``FAKE_NVML_HANG=<symbol>`` (that symbol sleeps
forever; every other one answers) and checks, for

* ``tui`` (on a pseudo-terminal): the screen is drawn, and ``q`` ends it with 0;
* ``watch -n 2``: it ends by itself with a clear result (0, or 6 "nothing to watch" when the
  count itself hangs) and printed something;
* ``exporter``: ``/metrics`` answers, and SIGTERM ends it with 0;
* ``record --seconds 1 --no-torch``: it ends by itself, with the recording written (0) or the
  one line "nothing to record" (6). (``--no-torch``: the torch facts come from a child process
  with its own time limit, and importing torch would cost most of the test's time.)
* ``report --quick --json``: it ends within seconds (not at its probes' 60-90 s time limits) with
  its JSON; where the report calls the hung symbol before it is written, it fails (exit 4) with
  ``driver_not_answering`` and never says "no GPU".

Symbols: :data:`SYMBOLS` is every NVML symbol these front ends call on the fake one-GPU board,
taken from its call log (``FAKE_NVML_CALLS``); :func:`test_the_symbol_list_is_complete` fails
when gpudoctor starts calling one that is not listed, so the guard grows with the code.

Grouping: the full product (48 symbols x 5 front ends, about 240 processes) is the
``benchmark``-marked :func:`test_every_symbol_hangs_in_every_front_end`. The default run hangs
every symbol once, in one front end chosen round-robin over the sorted list (so each front end
meets about 10 symbols from every phase: static facts, readings, processes, events), and the five
life-cycle calls (:data:`LIFECYCLE`: init, count, handle, event set, shutdown) in every front end:
about 70 cases, four at a time (most of a case is waiting, not computing).
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from support.tui_support import PtyApp

ROOT = Path(__file__).resolve().parents[2]
FAKE_NVML = ROOT / "benchmarks" / "fake_nvml"
FRONT_ENDS = ("tui", "watch", "exporter", "record", "report")

SYMBOLS = tuple(sorted("""
nvmlDeviceGetArchitecture nvmlDeviceGetClockInfo nvmlDeviceGetComputeMode nvmlDeviceGetComputeRunningProcesses_v3
nvmlDeviceGetCount_v2 nvmlDeviceGetCudaComputeCapability nvmlDeviceGetCurrPcieLinkGeneration
nvmlDeviceGetCurrPcieLinkWidth nvmlDeviceGetCurrentClocksEventReasons nvmlDeviceGetEccMode
nvmlDeviceGetEnforcedPowerLimit nvmlDeviceGetFanSpeed nvmlDeviceGetFieldValues nvmlDeviceGetGpuMaxPcieLinkGeneration
nvmlDeviceGetGpuFabricInfoV nvmlDeviceGetGraphicsRunningProcesses_v3 nvmlDeviceGetHandleByIndex_v2 nvmlDeviceGetMaxClockInfo
nvmlDeviceGetMaxPcieLinkGeneration nvmlDeviceGetMaxPcieLinkWidth nvmlDeviceGetMemoryBusWidth nvmlDeviceGetMemoryInfo
nvmlDeviceGetMemoryInfo_v2 nvmlDeviceGetMigMode nvmlDeviceGetName nvmlDeviceGetNumFans nvmlDeviceGetPciInfo_v3
nvmlDeviceGetPcieThroughput nvmlDeviceGetPerformanceState nvmlDeviceGetPersistenceMode
nvmlDeviceGetPowerManagementDefaultLimit nvmlDeviceGetPowerUsage nvmlDeviceGetProcessUtilization
nvmlDeviceGetProcessesUtilizationInfo nvmlGpmMetricsGet nvmlGpmQueryDeviceSupport nvmlGpmSampleAlloc
nvmlGpmSampleFree nvmlGpmSampleGet
nvmlDeviceGetRemappedRows nvmlDeviceGetRetiredPages nvmlDeviceGetRetiredPagesPendingStatus nvmlDeviceGetSerial
nvmlDeviceGetTemperature nvmlDeviceGetTemperatureThreshold nvmlDeviceGetTemperatureV nvmlDeviceGetTotalEccErrors
nvmlDeviceGetTotalEnergyConsumption nvmlDeviceGetUUID nvmlDeviceGetUtilizationRates nvmlDeviceGetVbiosVersion
nvmlEventSetCreate nvmlInitWithFlags nvmlShutdown nvmlSystemGetCudaDriverVersion_v2 nvmlSystemGetDriverVersion
nvmlSystemGetNVMLVersion
""".split()))

# "Within seconds": a blocked call is taken as such after 5 s (NvmlGate.STUCK_S) + 1 s; start-up
# of the interpreter on a loaded 2-core machine takes more, and a CPU hog on each core more again.
# The hung symbol sleeps for ever, so a front end that waits for it crosses any bound: these are
# generous (they were 40 s and 10 s), and START_S + QUIT_S stays under the 90 s that the quick
# report took before it stopped waiting on a hung device count or name.
START_S = 60.0
QUIT_S = 20.0

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fake libnvidia-ml, pty"),
              pytest.mark.timeout(900)]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_NVML), str(ROOT)])
    env.update(extra)
    return env


def _gpudoctor(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpudoctor", *args]


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def check_tui(env: dict[str, str]) -> str | None:
    app = PtyApp(_gpudoctor("tui", "-i", "0.5"), env=env)
    try:
        try:
            app.wait_for("Overview", timeout=START_S)
        except AssertionError:
            return f"the screen was not drawn within {START_S:.0f} s"
        app.keys("q")
        try:
            code = app.proc.wait(QUIT_S)
        except subprocess.TimeoutExpired:
            return f"still running {QUIT_S:.0f} s after q"
        return None if code == 0 else f"q: exit {code}"
    finally:
        app.close()


def check_watch(env: dict[str, str]) -> str | None:
    started = time.monotonic()
    try:
        done = subprocess.run(_gpudoctor("watch", "-i", "0.25", "-n", "2"), env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=START_S + QUIT_S)
    except subprocess.TimeoutExpired:
        return f"watch -n 2 still running after {START_S + QUIT_S:.0f} s"
    if done.returncode not in (0, 6):
        return f"exit {done.returncode}: {done.stderr[-300:]}"
    if not (done.stdout.strip() or done.stderr.strip()):
        return "printed nothing"
    if "Traceback" in done.stderr:
        return "traceback: " + done.stderr[-300:]
    return None if time.monotonic() - started < START_S + QUIT_S else "too slow"


def check_record(env: dict[str, str]) -> str | None:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "rec.json"
        try:
            done = subprocess.run(_gpudoctor("record", "-o", str(out), "--seconds", "1", "--interval", "0.25",
                                             "--no-torch"), env=env, cwd=ROOT, capture_output=True, text=True,
                                  timeout=START_S + QUIT_S)
        except subprocess.TimeoutExpired:
            return f"record --seconds 1 still running after {START_S + QUIT_S:.0f} s"
        if done.returncode == 6 and "nothing to record" in done.stderr:
            return None
        if done.returncode != 0:
            return f"exit {done.returncode}: {done.stderr[-300:]}"
        try:
            data = json.loads(out.read_text())
        except (OSError, ValueError) as exc:
            return f"no recording: {exc}"
        return None if data.get("format") == "gpudoctor-recording" else "not a recording"


def check_exporter(env: dict[str, str]) -> str | None:
    proc = subprocess.Popen(_gpudoctor("exporter", "--port", "0", "--interval", "0.5"), env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for _ in range(5):  # the serving line is the first or second line on stderr
            line = proc.stderr.readline()
            found = re.search(r"http://\S+/metrics", line)
            if found:
                url = found.group(0)
                break
        if url is None:
            return "never said where it serves"
        try:
            body = urllib.request.urlopen(url, timeout=START_S).read().decode()
        except OSError as exc:
            return f"/metrics did not answer: {exc}"
        if "gpudoctor_nvml_up" not in body:
            return "/metrics has no gpudoctor_nvml_up"
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(QUIT_S)
        except subprocess.TimeoutExpired:
            return f"still running {QUIT_S:.0f} s after SIGTERM"
        return None if code == 0 else f"SIGTERM: exit {code}"
    finally:
        _kill(proc)
        proc.stderr.close()


#: Calls made on the way out, after the report is written (NVML's shutdown, freeing GPM's buffers):
#: hung, the report is unchanged and the process must still end.
CLOSING = ("nvmlShutdown", "nvmlGpmSampleFree")


@functools.lru_cache(maxsize=1)
def report_calls() -> frozenset[str]:
    """The NVML symbols ``report --quick --json`` calls on the fake board when nothing hangs."""
    with tempfile.TemporaryDirectory() as folder:
        calls = Path(folder) / "calls"
        done = subprocess.run(_gpudoctor("report", "--quick", "--json"), env=_env(FAKE_NVML_CALLS=str(calls)),
                              cwd=ROOT, capture_output=True, text=True, timeout=START_S + QUIT_S)
        assert done.returncode == 0, done.stderr[-300:]
        return frozenset(calls.read_text().split())


def check_report(env: dict[str, str]) -> str | None:
    hung = env.get("FAKE_NVML_HANG", "")
    try:
        done = subprocess.run(_gpudoctor("report", "--quick", "--json"), env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=START_S + QUIT_S)
    except subprocess.TimeoutExpired:
        return f"report --quick still running after {START_S + QUIT_S:.0f} s"
    if "Traceback" in done.stderr:
        return "traceback: " + done.stderr[-300:]
    try:
        report = json.loads(done.stdout)
    except ValueError:
        return f"exit {done.returncode} without a JSON report: {done.stderr[-300:]}"
    codes = {f["code"] for r in report["results"] for f in r["findings"]}
    if hung in report_calls() and hung not in CLOSING:
        if done.returncode != 4 or "driver_not_answering" not in codes:
            return f"exit {done.returncode}, findings {sorted(codes)}: the blocked driver is not the verdict"
        if "no_cuda_device" in codes:
            return "says no GPU is visible while the driver holds the answer"
    elif done.returncode != 0:
        return f"exit {done.returncode} with a symbol it does not call hung: {sorted(codes)}"
    return None


CHECKS = {"report": check_report, "tui": check_tui, "watch": check_watch, "exporter": check_exporter, "record": check_record}


def _run_cases(cases: list[tuple[str, str]]) -> list[str]:
    def one(case: tuple[str, str]) -> str | None:
        front_end, symbol = case
        why = CHECKS[front_end](_env(FAKE_NVML_HANG=symbol))
        return None if why is None else f"{front_end} with {symbol} hanging: {why}"

    with ThreadPoolExecutor(max_workers=4) as pool:
        return [failure for failure in pool.map(one, cases) if failure is not None]


#: The calls of NVML's own life cycle, which every front end makes on its way in or out: hung in
#: every front end in the default run too (the round-robin alone gave nvmlShutdown to the TUI,
#: which never calls it, and missed watch, record and the exporter hanging on their way out).
LIFECYCLE = ("nvmlInitWithFlags", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlEventSetCreate",
             "nvmlShutdown")


def default_cases(front_end: str) -> list[str]:
    """The symbols the default run hangs in ``front_end``: round-robin over the sorted list, and
    the life-cycle calls everywhere."""
    mine = [s for i, s in enumerate(SYMBOLS) if FRONT_ENDS[i % len(FRONT_ENDS)] == front_end]
    return mine + [s for s in LIFECYCLE if s not in mine]


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_each_symbol_hangs_once_and_the_front_end_still_starts_and_quits(front_end):
    failures = _run_cases([(front_end, symbol) for symbol in default_cases(front_end)])
    assert not failures, "\n".join(failures)


@pytest.mark.benchmark
@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_every_symbol_hangs_in_every_front_end(front_end):
    failures = _run_cases([(front_end, symbol) for symbol in SYMBOLS])
    assert not failures, "\n".join(failures)


def test_the_symbol_list_is_complete(tmp_path):
    """What the front ends call on the fake board (no hang) is all in SYMBOLS."""
    calls = tmp_path / "calls"
    env = _env(FAKE_NVML_CALLS=str(calls))
    assert check_watch(env) is None
    assert check_record(env) is None
    assert check_exporter(env) is None
    assert check_tui(env) is None
    assert check_report(env) is None
    called = set(calls.read_text().split())
    assert called, "the fake NVML logged no call"
    assert called <= set(SYMBOLS), f"called but not guarded: {sorted(called - set(SYMBOLS))}"
