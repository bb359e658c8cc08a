"""The hand-made files in tests/data: one generator writes all of them, byte for byte, and each
says in its name and inside that it is hand-made (issue #10 item 6)."""

from __future__ import annotations

import json
from pathlib import Path

from support.script_loader import load_script

DATA = Path(__file__).resolve().parents[1] / "data"


def _generator():
    return load_script(DATA / "make_handmade.py", "make_handmade")


def test_one_generator_rewrites_every_committed_hand_made_file_byte_for_byte(tmp_path):
    written = _generator().write_all(tmp_path)
    assert len(written) >= 13  # allocator_stats_handmade.json went with assess_allocator_stats
    for path in written:
        committed = DATA / path.name
        assert committed.exists(), f"{path.name}: generated but not committed"
        assert path.read_bytes() == committed.read_bytes(), \
            f"{path.name} differs from the generator's output: run python tests/data/make_handmade.py"


def test_no_hand_made_file_without_the_generator_and_no_second_generator():
    generated = set(_generator().builders())
    for path in sorted(DATA.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        hand_made = data.get("hand_made") or (data.get("meta") or {}).get("hand_made")
        if hand_made or "handmade" in path.name:
            assert path.name in generated, f"{path.name} is hand-made but no generator writes it"
    assert [p.name for p in DATA.glob("*.py")] == ["make_handmade.py"]


def test_every_generated_file_says_it_is_hand_made():
    for name, build in _generator().builders().items():
        data = build()
        assert "handmade" in name, name
        if data.get("format") == "gpudoctor-recording":
            assert data["meta"]["hand_made"] is True and data["meta"]["scenario"], name
        else:
            assert data["hand_made"] is True and data["scenario"], name
    standin = _generator().builders()["handmade_two_gpu_training_standin.json"]()
    assert "STAND-IN" in standin["meta"]["scenario"] and "Replace with a real" in standin["meta"]["scenario"]


def test_a_long_recording_is_written_in_parts_that_each_replay(tmp_path):
    """A recording past what --replay reads (64 MiB, 100,000 samples) is cut into parts, each a
    whole recording that replays; a 5,000-character device name is bounded and a PID of -1 left
    out, as replay would refuse them (record wrote files its own --replay refused)."""
    import json as _json

    from gpudoctor.backends.replay import ReplayBackend
    from gpudoctor.sampling.recorder import _valid_processes, part_paths, split_recording
    from gpudoctor.backends.recording import load_recording, plain_strings

    base = _json.loads((DATA / "handmade_two_gpu_training_standin.json").read_text())
    one = base["nvml"]["samples"][0]
    base["nvml"]["static"][0]["name"] = "N" * 5000
    sample = dict(one, processes=[[{"pid": -1, "type": "compute", "gpu_memory_bytes": 1}], []])
    base["nvml"]["samples"] = [dict(sample, t=float(i)) for i in range(250)]
    data = plain_strings(_valid_processes(base))
    assert data["nvml"]["samples"][0]["processes"][0] == []  # the PID -1 entry is gone
    size = len(_json.dumps(data["nvml"]["samples"][0], separators=(",", ":"))) + 1
    limit = 60 * size
    parts = split_recording(data, max_bytes=limit, max_samples=100)
    n = len(parts)
    assert n >= 4 and [s for p in parts for s in p["nvml"]["samples"]] == data["nvml"]["samples"]
    for part in parts:  # every part within the bounds it was cut to
        chunk = part["nvml"]["samples"]
        assert len(chunk) <= 100 and sum(len(_json.dumps(s, separators=(",", ":"))) + 1 for s in chunk) <= limit
    assert [(p["meta"]["part"], p["meta"]["parts"]) for p in parts] == [(k, n) for k in range(1, n + 1)]
    assert len(split_recording(data, max_bytes=10 ** 9, max_samples=100)) == 3  # the sample bound cuts too
    paths = part_paths(tmp_path / "rec.json", n)
    assert [p.name for p in paths] == ["rec.json"] + [f"rec-{k}.json" for k in range(2, n + 1)]
    for part, where in zip(parts, paths):
        where.write_text(_json.dumps(part))
        loaded = load_recording(where)  # the replay's own reader accepts every part
        assert len(loaded["nvml"]["static"][0]["name"]) <= 4096
        assert ReplayBackend.from_file(where).device_count() == len(base["nvml"]["static"])
    assert split_recording(data, max_bytes=10 ** 9, max_samples=10 ** 6) == [data]  # short: one file
