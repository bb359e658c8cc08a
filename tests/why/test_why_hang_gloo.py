"""`gpudoctor why LAUNCHER_PID` on real torchrun jobs (gloo on the CPU, loopback only) whose last
rank never reaches the all-reduce the others wait in: stuck in a sleep, slow in backward, or
waiting for data for ever. Every rank is killed at the end, even on failure."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import jsonschema
import pytest

from gpudoctor.core import exitcodes
from gpudoctor.cli import main

from support._hang_targets import line_of, start_hung_job
from support._why_targets import stop_group

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "why.schema.json").read_text(encoding="utf-8"))
SECONDS = "3"


def why_of(tmp_path, capsys, mode: str, nproc: int, before=None, nccl_settings: bool = True) -> dict:
    import psutil

    proc = start_hung_job(tmp_path, mode, nproc, nccl_settings=nccl_settings)
    tree = psutil.Process(proc.pid).children(recursive=True)
    try:
        if before is not None:
            before(tmp_path)
        code = main(["why", "--json", "--seconds", SECONDS, str(proc.pid)])
    finally:
        stop_group(proc)
    assert not [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]  # every rank ended
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, SCHEMA)
    assert code == exitcodes.OK
    return data


def ranks_of(data: dict) -> dict[int, dict]:
    return {p["rank"]: p for p in data["processes"] if p["role"] == "trainer"}


def check_held_in_all_reduce(data: dict, nproc: int) -> dict:
    """Every rank but the last waits in all_reduce at the job's line; the last one is named."""
    ranks = ranks_of(data)
    assert sorted(ranks) == list(range(nproc))
    found = data["hang"]
    assert found is not None, data["verdict"]
    assert found["collective"] == "all_reduce"
    assert sorted(found["waiting"]) == sorted(ranks[r]["pid"] for r in range(nproc - 1))
    assert found["waiting_lines"][0]["line"] == line_of("ALL_REDUCE LINE")
    # a waiter sits in the collective for >= 90 % of its samples (hang.WHOLE_WINDOW), and the ranks were
    # running before the window began, so the wait said is at least 90 % of the window actually sampled
    assert found["waited_s"] is not None and found["waited_s"] >= round(0.9 * data["sampled_s"], 2) - 0.01
    assert data["verdict"]["pid"] == ranks[nproc - 1]["pid"]
    assert f"rank {nproc - 1} (pid {ranks[nproc - 1]['pid']})" in data["verdict"]["message"]
    assert found["gpu"]["state"] == "no_gpu"
    return found["away"][0]


def write_dumps(folder: Path) -> None:
    """Flight recorder dumps as ProcessGroupNCCL would leave them on a timeout: rank 1 one behind."""
    for rank, seq, state in ((0, 2, "started"), (1, 1, "completed")):
        entries = [{"collective_seq_id": s, "pg_id": 0, "profiling_name": "nccl:all_reduce", "is_p2p": False,
                    "state": "completed" if s < seq else state, "input_sizes": [[1024]], "time_created_ns": 1,
                    "frames": [{"name": "<module>", "filename": str(folder / "hung.py"),
                                "line": line_of("ALL_REDUCE LINE")}]} for s in range(1, seq + 1)]
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps({"version": "2.10", "entries": entries}))


def test_two_ranks_one_stuck_before_the_all_reduce(tmp_path, capsys):
    data = why_of(tmp_path, capsys, "stuck", 2)
    away = check_held_in_all_reduce(data, 2)
    assert data["verdict"]["code"] == "rank_hang" and data["verdict"]["words"] == "rank 1 holds the others in all_reduce"
    assert away["kind"] == "waiting" and away["doing"] == "sleeping"
    assert away["lines"][0]["line"] == line_of("STUCK LINE")
    # no dump in the job's TORCH_NCCL_DEBUG_INFO_TEMP_FILE folder: the settings for next time
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT=1" in data["verdict"]["fix"]
    assert data["hang"]["flight_recorder"]["settings"]["1"]["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"].endswith(
        "nccl_trace_rank_")


def test_a_gloo_job_with_no_nccl_settings_gets_no_flight_recorder_advice(tmp_path, capsys):
    """Issue 36, item 6: NCCL's flight-recorder settings were suggested for a gloo job on the host
    (no GPU, none of the recorder's variables set in any rank): they do not apply there. The wait
    said is no longer than the ranks have run."""
    data = why_of(tmp_path, capsys, "stuck", 2, nccl_settings=False)
    check_held_in_all_reduce(data, 2)
    words = data["verdict"]["message"] + data["verdict"]["fix"]
    assert "TORCH_NCCL" not in words and "TORCH_FR" not in words, data["verdict"]
    assert data["hang"]["flight_recorder"]["advice"] == [] and "does not apply" in data["hang"]["flight_recorder"]["words"]
    started = re.search(r"the ranks started (\d+) s ago", data["hang"]["waited_words"])
    assert started is not None and data["hang"]["waited_s"] <= int(started.group(1)), data["hang"]["waited_words"]


def test_two_ranks_one_slow_in_backward_is_named_slow(tmp_path, capsys):
    data = why_of(tmp_path, capsys, "backward", 2)
    away = check_held_in_all_reduce(data, 2)
    assert data["verdict"]["code"] == "straggler", data["verdict"]
    assert data["verdict"]["words"] == "straggler: rank 1 slow in backward"
    assert data["straggler"]["pid"] == data["verdict"]["pid"] and data["hang"]["slow"] is True
    assert away["category"] == "backward" and away["lines"][0]["line"] == line_of("SLOW BACKWARD LINE")


def test_two_ranks_one_in_an_endless_data_wait_with_its_dump(tmp_path, capsys):
    data = why_of(tmp_path, capsys, "data", 2, before=write_dumps)
    away = check_held_in_all_reduce(data, 2)
    assert data["verdict"]["code"] == "rank_hang" and away["kind"] == "data_wait"
    assert away["lines"][0]["line"] == line_of("BLOCKED DATA LINE")  # the dataset's line, from the worker
    fr = data["hang"]["flight_recorder"]
    assert [d["rank"] for d in fr["dumps"]] == [0, 1] and fr["behind"]["behind"] == [1]
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT" not in data["verdict"]["fix"]


def test_four_ranks_one_stuck(tmp_path, capsys):
    data = why_of(tmp_path, capsys, "stuck", 4)
    away = check_held_in_all_reduce(data, 4)
    assert data["verdict"]["words"] == "rank 3 holds the others in all_reduce" and away["doing"] == "sleeping"
    assert "3 of 4 ranks" in data["verdict"]["message"]

