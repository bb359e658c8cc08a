"""What the paired start-up benchmarks share (quick_vs_nvitop, tui_first_frame, watch_first_line):
the environment both programs run in, the interleaved timing rounds, the facts a result names
(date, machine, NVML), and how a result is shown."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

FAKE_NVML = Path(__file__).resolve().parent / "fake_nvml"


def program_env(fake_nvml: bool) -> dict[str, str]:
    """This environment, with bytecode written and used as an installed package has it, and with
    benchmarks/fake_nvml on PYTHONPATH when there is no driver (``fake_nvml``)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if fake_nvml:
        env["PYTHONPATH"] = os.pathsep.join([str(FAKE_NVML)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def run_facts(fake_nvml: bool) -> dict[str, str]:
    """The date, the machine (with its load now) and the NVML a result was measured on."""
    return {"date": time.strftime("%Y-%m-%d", time.gmtime()),
            "machine": f"{platform.machine()} {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
                       f"Python {platform.python_version()}",
            "nvml": "fake one-GPU H100 PCIe (benchmarks/fake_nvml)" if fake_nvml else "real driver"}


def paired_parser(doc: str, runs: int, warmup: int) -> argparse.ArgumentParser:
    """The options every paired benchmark takes: -n, --warmup, --bin, --fake-nvml."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("-n", type=int, default=runs, help=f"timed runs per program (default {runs})")
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--bin", default=os.path.dirname(sys.executable),
                        help="folder with the gpudoctor and nvitop commands (default: this Python's)")
    parser.add_argument("--fake-nvml", action="store_true", help="use benchmarks/fake_nvml (no driver here)")
    return parser


def interleaved(runs: dict[str, Callable[[], float | None]], n: int, warmup: int,
                before: Callable[[], float] | None = None) -> tuple[dict[str, list[float]], list[float]] | str:
    """``warmup`` + ``n`` rounds, each timing every run once, in alternating order (ours, theirs,
    theirs, ours...) so that the machine's drift and load fall on both alike; ``before`` (if any) is
    timed first in every round. The timed rounds' seconds per run and ``before``'s, or the name of
    the first run that gave no time (None)."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    first: list[float] = []
    for i in range(warmup + n):
        took_before = before() if before is not None else None
        if took_before is not None and i >= warmup:
            first.append(took_before)
        for name in (list(runs) if i % 2 == 0 else list(reversed(runs))):
            took = runs[name]()
            if took is None:
                return name
            if i >= warmup:
                times[name].append(took)
    return times, first


def paired_result(times: dict[str, list[float]], ours: str, theirs: str, target: float,
                  fake_nvml: bool) -> tuple[dict, dict[str, float], float]:
    """What every paired result says: the facts, the runs, each program's median (ms), the ratio of
    ``ours`` to ``theirs``, the target and whether it is met; with the medians and the ratio unrounded."""
    medians = {name: statistics.median(t) * 1000 for name, t in times.items()}
    ratio = medians[ours] / medians[theirs]
    result = {**run_facts(fake_nvml), "runs": len(times[ours]),
              **{f"{name}_median_ms": round(m, 1) for name, m in medians.items()},
              "ratio_of_medians": round(ratio, 3), "target": target, "met": ratio <= target}
    return result, medians, ratio


def show(result: dict, ratio: float, where: str, lines: list[str], as_json: bool) -> int:
    """Print ``result`` as JSON, or as text: its facts and ``where`` (the programs' folder...), the
    benchmark's own ``lines``, then the ratio of medians against the target. The exit code: 0 where
    the target is met, 1 where it is not."""
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['date']}  {result['machine']}  NVML: {result['nvml']}  {where}")
        for line in lines:
            print(line)
        print(f"  ratio of medians {ratio:.2f} (target <= {result['target']}): {'met' if result['met'] else 'NOT met'}")
    return 0 if result["met"] else 1
