"""NVML, through one gate.

Every NVML call goes through :meth:`NvmlGate.query`, which starts NVML lazily and turns
any ``NVMLError`` into :class:`~gpudoctor.backends.na.NA` carrying the error's name
(``NotSupported``, ``NoPermission``, ``GpuIsLost``...). Callers never see an NVML
exception; a missing ``libnvidia-ml.so`` is one NA for everything, which the probes
turn into a finding.

:class:`NvmlBackend` builds the readings gpudoctor uses on top of the gate: ``static``
facts per device (name, limits, thresholds) and ``sample`` readings (utilisation,
temperature, power...). The replay backend serves the same dictionaries from a
recording, so probes and front ends cannot tell the two apart.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from types import TracebackType
from typing import Any, Callable, ClassVar, NewType, Protocol, Union, cast

from gpudoctor.core._num import is_number
from gpudoctor.core._record import replace

from . import catalogue
from .base import (DeviceIdentity, GpuSample, MemoryReading, MigDeviceReading, NvLinkReading, P2PReading,
                   ProcessReading, UtilizationReading)
# the clock-event reasons and the gate's limit live in a light module (the TUI's first frame needs them, not NVML)
from .clock_reasons import (HARMFUL_THROTTLE_MASK, STUCK_S, THROTTLE_REASONS,  # noqa: F401 - also this module's
                            throttle_reason_names, throttle_reason_words)
from .na import NA, is_na
from .plausible import check, screen, within
from .base import DeviceStatic  # the static facts' type, made from the catalogue


class _LazyLog:
    """The module's logger, imported at its first message (`report --quick` need not pay for
    logging: it seldom has anything to log)."""

    def __getattr__(self, name: str) -> Any:
        import logging

        return getattr(logging.getLogger(__name__), name)


log = _LazyLog()

def _error_name(exc: BaseException) -> str:
    name = type(exc).__name__
    if name.startswith("NVMLError_"):
        return name[len("NVMLError_"):]
    if name == "NVMLError":
        return str(exc) or "NVMLError"
    return name


def _text(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def binding_file() -> str:
    """This interpreter's NVML binding (nvidia-ml-py's ``pynvml.py``) as a file another interpreter can load
    (``report --python``'s child, through :func:`load_binding`); '' when there is none or it is no plain
    source file. Found, not imported."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("pynvml")
    except (ImportError, ValueError):
        return ""
    return spec.origin if spec is not None and spec.origin and spec.origin.endswith(".py") else ""


def load_binding(path: str) -> None:
    """In another interpreter (``report --python``'s child): its own NVML binding when it has one, else the
    file at ``path`` (from :func:`binding_file`) loaded as ``pynvml``, so the gate finds a binding."""
    import importlib.util
    import sys

    try:
        import pynvml  # noqa: F401 - the interpreter's own binding
    except ImportError:
        spec = importlib.util.spec_from_file_location("pynvml", path)
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        sys.modules["pynvml"] = module
        spec.loader.exec_module(module)


def normalise_bus_id(bus_id: object) -> str | None:
    """'00000000:65:00.0' or '0000:65:00.0' -> '0000:65:00.0' (lower case).

    NVML pads the PCI domain to 8 hex digits, CUDA and sysfs to 4; comparing them needs
    one form.
    """
    if not bus_id or not isinstance(bus_id, str):
        return None
    text = bus_id.strip().lower()
    try:
        domain, bus, rest = text.split(":")
        device, function = rest.split(".")
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16):x}"
    except ValueError:
        return text


DRIVER_NOT_ANSWERING = "DriverNotAnswering"

# Every gate of this process, for :func:`thread_blocked` (weakly: a closed backend's gate goes).
_GATES: weakref.WeakSet[NvmlGate] = weakref.WeakSet()


def thread_blocked(thread: int) -> bool:
    """Whether the thread whose ident is ``thread`` is blocked inside a call of any NVML gate of
    this process for STUCK_S seconds or more (see :meth:`NvmlGate.blocked`). The runner asks it of
    a probe's thread, so a probe held by a hung driver ends at once instead of at its time limit."""
    return any(gate.blocked(thread) for gate in list(_GATES))


#: A device handle (pynvml's ``c_nvmlDevice_t``): opaque here, only handed back to NVML.
NvmlHandle = NewType("NvmlHandle", object)
#: A GPM sample buffer (pynvml's ``c_nvmlGpmSample_t``), allocated by NVML and handed back to it.
GpmSample = NewType("GpmSample", object)
#: Which GPM samples: a whole device (its index) or one MIG GPU instance ((index, instance id)).
GpmKey = Union[int, tuple[int, int]]


class NvmlLibrary(Protocol):
    """The NVML binding the gate drives: the ``pynvml`` module, or a stand-in for it in tests.

    Start-up and shut-down are called directly; every reading is looked up by name
    (:meth:`NvmlGate.query`), so a binding without a function answers NA, not AttributeError.
    """

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...


class _Held:
    """Releases an already acquired lock on leaving the block."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.lock.release()


#: How long closing waits for nvmlShutdown itself, which can hang like any call.
SHUTDOWN_WAIT_S = 2.0


def _shut_down(module: NvmlLibrary) -> None:
    """``nvmlShutdown()`` in a daemon thread, waited for SHUTDOWN_WAIT_S at most: a command on
    its way out (watch -n, record, the exporter's SIGTERM) must not hang in it; the driver cleans
    up after a process that exits without it."""
    def call() -> None:
        try:
            module.nvmlShutdown()
        except Exception:
            pass

    thread = threading.Thread(target=call, name="gpudoctor-nvml-shutdown", daemon=True)
    thread.start()
    thread.join(SHUTDOWN_WAIT_S)


class NvmlGate:
    """Lazy NVML start-up and the one place NVML exceptions are caught."""

    def __init__(self, module: NvmlLibrary | None = None) -> None:
        self._module = module
        self._lock = threading.Lock()
        self._started = False
        self._init_na: NA | None = None
        self._missing_functions: set[str] = set()
        # Calls under way, by a token, with the thread that made each and the time it began: one
        # that has not come back after STUCK_S means the driver is blocked (a failing GPU can hold
        # a call for minutes).
        self._in_flight: dict[int, tuple[int, float]] = {}
        self._init_began: float | None = None
        self._init_thread: int | None = None
        _GATES.add(self)

    @property
    def lib(self) -> Any:
        return self._module

    def start(self) -> NA | None:
        """Initialise NVML once. Returns None when usable, else NA with the reason."""
        if self._started and self._init_began is None:
            return self._init_na
        if self.stuck():
            return NA(DRIVER_NOT_ANSWERING)
        # Another thread's nvmlInit may be the one that hangs: wait for it a while, not forever.
        if not self._lock.acquire(timeout=STUCK_S):
            return NA(DRIVER_NOT_ANSWERING)
        try:
            if self._started:
                return self._init_na
            self._init_thread = threading.get_ident()
            self._init_began = time.monotonic()  # before _started: the fast path reads them unlocked
            self._started = True
            try:  # however start-up ends, it is no longer under way (else it would read as stuck)
                if self._module is None:
                    try:
                        import pynvml  # nvidia-ml-py
                    except ImportError:
                        self._init_na = NA("PythonBindingMissing")
                        return self._init_na
                    self._module = pynvml
                try:
                    self._module.nvmlInit()
                except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
                    self._init_na = NA(_error_name(exc))
                    log.debug("NVML unavailable: %s", self._init_na)
            finally:
                self._init_began = None
            return self._init_na
        finally:
            self._lock.release()

    def stuck(self) -> bool:
        """Whether a call into NVML (nvmlInit included) has not come back for STUCK_S seconds.

        Then every other call answers NA("DriverNotAnswering") at once instead of queueing
        behind it in the driver: a report ends with that finding, a front end goes on drawing
        and quits when asked, rather than each reading waiting its own time limit."""
        now = time.monotonic()
        began = self._init_began
        if began is not None and now - began > STUCK_S:
            return True
        return any(now - t > STUCK_S for _, t in list(self._in_flight.values()))

    def blocked(self, thread: int) -> bool:
        """Whether the thread whose ident is ``thread`` is inside an NVML call (nvmlInit included)
        that has not come back for STUCK_S seconds: the caller waiting for that thread can stop
        waiting, since the driver holds it and may for minutes."""
        now = time.monotonic()
        began = self._init_began
        if began is not None and self._init_thread == thread and now - began > STUCK_S:
            return True
        return any(who == thread and now - t > STUCK_S for who, t in list(self._in_flight.values()))

    def query(self, function: str, *args: object) -> Any:
        """Call ``pynvml.<function>(*args)``; any failure becomes NA(reason)."""
        na = self.start()
        if na is not None:
            return na
        fn: Callable[..., Any] | None = getattr(self._module, function, None)
        if fn is None:
            if function not in self._missing_functions:
                self._missing_functions.add(function)
                log.info("NVML binding has no %s (old nvidia-ml-py?)", function)
            return NA("FunctionNotFound")
        if self._in_flight and self.stuck():
            return NA(DRIVER_NOT_ANSWERING)
        token = object()
        self._in_flight[id(token)] = (threading.get_ident(), time.monotonic())
        try:
            return _text(fn(*args))
        except Exception as exc:
            return NA(_error_name(exc))
        finally:
            self._in_flight.pop(id(token), None)

    def error_name(self, code: int) -> str:
        """The name of an NVML return code (``3`` -> "NotSupported"), as :meth:`query` names errors:
        for answers that carry codes of their own (GPM's per-metric returns)."""
        make_error = getattr(self._module, "NVMLError", None)  # a stand-in binding may have none
        try:
            exc = make_error(code) if make_error is not None else None
        except Exception:
            exc = None
        if exc is None:
            return f"NVML error {code}"
        return _error_name(exc)

    def constant(self, name: str, default: int) -> int:
        na = self.start()
        if na is not None or self._module is None:
            return default
        value = getattr(self._module, name, default)
        # nvidia-ml-py declares NVML_P2P_CAPS_INDEX_READ as "0," (a tuple): a constant that is not an
        # int is the binding's slip, and NVML's own value (the default) is used instead
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    def shutdown(self) -> None:
        # A hung nvmlInit holds the lock, and nvmlShutdown behind a hung call would block too:
        # closing never waits for the driver (the process can still exit).
        if self.stuck() or not self._lock.acquire(timeout=STUCK_S):
            return
        with _Held(self._lock):
            if self._started and self._init_na is None and self._module is not None:
                _shut_down(self._module)
            self._started = False
            self._init_na = None

    def reset(self) -> None:
        """Forget the last start-up: shut NVML down if it was up, and let the next call run a
        fresh ``nvmlInit`` (a driver loaded or reloaded since, a GPU reset). Start-up failures
        are otherwise kept, so that one missing driver costs one ``nvmlInit``, not one per call.
        """
        self.shutdown()


#: The shortest time between the two GPM samples of one reading, defined here alone (everything else
#: that waits for GPM, or outlasts it by construction, uses this name). NVML computes GPM metrics from
#: the counter differences between two samples; nvml.h states a minimum only from NVML 12.9 on (in
#: nvmlGpmMetricsGet: more than 100 ms between the two nvmlGpmSampleGet() calls, for the counters'
#: internal refresh rate); earlier headers and the R525 reference state none. Not yet measured on a
#: GPU: what a shorter pair gives, and whether 100 ms suffices, is to be learned there. A full read
#: sooner than this after the last sample gives the last reading again ("Warming" when there is none).
GPM_MIN_INTERVAL_S = 0.1

# What a failed GPM start-up means, in words (the NA's reason, read by gpudoctor.backends.busy).
GPM_NEEDS_HOPPER = "needs Hopper or later"
GPM_OLD_DRIVER = "needs a driver with GPM (R520 or later)"
GPM_WARMING = "Warming"
GPM_MIG = "MIG mode: GPM is read per GPU instance"


# Answers to the MIG mode query that mean "no MIG here", not "the device failed".
_NO_MIG_REASONS = frozenset({"NotSupported", "FunctionNotFound", "InvalidArgument"})


# NVML's answers to "is GPM supported" that hold for the life of the driver: cached for good.
# Any other failure (Unknown, Timeout, DriverNotAnswering, InsufficientResources, GpuIsLost...)
# may pass: it is asked again after a back-off that doubles from GPM_RETRY_FIRST_S up to
# GPM_RETRY_MAX_S, so that one hiccup does not say "SM activity: Unknown" for weeks.
GPM_PERMANENT = frozenset({"FunctionNotFound", "NotSupported"})
GPM_RETRY_FIRST_S = 5.0
GPM_RETRY_MAX_S = 300.0


class _GpmRetry:
    """A transient GPM failure: what to answer until ``at`` (monotonic), then ask NVML again."""

    __slots__ = ("na", "at", "wait_s")

    def __init__(self, na: NA, at: float, wait_s: float) -> None:
        self.na, self.at, self.wait_s = na, at, wait_s


class _GpmState:
    """One device's (or one MIG GPU instance's) GPM samples: two buffers allocated once and used
    in turn, the time the newer was taken, and the last metrics computed from them."""

    __slots__ = ("samples", "newer", "taken", "last")

    def __init__(self, samples: tuple[GpmSample, GpmSample]) -> None:
        self.samples = samples
        self.newer = -1            # which buffer holds the newest sample (-1: none taken yet)
        self.taken = 0.0           # monotonic time of the newest sample
        self.last: dict[str, Any] | None = None


# Answers that mean "this driver or binding has no v2 memory call", not "the GPU failed".
_NO_V2_REASONS = frozenset({"FunctionNotFound", "NotSupported", "ArgumentVersionMismatch", "TypeError",
                            "AttributeError"})


#: nvmlValueType_t -> the member of nvmlValue_t that holds a sample (NVML_VALUE_TYPE_*).
_SAMPLE_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def power_usage_is_average(architecture: object, compute_capability: object) -> bool | None:
    """Whether nvmlDeviceGetPowerUsage (``power_w``) is a 1-second average rather than the power at that
    instant: nvml.h says it averages over 1 s on Ampere (except GA100) and later. ``architecture`` is
    nvmlDeviceGetArchitecture's number (static ``architecture``: 2 Kepler .. 6 Turing, 7 Ampere, 8 Ada,
    9 Hopper, 10 Blackwell, 13 Rubin); GA100 (A100, A30) is the Ampere with compute capability 8.0.
    None where the architecture is unknown."""
    if not isinstance(architecture, int) or isinstance(architecture, bool):
        return None
    if 2 <= architecture <= 6:
        return False
    if architecture == 7:
        return compute_capability != "8.0" if isinstance(compute_capability, str) else None
    return True if architecture in (8, 9, 10, 13) else None


def _field_value(answer: Any, error_name: Callable[[int], str]) -> Any:
    """The first field of an ``nvmlDeviceGetFieldValues`` answer (``nvmlFieldValue_t``): its value by
    its ``valueType``, or NA with the field's own return code (a field the GPU lacks: NotSupported)."""
    try:
        field = answer[0]
        code = int(field.nvmlReturn)
        if code != 0:
            return NA(error_name(code))
        value = getattr(field.value, _SAMPLE_VALUE_FIELDS.get(int(field.valueType), "uiVal"))
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return NA("NotAFieldValue")
    return value if is_number(value) else NA("NotAFieldValue")


def _convert(answer: Any, how: catalogue.NvmlRead, error_name: Callable[[int], str] = str) -> Any:
    """An NVML answer as the catalogue's reading: its ``item`` or ``attribute``, converted, multiplied,
    divided (NA stays NA)."""
    if is_na(answer):
        return answer
    if how.convert == "field":
        answer = _field_value(answer, error_name)
        if is_na(answer):
            return answer
    value = answer[how.item] if how.item is not None else answer
    if how.attribute:
        value = value[how.attribute] if isinstance(value, dict) else getattr(value, how.attribute)
    if how.convert == "len":
        value = len(value)
    elif how.convert == "int":
        value = int(value)
    elif how.convert == "bool":
        value = bool(value)
    if how.multiply != 1:
        value = value * how.multiply
    return value / float(how.divide) if how.divide != 1 else value


def _memory_reading(used: int | NA, free: int | NA, total: int | NA, reserved: int | NA) -> MemoryReading:
    """A memory reading with impossible byte counts as NA (gpudoctor.backends.plausible)."""
    return MemoryReading(check("memory_used_bytes", used), check("memory_free_bytes", free),
                         check("memory_total_bytes", total), check("memory_reserved_bytes", reserved))


#: A static fact's ``reader`` (gpudoctor.backends.catalogue.StaticFact) -> the method of
#: :class:`NvmlBackend` that reads it: a dictionary of the facts it makes, by key.
STATIC_READERS = {"index": "_static_index", "pci": "_static_pci", "memory": "_static_memory",
                  "compute_capability": "_static_compute_capability", "fabric": "fabric"}

#: The static facts :meth:`NvmlBackend.fabric` adds to a device's static facts.
FABRIC_KEYS = tuple(f.key for f in catalogue.STATIC_FACTS if f.reader == "fabric")
# The calls tried in turn, with the binding's structure for each (nvidia-ml-py names): the
# versioned call with the v3 structure (health summary), with v2 (health mask), then the first call.
_FABRIC_CALLS = (("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfo_v3_t"),
                 ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
                 ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"))
# Answers that mean "this driver or binding lacks that call or structure version": try the next.
#: The P2P capabilities :meth:`NvmlBackend.p2p` asks (key, pynvml constant, its value).
_P2P_CAPS = (("read", "NVML_P2P_CAPS_INDEX_READ", 0), ("write", "NVML_P2P_CAPS_INDEX_WRITE", 1),
             ("nvlink", "NVML_P2P_CAPS_INDEX_NVLINK", 2), ("atomics", "NVML_P2P_CAPS_INDEX_ATOMICS", 3))
_FABRIC_TRY_NEXT = frozenset({"FunctionNotFound", "ArgumentVersionMismatch", "TypeError", "AttributeError"})
_FABRIC_UUID_BYTES = 16


def _by_reference(info: object) -> object:
    """What pynvml's fabric wrappers take: a pointer to the ctypes structure they fill (a test's
    stand-in structure is passed as it is)."""
    import ctypes

    return ctypes.byref(info) if isinstance(info, ctypes.Structure) else info


def _mig_profile(name: object) -> Any:
    """A MIG device's profile from its name ("NVIDIA H100 80GB HBM3 MIG 3g.40gb" -> "3g.40gb")."""
    if not isinstance(name, str):
        return name
    return name.rsplit("MIG ", 1)[1].strip() if "MIG " in name else NA("NotInName")


def _fabric_reading(info: object, error_name: Callable[[int], str]) -> dict[str, Any]:
    """A filled fabric structure as static facts (bounded: it is the driver's data)."""
    def number(name: str) -> Any:
        value = getattr(info, name, None)
        return int(value) if isinstance(value, int) and 0 <= value < 2 ** 32 else NA("NotInStructure")

    status = number("status")
    raw = bytes(getattr(info, "clusterUuid", b"") or b"")[:_FABRIC_UUID_BYTES]
    uuid = raw.hex() if len(raw) == _FABRIC_UUID_BYTES and any(raw) else None
    state = number("state")  # nvml.h's state is one byte (pynvml declares a wider field): the low byte
    return {
        "fabric_state": state if is_na(state) else state & 0xFF,
        "fabric_status": status if is_na(status) else "Success" if status == 0 else error_name(status),
        "fabric_clique_id": number("cliqueId"),
        "fabric_cluster_uuid": (f"{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}"
                                if uuid else None),
        "fabric_health_mask": number("healthMask"),
        "fabric_health_summary": number("healthSummary"),
    }


#: The initial (host's) PID namespace as ``/proc/self/ns/pid`` names it: the kernel gives it the fixed
#: inode PROC_PID_INIT_INO (0xEFFFFFFC, include/linux/proc_ns.h); every other namespace gets its own.
HOST_PID_NAMESPACE = "pid:[4026531836]"


def pid_namespace(proc_root: str = "/proc") -> str | None:
    """This process's PID namespace (``pid:[inode]``), or None where there is no /proc to say."""
    try:
        return os.readlink(os.path.join(proc_root, "self", "ns", "pid"))[:64]
    except (OSError, ValueError):
        return None


def _unsigned(answer: object) -> int | None:
    """An NVML ``unsigned int`` answer as a number, or None (NA, or not such a number)."""
    if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < 2 ** 32:
        return None
    return int(answer)


def nvlink_version_words(version: object, name: object) -> str:
    """An NVLink version as people see it: the raw value NVML answered, with the enum's reading of it
    beside it (never the name alone: drivers have answered H100 links with values the enum names as
    other versions, so which reading is right is still to be settled on a GPU)."""
    if not isinstance(version, int) or isinstance(version, bool):
        return "not read"
    if isinstance(name, str) and name:
        return f"{version} (as nvmlNvlinkVersion_t: NVLink {name})"
    return f"{version} (not a value of the binding's nvmlNvlinkVersion_t)"


class _MigSlice:
    """One MIG device being read: its GPU's index, its GPU instance id (or NA), its MIG handle, and
    the GPM readings of each GPU instance, shared by every MIG device of one :meth:`NvmlBackend.mig_devices`."""

    __slots__ = ("index", "gpu_instance_id", "handle", "gpm")

    def __init__(self, index: int, gpu_instance_id: int | NA, handle: NvmlHandle, gpm: dict[int, Any]) -> None:
        self.index, self.gpu_instance_id, self.handle, self.gpm = index, gpu_instance_id, handle, gpm


class NvmlBackend:
    """Live readings through NVML. The methods are :class:`~gpudoctor.backends.base.GpuBackend`."""

    kind: ClassVar[str] = "nvml"
    source = ""  # a replay names its file here
    #: Where the process file system is (a test lays out its own): which PID namespace this is in.
    proc_root = "/proc"

    def __init__(self, gate: NvmlGate | None = None) -> None:
        self.gate = gate or NvmlGate()
        self._handles: dict[int, NvmlHandle] = {}
        self._identities: dict[int, DeviceIdentity] = {}  # index -> PCI bus id and UUID, read once
        self._process_util_seen: dict[int, int] = {}
        # Devices (by index) whose driver or binding answered that it has no
        # nvmlDeviceGetProcessesUtilizationInfo: kept per device, since a GPU in MIG mode answers
        # NotSupported where its neighbours answer.
        self._no_util_info: set[int] = set()
        self._memory_v2 = True  # until the driver or the binding says it has no v2 memory call
        # GPM per device (index) or MIG GPU instance ((index, gpu instance id)): its samples, or
        # the NA that says why it cannot be read; freed before NVML shuts down or restarts.
        self._gpm: dict[GpmKey, _GpmState | _GpmRetry | NA] = {}
        self._clock: Callable[[], float] = time.monotonic

    # -- system ---------------------------------------------------------------------
    def status(self) -> NA | None:
        return self.gate.start()

    def driver_version(self) -> str | NA:
        return self.gate.query("nvmlSystemGetDriverVersion")

    def cuda_driver_version(self) -> str | NA:
        """Highest CUDA version the driver supports, as 'major.minor' (nvidia-smi's 'CUDA Version')."""
        value = self.gate.query("nvmlSystemGetCudaDriverVersion_v2")
        if is_na(value):
            value = self.gate.query("nvmlSystemGetCudaDriverVersion")
        if is_na(value):
            return value
        return f"{value // 1000}.{(value % 1000) // 10}"

    def nvml_version(self) -> str | NA:
        return self.gate.query("nvmlSystemGetNVMLVersion")

    def device_count(self) -> int | NA:
        return self.gate.query("nvmlDeviceGetCount")

    def _handle(self, index: int) -> NvmlHandle | NA:
        handle = self._handles.get(index)
        if handle is None:
            handle = self.gate.query("nvmlDeviceGetHandleByIndex", index)
            if not is_na(handle):
                self._handles[index] = handle
        return handle

    def _q(self, function: str, index: int, *args: object) -> Any:
        handle = self._handle(index)
        if is_na(handle):
            return handle
        return self.gate.query(function, handle, *args)

    # -- per device, read once ------------------------------------------------------
    def identity(self, index: int) -> DeviceIdentity:
        """The device's PCI bus id and UUID: two NVML calls, kept until NVML restarts (a device
        keeps both for as long as the driver runs). What the torch-to-NVML resolver needs, on a
        training thread at the first monitored step, without :meth:`static`'s twenty-odd calls."""
        if index not in self._identities:
            pci = self._q("nvmlDeviceGetPciInfo", index)
            found = DeviceIdentity(pci if is_na(pci) else normalise_bus_id(_text(getattr(pci, "busId", None))),
                                   self._q("nvmlDeviceGetUUID", index))
            if any(is_na(v) and v.reason in ("Uninitialized", "DriverNotAnswering", "GpuIsLost")
                   for v in found.values()):
                return found  # a passing state: asked again next time
            self._identities[index] = found
        return self._identities[index]  # a frozen record: shared safely

    def static(self, index: int) -> DeviceStatic:
        """Facts read once per device: one per static fact of the catalogue
        (gpudoctor.backends.catalogue.STATIC_FACTS), in its order, each read through the gate (an
        NVML error is NA) by its :class:`~gpudoctor.backends.catalogue.NvmlRead` or by the reader it
        names (:data:`STATIC_READERS`: each called once), then screened with its plausible range."""
        answers: dict[tuple[Any, ...], Any] = {}
        made: dict[str, dict[str, Any]] = {}
        out: dict[str, Any] = {}
        for fact in catalogue.static_facts():
            if fact.nvml is not None:
                out[fact.key] = self._read_nvml(index, fact.nvml, answers)
                continue
            if fact.reader not in made:
                made[fact.reader] = getattr(self, STATIC_READERS[fact.reader])(index)
            out[fact.key] = made[fact.reader].get(fact.key, NA("NotRead"))
        return cast(DeviceStatic, screen(out))

    # The static facts that take more than one call's answer as it is (STATIC_READERS): each gives
    # the facts it makes, by key.
    def _static_index(self, index: int) -> dict[str, Any]:
        return {"index": index}

    def _static_pci(self, index: int) -> dict[str, Any]:
        pci = self._q("nvmlDeviceGetPciInfo", index)
        return {"pci_bus_id": pci if is_na(pci) else normalise_bus_id(_text(getattr(pci, "busId", None)))}

    def _static_memory(self, index: int) -> dict[str, Any]:
        memory = self._q("nvmlDeviceGetMemoryInfo", index)
        return {"memory_total_bytes": memory if is_na(memory) else int(memory.total)}

    def _static_compute_capability(self, index: int) -> dict[str, Any]:
        cc = self._q("nvmlDeviceGetCudaComputeCapability", index)
        return {"compute_capability": cc if is_na(cc) else f"{cc[0]}.{cc[1]}"}

    def fabric(self, index: int) -> dict[str, Any]:
        """The GPU's NVLink fabric registration (``nvidia-smi -q``'s "Fabric" section): on an
        NVSwitch board (HGX/DGX, Hopper and later) the fabric manager registers each GPU, and
        CUDA refuses to start (error 802) until that is done.

        Keys (:data:`FABRIC_KEYS`): ``fabric_state`` (NVML_GPU_FABRIC_STATE_*: 0 not supported,
        1 not started, 2 in progress, 3 completed), ``fabric_status`` (the registration's
        nvmlReturn as a name, "Success"; meaningful once completed), ``fabric_clique_id``,
        ``fabric_cluster_uuid`` (None when unset), ``fabric_health_mask`` and
        ``fabric_health_summary`` (NA where the driver's structure has none). Asks
        ``nvmlDeviceGetGpuFabricInfoV`` with the v3 structure, then v2, then the older
        ``nvmlDeviceGetGpuFabricInfo``. A PCIe board or a GPU before Hopper answers NotSupported:
        every key is then NA("NotSupported"), which is normal and no finding.
        """
        handle = self._handle(index)
        if is_na(handle):
            return {key: handle for key in FABRIC_KEYS}
        answer: Any = NA("FunctionNotFound")
        info: Any = None
        for function, struct in _FABRIC_CALLS:
            make = getattr(self.gate.lib, struct, None)
            if make is None:
                continue
            info = make()
            answer = self.gate.query(function, handle, _by_reference(info))
            if not is_na(answer) or answer.reason not in _FABRIC_TRY_NEXT:
                break
        if is_na(answer):
            return {key: answer for key in FABRIC_KEYS}
        return _fabric_reading(info, self.gate.error_name)

    # -- per device, every interval -------------------------------------------------
    def memory(self, index: int) -> MemoryReading:
        """Framebuffer memory only (nvidia-smi --query-gpu=memory.used,memory.reserved,memory.free,memory.total).

        One NVML call: for code that reads memory often (the allocator walk, samplers). The
        v2 structure (``nvmlDeviceGetMemoryInfo_v2``) gives "used" as nvidia-smi shows it and
        the driver's reserved memory apart; where the driver or the binding has no v2 call,
        the v1 call is used (its "used" includes the reserved memory) and reserved is
        ``NA("MemoryV2NotSupported")``, with one log line saying so.
        """
        version = self.gate.constant("nvmlMemory_v2", 0)
        if version and self._memory_v2:
            memory = self._q("nvmlDeviceGetMemoryInfo", index, version)
            if not is_na(memory):
                return _memory_reading(int(memory.used), int(memory.free), int(memory.total), int(memory.reserved))
            if memory.reason not in _NO_V2_REASONS:
                return MemoryReading(memory, memory, memory, memory)
            self._memory_v2 = False
            log.info("NVML has no v2 memory call (%s): memory used includes the driver's reserved memory",
                     memory.reason)
        memory = self._q("nvmlDeviceGetMemoryInfo", index)
        if is_na(memory):
            return MemoryReading(memory, memory, memory, memory)
        return _memory_reading(int(memory.used), int(memory.free), int(memory.total), NA("MemoryV2NotSupported"))

    def fast_sample(self, index: int) -> GpuSample:
        """The readings that cost one quick NVML call each: utilisation, memory, temperature,
        power, clocks, throttle reasons, performance state (the catalogue's "fast" readings).

        Leaves out the PCIe throughput counters (NVML measures each over a 20 ms window, so
        two of them cost >= 40 ms per GPU), ECC and retirement counts and the modes: cheap
        enough for samplers beside a training loop.
        """
        return cast(GpuSample, screen({**self.utilization(index), **self.memory(index),
                                       **self._read_catalogue(index, "fast")}))

    def sample(self, index: int) -> GpuSample:
        """Every reading gpudoctor shows: :meth:`fast_sample` plus PCIe link and throughput,
        fan, ECC, page retirement, row remapping, persistence and compute mode, energy."""
        return cast(GpuSample, screen({**self.fast_sample(index), **self._read_catalogue(index, "full"),
                                       **self.gpm(index)}))

    def _read_catalogue(self, index: int, read: str) -> dict[str, Any]:
        """The catalogue's readings of one kind of read ("fast", "full") that have NVML calls of
        their own, in catalogue order. A call that gives several readings (remapped rows) is made once."""
        answers: dict[tuple[Any, ...], Any] = {}
        return {reading.key: self._read_nvml(index, reading.nvml, answers)
                for reading in catalogue.readings() if reading.nvml is not None and reading.read == read}

    def _read_nvml(self, index: int, how: catalogue.NvmlRead, answers: dict[tuple[Any, ...], Any]) -> Any:
        """What the catalogue's ``how`` reads of the device, converted (NA where no function
        answers); ``answers`` keeps each call's answer, so a call that gives several readings or
        facts is made once (:meth:`_call`)."""
        return _convert(self._call(how, answers, self._q, index), how, self.gate.error_name)

    def _call(self, how: catalogue.NvmlRead, answers: dict[tuple[Any, ...], Any], ask: Callable[..., Any],
              target: object) -> Any:
        """The answer to ``how``'s call: the first of its functions that answers, asked as
        ``ask(function, target, *args)`` (``target``: a device index for :meth:`_q`, a MIG handle for
        the gate); kept in ``answers``, so readings that share a call make it once."""
        args = tuple(self.gate.constant(name, default) for name, default in how.args)
        call = (how.functions, args)
        if call not in answers:
            answer: Any = NA("FunctionNotFound")
            for function in how.functions:
                answer = ask(function, target, *((list(args),) if how.convert == "field" else args))
                if not is_na(answer):
                    break
            answers[call] = answer
        return answers[call]

    def nvlink(self, index: int) -> list[NvLinkReading] | NA:
        """NVLink links of a device: one dict per link that answered, or NA.

        ``nvidia-smi nvlink --status`` / ``nvidia-smi topo -m`` show the same. A GPU
        without NVLink answers NotSupported for every link: that is normal, not an error.
        Each link: ``link``, ``active`` (bool), ``version`` (the raw unsigned int NVML answered:
        nvml.h declares ``unsigned int *version``; None when it answered none or no such number),
        ``version_name`` ("4.0": that value read as pynvml's nvmlNvlinkVersion_t constants, None if
        the binding has none or the value is not among them: a name to show only beside the raw
        value, :func:`nvlink_version_words`), ``remote_pci_bus_id`` (the peer,
        normalised like ``static()['pci_bus_id']``) and ``remote_type`` (gpu, switch, ibmnpu).
        """
        handle = self._handle(index)
        if is_na(handle):
            return handle
        max_links = self.gate.constant("NVML_NVLINK_MAX_LINKS", 18)
        remote_types = {self.gate.constant("NVML_NVLINK_DEVICE_TYPE_GPU", 0): "gpu",
                        self.gate.constant("NVML_NVLINK_DEVICE_TYPE_IBMNPU", 1): "ibmnpu",
                        self.gate.constant("NVML_NVLINK_DEVICE_TYPE_SWITCH", 2): "switch"}
        links: list[NvLinkReading] = []
        first_na: NA | None = None
        for link in range(int(max_links)):
            state = self.gate.query("nvmlDeviceGetNvLinkState", handle, link)
            if is_na(state):
                if first_na is None:  # NA is falsy: test identity, not truth
                    first_na = state
                if state.reason == "InvalidArgument":  # past the device's last link
                    break
                continue
            pci = self.gate.query("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            remote = self.gate.query("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            version = _unsigned(self.gate.query("nvmlDeviceGetNvLinkVersion", handle, link))
            links.append({
                "link": link,
                "active": bool(state),
                "version": version,
                "version_name": None if version is None else self._nvlink_version_names().get(version),
                "remote_pci_bus_id": None if is_na(pci) else normalise_bus_id(_text(getattr(pci, "busId", None))),
                "remote_type": None if is_na(remote) else remote_types.get(int(remote), "unknown"),
            })
        if not links:
            return first_na if first_na is not None else NA("NotSupported")
        return links

    def p2p(self, index: int, peer: int) -> P2PReading:
        """The path between two GPUs as NVML sees it (``nvidia-smi topo -m`` and ``topo -p2p``).

        ``topology``: nvmlDeviceGetTopologyCommonAncestor's level (0 the same board, 10 one PCIe
        switch (PIX), 20 several switches (PXB), 30 the host bridge (PHB), 40 the NUMA node (NODE),
        50 across sockets (SYS)). ``read``, ``write``, ``nvlink``, ``atomics``: nvmlDeviceGetP2PStatus
        for that capability (0 OK, 1 chipset not supported, 2 GPU not supported, 3 IOH topology
        not supported, 4 disabled by the registry key, 5 not supported, 6 unknown). Each is NA with
        NVML's reason where the call fails (a lost GPU, a driver without the function).
        """
        out: dict[str, Any] = {}
        handles = self._handle(index), self._handle(peer)
        for handle in handles:
            if is_na(handle):
                return P2PReading.unknown(handle)
        out["topology"] = self.gate.query("nvmlDeviceGetTopologyCommonAncestor", *handles)
        for key, constant, default in _P2P_CAPS:
            out[key] = self.gate.query("nvmlDeviceGetP2PStatus", *handles, self.gate.constant(constant, default))
        return P2PReading(**{key: value if is_na(value) else int(value) for key, value in out.items()})

    def _nvlink_version_names(self) -> dict[int, str]:
        """nvmlNvlinkVersion_t values -> "4.0" etc., from the binding's NVML_NVLINK_VERSION_*
        constants (NVML_NVLINK_VERSION_4_0 = 6: the enum, not the version number, which is
        what newer drivers return). Empty with an older binding that has no such constants:
        then only the raw ``version`` is given, since it cannot be told apart from a number.
        """
        module = self.gate.lib
        cached = getattr(self, "_nvlink_names", None)
        if cached is not None and cached[0] is module:
            return cached[1]
        names: dict[int, str] = {}
        for attr in dir(module) if module is not None else ():
            if attr.startswith("NVML_NVLINK_VERSION_") and attr != "NVML_NVLINK_VERSION_INVALID":
                value = getattr(module, attr)
                major, _, minor = attr[len("NVML_NVLINK_VERSION_"):].partition("_")
                if isinstance(value, int) and major.isdigit() and minor.isdigit():
                    names[value] = f"{major}.{minor}"
        self._nvlink_names = (module, names)
        return names

    def total_energy_mj(self, index: int) -> int | NA:
        """Energy used since the driver loaded, in mJ (nvidia-smi --query-gpu=total_energy_consumption)."""
        return check("energy_mj", self._q("nvmlDeviceGetTotalEnergyConsumption", index))

    def utilization_samples(self, index: int, since_us: int) -> list[tuple[int, float]] | NA:
        """NVML's own ``utilization.gpu`` samples newer than ``since_us``, oldest first, as
        ``[(timestamp_us, percent)]`` (``nvmlDeviceGetSamples`` with
        ``NVML_GPU_UTILIZATION_SAMPLES``; ``since_us`` 0 gives the driver's whole buffer).

        Each sample is the share of NVML's sample period (1/6 s to 1 s, by product) ending at
        its timestamp, a CPU time in microseconds, in which a kernel ran. No new sample is an
        empty list; anything else NVML refuses is NA with the reason.
        """
        kind = self.gate.constant("NVML_GPU_UTILIZATION_SAMPLES", 1)
        answer = self._q("nvmlDeviceGetSamples", index, kind, int(since_us))
        if is_na(answer):
            return [] if answer.reason == "NotFound" else answer  # NotFound: none since since_us
        value_type, samples = answer
        field = _SAMPLE_VALUE_FIELDS.get(int(value_type), "uiVal")
        out = []
        for entry in samples:
            value = check("gpu_util_pct", getattr(entry.sampleValue, field))
            if not is_na(value):
                out.append((int(entry.timeStamp), float(value)))
        return sorted(out)

    def compute_mode(self, index: int) -> int | NA:
        """nvmlDeviceGetComputeMode: 0 default, 1 exclusive thread (deprecated), 2 prohibited,
        3 exclusive process (one context on the device at a time). One NVML call."""
        return self._q("nvmlDeviceGetComputeMode", index)

    def utilization(self, index: int) -> UtilizationReading:
        """Only the busy percentages (nvidia-smi --query-gpu=utilization.gpu,utilization.memory).

        One NVML call, cheap enough to poll at 10-20 Hz beside a running benchmark.
        """
        util = self._q("nvmlDeviceGetUtilizationRates", index)
        return UtilizationReading(time.time(), util if is_na(util) else check("gpu_util_pct", int(util.gpu)),
                                  util if is_na(util) else check("mem_util_pct", int(util.memory)))

    def processes(self, index: int) -> list[ProcessReading] | NA:
        """Processes holding a context on the device: pid, type, GPU memory, SM util (the newest
        sample per PID; NA("PidNamespaceMismatch") where the list and the samples may number
        processes in different PID namespaces: see :meth:`_pid_join_refused`)."""
        found: dict[int, dict[str, Any]] = {}
        any_ok = False
        first_na: NA | None = None
        for kind, function in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                               ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
            procs = self._q(function, index)
            if is_na(procs):
                if first_na is None:  # NA is falsy: test identity, not truth
                    first_na = procs
                continue
            any_ok = True
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                entry = found.setdefault(int(p.pid), {"pid": int(p.pid), "type": kind,
                                                      "gpu_memory_bytes": None, "sm_util_pct": None})
                if used is not None and used < (1 << 62):  # NVML_VALUE_NOT_AVAILABLE is ULL max
                    entry["gpu_memory_bytes"] = int(used)
                if entry["type"] != kind:
                    entry["type"] = "compute+graphics"
        if not any_ok:
            return first_na if first_na is not None else NA("Unknown")
        last_seen = self._process_util_seen.get(index, 0)
        samples = self._process_util_samples(index, last_seen)
        if not is_na(samples):
            newest_by_pid: dict[int, tuple[int, int]] = {}  # pid -> (timeStamp, smUtil) of its newest sample
            newest = last_seen
            for u in samples:
                pid, stamp = int(u.pid), int(getattr(u, "timeStamp", 0))
                if pid not in newest_by_pid or stamp >= newest_by_pid[pid][0]:
                    newest_by_pid[pid] = (stamp, int(u.smUtil))
                newest = max(newest, stamp)
            self._process_util_seen[index] = newest
            refused = self._pid_join_refused(set(found), set(newest_by_pid))
            for pid, entry in found.items():
                if refused is not None:
                    entry["sm_util_pct"] = refused
                elif pid in newest_by_pid:
                    entry["sm_util_pct"] = newest_by_pid[pid][1]
        return [ProcessReading(e["pid"], e["type"], e["gpu_memory_bytes"], e["sm_util_pct"])
                for e in sorted(found.values(), key=lambda e: e["pid"])]

    def _pid_join_refused(self, listed: set[int], sampled: set[int]) -> NA | None:
        """None when the running processes and the utilisation samples can be matched by PID, else
        NA("PidNamespaceMismatch") for every process's SM %.

        R535+ drivers give the running processes in the caller's PID namespace and the utilisation
        samples in the host's. On the host (this process in the initial PID namespace) both are host
        PIDs. In a container they are numbered in two namespaces, and a container PID that happens
        to equal some host PID would credit another process's SM % to it; a container's own /proc
        numbers only its processes (NSpid shows no host PID), so no translation is possible: no join.
        Without a /proc (no PID namespaces to tell) two sets sharing no PID still say so."""
        namespace = pid_namespace(self.proc_root)
        if namespace == HOST_PID_NAMESPACE or not listed or not sampled:
            return None
        if namespace is not None or not listed & sampled:
            return NA("PidNamespaceMismatch")
        return None

    def _process_util_samples(self, index: int, last_seen: int) -> Any:
        """Per-process utilisation samples newer than ``last_seen``: the v1 info call where the
        driver has it (R550+), else the older ``nvmlDeviceGetProcessUtilization``."""
        if index not in self._no_util_info:
            samples = self._q("nvmlDeviceGetProcessesUtilizationInfo", index, last_seen)
            if not is_na(samples) or samples.reason not in ("FunctionNotFound", "NotSupported"):
                return samples
            self._no_util_info.add(index)  # this device (or the binding) has only the old call
        return self._q("nvmlDeviceGetProcessUtilization", index, last_seen)

    # -- GPM (Hopper and later) ------------------------------------------------------
    def gpm(self, index: int) -> dict[str, float | NA]:
        """The catalogue's GPM readings of a whole GPU (SM activity, occupancy, tensor, DRAM...),
        computed by NVML from this call's GPM sample and the previous one.

        The first call has no previous sample: every reading is ``NA("Warming")``, never 0. A
        device without GPM answers NA with the reason in words (``needs Hopper or later``: an older
        GPU or a vGPU without it; ``needs a driver with GPM``: the driver or binding lacks the
        calls); a metric the device lacks (NVLink on a PCIe board) is NA with NVML's own error for
        it. A GPU in MIG mode is read per GPU instance (:meth:`gpm_mig`).
        """
        handle = self._handle(index)
        if is_na(handle):
            return self._gpm_na(handle)
        mig = self.gate.query("nvmlDeviceGetMigMode", handle)
        if is_na(mig) and mig.reason not in _NO_MIG_REASONS:
            return self._gpm_na(mig)  # the device failed (GpuIsLost...): say so, not "needs Hopper"
        if not is_na(mig) and int(mig[0]) == 1:
            return self._gpm_na(NA(GPM_MIG))
        return self._gpm_read(index, handle, None)

    def gpm_mig(self, index: int, gpu_instance_id: int) -> dict[str, float | NA]:
        """The GPM readings of one MIG GPU instance of GPU ``index`` (nvmlGpmMigSampleGet), as
        :meth:`gpm` gives them for a whole GPU."""
        handle = self._handle(index)
        if is_na(handle):
            return self._gpm_na(handle)
        return self._gpm_read((index, int(gpu_instance_id)), handle, int(gpu_instance_id))

    # -- MIG devices ----------------------------------------------------------------
    def mig_devices(self, index: int, readings: bool = True) -> list[MigDeviceReading] | NA:
        """The MIG devices of GPU ``index`` (nvidia-smi's "MIG devices" table), each read on its own
        MIG handle (nvmlDeviceGetMigDeviceHandleByIndex over nvmlDeviceGetMaxMigDeviceCount slots;
        an empty slot answers NotFound and is skipped). NA("MigDisabled") when the GPU is not in
        MIG mode, NA("MigNotSupported") when it has no MIG; a failing device gives its own NA.

        Per slice NVML gives ids, UUID, name, attributes, memory and processes; energy it gives for
        the whole GPU only, and utilisation rates not at all in MIG mode (NotSupported on a MIG
        handle): both are asked on the MIG handle all the same and kept as NVML answers, never
        divided between slices."""
        handle = self._handle(index)
        if is_na(handle):
            return handle
        mode = self.gate.query("nvmlDeviceGetMigMode", handle)
        if is_na(mode):
            return NA("MigNotSupported") if mode.reason in _NO_MIG_REASONS else mode
        if int(mode[0]) != 1:
            return NA("MigDisabled")
        slots = self.gate.query("nvmlDeviceGetMaxMigDeviceCount", handle)
        if is_na(slots):
            return slots
        found: list[MigDeviceReading] = []
        gpm: dict[int, Any] = {}  # GPM per GPU instance (by its id), read once per call
        for slot in range(min(int(slots), 64)):
            mig = self.gate.query("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            if is_na(mig):
                if mig.reason in ("NotFound", "InvalidArgument"):
                    continue  # an empty slot
                return mig  # the device failed (GpuIsLost, DriverNotAnswering...)
            found.append(self._mig_device(index, slot, mig, gpm) if readings
                         else self._mig_identity(index, slot, mig))
        return found

    def _mig_identity(self, index: int, slot: int, mig: NvmlHandle) -> MigDeviceReading:
        """What names a MIG device (ids, UUID, name and profile); its readings NA("NotRead")."""
        q = self.gate.query
        gi, ci, name = q("nvmlDeviceGetGpuInstanceId", mig), q("nvmlDeviceGetComputeInstanceId", mig), \
            q("nvmlDeviceGetName", mig)
        skipped: dict[str, Any] = {r.key: NA("NotRead") for r in catalogue.mig_readings()}
        return MigDeviceReading(
            parent=index, slot=slot, gpu_instance_id=gi if is_na(gi) else int(gi),
            compute_instance_id=ci if is_na(ci) else int(ci), uuid=q("nvmlDeviceGetUUID", mig), name=name,
            profile=_mig_profile(name), processes=NA("NotRead"), **skipped)

    def _mig_device(self, index: int, slot: int, mig: NvmlHandle, gpm: dict[int, Any]) -> MigDeviceReading:
        """A MIG device's names (:meth:`_mig_identity`) with its readings: each of the catalogue's MIG
        readings from its NVML call on the MIG handle (made once for the readings that share it) or
        its reader (:data:`MIG_READERS`), converted as its ``nvml`` says and screened with its range;
        then its processes. ``gpm``: the GPM readings of each GPU instance, read once per call of
        :meth:`mig_devices`."""
        named = self._mig_identity(index, slot, mig)
        at = _MigSlice(index, named.gpu_instance_id, mig, gpm)
        answers: dict[tuple[Any, ...], Any] = {}
        read = {r.key: self._mig_reading(r, at, answers) for r in catalogue.mig_readings()}
        return replace(named, **read, processes=self._mig_processes(mig))

    def _mig_reading(self, reading: catalogue.MigReading, at: "_MigSlice", answers: dict[tuple[Any, ...], Any]) -> Any:
        """One catalogue MIG reading of the MIG device ``at``."""
        how = reading.nvml
        if reading.reader:
            if (reading.reader,) not in answers:
                answers[(reading.reader,)] = MIG_READERS[reading.reader](self, at)
            answer = answers[(reading.reader,)]
        elif how is not None:
            answer = self._call(how, answers, self.gate.query, at.handle)
        else:
            answer = NA("NotRead")  # a reading with neither a call nor a reader (the catalogue's test refuses one)
        return within(reading.plausible, _convert(answer, how, self.gate.error_name) if how is not None else answer)

    def _mig_memory(self, at: "_MigSlice") -> Any:
        """A MIG device's memory info (MIG reader "memory"): the v2 call where the driver has it (used
        without the driver's reserved memory, as nvidia-smi shows it), else the v1 call."""
        version = self.gate.constant("nvmlMemory_v2", 0)
        if version and self._memory_v2:
            memory = self.gate.query("nvmlDeviceGetMemoryInfo", at.handle, version)
            if not is_na(memory) or memory.reason not in _NO_V2_REASONS:
                return memory
        return self.gate.query("nvmlDeviceGetMemoryInfo", at.handle)

    def _mig_gpm(self, at: "_MigSlice") -> dict[str, float | NA] | NA:
        """The GPM readings of a MIG device's GPU instance (MIG reader "gpm"; :meth:`gpm_mig`), read
        once per GPU instance in one call of :meth:`mig_devices`: the compute instances of one GPU
        instance share them. NA where the GPU instance id is."""
        gi = at.gpu_instance_id
        if is_na(gi):
            return gi
        if gi not in at.gpm:
            at.gpm[gi] = self.gpm_mig(at.index, gi)
        return at.gpm[gi]

    def _mig_processes(self, mig: NvmlHandle) -> list[ProcessReading] | NA:
        """The compute processes on one MIG device (pid, memory; NVML gives no per-process SM
        utilisation per slice): NoPermission for a user without the privileges NVML asks for."""
        procs = self.gate.query("nvmlDeviceGetComputeRunningProcesses", mig)
        if is_na(procs):
            return procs
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out.append(ProcessReading(int(p.pid), "compute",
                                      int(used) if used is not None and used < (1 << 62) else None, None))
        return sorted(out, key=lambda p: p.pid)

    @staticmethod
    def _gpm_na(na: NA) -> dict[str, float | NA]:
        return {r.key: na for r in catalogue.gpm_readings()}

    def _gpm_state(self, key: GpmKey, handle: NvmlHandle) -> "_GpmState | NA":
        state = self._gpm.get(key)
        if state is not None and not isinstance(state, _GpmRetry):
            return state
        retry = state
        if retry is not None and self._clock() < retry.at:
            return retry.na
        support = self.gate.query("nvmlGpmQueryDeviceSupport", handle)
        found: _GpmState | NA
        if is_na(support) and support.reason not in GPM_PERMANENT:  # may pass: asked again later
            wait = GPM_RETRY_FIRST_S if retry is None else min(GPM_RETRY_MAX_S, retry.wait_s * 2)
            self._gpm[key] = _GpmRetry(support, self._clock() + wait, wait)
            return support
        if is_na(support):
            found = NA(GPM_OLD_DRIVER if support.reason == "FunctionNotFound" else GPM_NEEDS_HOPPER)
        elif not int(getattr(support, "isSupportedDevice", 0)):
            found = NA(GPM_NEEDS_HOPPER)
        else:
            first = self.gate.query("nvmlGpmSampleAlloc")
            second = self.gate.query("nvmlGpmSampleAlloc") if not is_na(first) else first
            if is_na(second):
                if not is_na(first):
                    self.gate.query("nvmlGpmSampleFree", first)
                return second  # kept out of the cache: an allocation may succeed next time
            found = _GpmState((first, second))
        self._gpm[key] = found
        return found

    def _gpm_read(self, key: GpmKey, handle: NvmlHandle, gpu_instance: int | None) -> dict[str, float | NA]:
        state = self._gpm_state(key, handle)
        if is_na(state):
            return self._gpm_na(state)
        assert isinstance(state, _GpmState)
        now = self._clock()
        if state.newer >= 0 and now - state.taken < GPM_MIN_INTERVAL_S:
            return dict(state.last) if state.last is not None else self._gpm_na(NA(GPM_WARMING))
        slot = 0 if state.newer != 0 else 1
        buffer = state.samples[slot]
        taken = (self.gate.query("nvmlGpmMigSampleGet", handle, gpu_instance, buffer) if gpu_instance is not None
                 else self.gate.query("nvmlGpmSampleGet", handle, buffer))
        if is_na(taken):
            return self._gpm_na(taken)
        previous, state.newer, state.taken = state.newer, slot, now
        if previous < 0:
            return self._gpm_na(NA(GPM_WARMING))
        state.last = self._gpm_metrics(state.samples[previous], buffer)
        return dict(state.last)

    def _gpm_metrics(self, older: GpmSample, newer: GpmSample) -> dict[str, Any]:
        """nvmlGpmMetricsGet over two samples: each catalogue GPM reading, or NA with its metric's
        own return code."""
        wanted = catalogue.gpm_readings()
        make = getattr(self.gate.lib, "c_nvmlGpmMetricsGet_t", None)
        if make is None:
            return self._gpm_na(NA(GPM_OLD_DRIVER))
        request = make()
        request.version = self.gate.constant("NVML_GPM_METRICS_GET_VERSION", 1)
        request.numMetrics = len(wanted)
        request.sample1, request.sample2 = older, newer
        for i, reading in enumerate(wanted):
            assert reading.gpm is not None
            request.metrics[i].metricId = self.gate.constant(*reading.gpm)
        answer = self.gate.query("nvmlGpmMetricsGet", request)
        if is_na(answer):
            return self._gpm_na(answer)
        out: dict[str, Any] = {}
        for i, reading in enumerate(wanted):
            metric = answer.metrics[i]
            code = int(metric.nvmlReturn)
            out[reading.key] = (check(reading.key, round(float(metric.value), 1)) if code == 0
                                else NA(self.gate.error_name(code)))
        return out

    def _gpm_free(self) -> None:
        """Free every GPM sample buffer (before NVML shuts down or restarts), in a daemon thread
        waited for at most STUCK_S: closing never waits for a driver that does not answer (the
        gate then counts the call as stuck, and the process's exit frees the buffers)."""
        states, self._gpm = self._gpm, {}
        buffers = [b for state in states.values() if isinstance(state, _GpmState) for b in state.samples]
        if not buffers or self.gate.stuck():
            return

        def free() -> None:
            for buffer in buffers:
                self.gate.query("nvmlGpmSampleFree", buffer)

        worker = threading.Thread(target=free, name="gpudoctor-gpm-free", daemon=True)
        worker.start()
        worker.join(STUCK_S)

    def reset(self) -> None:
        """Start again from nothing: device handles from before a driver reload or a GPU reset
        are stale, so they are dropped with NVML itself; the next reading re-initialises."""
        self._gpm_free()
        self._handles.clear()
        self._identities.clear()
        self._process_util_seen.clear()
        self._no_util_info.clear()
        self.gate.reset()

    def close(self) -> None:
        self._gpm_free()
        self._handles.clear()
        self._identities.clear()
        self.gate.shutdown()


#: The readers of the MIG readings that take more than one NVML call, by the name a catalogue entry's
#: ``reader`` gives (gpudoctor.backends.catalogue.MigReading): each answers for one MIG device, and the
#: entry's ``nvml`` says how its answer becomes the reading.
MIG_READERS: dict[str, Callable[[NvmlBackend, _MigSlice], Any]] = {
    "memory": NvmlBackend._mig_memory,
    "gpm": NvmlBackend._mig_gpm,
}
