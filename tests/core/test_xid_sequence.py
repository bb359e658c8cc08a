"""Xids judged as a sequence, not by the last value: gpudoctor.core.xid.judge_sequence and gauge_steps, and
fleet over dcgm-exporter's last-Xid gauge with its history in the look-back window (a range
selector, one query, only where the gauge shows an Xid).

Prometheus is stood in for at the HTTP seam (the opener), answering the JSON shapes it returns.
"""

from __future__ import annotations

import io
import json
import urllib.parse

import pytest

from gpudoctor import fleet
from gpudoctor.core import xid

NOW = 1_800_000_000.0
LABELS = {"instance": "n1:9400", "job": "dcgm", "gpu": "0", "UUID": "GPU-x", "modelName": "NVIDIA H100 80GB HBM3"}


# --------------------------------------------------------------------------- the judgement
def test_a_critical_xid_followed_by_a_harmless_one_is_not_hidden():
    seq = xid.judge_sequence([79, 45, 45])
    assert (seq.worst, seq.last, seq.hidden, seq.follow_up_alone) == (79, 45, (79,), False)
    assert xid.judge_sequence([45]).follow_up_alone
    assert xid.judge_sequence([31, 79]).hidden == ()  # the critical one is the last: nothing hidden
    assert xid.judge_sequence([]).worst is None


def test_gauge_steps_are_the_values_the_gauge_took():
    samples = [(1.0, 0), (2.0, 79), (3.0, 79), (4.0, 45), (5.0, 0), (6.0, 45), (7.0, float("nan"))]
    assert xid.gauge_steps(samples) == [(2.0, 79), (4.0, 45), (6.0, 45)]


# --------------------------------------------------------------------------- fleet
def _vec(*series):
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [NOW, str(value)]} for labels, value in series]}}


def _mat(labels, samples):
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": labels, "values": [[t, str(v)] for t, v in samples]}]}}


# The last-Xid gauge's history under either of its names (dcgm-exporter 4.8's and 4.9's).
HISTORY = '{__name__=~"DCGM_FI_DEV_XID_ERRORS|DCGM_FI_DEV_XID_ERROR",'


class Prom:
    def __init__(self, gauge: float, history: list[tuple[float, float]] | None, name: str = "DCGM_FI_DEV_XID_ERRORS"):
        self.gauge, self.history, self.seen, self.name = gauge, history, [], name

    def __call__(self, request, timeout):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.full_url).query)["query"][0]
        self.seen.append(query)
        if query.startswith("up"):
            answer = _vec(({"instance": "n1:9400", "job": "dcgm"}, 1))
        elif query.startswith(HISTORY):
            answer = _mat(dict(LABELS, __name__=self.name), self.history) if self.history is not None else _vec()
        elif query.startswith("{__name__=~"):
            answer = _vec((dict(LABELS, __name__="DCGM_FI_DEV_GPU_UTIL"), 55),
                          (dict(LABELS, __name__=self.name), self.gauge))
        elif query.startswith('last_over_time({__name__=~"DCGM_FI_DEV_GPU_TEMP'):
            answer = _vec((LABELS, 50))
        else:
            answer = _vec()
        return io.BytesIO(json.dumps(answer).encode())


def _row(gauge, history, name="DCGM_FI_DEV_XID_ERRORS"):
    prom = Prom(gauge, history, name)
    view = fleet.collect(fleet.Prometheus("http://prom.example:9090", opener=prom), now=NOW)
    return view.rows[0], prom.seen


def test_the_gauge_history_shows_the_critical_xid_the_45_hides():
    history = [(NOW - 3000 + 30 * i, 0) for i in range(10)] + [(NOW - 2600, 79), (NOW - 2570, 79),
                                                               (NOW - 2540, 45), (NOW - 30, 45)]
    row, seen = _row(45, history)
    assert row.status == "fail" and row.xid_last == 79, row.reason
    assert "Xid 79" in row.reason and "came before the Xid 45" in row.reason
    assert any(q == HISTORY + 'instance=~"n1:9400"}[1h]' for q in seen), seen
    # without the history (the old judgement of the last value) the 79 was lost behind the 45
    row, _seen = _row(45, None)
    assert row.status == "warn" and "79" not in row.reason


def test_a_45_alone_says_the_xid_before_it_is_unknown():
    row, _seen = _row(45, [(NOW - 600, 45), (NOW - 30, 45)])
    assert row.status == "warn" and "the Xid before it is not in the exporter's series" in row.reason
    assert "dmesg" in row.reason


def test_an_application_xid_unchanged_for_the_whole_window_may_be_stale():
    """dcgm-exporter#500: a GPU recovered from an Xid 31 keeps showing it until the exporter restarts."""
    history = [(NOW - 3590 + 60 * i, 31) for i in range(60)]
    row, _seen = _row(31, history)
    assert row.status == "pass" and "may be stale" in row.reason and "restart dcgm-exporter" in row.reason
    # a fresh 31 in the window is still a warning
    recent = [(NOW - 3590 + 60 * i, 0) for i in range(55)] + [(NOW - 200, 31), (NOW - 100, 31)]
    row, _seen = _row(31, recent)
    assert row.status == "warn" and "stale" not in row.reason


def test_a_critical_xid_unchanged_for_the_whole_window_stays_a_failure_that_says_so():
    history = [(NOW - 3590 + 60 * i, 79) for i in range(60)]
    row, _seen = _row(79, history)
    assert row.status == "fail" and "unchanged for the whole look-back window" in row.reason
    assert "restart dcgm-exporter" not in row.reason.split(";")[0]


def test_a_refused_history_query_leaves_the_last_value_judged():
    class Refusing(Prom):
        def __call__(self, request, timeout):
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.full_url).query)["query"][0]
            if query.startswith(HISTORY):
                self.seen.append(query)
                return io.BytesIO(json.dumps({"status": "error", "errorType": "bad_data",
                                              "error": "range queries refused"}).encode())
            return super().__call__(request, timeout)

    prom = Refusing(79, None)
    row = fleet.collect(fleet.Prometheus("http://prom.example:9090", opener=prom), now=NOW).rows[0]
    assert row.status == "fail" and "Xid 79" in row.reason and "stale" not in row.reason


def test_no_xid_costs_no_history_query():
    _row_, seen = _row(0, [])
    assert not any(q.startswith(HISTORY) for q in seen)


# --------------------------------------------------------------------------- the kernel log's named cause
def test_a_follow_up_line_that_names_its_cause_brings_that_xid_in_before_it():
    lines = ["NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
             "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000002 caused by previous Xid 149",
             "NVRM: Xid (PCI:0000:ba:00): 79, pid=1, name=x, GPU has fallen off the bus.",
             "NVRM: Xid (PCI:0000:ba:00): 45, pid=1, name=x, Ch 00000003 caused by previous Xid 79"]
    found = xid.with_named_causes(xid.parse_kmsg(lines))
    assert [(x.pci_bus_id, x.code) for x in found] == [("0000:dc:00.0", 149), ("0000:dc:00.0", 45),
                                                       ("0000:dc:00.0", 45), ("0000:ba:00.0", 79),
                                                       ("0000:ba:00.0", 45)]  # 79 was logged: not twice
    assert found[0].text.startswith("(named by the Xid 45 that followed it)")


def test_the_event_watcher_files_the_named_cause():
    from gpudoctor.backends.events import EventWatcher
    from gpudoctor.backends.nvml import NvmlGate
    from support.nvml_fake import FakePynvml

    log = xid.KernelLog(xid.parse_kmsg(["NVRM: Xid (PCI:0000:65:00): 45, pid=1, name=p, Ch 00000001 caused by "
                                        "previous Xid 149"]), True, "")
    watcher = EventWatcher(NvmlGate(FakePynvml(1)), 1, bus_ids={0: "0000:65:00.0"}, kernel_log=lambda: log)
    watcher.register()
    try:
        assert [e.code for e in watcher.snapshot(0).logged_xids] == [149, 45]
    finally:
        watcher.stop()


# --------------------------------------------------------------------------- every front end, one verdict
def _every_gpu_recording(tmp_path):
    """The two-GPU stand-in recording with an Xid 31 logged on each GPU 20 s apart (a replay's kernel
    log), as flashinfer-ai/flashinfer#3869 logged one on each of eight."""
    from support.tui_support import STANDIN

    rec = json.loads(STANDIN.read_text())
    rec["nvml"]["events"] = [[{"time": 1_800_000_000.0, "kind": "xid", "code": 31, "source": "kernel_log"}],
                             [{"time": 1_800_000_020.0, "kind": "xid", "code": 31, "source": "kernel_log"}]]
    path = tmp_path / "xid31-every-gpu.json"
    path.write_text(json.dumps(rec))
    return path


@pytest.mark.timeout(600)
def test_xid_31_on_every_gpu_fails_the_quick_standard_and_full_reports(tmp_path):
    import subprocess
    import sys

    from gpudoctor.core import exitcodes

    path = _every_gpu_recording(tmp_path)
    for level in ("--quick", "", "--full"):
        args = [sys.executable, "-m", "gpudoctor", "report", "--replay", str(path), "--json"]
        proc = subprocess.run(args + ([level] if level else []), capture_output=True, text=True, timeout=300)
        assert proc.returncode == exitcodes.FAIL, (level, proc.stderr[-500:])
        events = next(r for r in json.loads(proc.stdout)["results"] if r["probe"] == "events")
        assert {f["code"]: f["status"] for f in events["findings"]}.get("xid_on_every_gpu") == "fail", level


def test_the_exporter_publishes_the_every_gpu_verdict(tmp_path):
    import os
    from pathlib import Path

    from support.prom_support import assert_exporter_report_fails

    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_", "PYTEST"))}
    assert_exporter_report_fails(env, Path(__file__).resolve().parents[2],
                                 ("--replay", str(_every_gpu_recording(tmp_path))))


@pytest.mark.timeout(120)
def test_the_tui_header_fails_on_xid_31_on_every_gpu(tmp_path):
    from support.tui_support import make_test_app, run_async, screen_text, take_samples, wait_for

    @run_async
    async def check():
        app = make_test_app(_every_gpu_recording(tmp_path), startup_doctor=True)
        async with app.run_test(size=(160, 40)) as pilot:
            await take_samples(pilot, app, 2)
            await wait_for(pilot, lambda: app.headline is not None and app.headline[0] == "fail", timeout=60)
            assert "Xid 31" in app.headline[1] and "every GPU" in app.headline[1], app.headline
            assert "Doctor: FAIL" in screen_text(app)
            await pilot.press("q")

    check()


def test_the_gauge_under_its_4_9_name_is_judged_as_a_sequence_too():
    """dcgm-exporter 4.9 renamed the gauge DCGM_FI_DEV_XID_ERROR: its history is read the same way."""
    history = [(NOW - 2600, 79), (NOW - 2540, 45), (NOW - 30, 45)]
    row, seen = _row(45, history, name="DCGM_FI_DEV_XID_ERROR")
    assert row.status == "fail" and row.xid_last == 79, row.reason
    assert "came before the Xid 45" in row.reason
    assert HISTORY + 'instance=~"n1:9400"}[1h]' in seen, seen
