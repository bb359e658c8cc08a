"""The one fake NVML for the tests: a stand-in for the ``pynvml`` module, the seam that
:class:`gpudoctor.backends.NvmlGate` calls, so every test goes through the real gate and
backend (errors become ``NA``, readings are built as in production).

Configure it per test::

    nvml = FakePynvml(count=2, readings={"nvmlDeviceGetUtilizationRates": util(55)})
    nvml.devices[1]["nvmlDeviceGetName"] = "Other GPU"       # one device differs
    nvml.devices[0]["nvmlDeviceGetFanSpeed"] = nvml_error("NotSupported")
    backend = NvmlBackend(NvmlGate(nvml))

A reading is a value (returned), an exception class or instance (raised), or a callable
(called with the arguments after the handle: a sensor, a counter...). An ``nvmlDevice*``
function with no reading raises ``NVMLError_NotSupported``, as datacenter and consumer GPUs
do for what they lack. ``mode`` covers the whole library: "ok"; "unloaded" (the driver was
reloaded: every call raises ``Uninitialized`` until the next ``nvmlInit``); "lost" (every
device call raises ``GpuIsLost``); ``lost`` names single devices that fell off the bus. Handles carry the NVML session they came from, so a
handle from before a re-initialisation fails like a real one.

A GPU in MIG mode (:func:`h100_mig`) has a ``"mig"`` list: one readings dictionary per MIG device
slot (None: an empty slot, which NVML answers NotFound), each answering on its own MIG handle
(``nvmlDeviceGetMigDeviceHandleByIndex``) like a device does, NotSupported for what it lacks.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

from gpudoctor.backends import NvmlBackend, NvmlGate


class NVMLError(Exception):
    """Base of the fake's errors; the gate reads the error's name, as pynvml names them."""


_ERRORS: dict[str, type] = {}


def nvml_error(name: str) -> type:
    """The exception class ``NVMLError_<name>`` (one class per name)."""
    if name not in _ERRORS:
        _ERRORS[name] = type(f"NVMLError_{name}", (NVMLError,), {})
    return _ERRORS[name]


#: NVML return codes the fake names (nvml.h), for GPM's per-metric answers.
RETURN_CODES = {1: "Uninitialized", 2: "InvalidArgument", 3: "NotSupported", 4: "NoPermission",
                13: "FunctionNotFound", 15: "GpuIsLost", 999: "Unknown"}
_CODE_OF = {name: code for code, name in RETURN_CODES.items()}

#: GPM metric ids (NVML_GPM_METRIC_*): SM activity, occupancy, any tensor, HMMA tensor, DRAM, fp64,
#: fp32, fp16, PCIe tx/rx, NVLink rx/tx.
GPM_SM, GPM_OCC, GPM_TENSOR, GPM_HMMA, GPM_DRAM, GPM_FP64, GPM_FP32, GPM_FP16 = 2, 3, 5, 7, 10, 11, 12, 13
GPM_PCIE_TX, GPM_PCIE_RX, GPM_NVLINK_RX, GPM_NVLINK_TX = 20, 21, 60, 61


def gpm_table(sm: float = 9.0, occupancy: float = 6.0, tensor: float = 0.0, hmma: float = 0.0, dram: float = 4.0,
              fp64: float = 0.0, fp32: float = 3.0, fp16: float = 0.0, nvlink: Any = None) -> dict[int, Any]:
    """A GPM metric table (default: small fp32 kernels: SMs mostly idle, no tensor work); NVLink
    answers NotSupported unless given (a PCIe board)."""
    link = nvml_error("NotSupported") if nvlink is None else nvlink
    return {GPM_SM: sm, GPM_OCC: occupancy, GPM_TENSOR: tensor, GPM_HMMA: hmma, GPM_DRAM: dram, GPM_FP64: fp64,
            GPM_FP32: fp32, GPM_FP16: fp16, GPM_PCIE_TX: 120.5, GPM_PCIE_RX: 830.0, GPM_NVLINK_RX: link,
            GPM_NVLINK_TX: link}


def hopper(**gpm: Any) -> dict[str, Any]:
    """Readings of an H100 with GPM (``gpm`` as :func:`gpm_table` takes it)."""
    return {"nvmlDeviceGetName": "NVIDIA H100 80GB HBM3", "gpm": gpm_table(**gpm)}


def mig_slice(gpu_instance: int, compute_instance: int, *, profile: str = "3g.40gb", sm_count: int = 60,
              memory_mib: int = 40448, used_mib: int = 0, processes: Any = (), uuid: str | None = None) -> dict[str, Any]:
    """The readings of one MIG device of an H100 80GB: its ids, "MIG-" UUID, name with the profile,
    attributes (SMs, memory), memory in use and compute processes (a list, or an exception). Utilisation
    rates, power and energy are absent: NVML answers NotSupported for them on a MIG handle (energy and
    power it gives for the whole GPU only, utilisation rates not at all in MIG mode)."""
    procs = processes if isinstance(processes, BaseException) or (
        isinstance(processes, type) and issubclass(processes, BaseException)) else list(processes)
    return {
        "nvmlDeviceGetGpuInstanceId": gpu_instance,
        "nvmlDeviceGetComputeInstanceId": compute_instance,
        "nvmlDeviceGetUUID": uuid or f"MIG-{gpu_instance:08x}-5c1e-5b0e-9a39-0123456789{compute_instance:02x}",
        "nvmlDeviceGetName": f"NVIDIA H100 80GB HBM3 MIG {profile}",
        "nvmlDeviceGetAttributes": SimpleNamespace(multiprocessorCount=sm_count, memorySizeMB=memory_mib,
                                                   gpuInstanceSliceCount=3, computeInstanceSliceCount=3),
        "nvmlDeviceGetMemoryInfo": SimpleNamespace(used=used_mib << 20, free=(memory_mib - used_mib) << 20,
                                                   total=memory_mib << 20),
        "nvmlDeviceGetComputeRunningProcesses": procs,
    }


def h100_mig(*, processes: Any = None, gpm: bool = True) -> dict[str, Any]:
    """Readings of an H100 80GB in MIG mode with two 3g.40gb slices (GPU instances 1 and 2, compute
    instance 0 each, in slots 0 and 2; slot 1 empty); two processes run on the first slice (12 GiB in
    use), none on the second. ``processes``: what the first slice's process list answers instead (an
    exception such as ``nvml_error("NoPermission")``: a user without privileges). GPM per GPU instance
    where ``gpm``."""
    on_first = [SimpleNamespace(pid=4242, usedGpuMemory=8 << 30), SimpleNamespace(pid=4243, usedGpuMemory=4 << 30)]
    first = mig_slice(1, 0, used_mib=12 << 10, processes=on_first if processes is None else processes)
    second = mig_slice(2, 0, used_mib=0, processes=[] if processes is None else processes)
    readings: dict[str, Any] = {
        "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": "GPU-5c1e0000-1111-2222-3333-444455556666",
        "nvmlDeviceGetMigMode": (1, 1),
        "nvmlDeviceGetMaxMigDeviceCount": 7,
        "mig": [first, None, second],
        # in MIG mode the whole GPU's process list needs privileges (per slice it is read on the MIG handle)
        "nvmlDeviceGetComputeRunningProcesses": nvml_error("NoPermission"),
        # NVML has no utilisation rates on a GPU in MIG mode (nvidia-smi's GPU-Util N/A); power and
        # energy stay the whole GPU's
        "nvmlDeviceGetUtilizationRates": nvml_error("NotSupported"),
        "nvmlDeviceGetPowerUsage": 310_000,
        "nvmlDeviceGetTotalEnergyConsumption": 5_000_000,
    }
    if gpm:
        readings["gpm"] = gpm_table()
        readings["gpm_mig"] = {1: gpm_table(sm=41.5), 2: gpm_table(sm=0.0, fp32=0.0, dram=0.0)}
    return readings


class CountingGpm:
    """GPM as nvml.h describes it: ``nvmlGpmSampleGet`` takes a sample of the device's counters and
    ``nvmlGpmMetricsGet`` computes each metric from two samples, over the time between them. The test
    sets each metric's activity (percent, by GPM metric id) as work starts and stops (:meth:`set`);
    the counters integrate it over ``clock`` (monotonic seconds). A metric given no level answers
    NotSupported. Put one in a device's ``"gpm"`` in place of a :func:`gpm_table`."""

    def __init__(self, levels: dict[int, float], clock: Any = None) -> None:
        import threading
        import time

        self.clock = clock or time.monotonic
        self.levels = dict(levels)
        self.totals = {metric: 0.0 for metric in levels}
        self.since = self.clock()
        self.lock = threading.Lock()

    def _advance(self) -> float:
        now = self.clock()
        for metric, pct in self.levels.items():
            self.totals[metric] += pct * (now - self.since)
        self.since = now
        return now

    def set(self, **levels: float) -> None:
        """New activity levels from now on, by GPM_* name without the prefix (``tensor=95.0``)."""
        with self.lock:
            self._advance()
            for name, pct in levels.items():
                self.levels[globals()[f"GPM_{name.upper()}"]] = pct

    def sample(self) -> tuple[float, dict[int, float]]:
        with self.lock:
            return self._advance(), dict(self.totals)

    @staticmethod
    def metric(older: tuple[float, dict[int, float]], newer: tuple[float, dict[int, float]], metric: int) -> Any:
        if metric not in newer[1]:
            return nvml_error("NotSupported")
        elapsed = newer[0] - older[0]
        return (newer[1][metric] - older[1][metric]) / elapsed if elapsed > 0 else 0.0


class GpmMetricsGet:
    """Stands in for pynvml's c_nvmlGpmMetricsGet_t."""

    def __init__(self) -> None:
        self.version = self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(64)]


def field_values(answers: dict[int, Any]) -> Any:
    """An ``nvmlDeviceGetFieldValues`` reading: called with a list of field ids (NVML_FI_*), it
    answers one ``nvmlFieldValue_t`` per id as pynvml gives it (``nvmlReturn``, ``valueType``,
    ``value``): ``answers[id]`` is a number (an unsigned int, valueType 1; a callable is called each
    time) or an exception class, whose name becomes the field's return code; an id not in
    ``answers`` is NotSupported, as NVML answers for a field the GPU lacks."""
    def read(ids: list[int]) -> list[SimpleNamespace]:
        out = []
        for field in ids:
            answer = answers.get(field, nvml_error("NotSupported"))
            if isinstance(answer, type) and issubclass(answer, BaseException):
                code = _CODE_OF.get(answer.__name__.removeprefix("NVMLError_"), 999)
                out.append(SimpleNamespace(fieldId=field, nvmlReturn=code, valueType=1, value=SimpleNamespace(uiVal=0)))
            else:
                value = answer() if callable(answer) else answer
                out.append(SimpleNamespace(fieldId=field, nvmlReturn=0, valueType=1, value=SimpleNamespace(uiVal=value)))
        return out

    return read


def util(gpu: int, memory: int = 0) -> SimpleNamespace:
    """An ``nvmlDeviceGetUtilizationRates`` answer."""
    return SimpleNamespace(gpu=gpu, memory=memory)


#: What every fake device answers unless the test says otherwise.
DEFAULT_READINGS: dict[str, Any] = {
    "nvmlDeviceGetName": "Fake GPU",
    "nvmlDeviceGetPciInfo": SimpleNamespace(busId=b"00000000:65:00.0"),
    "nvmlDeviceGetUtilizationRates": util(55, 12),
    "nvmlDeviceGetTemperature": lambda sensor: 41,
}


#: The device functions this fake's pynvml has (those gpudoctor calls); any other name is
#: missing, as in an old nvidia-ml-py, unless a test gives it a reading.
DEVICE_FUNCTIONS = frozenset("nvmlDevice" + name for name in (
    "GetArchitecture", "GetClockInfo", "GetComputeMode", "GetComputeRunningProcesses",
    "GetCudaComputeCapability", "GetCurrPcieLinkGeneration", "GetCurrPcieLinkWidth",
    "GetCurrentClocksEventReasons", "GetCurrentClocksThrottleReasons", "GetEccMode",
    "GetEnforcedPowerLimit", "GetFanSpeed", "GetGpuMaxPcieLinkGeneration", "GetGraphicsRunningProcesses",
    "GetIndex", "GetMaxClockInfo", "GetMaxPcieLinkGeneration", "GetMaxPcieLinkWidth", "GetMemoryBusWidth",
    "GetMemoryInfo", "GetMigMode", "GetName", "GetNumFans", "GetNvLinkRemoteDeviceType",
    "GetNvLinkRemotePciInfo", "GetNvLinkState", "GetNvLinkVersion", "GetPciInfo", "GetPcieThroughput",
    "GetPerformanceState", "GetPersistenceMode", "GetPowerManagementDefaultLimit", "GetPowerUsage",
    "GetProcessUtilization", "GetRemappedRows", "GetRetiredPages", "GetRetiredPagesPendingStatus",
    "GetSamples", "GetSerial", "GetSupportedEventTypes", "GetTemperature", "GetTemperatureThreshold",
    "GetTotalEccErrors", "GetTotalEnergyConsumption", "GetUUID", "GetUtilizationRates",
    "GetVbiosVersion", "RegisterEvents", "GetGpuFabricInfoV", "GetGpuFabricInfo", "GetMaxMigDeviceCount",
    "GetGpuInstanceId", "GetComputeInstanceId", "GetAttributes", "GetTopologyCommonAncestor", "GetP2PStatus"))


class _FabricInfo:
    """Stands in for pynvml's fabric structures (c_nvmlGpuFabricInfo_v3_t and older): the fields
    NVML fills, zero until it does."""

    FIELDS: tuple[str, ...] = ("version", "clusterUuid", "status", "cliqueId", "state", "healthMask",
                               "healthSummary")

    def __init__(self) -> None:
        for name in self.FIELDS:
            setattr(self, name, bytes(16) if name == "clusterUuid" else 0)


class _FabricInfoV2(_FabricInfo):
    FIELDS = _FabricInfo.FIELDS[:-1]  # no health summary


class _FabricInfoV1(_FabricInfo):
    FIELDS = ("clusterUuid", "status", "cliqueId", "state")  # no version, no health


def fabric(state: int, status: int = 0, clique: int = 0, cluster: bytes = b"", health_mask: int = 0,
           health_summary: int = 0) -> Any:
    """An ``nvmlDeviceGetGpuFabricInfoV`` answer: fills the structure it is given, as NVML does
    (state: NVML_GPU_FABRIC_STATE_*, 0 not supported .. 3 completed; status: an nvmlReturn)."""
    def fill(info: Any) -> int:
        values = {"state": state, "status": status, "cliqueId": clique, "clusterUuid": cluster.ljust(16, b"\0"),
                  "healthMask": health_mask, "healthSummary": health_summary}
        for name, value in values.items():
            if name in info.FIELDS:
                setattr(info, name, value)
        return 0

    return fill


def peer_paths(nvml: "FakePynvml", level: int, read: int = 0, write: int | None = None, nvlink: int = 5,
               pairs: dict[tuple[int, int], dict[str, int]] | None = None) -> None:
    """Give every device of ``nvml`` a topology and P2P status towards every other: ``level`` is
    nvmlDeviceGetTopologyCommonAncestor's answer (10 PIX ... 50 SYS), ``read``/``write``/``nvlink`` the
    nvmlGpuP2PStatus_t of nvmlDeviceGetP2PStatus for capability 0/1/2 (0 OK, 5 not supported);
    ``pairs`` overrides them for one pair ``(a, b)``, keys "level", "read", "write", "nvlink"."""
    caps = {0: read, 1: read if write is None else write, 2: nvlink, 3: 5}
    names = {0: "read", 1: "write", 2: "nvlink"}
    for index, device in enumerate(nvml.devices):
        def topology(peer: Any, index: int = index) -> int:
            return (pairs or {}).get(tuple(sorted((index, peer.index))), {}).get("level", level)

        def status(peer: Any, cap: int, index: int = index) -> int:
            pair = (pairs or {}).get(tuple(sorted((index, peer.index))), {})
            return pair.get(names.get(cap, ""), caps.get(cap, 5))

        device["nvmlDeviceGetTopologyCommonAncestor"] = topology
        device["nvmlDeviceGetP2PStatus"] = status


class FakePynvml:
    """A fake ``pynvml`` module with ``count`` devices (see the module's docstring)."""

    NVML_TEMPERATURE_GPU = 0
    NVML_GPM_METRICS_GET_VERSION = 1
    c_nvmlGpmMetricsGet_t = GpmMetricsGet
    c_nvmlGpuFabricInfo_v3_t = _FabricInfo
    c_nvmlGpuFabricInfoV_t = _FabricInfoV2
    c_nvmlGpuFabricInfo_t = _FabricInfoV1
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1

    def __init__(self, count: int = 1, *, readings: dict[str, Any] | None = None, driver: Any = "580.95.05",
                 cuda: int = 13000, init_error: str | None = None, init_failures: int = 0) -> None:
        self.count = count
        self.devices: list[dict[str, Any]] = [{**DEFAULT_READINGS, **(readings or {})} for _ in range(count)]
        self.driver = driver
        self.cuda = cuda
        self.init_error = init_error  # every nvmlInit fails with this (e.g. "LibraryNotFound")
        self.init_failures = init_failures  # this many nvmlInit calls fail with DriverNotLoaded
        self.mode = "ok"
        self.lost: set[int] = set()  # devices fallen off the bus (GpuIsLost), the others fine
        self.session = 0
        self.init_calls = self.shutdown_calls = self.handle_calls = 0
        self.calls: Counter[str] = Counter()  # device functions that reached a live device, by name
        self.gpm_buffers: set[int] = set()  # GPM sample buffers allocated and not freed
        self._gpm_next = 0

    # -- the library ----------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error:
            raise nvml_error(self.init_error)()
        if self.init_failures > 0:
            self.init_failures -= 1
            raise nvml_error("DriverNotLoaded")()
        self.session += 1
        if self.mode == "unloaded":
            self.mode = "ok"  # the driver is back

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def _live(self) -> None:
        if self.mode == "unloaded":
            raise nvml_error("Uninitialized")()

    def nvmlSystemGetDriverVersion(self) -> Any:
        self._live()
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._live()
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._live()
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimpleNamespace:
        self._live()
        if not 0 <= index < self.count:
            raise nvml_error("InvalidArgument")()
        self.handle_calls += 1
        return SimpleNamespace(index=index, session=self.session)

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        self._device(handle)
        return handle.index

    # -- MIG --------------------------------------------------------------------------------
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, slot: int) -> SimpleNamespace:
        slots = self._device(handle).get("mig") or []
        if getattr(handle, "mig", None) is not None:
            raise nvml_error("InvalidArgument")()  # a MIG handle has no MIG devices of its own
        if not 0 <= slot < len(slots) or slots[slot] is None:
            raise nvml_error("NotFound")()
        return SimpleNamespace(index=handle.index, session=handle.session, mig=slot)

    def nvmlDeviceIsMigDeviceHandle(self, handle: Any) -> bool:
        self._device(handle)
        return getattr(handle, "mig", None) is not None

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any) -> SimpleNamespace:
        self._device(handle)
        if getattr(handle, "mig", None) is None:
            raise nvml_error("InvalidArgument")()
        return SimpleNamespace(index=handle.index, session=handle.session)

    # -- GPM ------------------------------------------------------------------------------
    @staticmethod
    def NVMLError(code: int) -> BaseException:  # noqa: N802 (pynvml's name)
        return nvml_error(RETURN_CODES.get(code, "Unknown"))()

    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        device = self._device(handle)
        if "nvmlGpmQueryDeviceSupport" in device:
            return self.__getattr__("nvmlGpmQueryDeviceSupport")(handle)
        return SimpleNamespace(version=1, isSupportedDevice=int("gpm" in device))

    def nvmlGpmSampleAlloc(self) -> SimpleNamespace:
        self._live()
        self._gpm_next += 1
        self.gpm_buffers.add(self._gpm_next)
        return SimpleNamespace(id=self._gpm_next, table=None)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self.gpm_buffers.discard(sample.id)

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:
        source = self._device(handle).get("gpm")
        if source is None:
            raise nvml_error("NotSupported")()
        sample.counted = source.sample() if isinstance(source, CountingGpm) else None
        sample.table = source
        return sample

    def nvmlGpmMigSampleGet(self, handle: Any, gpu_instance: int, sample: Any) -> Any:
        sample.table, sample.counted = self._device(handle).get("gpm_mig", {}).get(gpu_instance), None
        if sample.table is None:
            raise nvml_error("InvalidArgument")()
        return sample

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        self._live()
        table = request.sample2.table
        for metric in request.metrics[:request.numMetrics]:
            if getattr(request.sample2, "counted", None) is not None:  # CountingGpm: from the two samples
                answer = CountingGpm.metric(request.sample1.counted, request.sample2.counted, metric.metricId)
            else:
                answer = table.get(metric.metricId, nvml_error("InvalidArgument"))
            if isinstance(answer, type) and issubclass(answer, BaseException):
                name = answer.__name__.removeprefix("NVMLError_")
                metric.nvmlReturn, metric.value = _CODE_OF.get(name, 999), 0.0
            else:
                metric.nvmlReturn, metric.value = 0, float(answer() if callable(answer) else answer)
        return request

    # -- the devices ------------------------------------------------------------------------
    def _device(self, handle: Any) -> dict[str, Any]:
        self._live()
        if self.mode == "lost" or handle.index in self.lost:
            raise nvml_error("GpuIsLost")()
        if handle.session != self.session:  # a handle from before the re-init
            raise nvml_error("Uninitialized")()
        slot = getattr(handle, "mig", None)
        if slot is not None:  # a MIG device: its own readings (the slot exists: its handle was given)
            return self.devices[handle.index]["mig"][slot]
        return self.devices[handle.index]

    def __getattr__(self, name: str) -> Any:
        if name not in DEVICE_FUNCTIONS and not any(name in d for d in self.__dict__.get("devices", ())):
            raise AttributeError(name)

        def call(handle: Any, *args: Any) -> Any:
            reading = self._device(handle).get(name, nvml_error("NotSupported"))
            self.calls[name] += 1
            if isinstance(reading, BaseException) or (isinstance(reading, type) and issubclass(reading, BaseException)):
                raise reading
            return reading(*args) if callable(reading) else reading

        return call


def no_driver() -> NvmlBackend:
    """The NVML backend of a machine without a driver (every reading: NA("LibraryNotFound"))."""
    return NvmlBackend(NvmlGate(FakePynvml(init_error="LibraryNotFound")))
