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
