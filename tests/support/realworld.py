"""The real-world corpus's runners (tests/probes/test_realworld.py): each case's posted facts
handed to gpudoctor's own checks as stand-ins (a fake GPU, a laid-out root, a stand-in Prometheus)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpudoctor import fleet
from gpudoctor.core import xid
from gpudoctor.backends import fatbin, stack
from gpudoctor.backends.cuda_driver import CudaStart
from gpudoctor.backends.base import DeviceIdentity, MigDeviceReading
from gpudoctor.backends.stack import Stack
from gpudoctor.backends.events import DeviceEvents, GpuEvent
from gpudoctor.backends.na import NA, decode
from gpudoctor.core.model import ProbeResult, Status
from gpudoctor.probes import ProbeContext
from support.stack_layout import lay_out

DATA = Path(__file__).parents[1] / "data" / "realworld"
CASE_FILES = sorted(DATA.glob("*.json"))
CHECKS = ("environment", "devices", "health", "kernel_log", "fleet", "p2p")


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _na(value: Any) -> Any:
    """``{"NA": reason}`` in a case file stands for gpudoctor's not-available value."""
    return decode(value, "NA")


# --------------------------------------------------------------------------- stand-ins for the backends
class FakeGpu:
    """The NVML backend's answers for the posted machine (only what the probes ask)."""

    kind = "nvml"

    def __init__(self, inputs: dict[str, Any]) -> None:
        self._driver = inputs.get("driver")
        self._driver_cuda = inputs.get("driver_cuda")
        self._gpus = inputs.get("gpus") or []
        self._mig = inputs.get("mig_devices")
        # NVML's failure to start as posted ("Failed to initialize NVML: ..." -> its NVML error name)
        self._failed = NA(inputs["nvml_status"]) if inputs.get("nvml_status") else None

    def status(self) -> Any:
        return self._failed

    def driver_version(self) -> Any:
        return self._failed or (self._driver if self._driver else NA("NotPosted"))

    def cuda_driver_version(self) -> Any:
        return self._failed or (self._driver_cuda if self._driver_cuda else NA("NotPosted"))

    def device_count(self) -> Any:
        return self._failed or len(self._gpus)

    def static(self, index: int) -> dict[str, Any]:
        g = self._gpus[index]
        out = {"index": index, "name": g.get("name", "(not posted)"),
               "uuid": g.get("uuid", f"GPU-{index:08d}-not-posted"),
               "pci_bus_id": g.get("pci_bus_id", f"00000000:{index + 1:02x}:00.0"),
               "mig_mode": g.get("mig_mode", 0)}
        if g.get("compute_capability"):
            out["compute_capability"] = g["compute_capability"]
        return out

    def identity(self, index: int) -> DeviceIdentity:
        """What the torch-to-NVML resolver reads: the device's bus id and UUID."""
        return DeviceIdentity(self.static(index).get("pci_bus_id"), self.static(index).get("uuid"))

    def mig_devices(self, index: int, readings: bool = True) -> Any:
        """NVML's MIG devices of GPU ``index`` where the thread posted them (``nvidia-smi -L``: their
        UUIDs, in ``inputs["mig_devices"]`` by GPU index), else NA: a GPU in MIG mode says none was
        posted, one not in it that it has none."""
        if self.static(index).get("mig_mode") != 1:
            return NA("MigDisabled")
        posted = (self._mig or {}).get(str(index))
        if not posted:
            return NA("NotPosted")
        unposted = NA("NotPosted")  # a reading the thread did not post
        return [MigDeviceReading.from_mapping({"parent": index, "slot": slot, **{k: unposted for k in (
                    "gpu_instance_id", "compute_instance_id", "name", "profile", "sm_count", "memory_size_bytes",
                    "memory_used_bytes", "memory_total_bytes", "gpu_util_pct", "energy_mj", "sm_active_pct",
                    "processes")}, **m}) for slot, m in enumerate(posted)]


HOST = {"python": "3.12", "os": "Linux", "cpu_model": "(not posted)", "cpu_logical": 8,
        "ram_total_bytes": 64 * 2 ** 30}


def _torch_facts(torch: dict[str, Any]) -> dict[str, Any]:
    """The posted torch facts, with torch_facts()'s other keys at neutral values."""
    facts: dict[str, Any] = {
        "importable": True, "hip_build": None, "git_version": None, "debug_build": False, "python": "3.12",
        "arch_list": [], "cudnn_available": True, "cudnn_version": "9.1.0", "nccl_version": None,
        "distributed_available": True, "mps_available": False, "xpu_available": False,
        "cuda_warnings": [], "cuda_init_error": None, "devices": [],
        "torchvision": {"installed": False, "version": None, "ops_ok": False, "error": "torchvision is not installed"},
    }
    facts.update(_na(torch))
    if facts.get("device_count") and not facts["devices"] and facts.get("cuda_available") is True:
        facts["devices"] = []  # devices stay unposted: the probes then use NVML's list
    return facts


def _extensions(inputs: dict[str, Any]) -> fatbin.ExtensionScan | NA:
    """The posted compiled extensions (path in site-packages -> its cubin and PTX targets, and the
    distribution that installed it) as the fat-binary scan would have read them; NA where none was posted."""
    posted = inputs.get("extensions")
    if not posted:
        return NA("NotPosted")
    scan = fatbin.ExtensionScan("(site-packages as posted)")
    for path, ext in posted.items():
        archs = fatbin.FatbinArchs()
        archs.has_fatbin = True
        archs.sass, archs.ptx = set(ext.get("sass", [])), set(ext.get("ptx", []))
        scan.found[path] = archs
        if ext.get("distribution"):
            scan.distributions[path] = ext["distribution"]
    return scan


def _stack(inputs: dict[str, Any], root: Path) -> Stack | NA:
    """The posted files (the module version file, the libraries' names, cgroup lines, /dev nodes, the
    PCI bus) laid out under ``root`` and read by the live readers, with the posted environment."""
    posted = inputs.get("stack")
    if not posted:
        return NA("NotPosted")
    return stack.read_stack(str(lay_out(root, posted.get("files") or {})), posted.get("env") or {})


def _cuda_start(inputs: dict[str, Any]) -> CudaStart | NA:
    # The CUDA driver's own start (cuInit) was not posted in most threads: unknown, not a pass.
    posted = inputs.get("cuda_start")
    return CudaStart(**posted) if posted else NA("NotRecorded")


def _context(inputs: dict[str, Any], root: Path | None = None) -> ProbeContext:
    return ProbeContext(FakeGpu(inputs), _torch_facts=_torch_facts(inputs.get("torch") or {}),
                        _host_facts=dict(HOST), _cuda_start=_cuda_start(inputs), _extensions=_extensions(inputs),
                        _stack=_stack(inputs, root) if root is not None else NA("NotPosted"))


# --------------------------------------------------------------------------- the checks
def run_environment(inputs: dict[str, Any], monkeypatch: pytest.MonkeyPatch, root: Path) -> ProbeResult:
    from gpudoctor.probes import environment

    for name, value in (inputs.get("env") or {}).items():
        monkeypatch.setenv(name, value)
    return environment.run(_context(inputs, root))


def run_devices(inputs: dict[str, Any], monkeypatch: pytest.MonkeyPatch, root: Path) -> ProbeResult:
    from gpudoctor.probes import devices

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    for name, value in (inputs.get("env") or {}).items():
        monkeypatch.setenv(name, value)
    return devices.run(_context(inputs, root))


def run_health(inputs: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> ProbeResult:
    from gpudoctor.probes import health

    r = ProbeResult("health")
    processes = _na(inputs["nvml_processes"]) if "nvml_processes" in inputs else None
    health.check_device(r, 0, _na(inputs["nvml_static"]), _na(inputs["nvml_sample"]), processes)
    return r.settle()




def run_kernel_log(inputs: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[ProbeResult, list]:
    from gpudoctor.probes import events

    found = xid.parse_kmsg(inputs["kernel_log"])
    # plain dmesg lines carry no boot-relative time: order them as posted; a follow-up's named cause
    # goes in before it, as the event watcher files them
    timed = [dataclasses.replace(x, time=float(i)) for i, x in enumerate(xid.with_named_causes(found))]
    r = ProbeResult("events")
    by_bus: dict[str, list[Any]] = {}
    for x in timed:
        by_bus.setdefault(x.pci_bus_id, []).append(x)
    states = {}
    for index, (_bus, xids) in enumerate(sorted(by_bus.items())):
        # as the event watcher files kernel-log Xids for the events probe
        logged = [GpuEvent(x.time, "xid", x.code, "kernel_log") for x in xids]
        states[index] = DeviceEvents(logged_xids=logged)
        events._judge_gpu(r, index, states[index])
    # the node is the GPUs the posted log names (a thread rarely posts the GPUs that logged nothing)
    events._judge_node(r, states, list(states))
    return r.settle(), found


FLEET_NOW = 1_800_000_000.0


class FakePrometheus:
    """Answers fleet.collect()'s instant queries from the posted series of one dcgm-exporter node."""

    url = "http://prometheus.invalid:9090"

    def __init__(self, series: list[dict[str, Any]], history: list[dict[str, Any]] | None = None) -> None:
        self.queries = 0
        base = {"instance": "node-1:9400", "job": "dcgm-exporter"}
        # a gauge's posted values over time, as a range selector returns them: samples [seconds before
        # the look, value], oldest first
        self._history = [(dict(base, __name__=h["name"], **h["labels"]),
                          [(FLEET_NOW + float(t), float(v)) for t, v in h["samples"]]) for h in history or []]
        self._series = [fleet.Series(dict(base, __name__=s["name"], **s["labels"]), float(s["value"]))
                        for s in series]
        gpus = sorted({s.labels.get("gpu", "0") for s in self._series})
        # dcgm-exporter's default set always carries the temperature gauge: that is how fleet finds its GPUs
        # (the reading itself is not a posted fact and plays no part in the verdict)
        self._known = [fleet.Series(dict(base, __name__="DCGM_FI_DEV_GPU_TEMP", gpu=g), 40.0) for g in gpus]

    def query_history(self, expr: str, at: float | None = None) -> list[tuple[dict[str, str], list]]:
        self.queries += 1
        return [(labels, samples) for labels, samples in self._history if labels["__name__"] in _names(expr)]

    def query(self, expr: str, at: float | None = None) -> list[fleet.Series]:
        self.queries += 1
        if expr.startswith("up"):
            return [fleet.Series({"__name__": "up", "instance": "node-1:9400", "job": "dcgm-exporter"}, 1.0)]
        if expr.startswith('last_over_time({__name__=~"DCGM_FI_DEV_GPU_TEMP'):  # the GPUs dcgm-exporter exports
            return list(self._known)
        if expr.startswith("last_over_time("):
            return []
        wanted = _names(expr)
        return [s for s in self._series + self._known if s.labels["__name__"] in wanted]


def _names(expr: str) -> set[str]:
    """The metric names a PromQL selector asks for: its __name__ regex of alternatives, or the name
    before its braces."""
    names = re.search(r'__name__=~"([^"]*)"', expr)
    return set(names.group(1).split("|")) if names else {expr.partition("{")[0]}


def run_fleet(inputs: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> fleet.FleetView:
    return fleet.collect(FakePrometheus(inputs["series"], inputs.get("history")), now=FLEET_NOW)


def _acs(bdf: str, posted: Any) -> Any:
    from gpudoctor.backends import pcie_paths

    if isinstance(posted, str) and posted.startswith("0x"):
        return pcie_paths.acs_from_register(bdf, int(posted, 16))
    [acs] = pcie_paths.acs_from_lspci(posted, bdf)
    return acs


def run_p2p(inputs: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> ProbeResult:
    from gpudoctor.backends import pcie_paths
    from gpudoctor.probes import _p2p

    bus = inputs["gpus"]
    pairs = []
    for posted in inputs["pairs"]:
        a, b = posted["gpus"]
        acs = posted.get("acs")
        pair = _p2p.PairPath(a, b, _na(posted["nvml"]), (bus[a], bus[b]), None if acs is None else list(acs))
        pair.acs = {bdf: _acs(bdf, line) for bdf, line in (acs or {}).items()}
        pairs.append(pair)
    words = pcie_paths.cmdline_words(inputs.get("cmdline", ""))
    units = inputs.get("iommu_units", [])
    kind = inputs.get("iommu_group_type") or pcie_paths.group_type_from_cmdline(words, units)
    iommu = pcie_paths.IommuState(True, units, words, {b: kind for b in bus})
    host = _p2p.HostPaths(True, "not posted in the thread", bool(inputs.get("vm")), iommu)
    r = ProbeResult("p2p")
    _p2p.judge(r, pairs, host)
    return r.settle()


# --------------------------------------------------------------------------- verdicts
def _finding_text(f: Any) -> str:
    return " ".join(str(getattr(f, k, "") or "") for k in ("summary", "why", "fix"))


def assert_probe_verdict(result: ProbeResult, expected: dict[str, Any]) -> None:
    codes = {f.code: f for f in result.findings}
    shown = [(Status(f.status).value, f.code) for f in result.findings]
    if expected.get("status"):
        assert Status(result.status).value == expected["status"], f"status {Status(result.status).value}: {shown}"
    if expected.get("code"):
        assert expected["code"] in codes, f"no {expected['code']} finding: {shown}"
        if expected.get("status") in ("fail", "warn"):
            assert Status(codes[expected["code"]].status).value == expected["status"], shown
    if expected.get("code_any"):
        assert set(expected["code_any"]) & set(codes), f"none of {expected['code_any']}: {shown}"
    for code in expected.get("absent", []):
        assert code not in codes, f"{code} should not be found: {shown}"
    if expected.get("words"):
        relevant = [codes[expected["code"]]] if expected.get("code") in codes else result.findings
        text = " ".join(_finding_text(f) for f in relevant).lower()
        for word in expected["words"]:
            assert word.lower() in text, f"{word!r} not in: {text[:400]}"
