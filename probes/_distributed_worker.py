"""The work one rank does for the ``distributed`` probe (imports torch when called).

Each rank joins a process group, measures all-reduce over message sizes, runs DDP
training steps of the reference MNIST network and checks that gradients and parameters
agree across ranks; local rank 0 of each node also reads the node's peer-access matrix,
NVLink state and runs a DataParallel smoke test. Everything a rank learns goes into one
JSON-safe ``payload`` dict; :mod:`gpudoctor.probes.distributed` turns the payloads of all
ranks into one :class:`~gpudoctor.core.model.ProbeResult`.

Two ways in:

* ``python -m gpudoctor.probes._distributed_worker --out DIR ...`` — started by the
  probe's own launcher (one process per rank, rendezvous on 127.0.0.1); the payload is
  written to ``DIR/rank<N>.json`` and progress to ``DIR/rank<N>.phase`` so the launcher
  can say where a hung rank stopped.
* :func:`run_rank` in-process, when gpudoctor itself was started by torchrun (RANK,
  WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the environment): the payloads are
  exchanged with ``all_gather_object`` so every rank can build the same result.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from gpudoctor.core.errors import first_line as _first_line

if TYPE_CHECKING:  # torch is an optional extra: imported for its types only (run_rank imports it)
    import torch as _torch
    from torch.distributed import TCPStore

    from gpudoctor.backends.base import GpuBackend

# The reference network from the tutorials our users learned from (docs/design).
MLP_WIDTHS = (784, 512, 256, 128, 64, 10)
DDP_BATCH = 64          # the tutorials' batch size
DDP_TIMED_STEPS = 10
SEED = 1234




class _Phases:
    """Writes the current phase to a file so a launcher can name where a rank hung."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.current = "start"
        self.seq = 0
        self.times: dict[str, float] = {}
        self._t = time.perf_counter()

    def enter(self, name: str) -> None:
        now = time.perf_counter()
        self.times[self.current] = round(self.times.get(self.current, 0.0) + now - self._t, 6)
        self._t = now
        self.current = name
        self.seq += 1
        if self.path is not None:
            try:
                # "<seq> <name>": the launcher compares seq to find the rank that fell behind.
                self.path.write_text(f"{self.seq} {name}", encoding="utf-8")
            except OSError:
                pass


def human(n: int) -> str:
    for unit, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult} {unit}"
    return f"{n} B"


def build_mlp(torch: ModuleType) -> _torch.nn.Sequential:
    nn = torch.nn
    layers: list[Any] = []
    for i, (a, b) in enumerate(zip(MLP_WIDTHS, MLP_WIDTHS[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(MLP_WIDTHS) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _sync(torch: ModuleType, device: _torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _spread(torch: ModuleType, dist: ModuleType, flat: _torch.Tensor) -> float:
    """Largest difference of any element of ``flat`` between two ranks (0.0 = identical)."""
    hi = flat.detach().clone()
    lo = flat.detach().clone().neg_()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MAX)
    return float((hi + lo).max().item())  # max - min


def allreduce_sweep(torch: ModuleType, dist: ModuleType, device: _torch.device, sizes: list[int], world: int,
                    rank: int, target_s: float, phases: _Phases,
                    fault: Callable[[str], None]) -> list[dict[str, Any]]:
    """All-reduce (sum, float32, in place) per message size: correctness, then timing."""
    out: list[dict[str, Any]] = []
    expected = world * (world + 1) / 2
    # One slot per rank, allocated before the sweep (a rank short of memory at a large size
    # can still vote): 1 = this rank could not allocate the buffer at this size.
    failed = torch.zeros(world, dtype=torch.int32, device=device)
    for size in sizes:
        fault("allreduce")  # before entering: a stuck rank stays in its previous phase
        phases.enter(f"allreduce {human(size)}")
        numel = max(1, size // 4)
        entry: dict[str, Any] = {"bytes": numel * 4, "dtype": "float32"}
        buf = None
        try:
            fault(f"alloc{numel * 4}")  # test hook: "oom:<rank>:alloc<bytes>"
            buf = torch.full((numel,), float(rank + 1), dtype=torch.float32, device=device)
        except Exception as exc:  # out of memory at this size: a recorded result
            entry["error"] = _first_line(exc)
        # Every rank learns who could not allocate, and all skip this size together: a rank
        # that skipped alone would leave the others in an all-reduce of another size.
        failed.zero_()
        if buf is None:
            failed[rank] = 1
        dist.all_reduce(failed)
        culprits = [r for r, bad in enumerate(failed.tolist()) if bad]
        if culprits or buf is None:  # (no buffer here: this rank is among the culprits)
            if buf is not None:
                entry["skipped"] = (f"rank{'s' if len(culprits) > 1 else ''} "
                                    f"{', '.join(map(str, culprits))} could not allocate {human(numel * 4)}")
            entry["failed_ranks"] = culprits
            out.append(entry)
            del buf
            continue
        dist.all_reduce(buf)
        _sync(torch, device)
        entry["correct"] = bool(torch.all(buf == expected).item())
        buf.zero_()
        for _ in range(2):  # warm-up: connections, NCCL channels, allocator
            dist.all_reduce(buf)
        _sync(torch, device)
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        _sync(torch, device)
        one = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
        dist.all_reduce(one, op=dist.ReduceOp.MAX)  # every rank must run the same count
        iters = int(min(200, max(3, target_s / max(float(one.item()), 1e-6))))
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        _sync(torch, device)
        entry["iters"] = iters
        entry["mean_s"] = (time.perf_counter() - t0) / iters
        out.append(entry)
        del buf
    return out


def ddp_check(torch: ModuleType, dist: ModuleType, device: _torch.device, rank: int, world: int, phases: _Phases,
              fault: Callable[[str], None]) -> dict[str, Any]:
    """DDP steps of the reference MLP; gradients checked against a manual all-reduce."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    phases.enter("ddp setup")
    torch.manual_seed(SEED)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    model = build_mlp(torch).to(device)
    reference = build_mlp(torch).to(device)
    reference.load_state_dict(model.state_dict())
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.5)
    gen = torch.Generator().manual_seed(SEED + 1 + rank)  # each rank its own batch
    steps = _DdpSteps(torch, dist, device, model, ddp, loss_fn, opt, gen)

    # 1. one step: DDP's averaged gradient versus local gradients summed by hand.
    fault("ddp")
    phases.enter("ddp gradient check")
    agreement = steps.against_manual_allreduce(reference, world)

    # 2. timed steps with gradient sync, and the same steps without it (local compute only):
    #    collectives make every rank wait for the slowest, so stragglers show in compute time.
    phases.enter("ddp timed steps")
    step_times, loss = steps.timed_synced_steps()
    compute_times = steps.timed_local_steps()
    dist.barrier()
    return {
        "batch_per_rank": DDP_BATCH,
        "loss": loss,
        **agreement,
        "step_times_s": step_times,
        "compute_times_s": compute_times,
        "parameters": int(sum(p.numel() for p in model.parameters())),
    }


@dataclass
class _DdpSteps:
    """The reference MLP wrapped in DDP, with its loss, its optimiser and this rank's batches."""

    torch: ModuleType
    dist: ModuleType
    device: _torch.device
    model: _torch.nn.Module
    ddp: _torch.nn.parallel.DistributedDataParallel
    loss_fn: _torch.nn.Module
    opt: _torch.optim.Optimizer
    gen: _torch.Generator

    def batch(self) -> tuple[_torch.Tensor, _torch.Tensor]:
        x = self.torch.randn(DDP_BATCH, 784, generator=self.gen).to(self.device)
        y = self.torch.randint(0, 10, (DDP_BATCH,), generator=self.gen).to(self.device)
        return x, y

    def against_manual_allreduce(self, reference: _torch.nn.Module, world: int) -> dict[str, float]:
        """One DDP step beside the same step on ``reference`` (the same weights, no DDP), its
        gradients all-reduced and averaged by hand: how far DDP's gradient is from that, and how
        far gradients and (after the optimiser's step) parameters differ between ranks."""
        torch, dist = self.torch, self.dist
        x, y = self.batch()
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.ddp(x), y)
        loss.backward()
        ddp_grad = torch.cat([p.grad.reshape(-1) for p in self.model.parameters()])
        reference.zero_grad(set_to_none=True)
        self.loss_fn(reference(x), y).backward()
        manual = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])
        dist.all_reduce(manual)
        manual /= world
        grad_vs_manual = float((ddp_grad - manual).abs().max().item())
        grad_scale = float(manual.abs().max().item())
        grad_spread = _spread(torch, dist, ddp_grad)
        self.opt.step()
        param_spread = _spread(torch, dist, torch.cat([p.detach().reshape(-1) for p in self.model.parameters()]))
        return {"grad_max_abs_diff_vs_manual": grad_vs_manual, "grad_max_abs": grad_scale,
                "grad_spread": grad_spread, "param_spread": param_spread}

    def timed_synced_steps(self) -> tuple[list[float], float]:
        """DDP_TIMED_STEPS training steps with gradient sync: their seconds, and the last loss."""
        times: list[float] = []
        loss = None
        for _ in range(DDP_TIMED_STEPS):
            x, y = self.batch()
            _sync(self.torch, self.device)
            t0 = time.perf_counter()
            self.opt.zero_grad(set_to_none=True)
            loss = self.loss_fn(self.ddp(x), y)
            loss.backward()
            self.opt.step()
            _sync(self.torch, self.device)
            times.append(time.perf_counter() - t0)
        assert loss is not None  # DDP_TIMED_STEPS > 0
        return times, float(loss.item())

    def timed_local_steps(self) -> list[float]:
        """The same steps' forward and backward without gradient sync (``no_sync``): seconds each."""
        times: list[float] = []
        with self.ddp.no_sync():
            for _ in range(DDP_TIMED_STEPS):
                x, y = self.batch()
                _sync(self.torch, self.device)
                t0 = time.perf_counter()
                self.opt.zero_grad(set_to_none=True)
                self.loss_fn(self.ddp(x), y).backward()
                _sync(self.torch, self.device)
                times.append(time.perf_counter() - t0)
        return times


COMPUTE_MODES = {0: "default", 1: "exclusive-thread", 2: "prohibited", 3: "exclusive-process"}


def dataparallel_blocker(gpu: GpuBackend, nvml_indices: list[int], local_ranks: int) -> str | None:
    """Why local rank 0 cannot run DataParallel over every GPU, or None.

    The other local ranks each hold a context on their own GPU; on a GPU in a compute mode
    other than default (exclusive-process: one context at a time; prohibited: none), rank 0
    cannot open a second one, so DataParallel would fail for a reason that is no fault.
    """
    from gpudoctor.backends import is_na

    if local_ranks <= 1:
        return None
    odd = []
    for torch_index, nvml_index in enumerate(nvml_indices):
        mode = gpu.compute_mode(nvml_index)
        if not is_na(mode) and int(mode) != 0:
            odd.append(f"GPU {torch_index} is in {COMPUTE_MODES.get(int(mode), f'mode {int(mode)}')} compute mode")
    if not odd:
        return None
    return (f"{'; '.join(odd)} and {local_ranks - 1} other local rank(s) hold their GPUs, so local rank 0 "
            "cannot open contexts on every GPU (`nvidia-smi -c DEFAULT` allows it)")


def node_checks(torch: ModuleType, local_ranks: int = 1) -> dict[str, Any]:
    """Peer access, NVLink (NVML) and DataParallel on this node's visible GPUs.

    ``local_ranks``: ranks on this node that hold a GPU context of their own (NCCL).
    """
    from gpudoctor.backends import NvmlBackend, is_na
    from gpudoctor.backends.visibility import nvml_index_for, torch_device_ids

    info: dict[str, Any] = {"hostname": socket.gethostname()}
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    info["cuda_devices"] = count
    if count < 2:
        info["skip_reason"] = ("no CUDA device is visible" if count == 0
                               else "only one CUDA device is visible")
        return info
    info["device_names"] = [torch.cuda.get_device_name(i) for i in range(count)]
    info["peer_access"] = [[None if i == j else bool(torch.cuda.can_device_access_peer(i, j))
                            for j in range(count)] for i in range(count)]
    gpu = NvmlBackend()
    blocker = None
    try:
        # torch is here: each device is matched to NVML by its PCI bus id (CUDA_VISIBLE_DEVICES'
        # order is wrong on mixed GPUs without CUDA_DEVICE_ORDER=PCI_BUS_ID)
        matched = [nvml_index_for(gpu, i, *torch_device_ids(i, torch)) for i in range(count)]
        status = gpu.status()
        if status is not None or None in matched:
            info["nvlink_error"] = status.reason if status is not None else "DeviceNotMatched"
        else:
            visible = [int(i) for i in matched if i is not None]
            blocker = dataparallel_blocker(gpu, visible, local_ranks)
            links: list[Any] = []
            for nvml_index in visible:
                state = gpu.nvlink(nvml_index)
                links.append(state.reason if is_na(state) else state)
            info["nvlink"] = links
            info["nvml_bus_ids"] = [gpu.static(i).get("pci_bus_id") for i in visible]
            info["nvml_bus_ids"] = [None if is_na(b) else b for b in info["nvml_bus_ids"]]
    finally:
        gpu.close()
    info["dataparallel"] = ({"devices": count, "skipped": blocker} if blocker
                            else dataparallel_smoke(torch, count))
    return info


def dataparallel_smoke(torch: ModuleType, count: int) -> dict[str, Any]:
    """nn.DataParallel over every visible GPU must give what one GPU gives."""
    try:
        torch.manual_seed(SEED)
        model = build_mlp(torch).to("cuda:0")
        x = torch.randn(DDP_BATCH * count, 784, device="cuda:0")
        with torch.no_grad():
            single = model(x)
        parallel_model = torch.nn.DataParallel(model, device_ids=list(range(count)))
        t0 = time.perf_counter()
        out = parallel_model(x)
        out.float().sum().backward()
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        diff = float((out.detach() - single).abs().max().item())
        grads_finite = all(bool(torch.isfinite(p.grad).all().item()) for p in model.parameters())
        return {"devices": count, "max_abs_diff": diff, "grads_finite": grads_finite,
                "ok": diff <= 1e-3 and grads_finite, "seconds": elapsed}
    except Exception as exc:
        return {"devices": count, "ok": False, "error": _first_line(exc)}


# torch's TCPStore server listens on every interface whatever host name it is given; handed a
# socket that is already bound and listening (master_listen_fd) it serves on that one instead.
# The legacy server takes such a socket in every torch gpudoctor supports (>= 2.2); the libuv
# server, the default from torch 2.4, serves one only from torch 2.8 (before, it never listened).
_LIBUV_TAKES_LISTEN_FD = (2, 8)


def _torch_version(torch: ModuleType) -> tuple[int, int]:
    try:
        major, minor = str(torch.__version__).split(".")[:2]
        return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)
    except ValueError:
        return (0, 0)


def bound_listener(host: str, port: int, backlog: int = 128) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (an IPv4 or IPv6 address or a name) and listening."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(backlog)
    except OSError:
        listener.close()
        raise
    return listener


def make_store(torch: ModuleType, rank: int, world: int, timeout_s: float) -> tuple[TCPStore, str]:
    """The rendezvous store at MASTER_ADDR:MASTER_PORT, and where its server listens.

    Rank 0 serves it from a socket bound to MASTER_ADDR (127.0.0.1 from the launcher), so the
    store is reachable only where the ranks were told to meet, not on every interface. A torch
    whose TCPStore takes no listening socket falls back to its own (all interfaces), and says so.
    """
    import datetime

    from torch.distributed import TCPStore

    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    timeout = datetime.timedelta(seconds=timeout_s)
    if rank != 0:
        return TCPStore(host, port, world, False, timeout), ""
    listener = bound_listener(host, port)
    address = listener.getsockname()
    where = f"[{address[0]}]:{address[1]}" if listener.family == socket.AF_INET6 else f"{address[0]}:{address[1]}"
    options: dict[str, Any] = {"master_listen_fd": listener.fileno()}
    if _torch_version(torch) < _LIBUV_TAKES_LISTEN_FD:
        options["use_libuv"] = False
    try:
        store = TCPStore(host, port, world, True, timeout, **options)
    except TypeError:  # no master_listen_fd / use_libuv in this torch
        listener.close()
        return TCPStore(host, port, world, True, timeout), f"all interfaces, port {port} " \
            f"(torch {torch.__version__} cannot serve the store from a socket bound to {host})"
    listener.detach()  # the store owns the descriptor now
    return store, where


def run_rank(*, rank: int, world: int, local_rank: int, backend: str, sizes: list[int],
             init_method: str, timeout_s: float, target_s: float = 0.2,
             phases: _Phases | None = None, fault: str = "", gather: bool = False,
             own_store: bool = False) -> Any:
    """One rank's whole check. Returns its payload, or every rank's when ``gather``.

    ``own_store``: meet through a store whose server rank 0 binds to MASTER_ADDR (the
    self-launched check) instead of ``init_method``."""
    import torch
    import torch.distributed as dist

    phases = phases or _Phases(None)
    payload: dict[str, Any] = {"rank": rank, "world_size": world, "local_rank": local_rank,
                               "hostname": socket.gethostname(), "pid": os.getpid(),
                               "backend": backend, "torch": torch.__version__, "error": None}
    inject = _fault_injector(fault, rank)
    device = _rank_device(torch, backend, local_rank, world, payload)
    inject("init")
    phases.enter("init_process_group")
    t0 = time.perf_counter()
    _join_group(torch, dist, backend, init_method, rank, world, timeout_s, own_store, payload)
    try:
        dist.barrier()
        payload["init_s"] = time.perf_counter() - t0
        payload["allreduce"] = allreduce_sweep(torch, dist, device, sizes, world, rank, target_s,
                                               phases, inject)
        payload["ddp"] = ddp_check(torch, dist, device, rank, world, phases, inject)
        if local_rank == 0:
            phases.enter("node checks")
            # peers, NVLink, DataParallel: whatever the backend; with NCCL every local rank
            # holds a context on its GPU
            local_ranks = (int(os.environ.get("LOCAL_WORLD_SIZE", "0")) or world) if backend == "nccl" else 1
            payload["node"] = node_checks(torch, local_ranks)
        phases.enter("done")
        payload["phase_s"] = phases.times
        if gather:
            everyone: list[Any] = [None] * world
            dist.all_gather_object(everyone, payload)
            return everyone
        # Leave together: no rank tears down its communicator while local rank 0 still
        # runs the node checks.
        dist.barrier()
        return payload
    finally:
        try:
            dist.destroy_process_group()
        except Exception:
            pass


def _start_helper() -> None:
    """The hang-tree fault's helper: a process the rank leaves running, as a DataLoader worker."""
    import subprocess

    subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _fault_injector(fault: str, rank: int) -> Callable[[str], None]:
    """The test hook: ``fault`` "crash|hang|hang-tree|oom:<rank>:<where>" makes rank ``<rank>`` exit,
    hang (after starting a helper process: hang-tree) or raise an out-of-memory error when it
    reaches ``<where>``; "" does nothing."""
    def inject(where: str) -> None:
        if not fault:
            return
        kind, who, at = (fault.split(":") + ["", ""])[:3]
        if int(who) == rank and at == where:
            if kind == "crash":
                os._exit(17)
            if kind == "hang-tree":  # a rank that has started a helper process of its own
                _start_helper()
            if kind in ("hang", "hang-tree"):
                while True:
                    time.sleep(1)
            if kind == "oom":
                raise RuntimeError(f"CUDA out of memory (injected at {where})")

    return inject


def _rank_device(torch: ModuleType, backend: str, local_rank: int, world: int,
                 payload: dict[str, Any]) -> _torch.device:
    """The device this rank works on: its own GPU for NCCL, else the CPU with its share of the
    cores; its name goes in ``payload``."""
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        payload["device_name"] = torch.cuda.get_device_name(device)
    else:
        device = torch.device("cpu")
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "0")) or world
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, local_world)))
        payload["device_name"] = "cpu"
    payload["device"] = str(device)
    return device


def _join_group(torch: ModuleType, dist: ModuleType, backend: str, init_method: str, rank: int, world: int,
                timeout_s: float, own_store: bool, payload: dict[str, Any]) -> None:
    """init_process_group: through our own store (``own_store``: where it listens goes in
    ``payload``) or through ``init_method``."""
    if own_store:
        store, listen = make_store(torch, rank, world, timeout_s)
        if listen:
            payload["store_listen"] = listen
        dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
    else:
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))


def _exit_with_parent() -> None:
    """Leave when the launcher goes away (killed at its time limit): no orphaned ranks."""
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="gpudoctor-parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpudoctor-distributed-worker")
    parser.add_argument("--out", required=True)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--sizes", required=True, help="comma-separated byte counts")
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--target", type=float, default=0.2)
    parser.add_argument("--fault", default="")
    args = parser.parse_args(argv)
    _exit_with_parent()
    rank = int(os.environ["RANK"])
    out = Path(args.out)
    phases = _Phases(out / f"rank{rank}.phase")
    try:
        payload = run_rank(rank=rank, world=int(os.environ["WORLD_SIZE"]),
                           local_rank=int(os.environ.get("LOCAL_RANK", rank)), backend=args.backend,
                           sizes=[int(s) for s in args.sizes.split(",")], init_method="env://",
                           timeout_s=args.timeout, target_s=args.target, phases=phases,
                           fault=args.fault, own_store=True)
        code = 0
    except Exception as exc:
        payload = {"rank": rank, "error": f"{_first_line(exc)} (in {phases.current})",
                   "traceback": traceback.format_exc(limit=6)}
        code = 1
    from gpudoctor.system.fileio import atomic_write_text

    atomic_write_text(out / f"rank{rank}.json", json.dumps(payload, default=str))
    return code


if __name__ == "__main__":
    sys.exit(main())
