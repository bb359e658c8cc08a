"""Distributed check: all-reduce bus bandwidth, a DDP step, stragglers, peers and NVLink.

What it checks, on N ranks (NCCL on GPUs, gloo on CPU):

* all-reduce (sum, float32) gives the right answer at every message size, and how fast:
  bus bandwidth as nccl-tests defines it, ``busbw = algbw * 2 (n - 1) / n`` with
  ``algbw = bytes / time``; the time is the slowest rank's mean, so one slow rank shows;
* a DDP training step of the reference MNIST network (784-512-256-128-64-10): DDP's
  averaged gradients must equal the local gradients all-reduced by hand, and gradients
  and parameters must agree across ranks;
* per-rank timings; a rank whose local compute is 1.5x slower than the median of the
  others (and slower by more than 2 ms, so timer noise on tiny steps is not blamed) is
  named as a straggler;
* on each node with >= 2 GPUs: the peer-access matrix (``torch.cuda.can_device_access_peer``),
  NVLink state (NVML) and a DataParallel smoke test. With one GPU or none those parts
  are ``skip`` findings with the reason, and the probe's status is that of the parts that ran.

Two ways to run: ``gpudoctor distributed --nproc N`` (or this probe from ``report``)
starts the ranks itself, on 127.0.0.1, with a time limit; under torchrun
(``torchrun --nproc-per-node N -m gpudoctor distributed``) every rank runs the probe and
the ranks exchange their results, so every rank reaches the same verdict and rank 0
writes the report. A rank that crashes or hangs is named (with the phase it was in),
never a hung command.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from gpudoctor.system import _proc
from gpudoctor.core import findings
from gpudoctor.system._proc import describe_exit
from gpudoctor.backends.nvml import nvlink_version_words
from gpudoctor.core.model import ProbeResult, Status

from . import Probe, ProbeContext, _wording
from ._distributed_worker import human as human_size

DEFAULT_SIZES = {"gloo": [64 << 10, 1 << 20, 16 << 20], "nccl": [1 << 20, 16 << 20, 128 << 20, 512 << 20]}
DEFAULT_TIMEOUT_S = 120.0
STRAGGLER_RATIO = 1.5
STRAGGLER_MIN_S = 0.002
# Seconds the other ranks get to notice a dead rank before the launcher stops them.
FAILURE_GRACE_S = 5.0
# The ranks' folder (their results and stderr) under the temporary directory: this prefix,
# then the launcher's PID, so a folder left by a launcher that was killed can be told apart.
WORKDIR_PREFIX = "gpudoctor-dist-"


def parse_size(text: str) -> int:
    """'4096', '64K', '1M', '2G' (binary units, as nccl-tests' -b/-e) -> bytes."""
    raw = text.strip().upper().removesuffix("IB").removesuffix("B")
    factor = 1
    for suffix, mult in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if raw.endswith(suffix):
            raw, factor = raw[:-1], mult
            break
    try:
        value = int(float(raw) * factor)
    except ValueError:
        raise ValueError(f"not a message size: {text!r} (use e.g. 64K, 1M, 256M)") from None
    if value < 4:
        raise ValueError(f"message size must be at least 4 bytes, got {text!r}")
    return value


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes/s) for an all-reduce, per nccl-tests."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world - 1) / world


def find_stragglers(times: dict[int, float]) -> list[tuple[int, float, float]]:
    """Ranks slower than STRAGGLER_RATIO x the median of the others: (rank, time, median)."""
    out: list[tuple[int, float, float]] = []
    if len(times) < 2:
        return out
    for rank, t in sorted(times.items()):
        others = [v for r, v in times.items() if r != rank]
        ref = statistics.median(others)
        if t > STRAGGLER_RATIO * ref and t - ref > STRAGGLER_MIN_S:
            out.append((rank, t, ref))
    return out


# --------------------------------------------------------------------------- launching
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stderr_tail(path: Path, limit: int = 3) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [ln for ln in lines if ln and not ln.startswith(("File ", "^", "~"))]
    return " | ".join(lines[-limit:])


def launch_local(nproc: int, backend: str, sizes: list[int], timeout_s: float, *,
                 target_s: float = 0.2, fault: str = "") -> tuple[dict[int, Any], dict[int, dict[str, str]]]:
    """Start ``nproc`` ranks on this machine (rendezvous on 127.0.0.1) and wait for them.

    Returns (payloads by rank, failures by rank). Never waits past ``timeout_s``: ranks
    still running then are killed. Each failure has ``kind``: ``failed`` (the first rank
    to die), ``hung`` (did not finish, and no other rank fell further behind), or
    ``stopped`` (waiting for a failed or hung rank when it was stopped), and ``text``.
    """
    remove_stale_workdirs()
    workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-"))
    port = _free_port()
    procs: dict[int, subprocess.Popen[bytes]] = {}
    try:
        cmd = _rank_command(workdir, backend, sizes, timeout_s, target_s, fault)
        for rank in range(nproc):
            with open(workdir / f"rank{rank}.stderr", "wb") as err:
                # Each rank leads a group of its own, so that what it starts (DataLoader workers,
                # helpers) is ended with it even once the rank itself has gone (_stop_ranks). A stop
                # (Ctrl-C, SIGTERM) reaches the ranks through the finally below, and a rank whose
                # launcher is gone leaves by itself (the worker's watch).
                procs[rank] = subprocess.Popen(cmd, env=_rank_environment(rank, nproc, port),
                                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                               **_proc.NEW_GROUP)
        exited_at, still_running = _wait_for_ranks(procs, timeout_s)
        payloads, errors, phases = _read_ranks(procs, workdir, still_running)
        return payloads, classify_failures(errors, exited_at, still_running, phases, timeout_s)
    finally:
        # Every path, Ctrl-C and SIGTERM included (the runner's child turns its stop into an
        # exception): no rank left running, no rank JSON (host names, PIDs) left behind.
        _stop_ranks(procs)
        shutil.rmtree(workdir, ignore_errors=True)


def _rank_environment(rank: int, nproc: int, port: int) -> dict[str, str]:
    """This process's environment with the variables torch.distributed's env:// rendezvous reads."""
    env = dict(os.environ)
    env.update(RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_RANK=str(rank),
               LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if sys.platform.startswith("linux") and os.path.exists("/sys/class/net/lo"):
        # stay on loopback: gloo's and NCCL's own listeners bind to the interface named
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        env.setdefault("NCCL_SOCKET_IFNAME", "lo")
    return env


def _rank_command(workdir: Path, backend: str, sizes: list[int], timeout_s: float, target_s: float,
                  fault: str) -> list[str]:
    """The command line of one rank (the same for every rank: each reads its own from RANK)."""
    # The ranks' own collective timeout is longer than ours, so that the rank that is
    # stuck, not the one waiting for it, is what we find when our limit comes.
    cmd = [sys.executable, "-m", "gpudoctor.probes._distributed_worker", "--out", str(workdir),
           "--backend", backend, "--sizes", ",".join(str(s) for s in sizes),
           "--timeout", str(timeout_s + 60.0), "--target", str(target_s)]
    if fault:
        cmd += ["--fault", fault]
    return cmd


def _read_ranks(procs: dict[int, "subprocess.Popen[bytes]"], workdir: Path, still_running: set[int]
                ) -> tuple[dict[int, Any], dict[int, str], dict[int, tuple[int, str]]]:
    """What the ranks left in ``workdir``: (the payload of each rank that finished well, what went
    wrong with each that finished otherwise, every rank's last phase as (sequence, name))."""
    import json

    phases: dict[int, tuple[int, str]] = {}
    payloads: dict[int, Any] = {}
    errors: dict[int, str] = {}
    for rank, p in procs.items():
        try:
            seq, _, name = (workdir / f"rank{rank}.phase").read_text(encoding="utf-8").partition(" ")
            phases[rank] = (int(seq), name.strip())
        except (OSError, ValueError):
            phases[rank] = (0, "start-up")
        payload = None
        try:
            payload = json.loads((workdir / f"rank{rank}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
        if rank in still_running:
            continue
        if payload is not None and not payload.get("error") and p.returncode == 0:
            payloads[rank] = payload
        elif payload is not None and payload.get("error"):
            errors[rank] = f"failed: {payload['error']}"
        else:
            tail = _stderr_tail(workdir / f"rank{rank}.stderr")
            errors[rank] = (f"{describe_exit(p.returncode)} (last phase: {phases[rank][1]})"
                            + (f": {tail}" if tail else ""))
    return payloads, errors, phases


def _stop_ranks(procs: dict[int, "subprocess.Popen[bytes]"]) -> None:
    for p in procs.values():  # the rank and what it started (DataLoader workers, NCCL helpers),
        # or, for a rank that has ended, what it left in its group
        _proc.end_tree(p.pid, grace_s=0.0, leader=p.poll() is None)
    for p in procs.values():
        try:
            p.wait(5)  # gone before its folder is removed: a dead rank writes nothing more
        except subprocess.TimeoutExpired:
            pass


def remove_stale_workdirs(parent: str | None = None) -> list[str]:
    """Remove the rank folders that a launcher killed outright (SIGKILL, power loss) left.

    Only this user's folders named ``gpudoctor-dist-<pid>-*`` whose launcher ``pid`` no
    longer runs. Returns the paths removed."""
    parent = parent or tempfile.gettempdir()
    removed: list[str] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        pid_text = entry.name[len(WORKDIR_PREFIX):].partition("-")[0]
        if not entry.name.startswith(WORKDIR_PREFIX) or not pid_text.isdigit():
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        if _pid_alive(int(pid_text)):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # another user's process, or cannot tell: leave the folder
    return True


def _wait_for_ranks(procs: dict[int, "subprocess.Popen[bytes]"], timeout_s: float) -> tuple[dict[int, float], set[int]]:
    """Wait until every rank exits, or ``timeout_s``, or FAILURE_GRACE_S after the first rank
    fails; kill the rest. Returns (when each rank exited, the ranks still running at the end)."""
    deadline = time.monotonic() + timeout_s
    exited_at: dict[int, float] = {}
    first_failure: float | None = None
    while time.monotonic() < deadline:
        now = time.monotonic()
        for r, p in procs.items():
            if r not in exited_at and p.poll() is not None:
                exited_at[r] = now
                if p.returncode != 0 and first_failure is None:
                    first_failure = now
                    deadline = min(deadline, now + FAILURE_GRACE_S)
        if len(exited_at) == len(procs):
            break
        time.sleep(0.05)
    still_running = {r for r, p in procs.items() if p.poll() is None}
    for p in procs.values():
        if p.poll() is None:  # with its tree: a rank killed alone leaves its helpers running
            _proc.end_tree(p.pid, grace_s=0.0)
        p.wait(10)
    return exited_at, still_running


def classify_failures(errors: dict[int, str], exited_at: dict[int, float], still_running: set[int],
                      phases: dict[int, tuple[int, str]], timeout_s: float) -> dict[int, dict[str, str]]:
    """Tell the rank that caused the trouble from the ranks that were waiting for it.

    A rank that died is the culprit when it died first (ties: one that left no error
    report of its own, i.e. crashed, before one that reported a broken connection).
    Without a death, the ranks that fell furthest behind (lowest phase number) hung; the
    others were waiting for them in a collective.
    """
    out: dict[int, dict[str, str]] = {}
    if errors:
        first = min(errors, key=lambda r: (exited_at.get(r, float("inf")), "failed:" in errors[r]))
        out[first] = {"kind": "failed", "text": errors[first]}
        for rank, text in errors.items():
            if rank != first:
                out[rank] = {"kind": "stopped", "text": _wording.RANK_FAILED_AFTER.format(first=first, text=text)}
        for rank in still_running:
            out[rank] = {"kind": "stopped",
                         "text": _wording.RANK_STOPPED_AFTER.format(first=first, phase=phases[rank][1])}
        return out
    if still_running:
        behind = min(phases[r][0] for r in still_running)
        culprits = sorted(r for r in still_running if phases[r][0] == behind)
        for rank in still_running:
            if rank in culprits:
                out[rank] = {"kind": "hung",
                             "text": _wording.RANK_HUNG.format(seconds=timeout_s, phase=phases[rank][1])}
            else:
                out[rank] = {"kind": "stopped",
                             "text": _wording.RANK_WAITING.format(ranks=", ".join(map(str, culprits)),
                                                                  phase=phases[rank][1])}
    return out


# --------------------------------------------------------------------------- assembling
def _tolerance(scale: float) -> float:
    # Two float32 sums of the same numbers in different orders differ by a few ulps.
    return 1e-4 * scale + 1e-7


def assemble(payloads: dict[int, Any], failures: dict[int, dict[str, str]], world: int, backend: str,
             mode: str, skipped: list[tuple[str, str]] | None = None) -> ProbeResult:
    """Build the probe result from every rank's payload (pure: testable without torch)."""
    result = ProbeResult(probe="distributed")
    hosts = sorted({p.get("hostname", "?") for p in payloads.values()})
    result.details.update(mode=mode, backend=backend, world_size=world, hosts=hosts)
    store_listen = (payloads.get(0) or {}).get("store_listen")
    if store_listen:
        result.details["store_listen"] = store_listen
        if store_listen.startswith("all interfaces"):
            result.findings.append(findings.finding("store_not_bound", where=store_listen))
    result.measure("world_size", world, "ranks")
    for code, why in skipped or []:  # each code's words say why with {why}
        result.findings.append(findings.finding(code, why=why))
    _failure_findings(result, failures)
    ranks = [payloads[r] for r in sorted(payloads)]
    if not ranks:
        return _finish(result, None)
    table = _allreduce_findings(result, ranks, world)
    ddp = _ddp_findings(result, ranks, payloads, backend, hosts)
    _node_findings(result, ranks)
    if not any(f.status in (Status.FAIL, Status.WARN) for f in result.findings) and table and ddp:
        peak = max(table, key=lambda row: row["busbw_GBps"])
        result.findings.append(findings.finding("distributed_ok", world=world, backend=backend, hosts=len(hosts),
                                                busbw=peak["busbw_GBps"], size=peak["size"]))
    return _finish(result, None)


def _failure_findings(result: ProbeResult, failures: dict[int, dict[str, str]]) -> None:
    for rank in sorted(failures):
        kind, text = failures[rank]["kind"], failures[rank]["text"]
        if kind == "stopped":
            result.findings.append(findings.finding("rank_stopped", rank=rank, text=text))
            continue
        result.findings.append(findings.finding("rank_hung" if kind == "hung" else "rank_failed", rank=rank, text=text))
    result.details["failures"] = {str(r): f for r, f in sorted(failures.items())}


def _allreduce_findings(result: ProbeResult, ranks: list[dict[str, Any]], world: int) -> list[dict[str, Any]]:
    """The all-reduce table (per size, the slowest rank's mean time) and its findings."""
    table: list[dict[str, Any]] = []
    wrong: list[str] = []
    size_errors: list[str] = []
    for i, entry in enumerate(ranks[0].get("allreduce", [])):
        nbytes = int(entry["bytes"])
        per_rank = {p["rank"]: p["allreduce"][i] for p in ranks if i < len(p.get("allreduce", []))}
        errors = {r: e["error"] for r, e in per_rank.items() if e.get("error")}
        if errors or any(e.get("skipped") for e in per_rank.values()):
            # The ranks that could not allocate; the others skipped the size with them.
            said = "; ".join(f"rank {r}: {e}" for r, e in errors.items()) or next(
                e["skipped"] for e in per_rank.values() if e.get("skipped"))
            size_errors.append(f"{human_size(nbytes)}: {said}" + ("" if len(errors) == len(per_rank) else
                                                                 " (skipped by every rank, so all stay in step)"))
            continue
        bad = [r for r, e in per_rank.items() if not e.get("correct", False)]
        if bad:
            wrong.append(f"{human_size(nbytes)} on rank(s) {', '.join(map(str, bad))}")
        seconds = max(e["mean_s"] for e in per_rank.values())
        algbw, busbw = bus_bandwidth(nbytes, seconds, world)
        table.append({"bytes": nbytes, "size": human_size(nbytes), "time_us": round(seconds * 1e6, 2),
                      "algbw_GBps": round(algbw, 4), "busbw_GBps": round(busbw, 4),
                      "iters": min(e.get("iters", 0) for e in per_rank.values()),
                      "per_rank_time_us": {str(r): round(e["mean_s"] * 1e6, 2) for r, e in per_rank.items()}})
        result.measure(f"allreduce_busbw_{human_size(nbytes).replace(' ', '')}", round(busbw, 4), "GB/s",
                       note=f"algbw {algbw:.4f} GB/s, {seconds * 1e6:.1f} us (slowest rank)")
    result.details["allreduce"] = table
    if wrong:
        result.findings.append(findings.finding("allreduce_wrong_result", wrong="; ".join(wrong)))
    if size_errors:
        result.findings.append(findings.finding("allreduce_size_failed", sizes="; ".join(size_errors)))
    if table:
        peak = max(table, key=lambda row: row["busbw_GBps"])
        result.measure("allreduce_busbw_peak", peak["busbw_GBps"], "GB/s", note=f"at {peak['size']}")
    return table


def _ddp_findings(result: ProbeResult, ranks: list[dict[str, Any]], payloads: dict[int, Any], backend: str,
                  hosts: list[str]) -> dict[int, Any]:
    """DDP's correctness across ranks, per-rank timings, and stragglers."""
    ddp = {p["rank"]: p["ddp"] for p in ranks if p.get("ddp")}
    if ddp:
        scale = max(d["grad_max_abs"] for d in ddp.values())
        tol = _tolerance(scale)
        vs_manual = max(d["grad_max_abs_diff_vs_manual"] for d in ddp.values())
        grad_spread = max(d["grad_spread"] for d in ddp.values())
        param_spread = max(d["param_spread"] for d in ddp.values())
        result.measure("ddp_grad_diff_vs_manual_allreduce", vs_manual, "", reference=tol)
        result.measure("ddp_grad_spread_across_ranks", grad_spread, "", reference=tol)
        result.measure("ddp_param_spread_across_ranks", param_spread, "", reference=tol)
        if vs_manual > tol:
            result.findings.append(findings.finding("ddp_gradients_wrong", diff=vs_manual, tol=tol))
        if grad_spread > tol or param_spread > tol:
            result.findings.append(findings.finding("ranks_disagree", grads=grad_spread, params=param_spread))
        step = {r: statistics.median(d["step_times_s"]) for r, d in ddp.items()}
        compute = {r: statistics.median(d["compute_times_s"]) for r, d in ddp.items()}
        result.measure("ddp_step_time_slowest", round(max(step.values()) * 1e3, 3), "ms",
                       note=f"batch {ranks[0]['ddp']['batch_per_rank']} per rank, median of timed steps")
        result.measure("ddp_compute_time_median", round(statistics.median(compute.values()) * 1e3, 3), "ms",
                       note="forward+backward without gradient sync")
        result.details["ranks"] = [
            {"rank": r, "hostname": payloads[r].get("hostname"), "device": payloads[r].get("device"),
             "device_name": payloads[r].get("device_name"), "init_s": round(payloads[r].get("init_s", 0.0), 4),
             "ddp_step_ms": round(step[r] * 1e3, 3), "ddp_compute_ms": round(compute[r] * 1e3, 3)}
            for r in sorted(ddp)]
        shared_cpus = backend == "gloo" and len(hosts) == 1
        for rank, t, ref in find_stragglers(compute):
            p = payloads[rank]
            if shared_cpus:
                # CPU ranks on one host compete for the same cores: slower ranks are expected.
                result.findings.append(findings.finding("straggler_shared_cpu", rank=rank, ms=t * 1e3, ref_ms=ref * 1e3))
                continue
            result.findings.append(findings.finding("straggler", rank=rank, host=f"{p.get('hostname')}",
                                                    gpu=f"{p.get('device')}", ms=t * 1e3, ref_ms=ref * 1e3))
    return ddp


def _node_findings(result: ProbeResult, ranks: list[dict[str, Any]]) -> None:
    nodes = [p["node"] for p in ranks if p.get("node")]
    result.details["nodes"] = nodes
    for node in nodes:
        host = node.get("hostname", "?")
        if node.get("skip_reason"):
            result.findings.append(findings.finding("multi_gpu_skipped", host=host, reason=node["skip_reason"]))
            continue
        matrix = node.get("peer_access") or []
        missing = [f"{i}->{j}" for i, row in enumerate(matrix) for j, ok in enumerate(row) if ok is False]
        if missing:
            result.findings.append(findings.finding("no_peer_access", host=host, pairs=", ".join(missing)))
        _nvlink_findings(result, host, node.get("nvlink") or [])
        dp = node.get("dataparallel") or {}
        if dp.get("skipped"):
            result.findings.append(findings.finding("dataparallel_skipped", host=host, reason=dp["skipped"]))
        elif dp and not dp.get("ok"):
            said = {"host": host, "devices": f"{dp.get('devices')}"}
            result.findings.append(findings.finding("dataparallel_failed", error=dp["error"], **said) if dp.get("error")
                                   else findings.finding("dataparallel_failed:differs", diff=f"{dp.get('max_abs_diff')}",
                                                         **said))


def _nvlink_findings(result: ProbeResult, host: str, links: list[Any]) -> None:
    """NVLink per GPU: warn on links down beside links up, or on fewer links up than the peers.

    Boards that can take an NVLink bridge but have none (H100 PCIe, H200 NVL without a
    bridge) report every link inactive rather than NotSupported: that is a board without
    NVLink connected, not a fault. A GPU whose links answer NotSupported (text, not a list)
    has no NVLink at all and is left out.
    """
    active: dict[int, int] = {}
    inactive: dict[int, list[int]] = {}
    for gpu, state in enumerate(links):
        if isinstance(state, list):
            active[gpu] = sum(1 for link in state if link.get("active"))
            inactive[gpu] = [link["link"] for link in state if not link.get("active")]
    total = sum(active.values())
    versions = sorted({nvlink_version_words(link.get("version"), link.get("version_name"))
                       for state in links if isinstance(state, list) for link in state if link.get("active")})
    result.measure("nvlink_active_links", total, "links",
                   note=host + (f"; version as NVML answered: {', '.join(versions)}" if versions else ""))
    if not active:
        return
    if total == 0:
        result.findings.append(findings.finding("nvlink_not_connected", host=host, gpus=len(active)))
        return
    most = max(active.values())
    down: list[str] = []
    notes: list[str] = []
    for gpu in sorted(active):
        if active[gpu] and inactive[gpu]:  # some links up, others down: a link failed
            down += [f"GPU {gpu} link {link}" for link in inactive[gpu]]
        elif active[gpu] < most:  # fewer links up than a peer (none up, or a shorter list)
            down += [f"GPU {gpu} link {link}" for link in inactive[gpu]] or [f"GPU {gpu}"]
            notes.append(f"GPU {gpu} has {active[gpu]} link(s) up, a peer {most}")
    if down:
        result.findings.append(findings.finding("nvlink_link_down", host=host, down=", ".join(down),
                                                notes=_wording.NVLINK_NOTES.format(notes="; ".join(notes)) if notes else ""))


def _finish(result: ProbeResult, summary: str | None) -> ProbeResult:
    # Parts that could not run are skip findings; the status is that of the parts that ran.
    ran = [f.status for f in result.findings if f.status != Status.SKIP]
    result.status = Status.worst(ran) if ran else Status.SKIP
    if summary is None:
        worst = [f for f in result.findings if f.status == result.status]
        summary = worst[0].summary if worst else ""
    result.summary = summary
    return result


# --------------------------------------------------------------------------- probe
def _under_torchrun() -> bool:
    world = os.environ.get("WORLD_SIZE", "")
    return all(k in os.environ for k in ("RANK", "MASTER_ADDR", "MASTER_PORT")) \
        and world.isdigit() and int(world) > 1


@dataclass(frozen=True)
class _Plan:
    """What the check will run: the backend, the message sizes, its limits, the GPUs torch sees,
    and the parts left out (skip findings: code, why)."""

    backend: str
    sizes: list[int]
    timeout_s: float
    target_s: float
    gpus: int
    skipped: list[tuple[str, str]]


def run(ctx: ProbeContext) -> ProbeResult:
    if not ctx.torch_allowed():
        return findings.skipped("distributed", "quick_mode:distributed")
    import torch
    import torch.distributed as dist

    opts = ctx.options
    if not dist.is_available():
        return findings.skipped("distributed", "distributed_unavailable")
    cuda = torch.cuda.is_available()
    gpus = torch.cuda.device_count() if cuda else 0
    backend = opts.get("backend") or "auto"
    torchrun = _under_torchrun()
    if not opts.get("backend") and gpus == 0 and not torchrun:
        # From `report --full` on a machine without a GPU: the CPU gloo run costs 15-25 s and
        # says nothing about the GPUs; the distributed command still runs it when asked.
        return findings.skipped("distributed", "no_cuda_device:distributed")
    if backend == "auto" and gpus == 1 and not torchrun and not opts.get("nproc"):
        # One GPU (report --full, or `gpudoctor distributed` without --backend/--nproc): two CPU gloo
        # ranks cost 15-25 s and say nothing about the GPU; NCCL on it, as a world of one, does.
        return _nccl_on_one_gpu(torch, dist)
    chosen = _choose_backend(dist, backend, cuda, gpus, torchrun)
    if isinstance(chosen, ProbeResult):
        return chosen
    backend, skipped = chosen
    sizes = [int(s) for s in (opts.get("sizes") or DEFAULT_SIZES[backend])]
    if opts.get("timeout_s"):  # the caller gave the runner a matching limit
        timeout_s = float(opts["timeout_s"])
    else:
        timeout_s = max(5.0, min(DEFAULT_TIMEOUT_S, ctx.time_left() - 10.0))
    plan = _Plan(backend, sizes, timeout_s, float(opts.get("target_s") or 0.2), gpus, skipped)
    return _run_under_torchrun(ctx, plan) if torchrun else _run_local(ctx, plan)


def _choose_backend(dist: ModuleType, backend: str, cuda: bool, gpus: int,
                    torchrun: bool) -> tuple[str, list[tuple[str, str]]] | ProbeResult:
    """The backend to check and the parts left out ("auto": NCCL where every rank on this node has
    a GPU, else gloo on the CPU, said in a skip finding), or the skip result when the backend
    cannot run here."""
    skipped: list[tuple[str, str]] = []
    # NCCL wants one GPU per rank on this node: under torchrun that is LOCAL_WORLD_SIZE
    # ranks (one per node is fine), otherwise the ranks we start here (at least 2).
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1) if torchrun else 2
    if backend == "auto":
        backend = "nccl" if gpus >= local_ranks and gpus > 0 and dist.is_nccl_available() else "gloo"
        if backend == "gloo":
            why = (_wording.NCCL_NO_DEVICE if gpus == 0 else
                   _wording.NCCL_NOT_BUILT if not dist.is_nccl_available() else
                   _wording.NCCL_TOO_FEW_GPUS.format(gpus=gpus, plural="s" if gpus != 1 else "", ranks=local_ranks))
            skipped.append(("nccl_skipped", why))
    if backend == "nccl" and not (cuda and dist.is_nccl_available()):
        why = _wording.NCCL_NOT_BUILT if not dist.is_nccl_available() else _wording.NCCL_NO_CUDA
        return findings.skipped("distributed", "nccl_unavailable", why=why)
    if backend == "gloo" and not dist.is_gloo_available():
        return findings.skipped("distributed", "gloo_unavailable")
    return backend, skipped


def _run_under_torchrun(ctx: ProbeContext, plan: _Plan) -> ProbeResult:
    """Under torchrun this process is one rank; the ranks exchange their payloads, so every rank
    builds the same result."""
    from ._distributed_worker import run_rank

    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if plan.backend == "nccl" and local_rank >= plan.gpus:
        return findings.errored("distributed", "no_local_gpu", rank=local_rank, gpus=plan.gpus)
    everyone = run_rank(rank=int(os.environ["RANK"]), world=world, local_rank=local_rank,
                        backend=plan.backend, sizes=plan.sizes, init_method="env://", timeout_s=plan.timeout_s,
                        target_s=plan.target_s, gather=True)
    payloads = {p["rank"]: p for p in everyone}
    return _unseen_gpus(assemble(payloads, {}, world, plan.backend, "torchrun", plan.skipped), ctx, plan.gpus,
                        plan.backend)


def _run_local(ctx: ProbeContext, plan: _Plan) -> ProbeResult:
    """The ranks started here, on 127.0.0.1: one per GPU for NCCL (``nproc`` option: how many)."""
    opts, backend, gpus = ctx.options, plan.backend, plan.gpus
    nproc = int(opts.get("nproc") or (gpus if backend == "nccl" else 2))
    if backend == "nccl" and nproc > gpus:
        return findings.skipped("distributed", "not_enough_gpus", nproc=nproc, gpus=gpus)
    if nproc < 2:
        return findings.skipped("distributed", "one_rank")
    payloads, failures = launch_local(nproc, backend, plan.sizes, plan.timeout_s, target_s=plan.target_s,
                                      fault=str(opts.get("fault") or ""))
    return _unseen_gpus(assemble(payloads, failures, nproc, backend, "local", plan.skipped), ctx, gpus, backend)


NCCL_ONE_GPU_TIMEOUT_S = 60.0


def _nccl_on_one_gpu(torch: ModuleType, dist: ModuleType) -> ProbeResult:
    """NCCL loaded, initialised and all-reducing on the only GPU (a world of one, an in-process
    store: nothing listens). Bandwidth between GPUs needs two of them; that is said, not faked."""
    import datetime

    result = ProbeResult(probe="distributed")
    result.details.update(mode="single_gpu", backend="nccl", world_size=1)
    if not dist.is_nccl_available():
        return findings.skipped("distributed", "nccl_unavailable:one_gpu")
    version = getattr(torch.cuda.nccl, "version", lambda: None)()
    shown = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version or "?")
    result.measure("nccl_version", shown)
    start = time.monotonic()
    try:
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=NCCL_ONE_GPU_TIMEOUT_S))
        try:
            tensor = torch.ones(1 << 20, device="cuda:0")
            dist.all_reduce(tensor)
            torch.cuda.synchronize(0)
            correct = bool(torch.all(tensor == 1).item())
        finally:
            dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 - NCCL's own error is the finding
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        result.findings.append(findings.finding("nccl_init_failed", error=text))
        return _finish(result, None)
    result.measure("nccl_init_and_all_reduce", round(time.monotonic() - start, 3), "s")
    if not correct:
        result.findings.append(findings.finding("nccl_wrong_result"))
        return _finish(result, None)
    result.findings.append(findings.finding("one_gpu"))
    return _finish(result, f"NCCL {shown} starts and all-reduces on the GPU (world of one)")


def _unseen_gpus(result: ProbeResult, ctx: ProbeContext, gpus: int, backend: str) -> ProbeResult:
    """A check that ran with gloo on the CPU while NVML sees GPUs torch cannot use says nothing
    about those GPUs: it fails, with why CUDA cannot start where the driver says, instead of
    passing as "healthy" (the same fact the devices probe fails on)."""
    from gpudoctor.backends.cuda_driver import cuda_start_findings
    from gpudoctor.backends.visibility import visible_nvml_indices

    if backend != "gloo" or gpus > 0:
        return result
    try:
        visible = visible_nvml_indices(ctx.gpu) if ctx.gpu.status() is None else []
    except Exception:  # NVML trouble is the health probe's to report; here it only means "unknown"
        visible = []
    if not isinstance(visible, list) or not visible:
        return result
    result.findings.extend(cuda_start_findings(ctx.cuda_start(), len(visible)))
    result.findings.append(findings.finding("gpus_not_checked", count=len(visible)))
    result.status = Status.worst((f.status for f in result.findings), default=Status.PASS)
    result.summary = f"the {len(visible)} GPU(s) NVML sees were not checked (gloo on the CPU); " + result.summary
    return result


PROBE = Probe.define(__name__, run, "Distributed: all-reduce bandwidth, DDP agreement, stragglers, peers",
                     level="full", uses_torch=True, timeout_s=DEFAULT_TIMEOUT_S + 60.0, order=900, asks_cuda_start=True,
                     description="torch.distributed on N ranks: NCCL on GPUs, gloo on CPU.")
