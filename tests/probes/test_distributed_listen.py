"""The self-launched distributed check listens only where the ranks were told to meet: rank 0's
rendezvous store and the ranks' gloo sockets are bound to 127.0.0.1, not to every interface."""

from __future__ import annotations

import ipaddress
import threading
import time

import psutil
import pytest

from gpudoctor.probes.distributed import assemble, launch_local

pytest.importorskip("torch")
SMALL = [64 << 10, 1 << 20]


def _listeners_of_ranks(seen: dict[tuple[int, str, int], str]) -> None:
    """Add (pid, address, port) -> RANK for every listening TCP socket of our rank processes."""
    for child in psutil.Process().children(recursive=True):
        try:
            if "gpudoctor.probes._distributed_worker" not in " ".join(child.cmdline()):
                continue
            rank = child.environ().get("RANK", "?")
            for conn in child.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    seen[(child.pid, conn.laddr.ip, conn.laddr.port)] = rank
        except psutil.Error:
            continue


def test_every_rank_listener_is_on_loopback():
    outcome: dict = {}

    def launch() -> None:
        outcome["payloads"], outcome["failures"] = launch_local(2, "gloo", SMALL, 90, target_s=1.0)

    worker = threading.Thread(target=launch)
    worker.start()
    seen: dict[tuple[int, str, int], str] = {}
    while worker.is_alive():
        _listeners_of_ranks(seen)
        time.sleep(0.05)
    worker.join()
    assert outcome["failures"] == {}, outcome["failures"]
    assert any(rank == "0" for rank in seen.values()), f"no listener of rank 0 seen: {seen}"
    wide = {key: rank for key, rank in seen.items() if not ipaddress.ip_address(key[1]).is_loopback}
    assert not wide, f"listening beyond loopback: {wide}"
    store = outcome["payloads"][0]["store_listen"]
    host, port = store.rsplit(":", 1)
    assert host == "127.0.0.1"
    # the store's listening socket itself was seen, in rank 0, on 127.0.0.1
    assert any(p == int(port) and rank == "0" for (_, _, p), rank in seen.items()), seen
    result = assemble(outcome["payloads"], outcome["failures"], 2, "gloo", "local")
    assert result.details["store_listen"] == store
    assert "store_not_bound" not in {f.code for f in result.findings}


def _own_listeners(port: int) -> list[str]:
    return [c.laddr.ip for c in psutil.Process().net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port]


@pytest.mark.parametrize("libuv_from", [(2, 8), (99, 0)], ids=["as-this-torch", "legacy-server"])
def test_rank0_store_serves_from_its_bound_socket(monkeypatch, libuv_from):
    """Both servers torch has: the libuv one (torch >= 2.8) and the legacy one that gpudoctor
    asks for on older torch, each serving from the socket bound to MASTER_ADDR."""
    import torch

    from gpudoctor.probes import _distributed_worker as worker

    port = _free_port()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setattr(worker, "_LIBUV_TAKES_LISTEN_FD", libuv_from)
    store, where = worker.make_store(torch, 0, 1, 30.0)
    assert where == f"127.0.0.1:{port}"
    assert _own_listeners(port) == ["127.0.0.1"]
    store.set("key", "value")
    assert store.get("key") == b"value"
    del store


def test_a_torch_without_master_listen_fd_falls_back_and_says_so(monkeypatch):
    import torch
    import torch.distributed

    from gpudoctor.probes import _distributed_worker as worker

    calls: list[dict] = []

    class OldTCPStore:
        def __init__(self, host, port, world, is_master, timeout, **options):
            calls.append(options)
            if options:
                raise TypeError("unexpected keyword argument 'master_listen_fd'")

    port = _free_port()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setattr(torch.distributed, "TCPStore", OldTCPStore)
    _, where = worker.make_store(torch, 0, 2, 30.0)
    assert calls[-1] == {} and where.startswith(f"all interfaces, port {port}")
    assert _own_listeners(port) == []  # our bound socket was closed, not leaked
    result = assemble({0: {"rank": 0, "store_listen": where}}, {}, 2, "gloo", "local")
    assert [f.code for f in result.findings if f.code == "store_not_bound"] == ["store_not_bound"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
