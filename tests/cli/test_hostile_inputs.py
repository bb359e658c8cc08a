"""Every input hostile, every exit clean: data that ended in a traceback, now one line and the
documented exit code (docs/exit-codes.md), or NA with a reason where a reading is impossible.

Each test here failed before the fix named beside it. The property-based tests of the same
parsers are in tests/cli/test_fuzz_parsers.py.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import urllib.parse

import pytest

from conftest import ROOT, run_cli
from gpudoctor.report import baseline
from gpudoctor.core import exitcodes
from gpudoctor import fleet
from gpudoctor.cli import main

HEALTHY = str(ROOT / "tests" / "data" / "handmade_consumer_notsupported.json")
NOW = 1_800_000_000.0


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# --------------------------------------------------------------------------- fleet's answers
class RawProm:
    """Answers each query with the raw body of the first rule whose prefix it starts with."""

    def __init__(self, rules):
        self.rules = rules

    def __call__(self, request, timeout):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.full_url).query)["query"][0]
        for prefix, body in self.rules:
            if query.startswith(prefix):
                return io.BytesIO(body if isinstance(body, bytes) else json.dumps(body).encode())
        return io.BytesIO(json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode())


def vector(*series):
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [NOW, value]} for labels, value in series]}}


def gpu_series(name, value, **labels):
    return dict({"__name__": name, "instance": "n1:9402", "job": "gpudoctor", "gpu": "0"}, **labels), value


def run_fleet(capsys, monkeypatch, rules, *args):
    monkeypatch.setattr(fleet.urllib.request, "urlopen", RawProm(rules))
    code = main(["fleet", "--prometheus", "http://prom.example:9090", *args])
    out, err = capsys.readouterr()
    return code, out, err


HEALTHY_GPU = [gpu_series("gpudoctor_gpu_up", "1"), gpu_series("gpudoctor_gpu_temperature_celsius", "61")]
INFO = ("last_over_time(gpudoctor_gpu_info", vector(({"instance": "n1:9402", "job": "gpudoctor", "gpu": "0",
                                                        "name": "H100"}, "1")))


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "1e400"])
def test_fleet_up_that_is_not_a_finite_number_is_na_not_a_traceback(capsys, monkeypatch, value):
    # before: int(float("NaN")) -> ValueError, int(inf) -> OverflowError, exit 1 with a traceback
    rules = [("up", vector(({"instance": "n1:9402", "job": "gpudoctor"}, value))),
             ("{__name__=~", vector(*HEALTHY_GPU)), INFO]
    code, out, err = run_fleet(capsys, monkeypatch, rules)
    assert code == exitcodes.OK, err
    assert "Traceback" not in err and "n1:9402" in out


def test_fleet_non_finite_samples_are_left_out_with_their_reason():
    body = json.dumps(vector(gpu_series("gpudoctor_gpu_last_xid", "NaN"),
                             gpu_series("gpudoctor_gpu_temperature_celsius", "61"))).encode()
    series, unreadable = fleet.parse_answer(body)
    assert [s.labels["__name__"] for s in series] == ["gpudoctor_gpu_temperature_celsius"]
    assert unreadable == ["gpudoctor_gpu_last_xid (instance=n1:9402, gpu=0): not a finite number (NaN); NA"]


def test_fleet_series_without_the_label_it_is_judged_by(capsys, monkeypatch):
    # before: KeyError: 'reason' (gpudoctor_gpu_throttled without its reason label)
    rules = [("up", vector(({"instance": "n1:9402", "job": "gpudoctor"}, "1"))),
             ("{__name__=~", vector(*HEALTHY_GPU, gpu_series("gpudoctor_gpu_throttled", "1"))), INFO]
    code, out, err = run_fleet(capsys, monkeypatch, rules)
    assert code == exitcodes.OK and "Traceback" not in err


def test_fleet_gpu_label_that_is_a_digit_only_to_isdigit(capsys, monkeypatch):
    # before: "²".isdigit() is True, int("²") raises ValueError while sorting the rows
    rules = [("up", vector(({"instance": "n1:9402", "job": "gpudoctor"}, "1"))),
             ("{__name__=~", vector(*[gpu_series("gpudoctor_gpu_up", "1", gpu=index) for index in ("²", "1")])),
             ("last_over_time(gpudoctor_gpu_info", vector(*[gpu_series("gpudoctor_gpu_info", "1", gpu=index)
                                                          for index in ("²", "1")]))]
    code, out, err = run_fleet(capsys, monkeypatch, rules, "--json")
    assert code == exitcodes.OK, err
    assert sorted(row["gpu"] for row in json.loads(out)["rows"]) == ["1", "\\xb2"]


@pytest.mark.parametrize("answer", [
    {"status": "success", "data": []},
    {"status": "success", "data": "text"},
    {"status": "success", "data": None},
    {"status": "success", "data": {"result": "text"}},
    {"status": "success", "data": {"result": None}},
    {"status": "success", "data": {"result": [["a"], {"metric": [], "value": [1, "1"]}, {"metric": {"a": 1},
                                                                                        "value": [1, "1"]}]}},
    {"status": "error", "error": ["not", "text"]},
    ["a", "list"],
])
def test_fleet_answer_of_the_wrong_shape_is_one_line(capsys, monkeypatch, answer):
    # before: AttributeError ('list' object has no attribute 'get'; 'list' object has no attribute 'items')
    code, out, err = run_fleet(capsys, monkeypatch, [("up", answer)])
    assert code in (exitcodes.USAGE, exitcodes.NO_GPU)
    one_line_error(err)


@pytest.mark.parametrize("status", [200, 400])
def test_fleet_answer_nested_100000_deep_is_one_line(capsys, monkeypatch, status):
    # before: RecursionError from json.loads (and from the HTTP error body)
    deep = b"[" * 100_000 + b"]" * 100_000
    if status == 200:
        rules = [("up", deep)]
        monkeypatch.setattr(fleet.urllib.request, "urlopen", RawProm(rules))
    else:
        def refuse(request, timeout):
            raise fleet.urllib.error.HTTPError(request.full_url, 400, "Bad Request", {}, io.BytesIO(deep[:60000]))
        monkeypatch.setattr(fleet.urllib.request, "urlopen", refuse)
    code = main(["fleet", "--prometheus", "http://prom.example:9090"])
    out, err = capsys.readouterr()
    assert code == exitcodes.UNREACHABLE
    assert "not JSON" in one_line_error(err) or "without Prometheus's JSON" in err


def test_fleet_prometheus_url_that_urlsplit_refuses(capsys):
    # before: ValueError: Invalid IPv6 URL
    code = main(["fleet", "--prometheus", "http://[::1"])
    out, err = capsys.readouterr()
    assert code == exitcodes.USAGE and "not a URL" in one_line_error(err)


# --------------------------------------------------------------------------- compare's reports
def report(**changes):
    data = {"schema_version": "1.0", "status": "pass", "host": {"hostname": "n1"},
            "results": [{"probe": "transfer", "status": "pass", "measurements": [
                {"name": "pinned_h2d_bandwidth", "value": 24.0, "unit": "GB/s"}]}]}
    data.update(changes)
    return data


def measurement(**changes):
    return report(results=[{"probe": "transfer", "status": "pass", "measurements": [
        dict({"name": "pinned_h2d_bandwidth", "value": 24.0, "unit": "GB/s"}, **changes)]}])


def compare_files(tmp_path, capsys, candidate, *extra):
    good, bad = tmp_path / "good.json", tmp_path / "candidate.json"
    good.write_text(json.dumps(report()))
    bad.write_text(candidate if isinstance(candidate, str) else json.dumps(candidate))
    code = main(["compare", str(good), str(bad), *extra])
    return code, *capsys.readouterr()


@pytest.mark.parametrize("host", [5, ["n1"], "n1"])
def test_compare_host_that_is_not_an_object(tmp_path, capsys, host):
    # before: TypeError / ValueError from dict(host)
    code, out, err = compare_files(tmp_path, capsys, report(host=host))
    assert code == exitcodes.USAGE and "host: expected an object" in one_line_error(err)


@pytest.mark.parametrize("device", [[0], {"index": 0}, "0", -1, True])
def test_compare_device_that_is_not_an_index(tmp_path, capsys, device):
    # before: TypeError: unhashable type: 'list' / 'dict'
    code, out, err = compare_files(tmp_path, capsys, measurement(device=device))
    assert code == exitcodes.USAGE
    assert "measurements[0].device: expected a GPU index" in one_line_error(err)


def test_compare_mixed_device_types(tmp_path, capsys):
    # before: TypeError: '<' not supported between instances of 'str' and 'int' while sorting the figures
    candidate = report(results=[{"probe": "transfer", "status": "pass", "measurements": [
        {"name": "pinned_h2d_bandwidth", "value": 24.0, "unit": "GB/s", "device": 0},
        {"name": "pinned_h2d_bandwidth", "value": 24.0, "unit": "GB/s", "device": "1"}]}])
    code, out, err = compare_files(tmp_path, capsys, candidate)
    assert code == exitcodes.USAGE and "measurements[1].device" in one_line_error(err)


@pytest.mark.parametrize("figure", ["9" * 400, "1e400", "NaN", "-Infinity"])
def test_compare_figure_that_is_no_finite_number_is_na(tmp_path, capsys, figure):
    # before: OverflowError: int too large to convert to float (400 digits)
    text = json.dumps(report()).replace("24.0", figure)
    code, out, err = compare_files(tmp_path, capsys, text)
    assert code == exitcodes.USAGE and "share no measured figure" in one_line_error(err)
    loaded = baseline.parse_report(text)
    m = loaded["results"][0]["measurements"][0]
    assert m["value"] is None and "not a finite number" in m["note"]


def test_compare_integers_stay_integers():
    loaded = baseline.parse_report(json.dumps(measurement(value=18446744073709551615, device=3)))
    m = loaded["results"][0]["measurements"][0]
    assert m["value"] == 18446744073709551615 and isinstance(m["value"], int) and m["device"] == 3


def test_compare_output_that_cannot_be_written_exits_7(tmp_path):
    # before: OSError (No space left on device) / "Exception ignored" and exit 1 or 120
    good = tmp_path / "good.json"
    good.write_text(json.dumps(report()))
    args = [sys.executable, "-m", "gpudoctor", "compare", str(good), str(good)]
    with open("/dev/full", "w") as full:
        into_full = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    closed = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120,
                            preexec_fn=lambda: os.close(1))
    for done in (into_full, closed):
        assert done.returncode == exitcodes.WRITE_FAILED, done.stderr
        assert "cannot write to stdout" in one_line_error(done.stderr)


# --------------------------------------------------------------------------- recordings
def test_watch_replay_with_an_event_time_far_in_the_future(tmp_path):
    # before: OverflowError: timestamp out of range for platform time_t (exit 1, a traceback)
    data = json.loads(open(HEALTHY, encoding="utf-8").read())
    n = len(data["nvml"]["static"])
    data["nvml"]["events"] = [[{"time": 1e300, "kind": "xid", "code": 79, "source": "nvml"}]] + [[]] * (n - 1)
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    done = run_cli("watch", "--replay", str(path), "--count", "1", timeout=120)
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert "nvml.events[0][0].time: 1e+300 is above the maximum" in one_line_error(done.stderr)


def test_recording_numbers_beyond_range_are_refused_in_one_line(tmp_path):
    from gpudoctor.backends.recording import RecordingError, load_recording

    text = open(HEALTHY, encoding="utf-8").read()
    for number in ("9" * 5000, "1e400"):
        path = tmp_path / "big.json"
        path.write_text(text.replace('"format_version": 1', f'"format_version": 1, "x": {number}', 1))
        with pytest.raises(RecordingError, match="a number out of range"):
            load_recording(path)


def test_record_keeps_impossible_readings_as_na(tmp_path):
    # before: ValueError: Out of range float values are not JSON compliant; the recording was lost
    from gpudoctor.backends import NA, ReplayBackend, load_recording
    from gpudoctor.sampling.recorder import record_parts

    class Impossible(ReplayBackend):
        def sample(self, index, *args, **kwargs):
            reading = dict(super().sample(index, *args, **kwargs))
            reading["power_w"] = math.nan
            reading["temperature_c"] = math.inf
            return reading

    gpu = Impossible.from_file(HEALTHY)
    (path, *_), _ = record_parts(tmp_path / "rec.json", seconds=0.3, interval=0.1, with_torch=False, gpu=gpu)
    loaded = load_recording(path)
    device = loaded["nvml"]["samples"][0]["devices"][0]
    assert device["power_w"] == NA("NotFinite") and device["temperature_c"] == NA("NotFinite")


# --------------------------------------------------------------------------- arguments and environment
@pytest.mark.parametrize("pid", ["2147483648", "²", "99999999999999999999999"])
def test_why_pid_out_of_range_or_not_ascii(capsys, pid):
    # before: OverflowError: signed integer is greater than maximum; ValueError: invalid literal for int()
    code = main(["why", pid])
    out, err = capsys.readouterr()
    assert code == exitcodes.USAGE and "not a process ID" in one_line_error(err)


def test_exporter_host_with_a_label_too_long_for_idna():
    # before: UnicodeError: encoding with 'idna' codec failed (label too long)
    done = run_cli("exporter", "--host", "a" * 100, "--port", "0", "--replay", HEALTHY, "--exit-after", "1",
                   timeout=120)
    assert done.returncode == exitcodes.USAGE
    assert "Traceback" not in done.stderr
    assert "argument --host" in done.stderr.splitlines()[0] and "63 characters" in done.stderr


def test_cuda_visible_devices_of_5000_digits():
    # before: ValueError: Exceeds the limit (4300 digits) for integer string conversion
    from gpudoctor.backends.visibility import parse_visible

    assert parse_visible("7" * 5000, ["GPU-a", "GPU-b"]) == []
    assert parse_visible("1," + "7" * 5000, ["GPU-a", "GPU-b"]) == [1]
    assert parse_visible("0,²", ["GPU-a", "GPU-b"]) == [0]


def test_relative_output_in_a_removed_working_directory(tmp_path):
    # before: FileNotFoundError from os.getcwd() in os.path.abspath (exit 1, a traceback)
    gone = tmp_path / "gone"
    gone.mkdir()
    script = ("import os, sys; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); from gpudoctor.cli import main; "
              "sys.exit(main(['report', '--quick', '-o', 'out.json', '--replay', sys.argv[2]]))")
    done = subprocess.run([sys.executable, "-c", script, str(gone), HEALTHY], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert "working directory no longer exists" in one_line_error(done.stderr)
