"""The hang verdict across ranks, the GPU's state while they wait and the CPU-aware straggler rule,
on recorded stacks (pure: no process is sampled here; tests/why/test_why_hang_gloo.py runs real ranks)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import jsonschema

from gpudoctor.why import analysis, hang, rules
from gpudoctor.why.stacks import parse_raw
from gpudoctor.core.model import Finding, Status
from gpudoctor.why.text import render_text

SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"
C10D = f"{SITE}/torch/distributed/distributed_c10d.py"
LOGGER = f"{SITE}/torch/distributed/c10d_logger.py"
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "why.schema.json").read_text(encoding="utf-8"))


def stack_line(frames: list[str], count: int, pid: int) -> str:
    return f'process 1:"torchrun";process {pid}:"python ddp.py";thread ({pid}): MainThread;' + ";".join(frames) \
        + f" {count}"


def in_collective(pid: int, op: str = "all_reduce", line: int = 30, count: int = 300) -> str:
    return stack_line([f"<module> (/w/ddp.py:{line})", f"wrapper ({LOGGER}:83)", f"{op} ({C10D}:2800)"], count, pid)


def sleeping(pid: int, count: int = 300) -> str:
    return stack_line(["<module> (/w/ddp.py:25)", f"sleep ({STDLIB}/time.py:1)"], count, pid)


def in_backward(pid: int, count: int = 300) -> str:
    return stack_line(["<module> (/w/ddp.py:28)", f"Tensor.backward ({SITE}/torch/_tensor.py:522)",
                       f"backward ({SITE}/torch/autograd/__init__.py:266)"], count, pid)


def readings(pids: dict[int, int], cpu: dict[int, float], gpu: dict | None = None, flight: dict | None = None) -> dict:
    processes = {pid: {"rank": rank, "cpu_pct": cpu[pid], "threads_cpu_pct": {pid: cpu[pid]}, "age_s": 60.0,
                       "gpu_evidence": {"readable": True, "device_files": [], "libcuda": False}}
                 for pid, rank in pids.items()}
    out = {"processes": processes, "host": {"cpus": 8, "idle_cpus": 4.0},
           "gpu": gpu or {"available": False, "reason": "NVML not available (LibraryNotFound)", "devices": []}}
    if flight is not None:
        out["flight_recorder"] = flight
    return out


def diagnose(lines: list[str], pids: dict[int, int], cpu: dict[int, float], **extra) -> dict:
    stacks = list(parse_raw("\n".join(lines) + "\n"))
    source = {("/w/ddp.py", 30): "dist.all_reduce(grad)", ("/w/ddp.py", 25): "time.sleep(3600)"}
    d = analysis.diagnose(stacks, readings(pids, cpu, **extra), lambda f, n: source.get((f, n), ""), pid=1,
                          meta={"sampled_s": 3.0, "rate_hz": 100, "ended": False, "interrupted": False})
    jsonschema.validate(json.loads(json.dumps(d)), SCHEMA)
    return d


def test_a_sleeping_rank_holds_three_ranks_in_all_reduce():
    d = diagnose([in_collective(11), in_collective(12), sleeping(13), in_collective(14)],
                 {11: 0, 12: 1, 13: 2, 14: 3}, {11: 1.0, 12: 1.0, 13: 0.5, 14: 1.0})
    v, found = d["verdict"], d["hang"]
    assert v["code"] == "rank_hang" and v["pid"] == 13 and v["words"] == "rank 2 holds the others in all_reduce"
    assert "3 of 4 ranks" in v["message"] and "torch.distributed all_reduce at ddp.py:30" in v["message"]
    assert "rank 2 (pid 13) is sleeping at ddp.py:25" in v["message"]
    assert "at least 3.0 s" in v["message"] and "started 60 s ago" in v["message"]
    assert v["lines"][0]["line"] == 25 and v["lines"][1]["line"] == 30
    assert found["collective"] == "all_reduce" and found["waiting"] == [11, 12, 14] and found["waited_s"] == 3.0
    assert found["away"][0]["kind"] == "waiting" and found["slow"] is False
    assert found["gpu"]["state"] == "no_gpu"
    # no dump: the settings for the next run are named
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE=2000" in v["fix"] and "TORCH_NCCL_DUMP_ON_TIMEOUT=1" in v["fix"]
    assert found["flight_recorder"]["advice"] and found["flight_recorder"]["dumps"] == []
    text = render_text(d)
    assert "rank 2 holds the others in all_reduce" in text and "GPU while they wait: no GPU in use" in text
    assert "pid 13 rank 2 trainer" in text


def test_a_rank_in_another_collective_and_a_rank_slow_in_backward():
    d = diagnose([in_collective(11), in_collective(12, op="broadcast", line=40)], {11: 0, 12: 1}, {11: 1.0, 12: 0.3})
    assert d["verdict"]["code"] == "rank_hang" and d["hang"]["away"][0]["kind"] == "other_collective"
    assert "in another collective, broadcast" in d["verdict"]["message"]
    assert "same collectives in the same order" in d["verdict"]["fix"]
    # a rank in backward on a busy CPU is slow, not waiting, and named as the straggler
    d = diagnose([in_collective(11), in_backward(12)], {11: 0, 12: 1}, {11: 1.0, 12: 97.0})
    assert d["verdict"]["code"] == "straggler" and d["verdict"]["pid"] == 12
    assert d["verdict"]["words"] == "straggler: rank 1 slow in backward"
    assert d["straggler"]["pid"] == 12 and d["hang"]["slow"] is True


def test_no_hang_when_the_ranks_do_not_sit_in_one_collective():
    d = diagnose([in_collective(11, count=100), in_backward(11, count=200), in_backward(12)],
                 {11: 0, 12: 1}, {11: 50.0, 12: 90.0})
    assert d["hang"] is None
    # more ranks elsewhere than in the collective: not "the others wait" either
    d = diagnose([in_collective(11), sleeping(12), sleeping(13)], {11: 0, 12: 1, 13: 2}, {11: 1, 12: 1, 13: 1})
    assert d["hang"] is None


def test_the_gpu_while_the_ranks_wait():
    assert hang.gpu_state(100.0, 6.0, None, True, None)["state"] == "spinning"
    words = hang.gpu_state(100.0, 6.0, None, True, None)["words"]
    assert words.startswith("GPU spinning (utilisation 100%, SM activity 6%)")
    assert hang.gpu_state(2.0, None, None, True, None)["words"].startswith("GPU idle (utilisation 2%)")
    unknown = hang.gpu_state(99.0, None, "needs Hopper or later", True, None)
    assert unknown["state"] == "busy_unknown" and "GPM: needs Hopper or later" in unknown["words"]
    assert hang.gpu_state(95.0, 80.0, None, True, None)["state"] == "busy"
    assert hang.gpu_state(None, None, None, None, "NVML not available")["words"] == \
        "GPU state not read (NVML not available)"
    # read from the devices the ranks hold
    gpu = {"available": True, "reason": None, "devices": [
        {"index": 0, "util_mean_pct": 100.0, "sm_active_mean_pct": 4.0, "processes": [{"pid": 11}, {"pid": 12}]},
        {"index": 1, "util_mean_pct": 0.0, "sm_active_mean_pct": 0.0, "processes": [{"pid": 13}]}]}
    d = diagnose([in_collective(11), in_collective(12), sleeping(13)], {11: 0, 12: 1, 13: 2},
                 {11: 1.0, 12: 1.0, 13: 1.0}, gpu=gpu)
    # the waiting ranks' GPU spins; the sleeping rank's idle GPU is not mixed in
    assert d["hang"]["gpu"] == {"util_pct": 100.0, "sm_active_pct": 4.0, "state": "spinning",
                                "words": hang.gpu_state(100.0, 4.0, None, True, None)["words"]}
    assert "GPU while they wait: GPU spinning (utilisation 100%, SM activity 4%)" in render_text(d, width=200)


def test_backward_counts_as_work_as_far_as_the_cpu_was_used():
    ranks = []
    for pid, backward in ((11, 80), (12, 80), (13, 95)):
        view = analysis.ProcessView(pid, main_samples=100, counts=Counter(
            {rules.BACKWARD: backward, rules.FORWARD: 100 - backward}))
        ranks.append((view, Finding(Status.WARN, "cpu_bound", "m", fix="f")))
    # without CPU figures backward is where DDP's fast ranks wait: nobody stands out
    assert analysis.straggler(ranks) is None
    # rank 13 used its core all the window, the others a third of one: 13 is slow inside backward
    found = analysis.straggler(ranks, {11: 30.0, 12: 30.0, 13: 99.0})
    assert found["pid"] == 13 and "in backward (+15%)" in found["message"] and "works 100%" in found["message"]
    # CPU alike on every rank: backward is where they wait, as without figures
    assert analysis.straggler(ranks, {11: 60.0, 12: 60.0, 13: 99.0}) is None


def test_the_flight_recorder_names_the_rank_behind():
    def summary(rank: int, seq: int, state: str) -> dict:
        last = {"seq": seq, "pg_id": 0, "op": "all_reduce", "state": state, "sizes": [[8]], "p2p": False,
                "created_ns": 1, "line": None}
        return {"rank": rank, "version": "2.10", "entries": 1, "path": f"/tmp/nccl_trace_rank_{rank}", "written": 1.0,
                "groups": [{"pg_id": 0, "last": last, "last_completed": None}]}

    flight = {"dumps": [summary(0, 8, "started"), summary(1, 7, "completed")], "errors": [], "settings": {}}
    flight["dumps"][0]["written"] = 1_700_000_600.0
    flight["dumps"][0]["groups"][0]["last"]["created_ns"] = 1_700_000_000 * 10**9
    d = diagnose([in_collective(11), sleeping(12)], {11: 0, 12: 1}, {11: 1.0, 12: 1.0}, flight=flight)
    record = d["hang"]["flight_recorder"]
    assert record["behind"]["behind"] == [1] and record["advice"] == []
    assert record["words"] == ("flight recorder (process group 0): rank 1 is behind at #7 all_reduce (completed); "
                               "rank 0 is at #8 all_reduce (started), enqueued 600 s before its dump was written")
    assert record["behind"]["waited_at_dump_s"] == 600.0
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in d["verdict"]["fix"]  # a dump was there: no advice
    assert record["words"] in render_text(d, width=0)
