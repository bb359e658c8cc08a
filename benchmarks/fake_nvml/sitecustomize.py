"""A fake one-GPU NVML for benchmarks and end-to-end tests on machines without a driver.

Put this folder on PYTHONPATH: Python imports ``sitecustomize`` at start-up, and this one
gives nvidia-ml-py's ``pynvml`` a fake ``libnvidia-ml`` (``pynvml.nvmlLib``). Every
``pynvml.nvml*`` wrapper then runs unchanged, ctypes arguments and all, against the
functions below, so gpudoctor and nvitop (which calls some NVML symbols itself through
``pynvml._nvmlGetFunctionPointer``) do their own full Python work on the same device.
The device is one idle NVIDIA H100 PCIe with realistic readings. A symbol not defined
here exists but answers NVML_ERROR_NOT_SUPPORTED (a current driver has every symbol);
both tools show it as N/A.

Environment:
- ``FAKE_NVML_DRIVER``: driver version (default 580.95.05); ``FAKE_NVML_CUDA``: the CUDA
  version it supports, as NVML encodes it (default 13000, i.e. 13.0). A 470 driver
  (``470.57.02``, ``11040``) makes the "driver too old for torch's CUDA build" case.
- ``FAKE_NVML_LOG``: a file to which each missing symbol's name is appended (coverage).
- ``FAKE_NVML_HANG``: the name of one NVML symbol (``nvmlDeviceGetTemperature``) that never
  returns, as a call into a failing driver can block for minutes; every other symbol answers.
  ``FAKE_NVML_CALLS``: a file to which the name of every symbol called is appended, once per
  name and process (which symbols a program calls: the hang guard test's list).
- ``FAKE_CUDA_INIT``: the CUresult the fake CUDA driver's cuInit answers (default 0: it starts and
  counts one device; e.g. 802 for a fabric manager that is not running; ``hang``: cuInit never
  returns, as on a faulty GPU; ``hang-tree``: cuInit starts a helper process, then never returns); ``FAKE_CUDA=missing``: no
  libcuda at all, as in a container given only the driver's utility capability; ``FAKE_CUDA=loader``:
  the real dynamic loader is asked for libcuda (it fails where no libcuda.so.1 lies on the library
  path, as in a namespace laid out as such a container).
- ``FAKE_NVML_BUSY=1``: a training board instead of an idle one: utilisation, memory, power,
  temperature, SM clock and PCIe traffic change every second (the same values for every
  program that reads them in the same second), so a monitor redraws what a busy GPU makes
  it redraw. Its GPM readings (SM activity, tensor activity...) show two patterns, changing every
  second: more often a "busy but small kernels" board (SMs about 10 % active, no tensor work),
  otherwise one whose tensor cores do the work; an idle board's GPM reads idle.
- ``FAKE_NVML_GPM=0``: the board answers that it has no GPM (``isSupportedDevice`` 0, as a GPU
  before Hopper does); GPM is otherwise supported. NVLink GPM metrics answer NOT_SUPPORTED each
  (the PCIe board has no NVLink bridge), the others succeed.
- ``FAKE_NVML_FABRIC``: the board sits on an NVSwitch fabric (an HGX board) and
  nvmlDeviceGetGpuFabricInfoV answers its registration: ``not_started`` (the fabric manager is not
  running), ``in_progress``, ``completed``, ``failed`` (completed with NVML_ERROR_UNKNOWN) or
  ``degraded`` (completed, health mask: bandwidth degraded). Unset: NOT_SUPPORTED, as a PCIe board
  answers.
- ``FAKE_NVML_INIT``: the NVML return code nvmlInit answers (default 0: started), e.g. 18
  (NVML_ERROR_LIB_RM_VERSION_MISMATCH: a driver upgraded without a reboot), 999 (NVML_ERROR_UNKNOWN: a
  container whose device cgroup lost the GPUs), 9 (NVML_ERROR_DRIVER_NOT_LOADED).
- ``FAKE_NVML_COMPUTE_MODE``: the compute mode the board answers (default 0, Default; 2 Prohibited, 3
  Exclusive_Process); ``FAKE_NVML_PROCESS``: the pid of a process holding a CUDA context on it (2 GiB;
  default none).
- ``FAKE_NVML_MIG=1``: MIG mode is on, with two 3g.40gb MIG devices (GPU instances 1 and 2,
  compute instance 0 each, in MIG device slots 0 and 1 of 7), each with its own handle, "MIG-"
  UUID, name, attributes (60 SMs, 40448 MiB) and memory; two processes (8 and 4 GiB) on the
  first, none on the second; GPM per GPU instance (nvmlGpmMigSampleGet). On a MIG handle
  utilisation rates, power and energy answer NOT_SUPPORTED (NVML gives power and energy for the
  whole GPU only), and utilisation rates on the GPU's own handle too (none in MIG mode: nvidia-smi
  shows N/A). ``FAKE_NVML_MIG_NOPERM=1`` besides: process lists answer NO_PERMISSION (a user without
  the privileges NVML asks for).

- ``FAKE_NVML_GPUS=2``: two such boards (PCI 0000:03:00.0 and 0000:04:00.0, each its own handle,
  index and UUID; the fake CUDA driver counts two), with a peer-to-peer path between them:
  nvmlDeviceGetTopologyCommonAncestor answers ``FAKE_NVML_TOPOLOGY`` (default 10, one PCIe switch)
  and nvmlDeviceGetP2PStatus ``FAKE_NVML_P2P`` for reads and writes (default 0, OK; NVLink: 5, not
  supported).
- ``FAKE_SYSFS_ROOT``: a directory laid out as /sys and /proc are (tests/support/pcie_tree.py) that
  gpudoctor's PCIe path readers read instead of ``/`` (``gpudoctor.backends.pcie_paths.ROOT``).

Not a reading of real hardware: timings taken with it measure the tools' own Python
work, not the cost of a real driver call.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import time

SUCCESS = 0
NOT_SUPPORTED = 3
NOT_FOUND = 6
NO_PERMISSION = 4
INSUFFICIENT_SIZE = 7

DRIVER = os.environ.get("FAKE_NVML_DRIVER", "580.95.05")
CUDA = int(os.environ.get("FAKE_NVML_CUDA", "13000"))
GIB = 1024 ** 3
BUSY = os.environ.get("FAKE_NVML_BUSY") == "1"
GPM = os.environ.get("FAKE_NVML_GPM", "1") != "0"
MIG = os.environ.get("FAKE_NVML_MIG") == "1"
FABRIC = os.environ.get("FAKE_NVML_FABRIC", "")
# FAKE_NVML_FABRIC -> (NVML_GPU_FABRIC_STATE_*, status nvmlReturn, health mask). A healthy mask:
# bandwidth not degraded, no route recovery, route healthy, no access timeout recovery
# (each field's FALSE value, 2), configuration none (1 << 8).
_HEALTHY_MASK = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8
_FABRIC_ANSWERS = {"not_started": (1, SUCCESS, 0), "in_progress": (2, SUCCESS, 0),
                   "completed": (3, SUCCESS, _HEALTHY_MASK), "failed": (3, 999, _HEALTHY_MASK),
                   "degraded": (3, SUCCESS, _HEALTHY_MASK & ~0x3 | 1)}
MIG_NOPERM = os.environ.get("FAKE_NVML_MIG_NOPERM") == "1"
INIT = int(os.environ.get("FAKE_NVML_INIT", "0"))
COMPUTE_MODE = int(os.environ.get("FAKE_NVML_COMPUTE_MODE", "0"))
HOLDER = int(os.environ.get("FAKE_NVML_PROCESS", "0"))
GPUS = 2 if os.environ.get("FAKE_NVML_GPUS") == "2" else 1
TOPOLOGY = int(os.environ.get("FAKE_NVML_TOPOLOGY", "10"))
P2P = int(os.environ.get("FAKE_NVML_P2P", "0"))
#: The MIG devices (FAKE_NVML_MIG=1): GPU instance id, compute instance id, memory in use, processes
#: (pid, bytes).
MIG_DEVICES = ((1, 0, 12 * GIB, ((4242, 8 * GIB), (4243, 4 * GIB))), (2, 0, 0, ()))
MIG_MEMORY_MIB = 40448
INVALID_ARGUMENT = 2


def _gpm_values() -> dict[int, float]:
    """GPM metric id -> value for this second: NVML_GPM_METRIC_* SM util (2), occupancy (3), any
    tensor (5), HMMA (7), DRAM (10), fp64/fp32/fp16 (11-13), PCIe tx/rx MiB/s (20, 21)."""
    if not BUSY:
        values = {2: 0.0, 3: 0.0, 5: 0.0, 7: 0.0, 10: 0.0, 11: 0.0, 12: 0.0, 13: 0.0}
    elif _busy(0, 3, 9) < 2:  # busy but small kernels: few SMs, fp32, no tensor work
        values = {2: _busy(6, 13, 10), 3: _busy(3, 8, 11), 5: 0.0, 7: 0.0, 10: _busy(2, 8, 12), 11: 0.0,
                  12: _busy(2, 6, 13), 13: 0.0}
    else:  # bf16 matrix math on the tensor cores
        tensor = float(_busy(55, 76, 14))
        values = {2: _busy(82, 96, 15), 3: _busy(25, 40, 16), 5: tensor, 7: tensor, 10: _busy(30, 50, 17),
                  11: 0.0, 12: _busy(5, 15, 18), 13: _busy(1, 4, 19)}
    values.update({20: _busy(1, 9000, 20) if BUSY else 1.2, 21: _busy(1, 9000, 21) if BUSY else 1.2})
    return {k: float(v) for k, v in values.items()}


def _busy(low: float, high: float, salt: int) -> int:
    """A reading of a training board: between ``low`` and ``high``, new every second."""
    x = (int(time.time()) * 2654435761 + salt * 40503) % 2**32
    return int(low + (high - low) * x / 2**32)


def _out(arg):
    """The ctypes object behind byref(...) (or the object itself)."""
    return getattr(arg, "_obj", arg)


def _set(arg, value):
    _out(arg).value = value
    return SUCCESS


def _fill(arg, **fields):
    obj = _out(arg)
    names = {f[0] for f in getattr(type(obj), "_fields_", [])}
    for name, value in fields.items():
        if name in names:
            setattr(obj, name, value)
    return SUCCESS


def _text(buf, value: str):
    buf.value = value.encode()
    return SUCCESS


class FakeNvmlLibrary:
    """Stands in for ctypes.CDLL('libnvidia-ml.so.1'): one idle H100 PCIe."""

    def __init__(self, pynvml) -> None:
        self._devices = [pynvml.struct_c_nvmlDevice_t() for _ in range(GPUS)]
        self._device = self._devices[0]
        self._migs = [pynvml.struct_c_nvmlDevice_t() for _ in MIG_DEVICES] if MIG else []
        self._pynvml = pynvml
        self._gpm_buffers: dict[int, object] = {}
        self._log = os.environ.get("FAKE_NVML_LOG")
        calls = os.environ.get("FAKE_NVML_CALLS")
        if calls:
            _trace_calls(self, calls)
        hang = os.environ.get("FAKE_NVML_HANG")
        if hang:
            setattr(self, hang, _hang)  # an instance attribute: found before the class's method

    def __getattr__(self, name):
        if self._log or os.environ.get("FAKE_NVML_CALLS"):
            with open(self._log or os.environ["FAKE_NVML_CALLS"], "a") as fh:
                fh.write(name + "\n")
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args: NOT_SUPPORTED

    # -- library and system
    def nvmlInitWithFlags(self, flags):
        return INIT

    def nvmlInit_v2(self):
        return INIT

    def nvmlShutdown(self):
        return SUCCESS

    def nvmlSystemGetDriverVersion(self, buf, size):
        return _text(buf, DRIVER)

    def nvmlSystemGetNVMLVersion(self, buf, size):
        return _text(buf, f"{CUDA // 1000}.{DRIVER}")

    def nvmlSystemGetCudaDriverVersion(self, out):
        return _set(out, CUDA)

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    # -- device handles
    def nvmlDeviceGetCount_v2(self, out):
        return _set(out, GPUS)

    def _handle(self, out, index=0):
        _out(out).contents = self._devices[index]
        return SUCCESS

    def _index_of(self, handle):
        """Which board a handle is (0 for anything else: a MIG handle belongs to board 0)."""
        import ctypes

        try:
            address = ctypes.addressof(handle.contents)
        except (AttributeError, TypeError, ValueError):
            return 0
        return next((i for i, d in enumerate(self._devices) if ctypes.addressof(d) == address), 0)

    def nvmlDeviceGetHandleByIndex_v2(self, index, out):
        index = getattr(index, "value", index)
        return self._handle(out, index) if 0 <= index < GPUS else 2  # INVALID_ARGUMENT

    def nvmlDeviceGetTopologyCommonAncestor(self, first, second, out):
        return _set(out, TOPOLOGY) if GPUS > 1 else NOT_SUPPORTED

    def nvmlDeviceGetP2PStatus(self, first, second, capability, out):
        if GPUS < 2:
            return NOT_SUPPORTED
        return _set(out, P2P if getattr(capability, "value", capability) in (0, 1) else 5)

    def nvmlDeviceGetHandleByUUID(self, uuid, out):
        return self._handle(out)

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id, out):
        return self._handle(out)

    def nvmlDeviceGetIndex(self, handle, out):
        return _set(out, self._index_of(handle))

    def nvmlDeviceIsMigDeviceHandle(self, handle, out):
        return _set(out, int(self._mig_of(handle) is not None))

    # -- MIG devices (FAKE_NVML_MIG=1)
    def _mig_of(self, handle):
        """Which MIG device a handle is (its slot), or None for the GPU's own handle."""
        if not self._migs:
            return None
        import ctypes

        try:
            address = ctypes.addressof(handle.contents)
        except (AttributeError, TypeError, ValueError):
            return None
        for slot, mig in enumerate(self._migs):
            if ctypes.addressof(mig) == address:
                return slot
        return None

    def nvmlDeviceGetMaxMigDeviceCount(self, handle, out):
        return _set(out, 7) if MIG and self._mig_of(handle) is None else NOT_SUPPORTED

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index, out):
        slot = getattr(index, "value", index)
        if not MIG or self._mig_of(handle) is not None:
            return INVALID_ARGUMENT
        if not 0 <= slot < len(self._migs):
            return NOT_FOUND  # an empty slot
        _out(out).contents = self._migs[slot]
        return SUCCESS

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle, out):
        return self._handle(out) if self._mig_of(handle) is not None else INVALID_ARGUMENT

    def nvmlDeviceGetGpuInstanceId(self, handle, out):
        slot = self._mig_of(handle)
        return INVALID_ARGUMENT if slot is None else _set(out, MIG_DEVICES[slot][0])

    def nvmlDeviceGetComputeInstanceId(self, handle, out):
        slot = self._mig_of(handle)
        return INVALID_ARGUMENT if slot is None else _set(out, MIG_DEVICES[slot][1])

    def nvmlDeviceGetAttributes_v2(self, handle, out):
        if self._mig_of(handle) is None:
            return _fill(out, multiprocessorCount=114, memorySizeMB=80 * 1024, gpuInstanceSliceCount=7,
                         computeInstanceSliceCount=7)
        return _fill(out, multiprocessorCount=60, memorySizeMB=MIG_MEMORY_MIB, gpuInstanceSliceCount=3,
                     computeInstanceSliceCount=3, sharedCopyEngineCount=3)

    # -- identity
    def nvmlDeviceGetName(self, handle, buf, size):
        return _text(buf, "NVIDIA H100 PCIe" if self._mig_of(handle) is None else "NVIDIA H100 PCIe MIG 3g.40gb")

    def nvmlDeviceGetUUID(self, handle, buf, size):
        slot = self._mig_of(handle)
        if slot is not None:
            return _text(buf, f"MIG-{MIG_DEVICES[slot][0]:08x}-7c3b-5f4d-8b8e-3d7f00fa4e11")
        return _text(buf, f"GPU-5a1e7c3b-0f4d-4b8e-9c21-3d7f00fa4e1{1 + self._index_of(handle)}")

    def nvmlDeviceGetSerial(self, handle, buf, size):
        return _text(buf, "1654923000000")

    def nvmlDeviceGetVbiosVersion(self, handle, buf, size):
        return _text(buf, "96.00.99.00.01")

    def nvmlDeviceGetPciInfo_v3(self, handle, out):
        bus = 0x17 if GPUS == 1 else 3 + self._index_of(handle)
        return _fill(out, busIdLegacy=b"0000:%02x:00.0" % bus, domain=0, bus=bus, device=0, pciDeviceId=0x233110DE,
                     pciSubSystemId=0x16C110DE, busId=b"00000000:%02x:00.0" % bus)

    def nvmlDeviceGetArchitecture(self, handle, out):
        return _set(out, 9)  # NVML_DEVICE_ARCH_HOPPER

    def nvmlDeviceGetCudaComputeCapability(self, handle, major, minor):
        _set(major, 9)
        return _set(minor, 0)

    def nvmlDeviceGetMemoryBusWidth(self, handle, out):
        return _set(out, 5120)

    # -- modes
    def nvmlDeviceGetPersistenceMode(self, handle, out):
        return _set(out, 1)

    def nvmlDeviceGetComputeMode(self, handle, out):
        return _set(out, COMPUTE_MODE)

    def nvmlDeviceGetDisplayActive(self, handle, out):
        return _set(out, 0)

    def nvmlDeviceGetDisplayMode(self, handle, out):
        return _set(out, 0)

    def nvmlDeviceGetMigMode(self, handle, current, pending):
        _set(current, int(MIG))
        return _set(pending, int(MIG))

    def nvmlDeviceGetEccMode(self, handle, current, pending):
        _set(current, 1)
        return _set(pending, 1)

    def nvmlDeviceGetPerformanceState(self, handle, out):
        return _set(out, 0)

    # -- readings (an idle board)
    @staticmethod
    def _used():
        return _busy(30, 31, 1) * GIB + _busy(0, 1024, 2) * 1024 ** 2 if BUSY else 529 * 1024 ** 2

    def nvmlDeviceGetMemoryInfo(self, handle, out):
        slot = self._mig_of(handle)
        if slot is not None:
            total, used = MIG_MEMORY_MIB * 1024 ** 2, MIG_DEVICES[slot][2]
            return _fill(out, total=total, free=total - used, used=used)
        used = self._used()
        return _fill(out, total=80 * GIB, free=80 * GIB - used, used=used)

    def nvmlDeviceGetMemoryInfo_v2(self, handle, out):
        if self._mig_of(handle) is not None:
            return self.nvmlDeviceGetMemoryInfo(handle, out)
        used = self._used()
        reserved = 512 * 1024 ** 2
        return _fill(out, total=80 * GIB, reserved=reserved, free=80 * GIB - used - reserved, used=used)

    def nvmlDeviceGetBAR1MemoryInfo(self, handle, out):
        return _fill(out, bar1Total=128 * GIB, bar1Free=128 * GIB - 2 * 1024 ** 2, bar1Used=2 * 1024 ** 2)

    def nvmlDeviceGetUtilizationRates(self, handle, out):
        if MIG:
            return NOT_SUPPORTED  # no utilisation rates in MIG mode, per slice or for the whole GPU
        if BUSY:
            return _fill(out, gpu=_busy(35, 100, 3), memory=_busy(10, 60, 4))
        return _fill(out, gpu=0, memory=0)

    def nvmlDeviceGetEncoderUtilization(self, handle, util, period):
        _set(util, 0)
        return _set(period, 167000)

    nvmlDeviceGetDecoderUtilization = nvmlDeviceGetEncoderUtilization

    def nvmlDeviceGetTemperature(self, handle, sensor, out):
        return _set(out, _busy(58, 66, 5) if BUSY else 31)

    def nvmlDeviceGetTemperatureV(self, handle, out):
        return _fill(out, temperature=_busy(58, 66, 5) if BUSY else 31)

    def nvmlDeviceGetTemperatureThreshold(self, handle, kind, out):
        value = {0: 92, 1: 89, 2: 87, 3: 85}.get(_out(kind).value if hasattr(kind, "value") else kind, 87)
        return _set(out, value)

    def nvmlDeviceGetFanSpeed(self, handle, out):
        return NOT_SUPPORTED  # passively cooled board

    nvmlDeviceGetFanSpeed_v2 = nvmlDeviceGetFanSpeed
    nvmlDeviceGetNumFans = nvmlDeviceGetFanSpeed

    def nvmlDeviceGetPowerUsage(self, handle, out):
        if self._mig_of(handle) is not None:
            return NOT_SUPPORTED  # the whole GPU's only
        return _set(out, _busy(180_000, 340_000, 6) if BUSY else 48_512)  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, handle, out):
        return _set(out, 350_000)

    nvmlDeviceGetPowerManagementLimit = nvmlDeviceGetEnforcedPowerLimit
    nvmlDeviceGetPowerManagementDefaultLimit = nvmlDeviceGetEnforcedPowerLimit

    def nvmlDeviceGetClockInfo(self, handle, kind, out):
        kind = _out(kind).value if hasattr(kind, "value") else kind
        sm = _busy(1650, 1756, 7) if BUSY else 345
        return _set(out, {0: sm, 1: sm, 2: 1593, 3: 765}.get(kind, sm))

    def nvmlDeviceGetMaxClockInfo(self, handle, kind, out):
        value = {0: 1755, 1: 1755, 2: 1593, 3: 1620}.get(_out(kind).value if hasattr(kind, "value") else kind, 1755)
        return _set(out, value)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle, out):
        return _set(out, 0x0 if BUSY else 0x1)  # running, or GPU idle

    nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type, out):
        return _set(out, 0)

    def nvmlDeviceGetRemappedRows(self, handle, corrected, uncorrected, pending, failure):
        for arg in (corrected, uncorrected, pending, failure):
            _set(arg, 0)
        return SUCCESS

    def nvmlDeviceGetRetiredPages(self, handle, cause, count, addresses):
        return NOT_SUPPORTED  # Hopper remaps rows instead

    nvmlDeviceGetRetiredPages_v2 = nvmlDeviceGetRetiredPages

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle, out):
        return NOT_SUPPORTED

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle, out):
        return _set(out, 5)

    nvmlDeviceGetMaxPcieLinkGeneration = nvmlDeviceGetCurrPcieLinkGeneration
    nvmlDeviceGetGpuMaxPcieLinkGeneration = nvmlDeviceGetCurrPcieLinkGeneration

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle, out):
        return _set(out, 16)

    nvmlDeviceGetMaxPcieLinkWidth = nvmlDeviceGetCurrPcieLinkWidth

    def nvmlDeviceGetPcieThroughput(self, handle, counter, out):
        return _set(out, _busy(2_000_000, 9_000_000, 8) if BUSY else 1200)  # KB/s

    def nvmlDeviceGetNvLinkState(self, handle, link, out):
        return NOT_SUPPORTED  # the PCIe board has no NVLink bridge fitted

    def nvmlDeviceGetFieldValues(self, handle, count, values):
        return NOT_SUPPORTED

    def nvmlDeviceGetGpuFabricInfoV(self, handle, info):
        if FABRIC not in _FABRIC_ANSWERS:
            return NOT_SUPPORTED  # a PCIe board: no NVLink fabric
        state, status, mask = _FABRIC_ANSWERS[FABRIC]
        if state == 3:
            _out(info).clusterUuid[:] = list(range(1, 17))
        return _fill(info, state=state, status=status, cliqueId=32766 if state == 3 else 0, healthMask=mask,
                     healthSummary=1 if state == 3 and FABRIC != "degraded" else 0)

    # -- GPM (Hopper and later); ctypes is imported here, never at start-up, where importing it
    # would bypass the fake CUDA driver's import hook (_FakeOnImport)
    def nvmlGpmQueryDeviceSupport(self, handle, support):
        return _fill(support, isSupportedDevice=int(GPM))

    def nvmlGpmSampleAlloc(self, out):
        import ctypes

        buffer = self._pynvml.struct_c_nvmlGpmSample_t()
        self._gpm_buffers[ctypes.addressof(buffer)] = buffer  # kept alive until freed
        _out(out).contents = buffer
        return SUCCESS

    def nvmlGpmSampleFree(self, sample):
        import ctypes

        self._gpm_buffers.pop(ctypes.addressof(sample.contents), None)
        return SUCCESS

    def nvmlGpmSampleGet(self, handle, sample):
        import ctypes

        if not GPM:
            return NOT_SUPPORTED
        return SUCCESS if ctypes.addressof(sample.contents) in self._gpm_buffers else INVALID_ARGUMENT

    def nvmlGpmMigSampleGet(self, handle, gpu_instance, sample):
        if not MIG or getattr(gpu_instance, "value", gpu_instance) not in (1, 2):
            return INVALID_ARGUMENT
        return self.nvmlGpmSampleGet(handle, sample)

    def nvmlGpmMetricsGet(self, request):
        request = _out(request)
        values = _gpm_values()
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            value = values.get(metric.metricId)
            if value is None:  # NVLink (no bridge fitted) and metrics this fake does not model
                metric.nvmlReturn, metric.value = NOT_SUPPORTED, 0.0
            else:
                metric.nvmlReturn, metric.value = SUCCESS, value
        return SUCCESS

    # -- processes: none running
    def _no_processes(self, handle, count, infos):
        _set(count, 0)
        return SUCCESS

    def _compute_processes(self, handle, count, infos):
        """Compute processes: none on a GPU out of MIG mode; in MIG mode those of a MIG device on its
        handle, all of them on the GPU's handle (NO_PERMISSION for both with FAKE_NVML_MIG_NOPERM)."""
        if not MIG:
            if not HOLDER:
                return self._no_processes(handle, count, infos)
            if infos is None or _out(count).value < 1:
                _set(count, 1)
                return INSUFFICIENT_SIZE
            infos[0].pid, infos[0].usedGpuMemory = HOLDER, 2 * GIB
            return _set(count, 1)
        if MIG_NOPERM:
            return NO_PERMISSION
        slot = self._mig_of(handle)
        chosen = [(gi, ci, pid, used) for s, (gi, ci, _, procs) in enumerate(MIG_DEVICES)
                  if slot is None or s == slot for pid, used in procs]
        if infos is None or _out(count).value < len(chosen):
            _set(count, len(chosen))
            return INSUFFICIENT_SIZE if chosen else SUCCESS
        for i, (gi, ci, pid, used) in enumerate(chosen):
            infos[i].pid, infos[i].usedGpuMemory = pid, used
            infos[i].gpuInstanceId, infos[i].computeInstanceId = gi, ci
        return _set(count, len(chosen))

    nvmlDeviceGetComputeRunningProcesses_v3 = _compute_processes
    nvmlDeviceGetGraphicsRunningProcesses_v3 = _no_processes
    nvmlDeviceGetMPSComputeRunningProcesses_v3 = _no_processes
    nvmlDeviceGetComputeRunningProcesses_v2 = _compute_processes
    nvmlDeviceGetGraphicsRunningProcesses_v2 = _no_processes
    nvmlDeviceGetMPSComputeRunningProcesses_v2 = _no_processes
    nvmlDeviceGetComputeRunningProcesses = _compute_processes
    nvmlDeviceGetGraphicsRunningProcesses = _no_processes

    def nvmlDeviceGetProcessUtilization(self, handle, samples, count, since):
        return NOT_FOUND  # no samples: nothing ran


def _hang(*args):
    """A driver call that never returns (it sleeps, so the GIL is free, as in a real blocked ioctl)."""
    while True:
        time.sleep(3600)


def _trace_calls(library, path: str) -> None:
    """Append each NVML symbol's name to ``path`` the first time this process calls it."""
    seen: set[str] = set()
    cls = type(library)
    names = [n for n in dir(cls) if n.startswith("nvml")]
    for name in names:
        method = getattr(library, name)

        def traced(*args, _name=name, _method=method):
            if _name not in seen:
                seen.add(_name)
                with open(path, "a") as fh:
                    fh.write(_name + "\n")
            return _method(*args)

        setattr(library, name, traced)


_CUDA_ERROR_NAMES = {0: "CUDA_SUCCESS", 100: "CUDA_ERROR_NO_DEVICE", 802: "CUDA_ERROR_SYSTEM_NOT_READY",
                     803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 999: "CUDA_ERROR_UNKNOWN"}


class FakeCudaLibrary:
    """Stands in for ctypes.CDLL('libcuda.so.1'), the CUDA driver: cuInit answers
    ``FAKE_CUDA_INIT`` (default 0: started) and one device is counted."""

    def __init__(self) -> None:
        answer = os.environ.get("FAKE_CUDA_INIT", "0")
        self._hang = answer in ("hang", "hang-tree")
        self._tree = answer == "hang-tree"
        self._init = 0 if self._hang else int(answer)

    def cuInit(self, flags):
        if self._tree:  # a driver that has started a helper process of its own, then hangs
            import subprocess

            subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        while self._hang:  # a driver that never finishes starting (a faulty GPU)
            time.sleep(3600)
        return self._init

    def cuGetErrorName(self, code, out):
        _out(out).value = _CUDA_ERROR_NAMES.get(code, "CUDA_ERROR_UNKNOWN").encode()
        return SUCCESS

    def cuDriverGetVersion(self, out):
        return _set(out, CUDA)

    def cuDeviceGetCount(self, out):
        return _set(out, 0 if self._init else GPUS)


def _fake_cdll(ctypes_module) -> None:
    """ctypes.CDLL('libcuda.so.1') gives FakeCudaLibrary, or fails as on a machine whose driver
    has no CUDA library when ``FAKE_CUDA=missing``; with ``FAKE_CUDA=loader`` the real loader is asked
    for it; every other library loads as usual."""
    real = ctypes_module.CDLL

    class CDLL(real):
        def __new__(cls, name, *args, **kwargs):
            if isinstance(name, str) and name.startswith("libcuda.so"):
                if os.environ.get("FAKE_CUDA") == "missing":
                    raise OSError(f"{name}: cannot open shared object file: No such file or directory")
                if os.environ.get("FAKE_CUDA") != "loader":
                    return FakeCudaLibrary()
            return super().__new__(cls)

    ctypes_module.CDLL = CDLL


class _FakeOnImport:
    """Gives pynvml the fake NVML library and ctypes the fake CUDA driver when (and only if) a
    program imports them. A plain meta-path finder (importlib.abc and importlib.util would add
    ~10 ms of imports to every program timed with this harness)."""

    def __init__(self) -> None:
        self.pending = {"pynvml": lambda module: setattr(module, "nvmlLib", FakeNvmlLibrary(module)),
                        "ctypes": _fake_cdll}
        sysfs = os.environ.get("FAKE_SYSFS_ROOT")
        if sysfs:
            self.pending["gpudoctor.backends.pcie_paths"] = lambda module: setattr(module, "ROOT", sysfs)

    def find_spec(self, name, path=None, target=None):
        if name not in self.pending:
            return None
        patch = self.pending.pop(name)
        if not self.pending:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("FAKE_NVML_OFF") != "1":
    sys.meta_path.insert(0, _FakeOnImport())
