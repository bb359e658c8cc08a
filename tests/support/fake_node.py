"""A fake NVIDIA HGX node of 8 (or up to 64) H100 GPUs on the test fake NVML (nvml_fake.FakePynvml):
a training job on most GPUs, one GPU idle, one running small kernels, with realistic readings that
change every second. For the TUI's compact view, ``--once``, the demo recording and a look in tmux
(``python tests/support/fake_node.py tui``: gpudoctor's CLI with this fake as its pynvml).

Not a reading of real hardware."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, so that `support` imports when run as a script

from support.nvml_fake import FakePynvml, gpm_table, nvml_error, util  # noqa: E402

GiB = 2**30
#: Per GPU: utilisation, memory used (GiB), SM activity, tensor activity, power (W), temperature,
#: and its processes (pid, GiB).
_PROFILES = (
    (98, 71.2, 88.0, 64.0, 655, 71, ((41021, 70.1),)),
    (97, 71.0, 86.0, 61.0, 640, 69, ((41022, 69.9),)),
    (99, 70.8, 89.0, 66.0, 662, 73, ((41023, 69.7),)),
    (96, 71.4, 85.0, 60.0, 631, 70, ((41024, 70.3),)),
    (100, 38.5, 9.0, 0.0, 212, 52, ((52210, 22.0), (52211, 15.4))),  # busy, but small kernels
    (0, 0.5, 0.0, 0.0, 71, 33, ()),  # idle
    (94, 64.0, 57.0, 0.0, 380, 61, ((52990, 63.0),)),
    (98, 71.1, 87.0, 63.0, 648, 72, ((41028, 70.0),)),
)

#: Who runs each fake process (user, command line, CPU %, resident memory in GiB): a torchrun job of
#: alice's on six GPUs, bob's two small-batch inference servers, carol's fine-tuning. Made up.
_OWNERS = {
    **{pid: ("alice", f"python -u train.py --config configs/llama3_8b.yaml --local-rank {rank}", 101.0, 14.2)
       for rank, pid in enumerate((41021, 41022, 41023, 41024, 41028))},
    52210: ("bob", "python serve.py --model mistral-7b --max-batch 1 --port 8001", 98.0, 6.1),
    52211: ("bob", "python serve.py --model mistral-7b --max-batch 1 --port 8002", 97.0, 6.0),
    52990: ("carol", "python finetune_lora.py --base llama3_8b --rank 16", 100.0, 11.3),
}


def process_info(pid: int, recorded: Any = None) -> dict[str, Any] | None:
    """The host's facts of a fake process (gpudoctor.backends.host.PsutilProcessInfo's answer), or
    None for a pid that is not one of the fake node's."""
    if pid not in _OWNERS:
        return None
    user, command, cpu, rss = _OWNERS[pid]
    return {"user": user, "command": command, "cpu_pct": cpu, "host_memory_bytes": int(rss * GiB), "uid": None}


def _wobble(value: float, index: int, spread: float) -> float:
    """``value`` moved by up to ``spread`` each second, the same for every reader in that second."""
    x = (int(time.time()) * 2654435761 + index * 40503) % 997 / 997
    return value + spread * (2 * x - 1) if value else value


class CountedInit(FakePynvml):
    """nvmlInit and nvmlShutdown counted as the real library counts them: a second user in the
    process (the TUI's start-up doctor beside its sampler) neither starts a new session nor ends
    the first one's; handles stay valid until the last shutdown."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.users = 0

    def nvmlInit(self) -> None:
        if self.users == 0:
            super().nvmlInit()
        else:
            self.init_calls += 1
        self.users += 1

    def nvmlShutdown(self) -> None:
        super().nvmlShutdown()
        self.users = max(0, self.users - 1)


def node(count: int = 8) -> FakePynvml:
    """An HGX H100 node of ``count`` GPUs (profiles repeat past 8)."""
    nvml = CountedInit(count=count)
    for i in range(count):
        u, mem, sm, tensor, watts, temp, procs = _PROFILES[i % len(_PROFILES)]
        nvml.devices[i].update({
            "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
            "nvmlDeviceGetUUID": f"GPU-{i:08x}-fa4e-0000-0000-000000000000",
            "nvmlDeviceGetPciInfo": SimpleNamespace(busId=f"00000000:{0x18 + 0x10 * i:02X}:00.0".encode()),
            "nvmlDeviceGetUtilizationRates": lambda u=u, i=i: util(int(min(100, _wobble(u, i, 2))), int(u * 0.4)),
            "nvmlDeviceGetMemoryInfo": SimpleNamespace(used=int(mem * GiB), free=int((79.6 - mem) * GiB),
                                                       total=int(79.6 * GiB), reserved=int(0.5 * GiB)),
            "nvmlDeviceGetTemperature": lambda sensor, temp=temp, i=i: int(_wobble(temp, i, 1)),
            "nvmlDeviceGetPowerUsage": lambda watts=watts, i=i: int(_wobble(watts, i, 15) * 1000),
            "nvmlDeviceGetEnforcedPowerLimit": 700_000,
            "nvmlDeviceGetClockInfo": lambda kind: 1980 if kind == 1 else 2619,
            "nvmlDeviceGetMaxClockInfo": lambda kind: 1980 if kind == 1 else 2619,
            "nvmlDeviceGetPerformanceState": 0 if u else 8,
            "nvmlDeviceGetCurrentClocksEventReasons": 0 if u else 1,
            "nvmlDeviceGetFanSpeed": nvml_error("NotSupported"),  # SXM boards have no fan of their own
            "nvmlDeviceGetPcieThroughput": lambda counter, u=u: 900_000 if u else 12,
            "nvmlDeviceGetComputeRunningProcesses": [SimpleNamespace(pid=pid, usedGpuMemory=int(gib * GiB))
                                                     for pid, gib in procs],
            "nvmlDeviceGetGraphicsRunningProcesses": [],
            "nvmlDeviceGetTotalEccErrors": lambda *a: 0,
            "gpm": gpm_table(sm=sm, occupancy=sm * 0.4, tensor=tensor, hmma=tensor, dram=sm * 0.5,
                             fp32=3.0 if sm < 20 else 12.0),
        })
    return nvml


def install(count: int = 8) -> FakePynvml:
    """Make ``import pynvml`` give this node (before gpudoctor reads NVML), and the host's process
    reader answer for the node's fake pids (which are no processes of this machine) with their
    user and command, as it would on the node: the TUI, ``--once`` and ``record`` show them."""
    from gpudoctor.backends import host

    fake = node(count)
    sys.modules["pynvml"] = fake  # type: ignore[assignment]

    class NodeProcessInfo(host.PsutilProcessInfo):
        def __call__(self, pid: int, recorded: Any) -> dict[str, Any]:
            return process_info(pid) or super().__call__(pid, recorded)

    host.PsutilProcessInfo = NodeProcessInfo  # type: ignore[misc]
    return fake


if __name__ == "__main__":  # python tests/support/fake_node.py [--gpus N] <gpudoctor arguments>
    args: list[str] = sys.argv[1:]
    gpus = 8
    if args[:1] == ["--gpus"]:
        gpus, args = int(args[1]), args[2:]
    install(gpus)
    from gpudoctor.cli import main

    sys.exit(main(args))
