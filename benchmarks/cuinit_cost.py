"""What starting the CUDA driver costs, with each GPU's persistence mode as found.

Run on a GPU machine (the GPU kit's first command runs it):

    python benchmarks/cuinit_cost.py [--runs 5] [--json FILE]

The quick report, the exporter and the TUI ask whether CUDA starts through
``gpudoctor.backends.cuda_driver.cuda_start``: ``cuInit`` in a child process with a time limit of
``TIMEOUT_S`` (no torch, no context). This measures, in fresh processes one after another:

- ``cuinit_s``: ``cuInit(0)`` alone, timed inside a child around the call (libcuda already loaded);
- ``cuda_start_wall_s``: the whole ``cuda_start()`` call as the report makes it (interpreter start,
  loading libcuda, cuInit, cuDeviceGetCount), against ``interpreter_wall_s``, the same child
  start with nothing asked, so the difference is what the check adds to a report.

Each GPU's persistence mode is read through gpudoctor's NVML backend and reported, never changed:
without persistence mode the driver tears the GPU state down when the last client exits, and each
cuInit pays for setting it up again. Exit 0 when measured, 3 when CUDA did not start here (the
answer is printed; nothing timed), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# cuInit alone: libcuda is loaded first, so only the driver's start is inside the timed window.
_TIMED_CUINIT = r"""
import ctypes, json, time
lib = ctypes.CDLL("libcuda.so.1")
started = time.perf_counter()
code = lib.cuInit(0)
print(json.dumps({"code": code, "seconds": time.perf_counter() - started}))
"""


def persistence_modes() -> dict[str, Any]:
    """Each GPU's name and persistence mode (1 on, 0 off, or why it could not be read), as found."""
    from gpudoctor.backends import NvmlBackend, is_na

    gpu = NvmlBackend()
    try:
        count = gpu.device_count()
        if is_na(count):
            return {"driver": None, "gpus": [], "nvml": str(count)}
        gpus = []
        for index in range(count):
            mode = gpu.sample(index).get("persistence_mode")
            gpus.append({"index": index, "name": str(gpu.static(index).get("name")),
                         "persistence_mode": mode if isinstance(mode, int) else str(mode)})
        return {"driver": str(gpu.driver_version()), "gpus": gpus}
    finally:
        gpu.close()


def _wall(argv: list[str], timeout_s: float) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    return time.perf_counter() - started, proc.stdout.strip()[-400:]


def measure(runs: int) -> dict[str, Any]:
    from gpudoctor.backends.cuda_driver import TIMEOUT_S, CudaStart, cuda_start

    first = cuda_start()
    if not isinstance(first, CudaStart) or not first.started:
        return {"started": False, "answer": first.to_dict() if isinstance(first, CudaStart) else str(first),
                "timeout_s": TIMEOUT_S}
    walls, baseline, cuinit = [], [], []
    for _ in range(runs):  # interleaved, so drift on the machine touches all three alike
        started = time.perf_counter()
        cuda_start()
        walls.append(time.perf_counter() - started)
        baseline.append(_wall([sys.executable, "-c", "import ctypes, json"], TIMEOUT_S)[0])
        _, line = _wall([sys.executable, "-c", _TIMED_CUINIT], TIMEOUT_S)
        answer = json.loads(line.splitlines()[-1]) if line else {}
        if answer.get("code") == 0:
            cuinit.append(float(answer["seconds"]))

    def spread(values: list[float]) -> dict[str, float | None]:
        if not values:
            return {"median": None, "min": None, "max": None}
        return {"median": round(statistics.median(values), 6), "min": round(min(values), 6),
                "max": round(max(values), 6)}

    return {"started": True, "answer": first.to_dict(), "runs": runs, "timeout_s": TIMEOUT_S,
            "cuinit_s": spread(cuinit), "cuda_start_wall_s": spread(walls), "interpreter_wall_s": spread(baseline),
            "cuda_start_added_s": round(statistics.median(walls) - statistics.median(baseline), 6)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per measurement (default 5)")
    parser.add_argument("--json", metavar="FILE", help="also write the result here")
    args = parser.parse_args(argv)
    if not 1 <= args.runs <= 50:
        parser.error("--runs must be between 1 and 50")
    from gpudoctor.system.fileio import atomic_write_json

    result: dict[str, Any] = {"date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              **persistence_modes(), **measure(args.runs)}
    if args.json:
        atomic_write_json(args.json, result)
    modes = ", ".join(f"GPU {g['index']} {g['name']}: persistence {g['persistence_mode']}" for g in result["gpus"])
    print(f"cuinit_cost, driver {result['driver']}, {result['date_utc']}; {modes or 'no GPU seen by NVML'}")
    if not result["started"]:
        print(f"CUDA did not start: {result['answer']}; nothing timed")
        return 3
    print(f"cuInit alone: median {result['cuinit_s']['median']} s (min {result['cuinit_s']['min']}, "
          f"max {result['cuinit_s']['max']}) over {args.runs} fresh processes")
    print(f"the report's CUDA check (cuda_start): median {result['cuda_start_wall_s']['median']} s, "
          f"{result['cuda_start_added_s']} s more than an empty child; its time limit is {result['timeout_s']:g} s")
    return 0


if __name__ == "__main__":
    import importlib.util

    if importlib.util.find_spec("gpudoctor") is None:  # run from a checkout without an install
        sys.path.insert(0, os.fspath(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
