"""Raw NVML facts that settle what gpudoctor assumes about a real GPU, read with pynvml directly.

Run on a GPU machine (the GPU kit's first command runs it):

    python benchmarks/gpu_facts.py --json gpu_facts.json [--smoke]

Each section is written to the JSON file as soon as it is done, so a run cut off by its time limit
keeps what it read; a section that fails records its error and the next one runs. Nothing here
changes a clock, a power limit or a mode. Sections, on GPU 0:

- ``identity``: name, architecture, CUDA compute capability, driver and NVML versions.
- ``gpm_interval``: while a bf16 GEMM loop keeps the GPU busy (torch, when it sees a GPU), GPM
  sample pairs taken 10, 20, 50, 100, 200 and 500 ms apart, with each metric's own return code,
  SM and tensor activity, and what each nvmlGpmSampleGet cost: the shortest interval whose
  readings agree with the 500 ms ones is GPM's real minimum (gpudoctor's GPM_MIN_INTERVAL_S).
- ``nvlink``: every link's state and the raw unsigned value nvmlDeviceGetNvLinkVersion answers
  (nvml.h declares ``unsigned int *version``), beside pynvml's NVML_NVLINK_VERSION_* names.
- ``power``: nvmlDeviceGetPowerUsage beside the fields NVML_FI_DEV_POWER_AVERAGE (185) and
  NVML_FI_DEV_POWER_INSTANT (186), 10 times a second for 2 s under the same load.
- ``pid_namespace``: this process's PID namespace and PID, and the PIDs of the running-process
  list and of the per-process utilisation samples while this process holds a CUDA context: whether
  the two lists number processes alike here.

Exit 0 when every section ran (some may record NotSupported), 3 when NVML does not start, 2 on
usage errors. ``--smoke`` shortens every wait (the script's own check on any machine).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

INTERVALS_S = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
PAIRS = 3
GPM_METRICS = (("sm_active_pct", "NVML_GPM_METRIC_SM_UTIL", 2),
               ("tensor_active_pct", "NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5))
POWER_FIELDS = (("power_average_field", 185), ("power_instant_field", 186))
NVLINK_LINKS = 18  # NVML_NVLINK_MAX_LINKS


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def _call(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - every NVML answer is a fact to record, errors included
        return {"error": _err(exc)}


class Load:
    """A bf16 GEMM loop on cuda:0 in a thread (nothing when torch sees no GPU), kept queued a few
    products deep so the GPU stays busy between its synchronisations."""

    def __init__(self, smoke: bool) -> None:
        self.running = False
        self.note = "no load: torch sees no CUDA GPU"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            import torch
        except ImportError:
            self.note = "no load: torch is not installed"
            return
        if not torch.cuda.is_available():
            return
        n = 1024 if smoke else 8192
        a = torch.randn(n, n, device="cuda:0", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda:0", dtype=torch.bfloat16)

        def loop() -> None:
            while not self._stop.is_set():
                for _ in range(8):
                    torch.matmul(a, b)
                torch.cuda.synchronize()

        self._thread = threading.Thread(target=loop, daemon=True)
        self.note = f"bf16 matmul {n}x{n}x{n} on cuda:0, 8 queued between synchronisations"

    def __enter__(self) -> "Load":
        if self._thread is not None:
            self._thread.start()
            self.running = True
            time.sleep(0.3)  # let the queue fill before the first sample
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def identity(nv: Any, h: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, fn in (("name", lambda: nv.nvmlDeviceGetName(h)),
                    ("driver", nv.nvmlSystemGetDriverVersion),
                    ("nvml_version", nv.nvmlSystemGetNVMLVersion),
                    ("architecture", lambda: nv.nvmlDeviceGetArchitecture(h)),
                    ("cuda_capability", lambda: list(nv.nvmlDeviceGetCudaComputeCapability(h))),
                    ("persistence_mode", lambda: nv.nvmlDeviceGetPersistenceMode(h))):
        value = _call(fn)
        out[key] = value.decode() if isinstance(value, bytes) else value
    return out


def _gpm_pair(nv: Any, h: Any, interval: float) -> dict[str, Any]:
    first, second = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
    try:
        t0 = time.perf_counter()
        nv.nvmlGpmSampleGet(h, first)
        get_s = time.perf_counter() - t0
        time.sleep(interval)
        t1 = time.perf_counter()
        nv.nvmlGpmSampleGet(h, second)
        apart = time.perf_counter() - t0 - get_s
        get2_s = time.perf_counter() - t1
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = getattr(nv, "NVML_GPM_METRICS_GET_VERSION", 1)
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = first, second
        for i, (_key, name, default) in enumerate(GPM_METRICS):
            request.metrics[i].metricId = getattr(nv, name, default)
        nv.nvmlGpmMetricsGet(request)
        out: dict[str, Any] = {"asked_s": interval, "apart_s": round(apart, 4),
                               "sample_get_ms": [round(get_s * 1e3, 3), round(get2_s * 1e3, 3)]}
        for i, (key, _name, _default) in enumerate(GPM_METRICS):
            metric = request.metrics[i]
            out[key] = {"return": int(metric.nvmlReturn), "value": round(float(metric.value), 2)}
        return out
    finally:
        nv.nvmlGpmSampleFree(first)
        nv.nvmlGpmSampleFree(second)


def gpm_interval(nv: Any, h: Any, load: Load, smoke: bool) -> dict[str, Any]:
    support = _call(lambda: nv.nvmlGpmQueryDeviceSupport(h))
    supported = getattr(support, "isSupportedDevice", None)
    out: dict[str, Any] = {"load": load.note, "supported": supported if supported is not None else support}
    if not supported:
        return out
    pairs = []
    for interval in INTERVALS_S:
        for _ in range(1 if smoke else PAIRS):
            pairs.append(_call(lambda interval=interval: _gpm_pair(nv, h, interval / (10 if smoke else 1))))
    out["pairs"] = pairs
    return out


def nvlink(nv: Any, h: Any) -> dict[str, Any]:
    names = {k: getattr(nv, k) for k in dir(nv) if k.startswith("NVML_NVLINK_VERSION_")}
    links = []
    for link in range(NVLINK_LINKS):
        state = _call(lambda link=link: nv.nvmlDeviceGetNvLinkState(h, link))
        if isinstance(state, dict) and link > 0:
            break  # past the board's links (InvalidArgument) or no NVLink at all
        links.append({"link": link, "state": state,
                      "version_raw": _call(lambda link=link: int(nv.nvmlDeviceGetNvLinkVersion(h, link)))})
    return {"pynvml_version_names": names, "links": links}


_UNION = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _fields(nv: Any, h: Any) -> dict[str, Any]:
    """Each power field's answer as NVML gives it: its return code, value type and raw value (the
    union member its type names; nvml.h gives the power fields in milliwatts)."""
    out: dict[str, Any] = {}
    answers = nv.nvmlDeviceGetFieldValues(h, [field for _key, field in POWER_FIELDS])
    for (key, _field), answer in zip(POWER_FIELDS, answers):
        member = _UNION.get(int(answer.valueType))
        out[key] = {"return": int(answer.nvmlReturn), "value_type": int(answer.valueType),
                    "raw": getattr(answer.value, member) if member and int(answer.nvmlReturn) == 0 else None}
    return out


def power(nv: Any, h: Any, smoke: bool) -> dict[str, Any]:
    readings = []
    for _ in range(3 if smoke else 20):
        row: dict[str, Any] = {"t": round(time.monotonic(), 3),
                               "power_usage_w": _call(lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000)}
        fields = _call(lambda: _fields(nv, h))
        row.update(fields if "error" not in fields else {"fields": fields})
        readings.append(row)
        time.sleep(0.1)
    return {"readings": readings}


def pid_namespace(nv: Any, h: Any) -> dict[str, Any]:
    def pids(fn: Callable[[], Any]) -> Any:
        answer = _call(fn)
        return answer if isinstance(answer, dict) else sorted(int(p.pid) for p in answer)

    return {"ns_pid": _call(lambda: os.readlink("/proc/self/ns/pid")), "pid": os.getpid(),
            "running_processes": pids(lambda: nv.nvmlDeviceGetComputeRunningProcesses(h)),
            "utilization_samples": pids(lambda: nv.nvmlDeviceGetProcessUtilization(h, 0))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE", required=True, help="write the facts here, section by section")
    parser.add_argument("--smoke", action="store_true", help="short waits: the script's own check")
    args = parser.parse_args(argv)
    from gpudoctor.system.fileio import atomic_write_json

    try:
        import pynvml as nv

        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(0)
    except Exception as exc:  # noqa: BLE001 - no NVML here: said in one line
        print(f"gpu_facts: NVML did not start: {_err(exc)}", file=sys.stderr)
        return 3
    facts: dict[str, Any] = {"date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}

    def section(name: str, fn: Callable[[], Any]) -> None:
        started = time.perf_counter()
        facts[name] = _call(fn)
        print(f"gpu_facts: {name} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        atomic_write_json(args.json, facts)

    section("identity", lambda: identity(nv, h))
    with Load(args.smoke) as load:
        section("gpm_interval", lambda: gpm_interval(nv, h, load, args.smoke))
        section("power", lambda: power(nv, h, args.smoke))
        section("pid_namespace", lambda: pid_namespace(nv, h))
    section("nvlink", lambda: nvlink(nv, h))
    _call(nv.nvmlShutdown)
    return 0


if __name__ == "__main__":
    import importlib.util

    if importlib.util.find_spec("gpudoctor") is None:  # run from a checkout without an install
        sys.path.insert(0, os.fspath(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
