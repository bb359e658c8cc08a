"""Property-based fuzzing of every parser of outside input (hypothesis).

Property, for each parser: any input either parses to values of the documented types, or
raises the module's documented error with a one-line message; never another exception.
Text a parser hands on for printing carries no control characters.

The default run has a small budget per test (the whole file well under a minute on a busy
2-core machine). ``HYPOTHESIS_PROFILE=long pytest -m benchmark tests/cli/test_fuzz_parsers.py``
runs the long profile (registered in tests/conftest.py) through the tests marked
``benchmark``, which the default run skips.
"""

from __future__ import annotations

import json
import math
import os
import re
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import fatbin_samples  # tests/ helper: ELF64 files with .nv_fatbin sections

from gpudoctor.report import baseline
from gpudoctor import fleet
from gpudoctor.system import safejson
from gpudoctor.core import xid
from gpudoctor.backends import fatbin
from gpudoctor.backends.na import NA
from gpudoctor.backends.visibility import parse_visible
from gpudoctor.backends.recording import RecordingError, load_recording
from gpudoctor.why import stacks

LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"


def budget(examples: int):
    """The default run's bounded budget; under the long profile, the profile's own."""
    if LONG:
        return lambda test: test
    return settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def control_free(text: str) -> bool:
    """No C0/C1 control character, no lone surrogate, no bidi override."""
    return not any(unicodedata.category(c) in ("Cc", "Cs") or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
                   for c in text)


def one_line(exc: BaseException) -> None:
    text = str(exc)
    assert text and "\n" not in text and "\r" not in text, repr(text)


# --------------------------------------------------------------------------- strategies
# JSON values with the awkward parts: huge integers, non-finite floats, odd text, deep nesting.
numbers = st.one_of(st.integers(), st.integers(min_value=-(10 ** 400), max_value=10 ** 400),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, -1, 2 ** 31, 2 ** 64]))
text = st.one_of(st.text(max_size=20), st.sampled_from(["", "²", "٣", "\x1b]0;x\x07", "\ud800", "0", "-1", "a" * 100]))
scalars = st.one_of(st.none(), st.booleans(), numbers, text)
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                           st.dictionaries(text, inner, max_size=4)), max_leaves=20)


def dumps(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass")


# Bytes that are JSON-ish: brackets, digits, exponents, constants, strings, garbage.
json_tokens = st.lists(st.sampled_from(['[', ']', '{', '}', ',', ':', '"a"', '"\\ud800"', '1', '-', 'e400', '9' * 30,
                                        '1.5', 'NaN', 'Infinity', '-Infinity', 'null', 'true', ' ', '\\', '"', '\x00',
                                        '\xff']), max_size=40).map(lambda t: "".join(t).encode("utf-8", "surrogatepass"))
raw_bytes = st.one_of(st.binary(max_size=200), json_tokens)


# --------------------------------------------------------------------------- safejson
@budget(500)
@given(data=st.one_of(raw_bytes, json_values.map(dumps)), allow_nan=st.booleans())
def test_safejson_parses_or_says_why_in_one_line(data, allow_nan):
    try:
        value = safejson.parse_bounded(data, max_depth=8, max_containers=100, allow_nan=allow_nan)
    except safejson.JsonFileError as exc:
        one_line(exc)
        return
    stack = [value]
    while stack:  # integers stay integers, within uint64's digits; no float outside the float range
        item = stack.pop()
        if isinstance(item, int) and not isinstance(item, bool):
            assert len(str(abs(item))) <= safejson.MAX_INT_DIGITS
        elif isinstance(item, float) and not allow_nan:
            assert math.isfinite(item)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())


def test_safejson_deep_nesting_is_refused_before_decoding():
    with pytest.raises(safejson.JsonFileError, match="nested more than 8 levels deep"):
        safejson.parse_bounded(b"[" * 100_000 + b"]" * 100_000, max_depth=8, max_containers=10 ** 6)


# --------------------------------------------------------------------------- reports (compare, --baseline)
def report_like(results):
    return {"schema_version": "1.0", "status": "pass", "host": {}, "results": results}


measurements = st.dictionaries(st.sampled_from(["name", "value", "reference", "device", "unit", "note"]), json_values,
                               max_size=6).map(lambda m: dict({"name": "pinned_h2d_bandwidth"}, **m))
results = st.lists(st.fixed_dictionaries({"probe": st.sampled_from(["transfer", "health", "devices"])},
                                         optional={"measurements": st.lists(measurements, max_size=3),
                                                   "status": scalars}), max_size=3)
reports = st.one_of(results.map(report_like), st.dictionaries(text, json_values, max_size=4).map(
    lambda extra: dict(report_like([]), **extra)), json_values)


def check_report(data: bytes) -> None:
    try:
        report = baseline.parse_report(data, "r.json")
    except baseline.BaselineError as exc:
        one_line(exc)
        return
    assert isinstance(report["results"], list) and isinstance(report.get("host") or {}, dict)
    for key, value in baseline.figures(report).items():
        assert isinstance(value, float) and math.isfinite(value)
        assert key[2] is None or (isinstance(key[2], int) and not isinstance(key[2], bool) and key[2] >= 0)
    ident = baseline.identity(report)
    assert all(isinstance(m, str) and control_free(m) for m in ident["models"])
    json.dumps(report, allow_nan=True)  # what compare prints as JSON can be encoded
    base = baseline.Baseline(baseline.figures(report), ident, ["r.json"], [])
    try:
        result = baseline.compare(base, report, force=True)
    except baseline.BaselineError as exc:
        one_line(exc)
        return
    from gpudoctor.commands.compare import render_comparison

    assert control_free(render_comparison(result, base, "r.json").replace("\n", ""))


@budget(400)
@given(report=reports)
def test_report_loading_parses_or_says_why(report):
    check_report(dumps(report))


@budget(200)
@given(data=raw_bytes)
def test_report_loading_of_raw_bytes(data):
    check_report(data)


# --------------------------------------------------------------------------- recordings
RECORDING = json.loads((__import__("conftest").DATA / "handmade_consumer_notsupported.json").read_text())
SAMPLE_KEYS = sorted(RECORDING["nvml"]["samples"][0]["devices"][0])


@st.composite
def mutated_recordings(draw):
    data = json.loads(json.dumps(RECORDING))
    nvml = data["nvml"]
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.sampled_from(["sample", "static", "event", "count", "top", "process"]))
        value = draw(json_values)
        if where == "sample":
            nvml["samples"][0]["devices"][0][draw(st.sampled_from(SAMPLE_KEYS))] = value
        elif where == "static":
            nvml["static"][0][draw(st.sampled_from(sorted(nvml["static"][0])))] = value
        elif where == "event":
            nvml["events"] = [[{"time": value, "kind": "xid", "code": 79, "source": "nvml"}]] + \
                [[] for _ in nvml["static"][1:]]
        elif where == "count":
            nvml["device_count"] = value
        elif where == "process":
            nvml["samples"][0]["processes"] = [value]
        else:
            data[draw(st.sampled_from(["format_version", "meta", "torch", "host", "nvml"]))] = value
    return data


@budget(150)
@given(data=st.one_of(mutated_recordings().map(dumps), raw_bytes))
def test_recording_loading_parses_or_says_why(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("rec") / "r.json"
    path.write_bytes(data)
    try:
        loaded = load_recording(path)
    except RecordingError as exc:
        one_line(exc)
        return
    stack = [loaded]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            assert control_free(item)
        elif isinstance(item, float):
            assert math.isfinite(item)
        elif isinstance(item, NA):
            assert control_free(item.reason)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
            stack.extend(k for k in item if isinstance(k, str))
    for per_device in loaded["nvml"].get("events", []):
        for event in per_device:
            assert 0 <= event["time"] <= 253_402_300_799


# --------------------------------------------------------------------------- Prometheus answers (fleet)
label_values = st.one_of(text, st.sampled_from(["0", "1", "²", "١", "9" * 200]), json_values)
sample_values = st.one_of(st.sampled_from(["NaN", "+Inf", "-Inf", "1e400", "1", "0", "79", "1e300", "-1e300", "",
                                           "0x10", "1_0"]), text, json_values)
metric_names = st.sampled_from(list(fleet.gpudoctor_metrics() + fleet.dcgm_metrics()))
series_items = st.one_of(
    st.fixed_dictionaries({"metric": st.fixed_dictionaries(
        {"__name__": metric_names, "instance": st.sampled_from(["n1:9402", "n2:9402"]), "gpu": label_values},
        optional={"reason": label_values, "status": label_values, "error_type": label_values,
                  "counter": label_values, "job": label_values}),
        "value": st.tuples(st.just(1.0), sample_values).map(list)}),
    json_values)
answers = st.one_of(
    st.lists(series_items, max_size=6).map(lambda r: {"status": "success", "data": {"resultType": "vector",
                                                                                     "result": r}}),
    st.fixed_dictionaries({"status": st.sampled_from(["success", "error"])},
                          optional={"data": json_values, "error": json_values}),
    json_values)


@budget(500)
@given(body=st.one_of(answers.map(dumps), raw_bytes))
def test_prometheus_answer_parses_or_says_why(body):
    try:
        series, unreadable = fleet.parse_answer(body, "http://prom")
    except fleet.FleetError as exc:
        one_line(exc)
        assert exc.kind in ("unreachable", "query")
        return
    for s in series:
        assert isinstance(s.value, float) and math.isfinite(s.value)
        assert all(isinstance(k, str) and isinstance(v, str) and control_free(k + v) for k, v in s.labels.items())
        gpu = s.labels.get("gpu", "")
        assert not gpu.isdigit() or gpu.isascii()
    assert all(isinstance(u, str) and control_free(u) for u in unreadable)


class AnswerEach:
    """The same fuzzed answer for every query fleet sends."""

    def __init__(self, bodies):
        self.bodies = bodies
        self.n = 0

    def __call__(self, request, timeout):
        import io

        body = self.bodies[self.n % len(self.bodies)]
        self.n += 1
        return io.BytesIO(body)


@budget(200)
@given(bodies=st.lists(answers.map(dumps), min_size=1, max_size=7))
def test_fleet_judges_any_answers_or_says_why(bodies):
    client = fleet.Prometheus("http://prom.example:9090", opener=AnswerEach(bodies))
    try:
        view = fleet.collect(client, now=1_800_000_000.0)
    except fleet.FleetError as exc:
        one_line(exc)
        return
    json.dumps(view.to_dict(), allow_nan=False)
    assert control_free(fleet.render_text(view).replace("\n", ""))


# --------------------------------------------------------------------------- kernel log Xids
kmsg_lines = st.one_of(
    text,
    st.builds(lambda head, bus, code, tail: f"{head};NVRM: Xid (PCI:{bus}): {code}, {tail}",
              st.sampled_from(["4,100,123456,-", "4,1,²,-", "4,1," + "9" * 5000 + ",-", "x", "", ",,"]),
              st.sampled_from(["0000:3b:00", "0000:3b:00.0", "zzzz:3b:00", "0000:3b:00.٣"]),
              st.one_of(st.integers(-5, 10 ** 12).map(str), st.sampled_from(["²", "١٢", "9" * 5000, ""])), text),
    st.sampled_from(["NVRM: The NVIDIA GPU 0000:b3:00.0", "NVRM: fallen off the bus and is not responding",
                     "6,7,8;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0a fallen off the bus"]))


@budget(500)
@given(lines=st.lists(kmsg_lines, max_size=8), boot=st.one_of(st.none(), st.floats(0, 2e9)))
def test_kernel_log_xids_parse_to_typed_records(lines, boot):
    for logged in xid.parse_kmsg(lines, boot):  # documented: never raises; lines that are no Xid are skipped
        assert isinstance(logged.code, int) and 0 <= logged.code < 10 ** 9
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.0", logged.pci_bus_id)
        assert logged.uptime_s is None or math.isfinite(logged.uptime_s)
        assert logged.time is None or math.isfinite(logged.time)
        assert len(logged.text) <= 300 and not re.search(r"[\x00-\x1f\x7f-\x9f]", logged.text)
        xid.explain(logged.code)


# --------------------------------------------------------------------------- CUDA_VISIBLE_DEVICES
visible_tokens = st.one_of(st.integers(-3, 10).map(str), st.sampled_from(["²", "٣", "7" * 5000, "GPU-a", "GPU-",
                                                                          "MIG-1", "a", " 1 ", "", "-", "--1"]), text)


@budget(500)
@given(tokens=st.lists(visible_tokens, max_size=6), uuids=st.lists(st.one_of(st.none(), st.sampled_from(
    ["GPU-a", "GPU-ab", "GPU-b"]), text), max_size=4))
def test_cuda_visible_devices_parses_to_indices_or_na(tokens, uuids):
    got = parse_visible(",".join(tokens), uuids)  # documented: never raises; NA when MIG instances are named
    if isinstance(got, NA):
        assert got.reason == "MigInstancesSelected"
        return
    assert all(isinstance(i, int) and 0 <= i < len(uuids) for i in got)
    assert len(set(got)) == len(got)


# --------------------------------------------------------------------------- py-spy raw output
frame = st.one_of(st.builds(lambda f, p, n: f"{f} ({p}:{n})", text, text, st.one_of(
    st.integers(0, 10 ** 30).map(str), st.sampled_from(["²", "", "x"]))), text)
stack_lines = st.one_of(
    st.builds(lambda pid, cmd, tid, frames, count: f'process {pid}:"{cmd}";thread ({tid}): MainThread;'
                                                   + ";".join(frames) + f" {count}",
              st.one_of(st.integers(0, 10 ** 30).map(str), st.just("²")), text,
              st.one_of(st.integers(0, 10 ** 30).map(str), st.sampled_from(["0x" + "f" * 40, "0x", "²"])),
              st.lists(frame, max_size=4),
              st.one_of(st.integers(0, 10 ** 15).map(str), st.sampled_from(["²", "١", "-1", ""]))),
    text)


@budget(500)
@given(lines=st.lists(stack_lines, max_size=6), joiner=st.sampled_from(["\n", "\r\n", ""]))
def test_py_spy_raw_output_parses_to_bounded_stacks(lines, joiner):
    for stack in stacks.parse_raw(joiner.join(lines)):  # documented: never raises; non-stacks are skipped
        assert isinstance(stack.count, int) and stack.count > 0
        assert all(isinstance(p, int) and 0 <= p < 10 ** 10 for p in stack.pids)
        assert stack.tid is None or (isinstance(stack.tid, int) and stack.tid >= 0)
        assert len(stack.frames) <= stacks.MAX_FRAMES
        for f in stack.frames:
            assert f.line is None or (isinstance(f.line, int) and f.line >= 0)
        assert len(stack.cmdline) <= 500 and len(stack.thread) <= stacks.MAX_NAME_CHARS


# --------------------------------------------------------------------------- CUDA fat binaries in a shared object
fat_entries = st.tuples(st.sampled_from([fatbin_samples.PTX, fatbin_samples.ELF, 4, 0]), st.integers(0, 200),
                        st.sampled_from([0x11, 0x8011, 0x108011, 0x1208011, 0xFFFFFFFFFFFFFFFF]),
                        st.binary(max_size=40), st.sampled_from([64, 80, 112]))
shared_objects = st.lists(st.lists(fat_entries, max_size=4), max_size=3).map(
    lambda containers: fatbin_samples.extension(*(fatbin_samples.container(*(fatbin_samples.entry(*e) for e in c))
                                                  for c in containers)))


@st.composite
def mutated_shared_objects(draw):
    data = bytearray(draw(shared_objects))
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(data) - 1))
        data[at:at + 8] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data[:draw(st.integers(0, len(data)))]) if draw(st.booleans()) else bytes(data)


@budget(400)
@given(data=st.one_of(mutated_shared_objects(), raw_bytes))
def test_fat_binary_reader_answers_or_says_why(data):
    asked = []

    def read(offset, size):
        asked.append(size)
        return data[offset:offset + size]

    found = fatbin.parse_elf(read, len(data))  # documented: never raises
    assert found.error is None or (found.error.startswith("could not read: ") and control_free(found.error)
                                   and "\n" not in found.error)
    assert all(re.fullmatch(r"sm_\d{1,4}[af]?", a) for a in found.sass), found.sass
    assert all(re.fullmatch(r"compute_\d{1,4}[af]?", a) for a in found.ptx), found.ptx
    # every read is bounded by the file (nothing is read past what the headers were checked against)
    assert all(0 <= size <= max(len(data), 64) for size in asked)
    for capability in ("7.5", "9.0", "12.0"):
        assert fatbin.verdict(found, capability) in ("sass", "ptx", "none")


# --------------------------------------------------------------------------- the long profile
@pytest.mark.benchmark
@pytest.mark.skipif(not LONG, reason="set HYPOTHESIS_PROFILE=long to fuzz for longer")
@pytest.mark.parametrize("name", sorted(n for n in dir() if n.startswith("test_") and n != "test_long_profile"
                                        and callable(globals()[n]) and hasattr(globals()[n], "hypothesis")))
def test_long_profile(name, tmp_path_factory):
    """Every property above, with the long profile's budget (run with -m benchmark)."""
    test = globals()[name]
    if "tmp_path_factory" in test.hypothesis.inner_test.__code__.co_varnames:
        test(tmp_path_factory=tmp_path_factory)
    else:
        test()
