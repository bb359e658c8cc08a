"""The TUI's GPU panels show critical GPU events (Xid, ECC) in words: Pilot tests on a replayed
recording that holds events, and the panel's event lines on their own."""

from __future__ import annotations

import json

import pytest

from gpudoctor.backends.events import DeviceEvents, GpuEvent
from gpudoctor.backends.na import NA
from gpudoctor.tui.widgets import event_lines
from support.tui_support import STANDIN, make_test_app, run_async, screen_text, take_samples, wait_for

pytestmark = pytest.mark.timeout(120)


def _text(lines) -> str:
    return "\n".join(line.plain for line in lines)


def test_no_events_no_lines():
    assert event_lines(None, 80) == []
    assert event_lines(DeviceEvents(), 80) == []
    assert event_lines(DeviceEvents(supported=NA("NotSupported")), 80) == []
    quiet = DeviceEvents(counts={"clock_change": 4}, recent=[GpuEvent(1.0, "clock_change")])
    assert event_lines(quiet, 80) == []  # clock changes are not faults


def test_xid_with_its_meaning_action_and_count():
    events = DeviceEvents(counts={"xid": 3}, recent=[GpuEvent(1000.0, "xid", 13), GpuEvent(1100.0, "xid", 79)])
    text = _text(event_lines(events, 100, now=1160.0))
    head, *words = text.splitlines()
    assert head.split() == ["Xid", "79", "(critical),", "60", "s", "ago;", "3", "since", "start"]
    assert "fallen off the bus" in words[0] and "drain the node" in " ".join(words)
    logged = DeviceEvents(logged_xids=[GpuEvent(500.0, "xid", 48, "kernel_log")])
    text = _text(event_lines(logged, 100, now=1000.0))
    assert "48 (critical), logged before start" in text and "ECC" in text


def test_ecc_event_and_width_bound():
    events = DeviceEvents(counts={"ecc_double_bit": 2}, recent=[GpuEvent(0.0, "ecc_double_bit"),
                                                                GpuEvent(10.0, "ecc_double_bit")])
    lines = event_lines(events, 40, now=7210.0)
    assert "double-bit (uncorrectable) ECC error, 2 h ago" in _text(event_lines(events, 200, now=7210.0))
    assert "(+1 more)" in _text(event_lines(events, 200, now=7210.0))
    assert all(len(line.plain) <= 40 for line in lines)


@run_async
async def test_overview_shows_a_replayed_xid_and_the_healthy_gpu_shows_none(tmp_path):
    rec = json.loads(STANDIN.read_text())
    rec["nvml"]["events"] = [[{"time": 1_800_000_000.0, "kind": "xid", "code": 79, "source": "kernel_log"}], []]
    path = tmp_path / "xid.json"
    path.write_text(json.dumps(rec))
    app = make_test_app(path)
    async with app.run_test(size=(100, 40)) as pilot:
        await take_samples(pilot, app, 2)
        text = screen_text(app)
        assert "79 (critical), logged before start" in text
        assert "GPU has fallen off the bus" in text
        assert text.count("(critical)") == 1  # GPU 1 had no event: no line
        await pilot.press("q")


@run_async
async def test_an_xid_delivered_by_nvml_fails_the_header_and_the_doctor(tmp_path):
    """An Xid 79 on NVML's stream (not in the kernel log): the panel names it, and the header and
    the Doctor's events probe fail with it (they said Doctor: PASS and "no Xid since boot")."""
    rec = json.loads(STANDIN.read_text())
    rec["nvml"]["events"] = [[{"time": 1_800_000_000.0, "kind": "xid", "code": 79}], []]
    path = tmp_path / "xid-stream.json"
    path.write_text(json.dumps(rec))
    app = make_test_app(path, startup_doctor=True)
    async with app.run_test(size=(160, 40)) as pilot:
        await take_samples(pilot, app, 2)
        await wait_for(pilot, lambda: app.headline is not None)
        assert app.headline[0] == "fail" and "Xid 79" in app.headline[1], app.headline
        assert "Doctor: FAIL" in screen_text(app)
        await pilot.press("d")
        await pilot.press("r")
        await wait_for(pilot, lambda: app.doctor.finished and "events" in app.doctor.results, timeout=60)
        events = app.doctor.results["events"]
        assert events.status.value == "fail", events.summary
        assert any(f.code == "xid_critical" for f in events.findings)
        assert app.headline[0] == "fail"
        await pilot.press("q")


@run_async
async def test_a_critical_event_after_the_verdict_turns_the_header_to_fail(tmp_path):
    """No doctor has run (or it passed before the event came): the panel's critical event sets the
    header's verdict to FAIL by itself."""
    rec = json.loads(STANDIN.read_text())
    rec["nvml"]["events"] = [[], [{"time": 1_800_000_000.0, "kind": "ecc_double_bit", "code": None}]]
    path = tmp_path / "ecc-stream.json"
    path.write_text(json.dumps(rec))
    app = make_test_app(path)
    async with app.run_test(size=(160, 40)) as pilot:
        app.headline = ("pass", "", "quick")  # what the quick doctor said before the event
        await take_samples(pilot, app, 2)
        assert app.headline[0] == "fail" and app.headline[1].startswith("GPU 1: uncorrectable"), app.headline
        assert "Doctor: FAIL" in screen_text(app)
        await pilot.press("q")
