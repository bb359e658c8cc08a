"""`record` writes what replay reads, as it goes (issue 35, item 3): one schema and one validator
for both, bounded memory, and a record that is killed keeps what it took."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from support.nvml_fake import FakePynvml, h100_mig

from gpudoctor.backends.nvml import NvmlBackend, NvmlGate
from gpudoctor.backends.recording import RecordingError, load_recording
from gpudoctor.sampling import recorder

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ROOT / "tests" / "data" / "handmade_two_gpu_training_standin.json"

IMPOSSIBLE = [SimpleNamespace(pid=-1, usedGpuMemory=1 << 30), SimpleNamespace(pid=2 ** 63 - 1, usedGpuMemory=1 << 30),
              SimpleNamespace(pid=4242, usedGpuMemory=8 << 30)]


def test_a_mig_slices_impossible_pids_are_left_out_and_the_recording_replays(tmp_path):
    """Before: record filtered impossible PIDs from a GPU's process list but not from a MIG
    slice's, and replay refused the whole recording."""
    backend = NvmlBackend(NvmlGate(FakePynvml(readings=h100_mig(processes=IMPOSSIBLE))))
    (path, *_), _ = recorder.record_parts(tmp_path / "mig.json", seconds=0.3, interval=0.15, with_torch=False, gpu=backend)
    loaded = load_recording(path)
    pids = {p["pid"] for s in loaded["nvml"]["samples"] for m in s["mig"][0] for p in m["processes"]}
    assert pids == {4242}
    data, _ = recorder.record(NvmlBackend(NvmlGate(FakePynvml(readings=h100_mig(processes=IMPOSSIBLE)))),
                              seconds=0.2, interval=0.1, with_torch=False)
    (tmp_path / "mem.json").write_text(json.dumps(data))
    load_recording(tmp_path / "mem.json")  # the in-memory record() applies the same validator


def test_the_schema_replay_applies_refuses_what_record_leaves_out(tmp_path):
    data = json.loads(HEALTHY.read_text())
    data["nvml"]["samples"][0]["processes"][0] = [{"pid": 2 ** 63 - 1}]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    try:
        load_recording(tmp_path / "bad.json")
    except RecordingError as exc:
        assert "above the maximum" in str(exc)
    else:
        raise AssertionError("a PID past any process's was replayed")


def test_parts_are_written_as_they_fill_and_memory_holds_one(tmp_path):
    """A long recording: each part is written once full and let go (the writer never holds more
    than one part's samples), and every part replays on its own."""
    backend = NvmlBackend(NvmlGate(FakePynvml(readings=h100_mig())))
    header, _ = recorder.capture(backend, seconds=0.0, interval=0.1, with_torch=False)
    writer = recorder.PartWriter(tmp_path / "rec.json", header, lambda: {"nvml": {}, "meta": {}},
                                 max_bytes=20_000, flush_s=3600)
    sample = recorder.record(backend, seconds=0.1, interval=0.1, with_torch=False)[0]["nvml"]["samples"][0]
    held = 0
    for k in range(60):
        writer.add(dict(sample, t=k * 0.1))
        held = max(held, len(json.dumps(writer.samples)))
    paths = writer.finish(header)
    assert len(paths) > 2 and held <= 20_000
    metas = [load_recording(p)["meta"] for p in paths]
    assert [m["part"] for m in metas] == list(range(1, len(paths) + 1)) and metas[-1]["parts"] == len(paths)
    assert sum(len(load_recording(p)["nvml"]["samples"]) for p in paths) == 60


RECORD = f"""
import os, sys
from gpudoctor import cli
from gpudoctor.backends import ReplayBackend
import gpudoctor.backends
gpudoctor.backends.NvmlBackend = lambda: ReplayBackend.from_file({str(HEALTHY)!r}, loop=True)
import gpudoctor.sampling.recorder
gpudoctor.sampling.recorder.FLUSH_S = 0.2
sys.argv = ["gpudoctor", "record", "-o", sys.argv[1], "--seconds", "600", "--interval", "0.1", "--no-torch"]
raise SystemExit(cli.main())
"""


def test_a_record_killed_outright_keeps_what_it_took(tmp_path):
    """Before: the samples were kept in memory and written at the end: SIGKILL lost them all.
    Now the part being taken is written every few seconds (here 0.2): once the file on disk holds
    samples, the record is killed, and the file replays with them."""
    out = tmp_path / "rec.json"
    proc = subprocess.Popen([sys.executable, "-c", RECORD, str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        samples = 0
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                samples = len(load_recording(out)["nvml"]["samples"])
            except RecordingError:
                samples = 0
            if samples >= 3:
                break
            time.sleep(0.1)
        assert samples >= 3, "no samples reached the file"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    assert len(load_recording(out)["nvml"]["samples"]) >= samples
