"""DDP: two gloo processes on the CPU, each summarising itself; gathered, rank 1 (slow data) is
named as the straggler. Real DistributedDataParallel, real all-reduces."""

from __future__ import annotations

import functools
import json
import os
import socket

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slow_and_leaping(clock, batch):
    from support._hooks_loops import slow_collate

    return clock.collate(slow_collate(batch, delay_s=0.04))


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    from support._hooks_loops import LeapingClock, fast_collate, make_loader, mnist_mlp

    from gpudoctor import TrainingMonitor
    from gpudoctor.hooks import monitor as monitor_module

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(mnist_mlp())
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
        collate = fast_collate
        if rank == 1:
            # Rank 1's data really is slow (40 ms: rank 0 waits for it in the all-reduce), and by
            # its monitor's clock each batch waits 1000 s more: its data wait stands out from
            # rank 0's by orders of magnitude, however busy the machine.
            leaping = LeapingClock()
            monitor_module._clock = leaping
            collate = functools.partial(_slow_and_leaping, leaping)
        loader = make_loader(collate, batch_size=64, n=64 * 12, seed=rank)
        monitor = TrainingMonitor(device="cpu")
        for inputs, targets in monitor.wrap(loader):
            with monitor.step():
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(inputs), targets).backward()  # all-reduce here
                opt.step()
        own = monitor.summary()
        gathered = monitor.summary(gather=True)
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
            json.dump({"own": own.to_dict(), "gathered": gathered.to_dict(), "text": str(gathered)}, fh)
        # Leave together: a rank that tears gloo down while its peer is still using the
        # connection can abort the peer ("terminate called without an active exception").
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(600)  # two ranks importing torch on a busy 2-core machine: minutes
def test_two_gloo_ranks_name_the_straggler(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    r0 = json.loads((tmp_path / "rank0.json").read_text())
    r1 = json.loads((tmp_path / "rank1.json").read_text())
    from support._hooks_loops import LEAP_S, validate_summary

    for doc in (r0["own"], r0["gathered"], r1["own"], r1["gathered"]):
        validate_summary(doc)
    # each rank summarised itself
    assert (r0["own"]["rank"], r0["own"]["world_size"], r1["own"]["rank"]) == (0, 2, 1)
    assert r0["own"]["steps"] == r1["own"]["steps"] == 12
    assert r1["own"]["data_wait_p50_s"] >= LEAP_S and r0["own"]["data_wait_p50_s"] < 1.0
    assert "ranks" not in r0["own"]
    # rank 0 waited for rank 1 inside its steps (the all-reduce), not for data
    assert r0["own"]["step_time_p50_s"] > 0.03
    gathered = r0["gathered"]
    assert [r["rank"] for r in gathered["ranks"]] == [0, 1]
    stragglers = [d for d in gathered["diagnosis"] if d["code"] == "straggler"]
    assert [d["evidence"]["rank"] for d in stragglers] == [1]
    assert "Rank 1 is a straggler: it waits for data" in stragglers[0]["message"]
    assert "per rank: rank 0:" in r0["text"]
    # every rank gets the same gathered view
    assert [d["code"] for d in r1["gathered"]["diagnosis"]].count("straggler") == 1


def test_gather_without_distributed_keeps_own_figures():
    from gpudoctor import TrainingMonitor

    monitor = TrainingMonitor(device="cpu")
    with monitor.step():
        pass
    summary = monitor.summary(gather=True)
    assert summary.ranks is None and any("not initialised" in n for n in summary.notes)
