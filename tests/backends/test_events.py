"""Critical GPU events: NVML's event set (through the gate, with a stand-in NVML module), the
kernel log, and the Xid table."""

from __future__ import annotations

import queue
import threading
from types import SimpleNamespace

import pytest

from gpudoctor.core import exitcodes, xid
from gpudoctor.backends import NvmlGate
from gpudoctor.backends.events import (EVENT_CLOCK, EVENT_DOUBLE_BIT_ECC, EVENT_SINGLE_BIT_ECC, EVENT_XID_CRITICAL,
                                       DeviceEvents, EventWatcher, GpuEvent, ReplayEvents)
from gpudoctor.backends.na import NA
from gpudoctor.core.model import Status
from support.nvml_fake import FakePynvml, nvml_error


class EventNvml(FakePynvml):
    """NVML's event functions over ``len(supported)`` devices; ``supported[i]`` is each one's
    event mask (or the error asking for it raises)."""

    def __init__(self, supported):
        super().__init__(len(supported))
        self.events: queue.Queue = queue.Queue()
        self.registered = {}
        self.freed = False
        self.waits = threading.Event()
        for index, mask in supported.items():
            self.devices[index]["nvmlDeviceGetSupportedEventTypes"] = mask
            self.devices[index]["nvmlDeviceRegisterEvents"] = (
                lambda mask, event_set, index=index: self.registered.__setitem__(index, mask))

    def nvmlEventSetCreate(self):
        return "set"

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        self.waits.set()
        try:
            item = self.events.get(timeout=timeout_ms / 1000.0)
        except queue.Empty:
            raise nvml_error("Timeout")() from None
        if isinstance(item, Exception):
            raise item
        return item

    def nvmlEventSetFree(self, event_set):
        self.freed = True

    def event(self, index, event_type, data=0):
        """An event from device ``index``, with a handle of the current NVML session."""
        return SimpleNamespace(device=SimpleNamespace(index=index, session=self.session), eventType=event_type,
                               eventData=data)

    def send(self, index, event_type, data=0):
        self.events.put(self.event(index, event_type, data))


def _no_log():
    return xid.KernelLog([], False, "cannot read /dev/kmsg: Permission denied (needs root or CAP_SYSLOG)")


def _wait_for(predicate, timeout=60.0):
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return True
        done.wait(0.01)
    return predicate()


def test_xid_and_ecc_events_are_counted_per_gpu_with_the_last_kept():
    nvml = EventNvml({0: 0xFFFF, 1: EVENT_XID_CRITICAL | EVENT_DOUBLE_BIT_ECC})
    clock = iter(range(1000, 2000)).__next__
    watcher = EventWatcher(NvmlGate(nvml), 2, wait_ms=50, clock=lambda: float(clock()), kernel_log=_no_log)
    watcher.start()
    try:
        assert nvml.registered[1] == EVENT_XID_CRITICAL | EVENT_DOUBLE_BIT_ECC
        nvml.send(1, EVENT_XID_CRITICAL, 79)
        nvml.send(1, EVENT_DOUBLE_BIT_ECC)
        nvml.send(0, EVENT_CLOCK)
        nvml.send(1, EVENT_XID_CRITICAL, 48)
        assert _wait_for(lambda: watcher.snapshot(1).xid_count == 2)
    finally:
        assert watcher.stop()
    gpu1 = watcher.snapshot(1)
    assert gpu1.supported is None
    assert gpu1.counts == {"xid": 2, "ecc_double_bit": 1}
    assert [(e.kind, e.code) for e in gpu1.recent] == [("xid", 79), ("ecc_double_bit", None), ("xid", 48)]
    assert gpu1.last_xid().code == 48
    assert watcher.snapshot(0).counts == {"clock_change": 1} and watcher.snapshot(0).recent == []
    assert nvml.freed
    assert watcher.kernel_log_readable is False and "CAP_SYSLOG" in watcher.kernel_log_reason


def test_unsupported_events_are_na_with_the_reason():
    nvml = EventNvml({0: nvml_error("NotSupported")(), 1: 0})
    watcher = EventWatcher(NvmlGate(nvml), 2, wait_ms=50, kernel_log=_no_log)
    watcher.start()
    assert watcher.snapshot(0).supported == NA("NotSupported")
    assert watcher.snapshot(1).supported == NA("NotSupported")  # no critical event type at all
    assert watcher.status == NA("NotSupported")
    assert watcher.stop()


def test_no_nvml_is_one_reason_for_every_gpu():
    watcher = EventWatcher(NvmlGate(FakePynvml(init_error="LibraryNotFound")), 1, kernel_log=_no_log)
    watcher.start()
    assert watcher.snapshot(0).supported == NA("LibraryNotFound")
    assert watcher.stop()


def test_watcher_stops_when_nvml_goes_away_and_says_why():
    nvml = EventNvml({0: 0xFFFF})
    watcher = EventWatcher(NvmlGate(nvml), 1, wait_ms=50, kernel_log=_no_log)
    watcher.start()
    nvml.events.put(nvml_error("Uninitialized")())
    assert _wait_for(lambda: watcher.status is not None)
    assert watcher.status == NA("Uninitialized")
    assert watcher.stop()


def test_single_bit_storm_is_derived_once_a_minute():
    nvml = EventNvml({0: EVENT_SINGLE_BIT_ECC})
    times = iter([1000.0 + i for i in range(30)])
    watcher = EventWatcher(NvmlGate(nvml), 1, wait_ms=50, clock=lambda: next(times), kernel_log=_no_log)
    watcher.register()
    for _ in range(25):
        watcher.handle(nvml.event(0, EVENT_SINGLE_BIT_ECC))
    counts = watcher.snapshot(0).counts
    assert counts["ecc_single_bit"] == 25 and counts["ecc_single_bit_storm"] == 1


def test_kernel_log_xids_are_attached_to_gpus_by_bus_id(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text(
        "6,1234,5000000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n"
        "4,1300,7000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
        "4,1301,8000000,-;NVRM: Xid (PCI:0000:86:00): 13, pid=99, Graphics Exception\n"
        "garbage line \x1b[31m\n")
    entries = xid.read_kernel_log(str(log), boot_time=1_700_000_000.0)
    assert entries.readable
    assert [(e.pci_bus_id, e.code, e.time) for e in entries.xids] == [
        ("0000:3b:00.0", 79, 1_700_000_007.0), ("0000:86:00.0", 13, 1_700_000_008.0)]
    watcher = EventWatcher(NvmlGate(EventNvml({0: 0xFFFF})), 1, bus_ids={0: "0000:3B:00.0"},
                           kernel_log=lambda: entries)
    watcher.register()
    snap = watcher.snapshot(0)
    assert [(e.code, e.source) for e in snap.logged_xids] == [(79, "kernel_log")]
    assert snap.last_xid().code == 79 and snap.xid_count == 0  # counted by source, not mixed


def test_unreadable_kernel_log_says_why(tmp_path):
    missing = xid.read_kernel_log(str(tmp_path / "nope"))
    assert not missing.readable and "cannot read" in missing.reason


def test_replayed_events():
    events = ReplayEvents({"nvml": {"device_count": 2, "events": [
        [{"time": 10.0, "kind": "xid", "code": 79}, {"time": 5.0, "kind": "xid", "code": 13, "source": "kernel_log"}]],
        "kernel_log": {"readable": True, "reason": ""}}})
    assert events.kernel_log_readable is True
    assert events.snapshot(0).last_xid().code == 79 and events.snapshot(0).xid_count == 1
    assert events.snapshot(1).supported == NA("NotRecorded")


@pytest.mark.parametrize("code", [13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120])
def test_every_common_xid_is_explained_with_an_action(code):
    info = xid.explain(code)
    assert info.code == code and info.words and info.action
    assert info.severity in ("critical", "warn", "info")
    assert "not in gpudoctor's table" not in info.words


def test_unknown_xid_points_to_the_catalog():
    assert "Xid catalog" in xid.explain(9999).action
    assert xid.explain(79).severity == "critical" and xid.explain(13).severity == "warn"


def test_recorded_events_are_validated_at_load(tmp_path):
    import json

    from gpudoctor.backends.recording import RecordingError, load_recording

    base = json.loads((__import__("pathlib").Path(__file__).parents[1] / "data" /
                       "handmade_two_gpu_training_standin.json").read_text())
    base["nvml"]["events"] = [[{"time": 1.0, "kind": "xid", "code": 79}], []]
    good = tmp_path / "good.json"
    good.write_text(json.dumps(base))
    assert load_recording(good)["nvml"]["events"][0][0]["code"] == 79
    base["nvml"]["events"] = [[{"time": 1.0, "kind": "bogus"}]]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(base))
    with pytest.raises(RecordingError) as info:
        load_recording(bad)
    assert "nvml.events[0][0].kind" in str(info.value)


def test_watch_prints_each_event_once_with_its_meaning(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    rec = json.loads((root / "tests" / "data" / "handmade_two_gpu_training_standin.json").read_text())
    rec["nvml"]["events"] = [[{"time": 1_800_000_000.0, "kind": "xid", "code": 79, "source": "kernel_log"},
                              {"time": 1_800_000_100.0, "kind": "ecc_double_bit", "code": None}], []]
    path = tmp_path / "events.json"
    path.write_text(json.dumps(rec))
    text = subprocess.run([sys.executable, "-m", "gpudoctor", "watch", "--replay", str(path), "-n", "3", "-i", "0.25"],
                          capture_output=True, text=True, timeout=60, cwd=root)
    # a critical event fails the watch, as it fails the report (it exited 0 before)
    assert text.returncode == exitcodes.FAIL, text.stderr
    events = [line for line in text.stdout.splitlines() if " EVENT " in line]
    assert len(events) == 2  # once each, not every interval
    assert "gpu0 EVENT Xid 79 (critical): GPU has fallen off the bus" in events[0]
    assert "double-bit" in events[1]
    lines = subprocess.run([sys.executable, "-m", "gpudoctor", "watch", "--replay", str(path), "-n", "2", "-i", "0.25",
                            "--json"], capture_output=True, text=True, timeout=60, cwd=root).stdout.splitlines()
    records = [json.loads(line) for line in lines]
    xids = [r for r in records if r.get("event") == "xid"]
    assert len(xids) == 1 and xids[0]["code"] == 79 and xids[0]["severity"] == "critical"


def test_a_recording_keeps_the_events_and_replays_them():
    import json
    from pathlib import Path

    from gpudoctor.backends import ReplayBackend
    from gpudoctor.backends.na import encode
    from gpudoctor.sampling.recorder import capture
    from gpudoctor.backends.recording import validate

    rec = json.loads((Path(__file__).parents[1] / "data" / "handmade_two_gpu_training_standin.json").read_text())
    rec["nvml"]["events"] = [[], [{"time": 1_800_000_000.0, "kind": "xid", "code": 48}]]
    out, interrupted = capture(ReplayBackend(rec), seconds=0.2, interval=0.1, with_torch=False)
    assert not interrupted
    assert out["nvml"]["events"][1][0]["code"] == 48 and out["nvml"]["events"][0] == []
    document = validate(json.loads(json.dumps(encode(out))))
    assert ReplayEvents(document).snapshot(1).last_xid().code == 48


def test_watch_without_a_critical_event_exits_0_and_with_an_application_xid_too(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    rec = json.loads((root / "tests" / "data" / "handmade_two_gpu_training_standin.json").read_text())
    rec["nvml"]["events"] = [[{"time": 1_800_000_000.0, "kind": "xid", "code": 13}], []]
    path = tmp_path / "events.json"
    path.write_text(json.dumps(rec))
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "watch", "--replay", str(path), "-n", "2", "-i", "0.25"],
                          capture_output=True, text=True, timeout=60, cwd=root)
    assert proc.returncode == exitcodes.OK, proc.stderr
    assert "gpu0 EVENT Xid 13" in proc.stdout


def test_critical_events_is_the_one_judgement():
    from gpudoctor.backends.events import critical_events, describe_event

    state = DeviceEvents(recent=[GpuEvent(3.0, "xid", 13), GpuEvent(4.0, "ecc_single_bit"),
                                 GpuEvent(5.0, "ecc_double_bit"), GpuEvent(6.0, "memory_retirement_failure")],
                         logged_xids=[GpuEvent(1.0, "xid", 79, "kernel_log"), GpuEvent(2.0, "xid", 31, "kernel_log")])
    found = critical_events(state)
    assert [(e.kind, e.code) for e in found] == [("xid", 79), ("ecc_double_bit", None),
                                                 ("memory_retirement_failure", None)]
    assert describe_event(1, found[0]).startswith("GPU 1: Xid 79 (GPU has fallen off the bus")
    assert critical_events(DeviceEvents()) == []



def test_older_xid_form_without_the_pci_prefix_is_read():
    lines = ["[  12.5] NVRM: Xid (0000:03:00): 31, Ch 00000001, engmask 00000101, intr 10000000",
             "4,1301,8000000,-;NVRM: Xid (PCI:0000:86:00): 13, pid=99, Graphics Exception",
             "NVRM: Xid (0000:0a:00.0): 43, Ch 00000010"]
    found = xid.parse_kmsg(lines)
    assert [(e.pci_bus_id, e.code) for e in found] == [("0000:03:00.0", 31), ("0000:86:00.0", 13),
                                                       ("0000:0a:00.0", 43)]


class _NodeWatcher:
    """A watcher stand-in whose GPUs logged the given Xids ``{index: [(time, code), ...]}``."""

    kernel_log_readable = True
    kernel_log_reason = ""

    def __init__(self, logged):
        self.logged = logged

    def snapshot(self, index):
        return DeviceEvents(logged_xids=[GpuEvent(t, "xid", c, "kernel_log") for t, c in self.logged.get(index, [])])


def _judge_node_of(count, logged, device=None):
    from gpudoctor.backends import NvmlBackend
    from gpudoctor.probes import ProbeContext, events

    ctx = ProbeContext(NvmlBackend(NvmlGate(FakePynvml(count=count))), device=device, level="quick",
                       events=_NodeWatcher(logged))
    return events.run(ctx)


def test_the_same_application_xid_repeated_on_one_gpu_is_a_warning():
    # pytorch/pytorch#51382's pattern: Xid 31 again and again on one GPU from different programs
    judged = _judge_node_of(4, {2: [(100.0, 31), (1500.0, 31), (3100.0, 31)]})
    found = [f for f in judged.findings if f.code == "xid_repeated_on_one_gpu"]
    assert len(found) == 1 and found[0].status == Status.WARN and found[0].device == 2
    assert "GPU 2: Xid 31 3 times" in found[0].summary
    assert "dcgmi diag -r 3" in found[0].fix and "another GPU" in found[0].fix
    assert judged.status == Status.WARN
    # each Xid is still explained as an application fault on its own line
    assert any(f.code == "xid_application" and f.device == 2 for f in judged.findings)


def test_repetition_needs_three_and_a_clean_neighbourhood():
    def codes(count, logged):
        return {f.code for f in _judge_node_of(count, logged).findings}

    assert "xid_repeated_on_one_gpu" not in codes(4, {2: [(1.0, 31), (2.0, 31)]})  # twice: the job retried
    # the same Xid on another GPU too: the program is the common factor
    assert "xid_repeated_on_one_gpu" not in codes(4, {2: [(1.0, 13), (2.0, 13), (3.0, 13)], 0: [(4.0, 13)]})
    assert "xid_repeated_on_one_gpu" not in codes(1, {0: [(1.0, 13), (2.0, 13), (3.0, 13)]})  # nothing to compare
    # a critical Xid is judged on its own (xid_critical), not as a repetition
    assert "xid_repeated_on_one_gpu" not in codes(2, {1: [(1.0, 79), (2.0, 79), (3.0, 79)]})
    assert "xid_repeated_on_one_gpu" in codes(2, {1: [(1.0, 13), (2.0, 13), (3.0, 13)], 0: [(4.0, 43)]})


def test_repetition_on_the_judged_gpu_only_when_one_device_is_asked_for(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    logged = {1: [(1.0, 43), (2.0, 43), (3.0, 43), (4.0, 43)]}
    judged = _judge_node_of(2, logged, device=0)  # torch's 0 is NVML's 1
    assert [(f.code, f.device) for f in judged.findings if f.status == Status.WARN] == [("xid_repeated_on_one_gpu", 1)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert not [f for f in _judge_node_of(2, logged, device=0).findings if f.status == Status.WARN]


def test_xid_31_on_every_gpu_in_one_window_needs_a_reset():
    logged = {i: [(1000.0 + i, 31)] for i in range(8)}
    judged = _judge_node_of(8, logged)
    found = [f for f in judged.findings if f.code == "xid_on_every_gpu"]
    # the GPUs hang until reset: the node is drained, as for a critical Xid (issue 34)
    assert len(found) == 1 and found[0].status == Status.FAIL and found[0].device is None
    assert judged.settle().status == Status.FAIL
    assert "every GPU of the node (8)" in found[0].summary
    assert "reset of the GPUs (or a reboot) is needed" in found[0].fix
    assert "not all of them" in found[0].why
    assert "xid_repeated_on_one_gpu" not in {f.code for f in judged.findings}


def test_a_follow_up_xid_45_never_hides_the_critical_xid_before_it():
    """The kernel log's order is kept: 79 then 45 on one GPU fails on the 79, and the 45's note says
    what it followed."""
    judged = _judge_node_of(1, {0: [(1.0, 79), (2.0, 45), (3.0, 45)]})
    assert judged.settle().status == Status.FAIL
    assert [f.code for f in judged.findings if f.status == Status.FAIL] == ["xid_critical"]
    [note] = [f for f in judged.findings if f.code == "xid_application"]
    assert "Xid 45 2 time(s)" in note.summary and "after Xid 79" in note.summary


def test_xid_31_on_some_gpus_or_spread_over_hours_is_not_node_wide():
    def codes(count, logged):
        return {f.code for f in _judge_node_of(count, logged).findings}

    assert "xid_on_every_gpu" not in codes(8, {i: [(1000.0, 31)] for i in range(7)})  # GPU 7 clean
    assert "xid_on_every_gpu" not in codes(2, {0: [(0.0, 31)], 1: [(7200.0, 31)]})  # two hours apart
    assert "xid_on_every_gpu" not in codes(1, {0: [(0.0, 31)]})  # one GPU: its own fault
    assert "xid_on_every_gpu" not in codes(2, {0: [(0.0, 13)], 1: [(1.0, 13)]})  # not an MMU fault
    assert "xid_on_every_gpu" in codes(2, {0: [(0.0, 31), (9000.0, 31)], 1: [(9300.0, 31)]})
