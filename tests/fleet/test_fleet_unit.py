"""fleet: judging rows from Prometheus answers, and every one-line error with its exit code.

Prometheus is stood in for at the HTTP seam (the opener): the answers are the JSON shapes
/api/v1/query returns. The end-to-end test with a real Prometheus is test_fleet_prometheus.py.
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.parse

import pytest

from gpudoctor.core import exitcodes
from gpudoctor import fleet
from gpudoctor.cli import main

from support.fleet_doubles import NOW, FakeProm, gpu, make, vec, view_of


def test_healthy_fleet_passes_with_the_readings():
    view = view_of(make([("a:9402", 2), ("b:9402", 1)]))
    assert [(r.instance, r.gpu, r.status) for r in view.rows] == [
        ("a:9402", "0", "pass"), ("a:9402", "1", "pass"), ("b:9402", "0", "pass")]
    row = view.rows[0]
    assert row.name == "NVIDIA H100 80GB HBM3"
    assert row.utilization == pytest.approx(0.93) and row.temperature_c == 61 and row.power_w == 512.5
    assert row.memory_used_bytes == 40 * 2**30 and row.memory_total_bytes == 80 * 2**30
    assert fleet.exit_code(view) == exitcodes.OK


def test_worst_first_with_reasons_lost_gpu_xid_and_stopped_target():
    extra = [
        (dict(gpu("b:9402", 0), __name__="gpudoctor_gpu_up"), 0),
        (dict(gpu("b:9402", 0), __name__="gpudoctor_gpu_error_info", reason="GpuIsLost"), 1),
        (dict(gpu("c:9402", 0), __name__="gpudoctor_gpu_last_xid"), 79),
        (dict(gpu("c:9402", 0), __name__="gpudoctor_gpu_xid_errors_total"), 2),
        (dict(gpu("c:9402", 0), __name__="gpudoctor_gpu_last_xid_timestamp_seconds"), NOW - 300),
        (dict(gpu("a:9402", 0), __name__="gpudoctor_gpu_throttled", reason="hw_thermal_slowdown"), 1),
        (dict(gpu("a:9402", 0), __name__="gpudoctor_gpu_throttled", reason="gpu_idle"), 1),
    ]
    fake = make([("a:9402", 1), ("b:9402", 1), ("c:9402", 1), ("d:9402", 1)],
                up={"a:9402": 1, "b:9402": 1, "c:9402": 1, "d:9402": 0}, extra=extra)
    view = view_of(fake)
    statuses = [(r.instance, r.status) for r in view.rows]
    assert statuses == [("b:9402", "fail"), ("c:9402", "fail"), ("d:9402", "stale"), ("a:9402", "warn")]
    lost, xid79, stopped, hot = view.rows
    assert "GpuIsLost" in lost.reason
    assert xid79.xid_last == 79 and xid79.xid_count == 2 and "fallen off the bus" in xid79.reason
    assert "5 min ago" in xid79.reason
    assert "not answering Prometheus" in stopped.reason and "10 min ago" in stopped.reason
    assert "thermal slowdown (hardware)" in hot.reason and "idle" not in hot.reason
    assert fleet.exit_code(view) == exitcodes.FAIL
    data = view.to_dict()
    assert data["targets_down"] == ["d:9402"]
    assert data["rows"][1]["xid_last"] == 79
    assert {"instance", "gpu", "status", "reason", "xid_last"} <= set(data["rows"][0])


def test_stale_only_exits_5_and_warn_only_exits_3_unless_fail_on_fail():
    stale = view_of(make([("a:9402", 1)], extra=[
        ({"__name__": "gpudoctor_sample_age_seconds", "instance": "a:9402", "job": "gpudoctor"}, 900)]))
    assert stale.rows[0].status == "stale" and "15 min old" in stale.rows[0].reason
    assert fleet.exit_code(stale) == exitcodes.PROBE_ERROR
    warn = view_of(make([("a:9402", 1)], extra=[
        (dict(gpu("a:9402", 0), __name__="gpudoctor_gpu_remapped_rows_pending"), 1)]))
    assert warn.rows[0].status == "warn"
    assert fleet.exit_code(warn) == exitcodes.WARN
    assert fleet.exit_code(warn, fail_on="fail") == exitcodes.OK


def test_report_verdict_and_age_of_the_node():
    extra = [
        ({"__name__": "gpudoctor_report_status", "instance": "a:9402", "job": "gpudoctor", "status": "fail"}, 1),
        ({"__name__": "gpudoctor_report_status", "instance": "a:9402", "job": "gpudoctor", "status": "pass"}, 0),
        ({"__name__": "gpudoctor_report_timestamp_seconds", "instance": "a:9402", "job": "gpudoctor"}, NOW - 3 * 86400),
    ]
    row = view_of(make([("a:9402", 1)], extra=extra)).rows[0]
    assert row.status == "fail" and row.report_status == "fail"
    assert row.report_age_s == pytest.approx(3 * 86400)
    assert "last report failed" in row.reason and "3 d old" in row.reason


def test_dcgm_exporter_series_are_understood():
    labels = {"instance": "n1:9400", "job": "dcgm", "gpu": "0", "UUID": "GPU-x", "modelName": "NVIDIA A100-SXM4-80GB"}
    fake = FakeProm([
        ("up", vec(({"instance": "n1:9400", "job": "dcgm"}, 1))),
        ("{__name__=~", vec((dict(labels, __name__="DCGM_FI_DEV_GPU_UTIL"), 55),
                            (dict(labels, __name__="DCGM_FI_DEV_FB_USED"), 1024),
                            (dict(labels, __name__="DCGM_FI_DEV_FB_FREE"), 3072),
                            (dict(labels, __name__="DCGM_FI_DEV_XID_ERRORS"), 48),
                            (dict(labels, __name__="DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"), 0x40))),
        ("last_over_time({__name__=~\"DCGM_FI_DEV_GPU_TEMP", vec((labels, 50))),
    ])
    row = view_of(fake).rows[0]
    assert row.source == "dcgm-exporter" and row.name == "NVIDIA A100-SXM4-80GB"
    assert row.utilization == pytest.approx(0.55)
    assert row.memory_used_bytes == 2**30 and row.memory_total_bytes == 4 * 2**30
    assert row.status == "fail" and row.xid_last == 48 and "ECC" in row.reason
    assert "thermal slowdown (hardware)" in row.reason


def test_match_is_sent_to_prometheus_escaped():
    fake = make([("a:9402", 1)])
    view_of(fake, [fleet.parse_match('job=gpu"x'), fleet.parse_match("instance=~a.*")])
    assert fake.seen[0] == 'up{job="gpu\\"x",instance=~"a.*"}'
    assert all('job="gpu\\"x"' in q for q in fake.seen)


@pytest.mark.parametrize("text", ["job", "=x", "job=~(", "__name__=up", "1abc=x"])
def test_bad_match_is_a_usage_error(text):
    with pytest.raises(fleet.FleetError) as info:
        fleet.parse_match(text)
    assert info.value.kind == "usage"


def test_label_text_from_prometheus_is_plain_and_bounded():
    extra = [(dict(gpu("a:9402", 0), __name__="gpudoctor_gpu_up"), 0),
             (dict(gpu("a:9402", 0), __name__="gpudoctor_gpu_error_info", reason="\x1b]0;pwned\x07[red]x" + "y" * 500), 1)]
    view = view_of(make([("a:9402", 1)], extra=extra))
    text = fleet.render_text(view)
    assert "\x1b" not in text and "\x07" not in text
    assert len(view.rows[0].reason) < 400


def _run(capsys, fake, monkeypatch, *args):
    monkeypatch.setattr(fleet.urllib.request, "urlopen", fake)
    code = main(["fleet", "--prometheus", "http://prom.example:9090", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_errors_are_one_line_with_their_exit_codes(capsys, monkeypatch):
    refused = FakeProm([("up", urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")))])
    code, out, err = _run(capsys, refused, monkeypatch)
    assert code == exitcodes.UNREACHABLE and out == "" and len(err.strip().splitlines()) == 1
    assert "cannot be reached" in err

    bad = urllib.error.HTTPError("http://x", 400, "Bad Request", {}, io.BytesIO(json.dumps(
        {"status": "error", "errorType": "bad_data", "error": "parse error at char 5"}).encode()))
    code, out, err = _run(capsys, FakeProm([("up", bad)]), monkeypatch)
    assert code == exitcodes.USAGE and "refused the query" in err and len(err.strip().splitlines()) == 1

    html = urllib.error.HTTPError("http://x", 404, "Not Found", {}, io.BytesIO(b"<html>nope</html>"))
    code, out, err = _run(capsys, FakeProm([("up", html)]), monkeypatch)
    assert code == exitcodes.UNREACHABLE and "Prometheus server's address" in err

    code, out, err = _run(capsys, FakeProm([]), monkeypatch)
    assert code == exitcodes.NO_GPU and "holds no GPU series" in err and out == ""


def test_cli_json_rows_worst_first(capsys, monkeypatch):
    extra = [(dict(gpu("b:9402", 0), __name__="gpudoctor_gpu_up"), 0)]
    code, out, err = _run(capsys, make([("a:9402", 1), ("b:9402", 1)], extra=extra), monkeypatch, "--json")
    data = json.loads(out)
    assert code == exitcodes.FAIL
    assert [r["status"] for r in data["rows"]] == ["fail", "pass"]
    assert data["counts"] == {"fail": 1, "stale": 0, "warn": 0, "pass": 1}


def test_json_matches_the_published_schema(capsys, monkeypatch):
    import jsonschema
    from pathlib import Path

    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "fleet.schema.json").read_text())
    extra = [(dict(gpu("b:9402", 0), __name__="gpudoctor_gpu_last_xid"), 13)]
    code, out, err = _run(capsys, make([("a:9402", 2), ("b:9402", 1)], up={"a:9402": 1, "b:9402": 1, "c:9402": 0},
                                       extra=extra), monkeypatch, "--json")
    data = json.loads(out)
    jsonschema.validate(data, schema)
    assert data["rows"][0]["instance"] == "c:9402" and data["rows"][0]["status"] == "stale"
    assert data["rows"][1]["xid_last"] == 13 and data["rows"][1]["status"] == "warn"


def test_the_power_cap_alone_is_no_warning_heat_or_hardware_is():
    """A loaded board sits at its power cap (the health probe does not warn on it either)."""
    from gpudoctor.fleet import FleetRow, _judge_clocks

    capped = FleetRow("node:9400", "0")
    _judge_clocks(capped, ["sw_power_cap", "gpu_idle"])
    capped.settle()
    assert capped.status == "pass" and capped.reason == "no problem seen"
    hot = FleetRow("node:9400", "1")
    _judge_clocks(hot, ["sw_power_cap", "sw_thermal_slowdown"])
    hot.settle()
    assert hot.status == "warn" and hot.reason == "clocks held down: power cap, thermal slowdown (software)"


# ---------------------------------------------------------------- GPUs Prometheus no longer gets
def _with(fake, *rules):
    """``fake`` answering ``rules`` (prefix, answer) before its own."""
    fake.rules[:0] = list(rules)
    return fake


def test_a_gpu_that_vanished_from_a_live_exporter_is_a_warning_with_its_age():
    """Before: the GPU seen in the look-back window but gone from the latest scrape stayed
    `PASS ... no problem seen` with `-` for every reading."""
    fake = make([("a:9402", 1)])
    info = dict(fake.rules)["last_over_time(gpudoctor_gpu_info"]["data"]["result"]
    info.append({"metric": gpu("a:9402", 1, name="NVIDIA H100 80GB HBM3"), "value": [NOW, "1"]})
    _with(fake,
          ("last_over_time(timestamp(gpudoctor_gpu_info", vec((gpu("a:9402", 0), NOW - 5), (gpu("a:9402", 1), NOW - 420))),
          ("last_over_time({__name__=~", vec((dict(gpu("a:9402", 1), __name__="gpudoctor_gpu_temperature_celsius"), 58))))
    view = view_of(fake)
    gone = next(r for r in view.rows if r.gpu == "1")
    assert gone.status == "warn" and "GPU no longer exported (last seen 7 min ago)" in gone.reason
    assert gone.last_known and gone.last_known_age_s == pytest.approx(420)
    assert gone.temperature_c == 58  # its last known reading, not `-`
    still = next(r for r in view.rows if r.gpu == "0")
    assert still.status == "pass" and not still.last_known
    assert fleet.exit_code(view) == exitcodes.WARN


def test_a_stale_node_keeps_its_last_known_xid_and_keeps_failing():
    """Before: when the exporter of an Xid 79 node stopped answering, the row turned STALE and its Xid
    column went to `-`: the last known Xid was dropped just when the node had probably died."""
    fake = make([("a:9402", 1), ("d:9402", 1)], up={"a:9402": 1, "d:9402": 0})
    # Prometheus gets nothing of d now (the target is down); the look-back window still has its series.
    current = dict(fake.rules)["{__name__=~"]["data"]["result"]
    current[:] = [s for s in current if s["metric"].get("instance") != "d:9402"]
    _with(fake, ("last_over_time({__name__=~", vec(
        (dict(gpu("d:9402", 0), __name__="gpudoctor_gpu_last_xid"), 79),
        (dict(gpu("d:9402", 0), __name__="gpudoctor_gpu_xid_errors_total"), 1),
        (dict(gpu("d:9402", 0), __name__="gpudoctor_gpu_last_xid_timestamp_seconds"), NOW - 900),
        (dict(gpu("d:9402", 0), __name__="gpudoctor_gpu_temperature_celsius"), 70),
        ({"__name__": "gpudoctor_report_status", "instance": "d:9402", "job": "gpudoctor", "status": "pass"}, 1),
        (dict(gpu("a:9402", 0), __name__="gpudoctor_gpu_last_xid"), 13),  # a's current answer wins
    )))
    view = view_of(fake)
    dead = next(r for r in view.rows if r.instance == "d:9402")
    assert dead.status == "fail" and dead.xid_last == 79 and dead.xid_count == 1
    assert dead.last_known and dead.last_known_age_s == pytest.approx(600)  # the target's last sample
    assert "last known (10 min ago): Xid 79, 15 min ago" in dead.reason
    assert "not answering Prometheus" in dead.reason
    assert dead.temperature_c == 70 and dead.report_status == "pass"
    alive = next(r for r in view.rows if r.instance == "a:9402")
    assert alive.status == "pass" and alive.xid_last is None and not alive.last_known
    assert fleet.exit_code(view) == exitcodes.FAIL
    text = fleet.render_text(view)
    assert " 79 " in next(line for line in text.splitlines() if "d:9402" in line)


def test_dcgm_windowed_xid_counts_keep_a_critical_xid_behind_a_harmless_one():
    """dcgm-exporter's last-Xid gauge shows only the newest code (31, harmless) and keeps it for ever;
    its windowed count (DCGM_EXP_XID_ERRORS_COUNT, one series per code) still holds the Xid 79."""
    labels = {"instance": "n1:9400", "job": "dcgm", "gpu": "0", "UUID": "GPU-x", "modelName": "NVIDIA H100 80GB HBM3"}
    window = dict(labels, __name__="DCGM_EXP_XID_ERRORS_COUNT", window_size_in_ms="300000")
    fake = FakeProm([
        ("up", vec(({"instance": "n1:9400", "job": "dcgm"}, 1))),
        ("{__name__=~", vec((dict(labels, __name__="DCGM_FI_DEV_GPU_UTIL"), 55),
                            (dict(labels, __name__="DCGM_FI_DEV_XID_ERRORS"), 31),
                            (dict(window, xid="79"), 1), (dict(window, xid="31"), 2),
                            (dict(window, xid="13"), 0))),
        ("last_over_time({__name__=~\"DCGM_FI_DEV_GPU_TEMP", vec((labels, 50))),
    ])
    row = view_of(fake).rows[0]
    assert row.status == "fail" and row.xid_last == 79 and row.xid_count == 3
    assert "Xid 79 (1 time(s) in the last 5 min)" in row.reason and "Xid 31 (2 time(s)" in row.reason
    assert "Xid 13" not in row.reason  # counted 0 in the window


def test_a_stale_dcgm_last_xid_gauge_is_not_judged_where_the_window_is_exported():
    """The gauge still says 48 from last week; the window (exported, with other GPUs' codes) has
    nothing for this GPU: no Xid finding for it."""
    labels = {"instance": "n1:9400", "job": "dcgm", "UUID": "GPU-x", "modelName": "NVIDIA H100 80GB HBM3"}
    fake = FakeProm([
        ("up", vec(({"instance": "n1:9400", "job": "dcgm"}, 1))),
        ("{__name__=~", vec((dict(labels, gpu="0", __name__="DCGM_FI_DEV_GPU_UTIL"), 55),
                            (dict(labels, gpu="1", __name__="DCGM_FI_DEV_GPU_UTIL"), 55),
                            (dict(labels, gpu="0", __name__="DCGM_FI_DEV_XID_ERRORS"), 48),
                            (dict(labels, gpu="1", __name__="DCGM_EXP_XID_ERRORS_COUNT", xid="13",
                                  window_size_in_ms="300000"), 1))),
        ("last_over_time({__name__=~\"DCGM_FI_DEV_GPU_TEMP", vec((dict(labels, gpu="0"), 50), (dict(labels, gpu="1"), 50))),
    ])
    rows = {r.gpu: r for r in view_of(fake).rows}
    assert rows["0"].status == "pass" and rows["0"].xid_last is None, rows["0"].reason
    assert rows["1"].status == "warn" and rows["1"].xid_last == 13


def test_an_answer_over_the_size_bound_is_refused_in_one_line(capsys, monkeypatch):
    """A 33 MiB answer is refused before it is parsed (up to 256 MiB was parsed: 40 MB took 1.1 GB)."""
    huge = vec(({"instance": "n1", "job": "gpudoctor", "pad": "x" * (33 << 20)}, 1))
    fake = FakeProm([("up", huge)])
    with pytest.raises(fleet.FleetError, match="more than 32 MiB; narrow the selection with --match"):
        view_of(fake)


# --------------------------------------------------------------------------- held but idle (fleet.idle)
def _held(sm=None, util=0.0, held_since=None, busy_at=None, power=300.0):
    """One dcgm-exporter GPU held by a pod, with the idle queries' answers (window 30m, lookback 1h)."""
    labels = {"instance": "n:9400", "job": "dcgm", "gpu": "0", "pod": "p-0", "namespace": "ml", "container": "c"}
    key = {"instance": "n:9400", "gpu": "0"}
    rules = [("up", vec(({"instance": "n:9400", "job": "dcgm"}, 1))),
             ("{__name__=~", vec((dict(labels, __name__="DCGM_FI_DEV_GPU_UTIL_RATIO"), util),
                                 (dict(labels, __name__="DCGM_FI_DEV_BOARD_POWER_WATTS"), power))),
             ('last_over_time({__name__=~"DCGM_FI_DEV_GPU_TEMP', vec((labels, 50))),
             ("max_over_time((gpudoctor_gpu_sm_active_ratio", vec(*([(key, sm)] if sm is not None else []))),
             ("max_over_time((gpudoctor_gpu_utilization_ratio", vec((key, util))),
             ("avg_over_time((gpudoctor_gpu_power_watts", vec((key, power))),
             ("max_over_time(timestamp((gpudoctor_gpu_sm", vec(*([(key, busy_at)] if busy_at and sm is not None else []))),
             ("max_over_time(timestamp((gpudoctor_gpu_util", vec(*([(key, busy_at)] if busy_at and sm is None else []))),
             ("min_over_time(timestamp(group", vec(*([(dict(key, pod="p-0"), held_since)] if held_since else [])))]
    return FakeProm(rules)


def test_a_held_gpu_with_no_sm_activity_is_idle_though_utilisation_reads_busy():
    fake = _held(sm=0.002, util=0.95, held_since=NOW - 7200, busy_at=None)
    [row] = view_of(fake).rows
    assert row.holder == "pod ml/p-0 (container c)"
    assert row.idle_for_s == 7200 and row.idle_gpu_hours == 2.0 and row.idle_energy_kwh == pytest.approx(0.6)
    assert "held by pod ml/p-0 (container c) but idle for 2 h (2.0 GPU-hours, 0.60 kWh)" in row.reason
    assert next(f for f in row.findings if f.code == "held_idle").why.endswith("(SM activity below 1% for the whole time).")


def test_sm_activity_decides_where_there_is_some_and_a_short_hold_is_not_listed():
    assert view_of(_held(sm=0.2, util=0.0, held_since=NOW - 7200)).rows[0].idle_for_s is None  # SM works
    assert view_of(_held(util=0.0, held_since=NOW - 600)).rows[0].idle_for_s is None  # held 10 min < 30 min
    # idle since its last busy moment 40 min ago, held for two hours: 40 min, judged by utilisation
    row = view_of(_held(util=0.0, held_since=NOW - 7200, busy_at=NOW - 2400)).rows[0]
    assert row.idle_for_s == 2400 and "utilisation below 1%" in next(f.why for f in row.findings if f.code == "held_idle")


def test_no_idle_queries_without_a_held_gpu():
    fake = make([("a:9402", 2)])
    view = view_of(fake)
    assert not any(q.startswith(("max_over_time(", "avg_over_time(", "min_over_time(")) for q in fake.seen)
    assert view.to_dict()["held_idle"] == [] and view.to_dict()["idle_window"] == "30m"


def test_only_targets_without_rows_are_asked_about_in_groups_of_bounded_length(monkeypatch):
    from gpudoctor.fleet import gather

    fake = make([("a:9402", 1)], up={"a:9402": 1, "node-1:9100": 1, "node-2:9100": 1, "gone:9100": 0})
    view_of(fake)
    asked = [q for q in fake.seen if q.startswith("group by (instance, __name__)")]
    assert len(asked) == 1 and 'node\\\\-1:9100|node\\\\-2:9100' in asked[0] and "a:9402" not in asked[0]
    monkeypatch.setattr(gather, "INSTANCES_PER_QUERY_CHARS", 16)
    assert gather._instance_groups(["node-1:9100", "node-2:9100", "n3"]) == ["node\\-1:9100", "node\\-2:9100|n3"]
    fake = make([("a:9402", 1)])
    view_of(fake)
    assert not [q for q in fake.seen if q.startswith("group by")]  # every target has rows: no query
