"""`record` writes what replay reads, as it goes (issue 35, item 3): one schema and one validator
for both, bounded memory, and a record that is killed keeps what it took."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from support.nvml_fake import FakePynvml, h100_mig
from support.recorded import record_file

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
    sample = record_file(backend, tmp_path / "one.json", seconds=0.1, interval=0.1)[0]["nvml"]["samples"][0]
    held = 0
    for k in range(60):
        writer.add(dict(sample, t=k * 0.1))
        held = max(held, len(json.dumps(writer.samples)))
    paths = writer.finish(header)
    assert len(paths) > 2 and held <= 20_000
    metas = [load_recording(p)["meta"] for p in paths]
    assert [m["part"] for m in metas] == list(range(1, len(paths) + 1)) and metas[-1]["parts"] == len(paths)
    assert sum(len(load_recording(p)["nvml"]["samples"]) for p in paths) == 60


def _written_in_parts(path: Path, header: dict, samples: list[dict], *, max_bytes: int, max_samples: int) -> list[Path]:
    writer = recorder.PartWriter(path, header, lambda: {"nvml": {}, "meta": {}}, max_bytes=max_bytes,
                                 max_samples=max_samples, flush_s=3600)
    for sample in samples:
        writer.add(sample)
    end = {"nvml": {"events": [[] for _ in header["nvml"]["static"]], "kernel_log": {"readable": None, "reason": ""}},
           "meta": {"duration_s": 25.0}}
    return writer.finish(end)


def test_a_long_recording_is_written_in_parts_that_each_replay(tmp_path):
    """A recording past what --replay reads (64 MiB, 100,000 samples) is cut into parts, each a
    whole recording that replays; a 5,000-character device name is bounded and a PID of -1 left
    out, as replay would refuse them (record wrote files its own --replay refused)."""
    from gpudoctor.backends.replay import ReplayBackend

    base = json.loads(HEALTHY.read_text())
    one = base["nvml"]["samples"][0]
    base["nvml"]["static"][0]["name"] = "N" * 5000
    sample = dict(one, processes=[[{"pid": -1, "type": "compute", "gpu_memory_bytes": 1}], []])
    samples = [dict(sample, t=float(i)) for i in range(250)]
    kept = [dict(s, processes=[[], []]) for s in samples]  # the PID -1 entry is gone
    size = len(json.dumps(kept[0], separators=(",", ":"))) + 1
    limit = 60 * size
    paths = _written_in_parts(tmp_path / "rec.json", base, samples, max_bytes=limit, max_samples=100)
    parts = [json.loads(p.read_text()) for p in paths]
    n = len(parts)
    assert n >= 4 and [s for p in parts for s in p["nvml"]["samples"]] == kept
    for part in parts:  # every part within the bounds it was cut to
        chunk = part["nvml"]["samples"]
        assert len(chunk) <= 100 and sum(len(json.dumps(s, separators=(",", ":"))) + 1 for s in chunk) <= limit
    assert [p["meta"]["part"] for p in parts] == list(range(1, n + 1)) and parts[-1]["meta"]["parts"] == n
    bound = _written_in_parts(tmp_path / "samples.json", base, samples, max_bytes=10 ** 9, max_samples=100)
    assert len(bound) == 3  # the sample bound cuts too
    assert paths == recorder.part_paths(tmp_path / "rec.json", n)
    assert [p.name for p in paths] == ["rec.json"] + [f"rec-{k}.json" for k in range(2, n + 1)]
    for where in paths:
        loaded = load_recording(where)  # the replay's own reader accepts every part
        assert len(loaded["nvml"]["static"][0]["name"]) <= 4096
        assert ReplayBackend.from_file(where).device_count() == len(base["nvml"]["static"])
    short = _written_in_parts(tmp_path / "short.json", base, samples, max_bytes=10 ** 9, max_samples=10 ** 6)
    assert len(short) == 1 and "part" not in json.loads(short[0].read_text())["meta"]  # short: one file


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def test_everything_the_recorder_defines_is_on_the_path_gpudoctor_record_takes():
    """One way to record: every function and class of sampling/recorder.py is reached from what
    gpudoctor/ (the record command) imports from it. Before, ``record`` (the recording in memory)
    and ``split_recording`` (parts cut afterwards) were a second path only tests took, beside
    ``record_parts``, the command's."""
    source = ROOT / "gpudoctor" / "sampling" / "recorder.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    defined = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    imported: set[str] = set()
    for path in (ROOT / "gpudoctor").rglob("*.py"):
        if path == source:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "gpudoctor.sampling.recorder":
                imported |= {alias.name for alias in node.names}
    assert imported, "nothing in gpudoctor/ records"
    reached, todo = set(), [name for name in imported if name in defined]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += [used for used in _names_used(defined[name]) if used in defined]
    assert sorted(set(defined) - reached) == []


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
