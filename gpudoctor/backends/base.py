"""The GPU backend seam: what every GPU backend offers, and the typed readings it returns.

Two backends satisfy :class:`GpuBackend`: :class:`~gpudoctor.backends.nvml.NvmlBackend`
(live NVML through the gate) and :class:`~gpudoctor.backends.replay.ReplayBackend` (a
recording made by ``gpudoctor record``). ``tests/backends/test_backends.py`` checks that both have
every method with the same parameters and give the same record types for the same calls,
so callers never probe a backend with ``getattr``.

A reading the driver cannot give is :class:`~gpudoctor.backends.na.NA` (with the reason)
in place of the number: NA is part of every record's field types.

The small readings are records (:class:`MemoryReading`, :class:`UtilizationReading`,
:class:`ProcessReading`, :class:`DeviceIdentity`, :class:`P2PReading`...): frozen dataclasses with typed attributes. They are also
read-only mappings of their field names (``reading["memory_used_bytes"]``), so the JSON
writers and the recorder store them as they stored the dictionaries before. The whole
samples (``sample``/``fast_sample``) and the static facts stay dictionaries keyed by the
names in docs/recording.schema.json: a recording may hold any subset of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Protocol, TypedDict, Union, runtime_checkable

from gpudoctor.core._record import field, fields, record
from .na import NA

#: A number the driver gave, or why it gave none.
IntOrNA = Union[int, NA]
FloatOrNA = Union[float, NA]
#: A string the driver gave (or null where it gave none: a bus id it could not parse), or why not.
TextOrNA = Union[str, NA]
OptionalTextOrNA = Union[str, None, NA]


class MappingRecord(Mapping[str, Any]):
    """A record that is also a read-only mapping of its fields (for JSON and recordings)."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        if key in self._names():
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        names = cls.__dict__.get("_field_names")
        if names is None:
            names = tuple(f.name for f in fields(cls))
            cls._field_names = names  # type: ignore[attr-defined]
        return names

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._names()}


@record(frozen=True, eq=False)
class MemoryReading(MappingRecord):
    """Device (framebuffer) memory, as nvidia-smi shows it.

    ``memory_used_bytes`` is what processes hold (NVML's v2 structure, like nvidia-smi);
    ``memory_reserved_bytes`` is what the driver keeps for itself (about 0.5 GiB on an
    H100). With a driver or binding that has no v2 call, used comes from the v1 call and
    includes the reserved memory; reserved is then ``NA("MemoryV2NotSupported")``.
    """

    memory_used_bytes: IntOrNA
    memory_free_bytes: IntOrNA
    memory_total_bytes: IntOrNA
    memory_reserved_bytes: IntOrNA


@record(frozen=True, eq=False)
class UtilizationReading(MappingRecord):
    """NVML utilization rates: the share of the last sample period a kernel ran / memory was used
    (NVML answers whole percents; a recording may hold any number, as the schema says)."""

    t: float
    gpu_util_pct: FloatOrNA
    mem_util_pct: FloatOrNA


@record(frozen=True, eq=False)
class ProcessReading(MappingRecord):
    """One process holding a context on a device (NVML running processes)."""

    pid: int
    type: str                     # compute, graphics or compute+graphics
    gpu_memory_bytes: int | None  # None: the driver does not say (NVML_VALUE_NOT_AVAILABLE)
    sm_util_pct: int | None       # None: no utilisation sample for the pid
    #: Further fields a recording holds for the pid (user, command... of hand-made files),
    #: served as mapping keys after the four above.
    recorded: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return ("pid", "type", "gpu_memory_bytes", "sm_util_pct")

    def __getitem__(self, key: str) -> Any:
        if key in self._names():
            return getattr(self, key)
        return self.recorded[key]

    def __iter__(self) -> Iterator[str]:
        yield from self._names()
        yield from (k for k in self.recorded if k not in self._names())

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.items())

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "ProcessReading":
        """A recorded process entry (whatever a recording holds) as a reading."""
        return cls(pid=data.get("pid"), type=str(data.get("type", "")),  # type: ignore[arg-type]
                   gpu_memory_bytes=data.get("gpu_memory_bytes"), sm_util_pct=data.get("sm_util_pct"),
                   recorded={k: v for k, v in data.items() if k not in cls._names()})


@record(frozen=True, eq=False)
class DeviceIdentity(MappingRecord):
    """What matches an NVML device to torch's (:meth:`GpuBackend.identity`): its PCI bus id in
    one form (``0000:65:00.0``, as ``normalise_bus_id`` writes it; None where the driver's text is
    no bus id) and its UUID (``GPU-...``), each NA with the reason where NVML cannot give it."""

    pci_bus_id: Union[str, NA, None]
    uuid: Union[str, NA]


@record(frozen=True, eq=False)
class P2PReading(MappingRecord):
    """The path between two GPUs as NVML sees it (:meth:`GpuBackend.p2p`; ``nvidia-smi topo -m``
    and ``topo -p2p``). ``topology``: nvmlDeviceGetTopologyCommonAncestor's level (0 the same
    board ... 50 across sockets); ``read``, ``write``, ``nvlink``, ``atomics``: nvmlDeviceGetP2PStatus
    for that capability (0 OK, else why not). Each is NA with the reason where it is not known."""

    topology: IntOrNA
    read: IntOrNA
    write: IntOrNA
    nvlink: IntOrNA
    atomics: IntOrNA

    @classmethod
    def unknown(cls, na: NA) -> "P2PReading":
        """Every field ``na`` (a device that cannot be read, a source that holds no path)."""
        return cls(**{name: na for name in cls._names()})


@record(frozen=True, eq=False)
class MigDeviceReading(MappingRecord):
    """One MIG device (a compute instance of a GPU instance) of a GPU in MIG mode, read on its own
    MIG handle.

    ``uuid`` is NVML's "MIG-..." UUID as given (what CUDA_VISIBLE_DEVICES takes); ``profile`` the
    part of the name after "MIG " ("3g.40gb"); ``sm_count`` and ``memory_size_bytes`` come from the
    device's attributes, ``memory_used_bytes``/``memory_total_bytes`` from its memory info.
    ``processes``: the compute processes on the slice (pid, memory), or NA (``NoPermission`` without
    the privileges NVML asks for). ``sm_active_pct`` is GPM's SM activity of the slice's GPU instance
    (shared by the compute instances of one GPU instance; Hopper and later). ``gpu_util_pct`` and
    ``energy_mj`` are what NVML answers on the MIG handle: NA (NotSupported) as documented, since NVML
    gives energy for the whole GPU only and no utilisation rates at all on a GPU in MIG mode.
    """

    parent: int
    slot: int
    gpu_instance_id: IntOrNA
    compute_instance_id: IntOrNA
    uuid: Union[str, NA]
    name: Union[str, NA]
    profile: Union[str, NA]
    # The readings: the catalogue's MIG_READINGS, written out by python -m gpudoctor.tools.regenerate.
    # mig-reading:begin
    sm_count: IntOrNA
    memory_size_bytes: IntOrNA
    memory_used_bytes: IntOrNA
    memory_total_bytes: IntOrNA
    gpu_util_pct: IntOrNA
    energy_mj: IntOrNA
    sm_active_pct: FloatOrNA
    # mig-reading:end
    processes: Union[list[ProcessReading], NA]

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "MigDeviceReading":
        """A recorded MIG device (whatever a recording holds; an absent field reads NotRecorded)."""
        missing = NA("NotRecorded")
        procs = data.get("processes", missing)
        return cls(**{name: data.get(name, missing) for name in cls._names() if name != "processes"},
                   processes=[ProcessReading.from_mapping(p) for p in procs if isinstance(p, Mapping)]
                   if isinstance(procs, list) else procs)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if isinstance(self.processes, list):
            out["processes"] = [p.to_dict() for p in self.processes]
        return out


class GpuSample(TypedDict, total=False):
    """One device's readings (``sample``; ``fast_sample`` gives the first group only).

    Keyed by the readings of gpudoctor.backends.catalogue, where each is defined (and from which
    the recording schema is made); its fields are written out here for type checkers by
    ``python -m gpudoctor.tools.regenerate`` (tests/backends/test_catalogue.py fails while they are not current).
    A recording may hold any subset; an absent key reads as NA.
    """

    # gpu-sample:begin
    t: float
    gpu_util_pct: FloatOrNA
    mem_util_pct: FloatOrNA
    memory_used_bytes: IntOrNA
    memory_free_bytes: IntOrNA
    memory_total_bytes: IntOrNA
    memory_reserved_bytes: IntOrNA
    temperature_c: FloatOrNA
    power_w: FloatOrNA
    power_instant_w: FloatOrNA
    power_limit_w: FloatOrNA
    clock_sm_mhz: IntOrNA
    clock_mem_mhz: IntOrNA
    clock_graphics_mhz: IntOrNA
    throttle_reasons: IntOrNA
    performance_state: IntOrNA
    pcie_gen_current: IntOrNA
    pcie_width_current: IntOrNA
    pcie_tx_kbps: FloatOrNA
    pcie_rx_kbps: FloatOrNA
    fan_pct: FloatOrNA
    ecc_volatile_corrected: IntOrNA
    ecc_volatile_uncorrected: IntOrNA
    ecc_aggregate_corrected: IntOrNA
    ecc_aggregate_uncorrected: IntOrNA
    retired_pages_sbe: IntOrNA
    retired_pages_dbe: IntOrNA
    retired_pages_pending: Union[int, bool, NA]
    remapped_rows_correctable: IntOrNA
    remapped_rows_uncorrectable: IntOrNA
    remapped_rows_pending: Union[int, bool, NA]
    remapped_rows_failure: Union[int, bool, NA]
    persistence_mode: IntOrNA
    compute_mode: IntOrNA
    sm_active_pct: FloatOrNA
    sm_occupancy_pct: FloatOrNA
    tensor_active_pct: FloatOrNA
    tensor_hmma_active_pct: FloatOrNA
    dram_active_pct: FloatOrNA
    fp64_active_pct: FloatOrNA
    fp32_active_pct: FloatOrNA
    fp16_active_pct: FloatOrNA
    gpm_pcie_tx_mibps: FloatOrNA
    gpm_pcie_rx_mibps: FloatOrNA
    nvlink_rx_mibps: FloatOrNA
    nvlink_tx_mibps: FloatOrNA
    energy_mj: IntOrNA
    # gpu-sample:end


class DeviceStatic(TypedDict, total=False):
    """One device's facts read once (``static``): its name, identity, limits and modes.

    Keyed by the static facts of gpudoctor.backends.catalogue (``STATIC_FACTS``), where each is
    defined (and from which the recording schema's ``static`` part is made); its fields are
    written out here for type checkers by ``python -m gpudoctor.tools.regenerate``
    (tests/backends/test_catalogue.py fails while they are not current). A recording made by an older
    gpudoctor may lack a key.
    """

    # device-static:begin
    index: int
    name: TextOrNA
    uuid: TextOrNA
    serial: TextOrNA
    pci_bus_id: OptionalTextOrNA
    memory_total_bytes: IntOrNA
    compute_capability: TextOrNA
    architecture: IntOrNA
    vbios_version: TextOrNA
    temperature_slowdown_c: FloatOrNA
    temperature_shutdown_c: FloatOrNA
    temperature_gpu_max_c: FloatOrNA
    power_limit_w: FloatOrNA
    power_default_limit_w: FloatOrNA
    clock_sm_max_mhz: IntOrNA
    clock_mem_max_mhz: IntOrNA
    pcie_gen_max: IntOrNA
    pcie_gen_gpu_max: IntOrNA
    pcie_width_max: IntOrNA
    memory_bus_width_bits: IntOrNA
    mig_mode: IntOrNA
    ecc_mode: IntOrNA
    num_fans: IntOrNA
    fabric_state: IntOrNA
    fabric_status: TextOrNA
    fabric_clique_id: IntOrNA
    fabric_cluster_uuid: OptionalTextOrNA
    fabric_health_mask: IntOrNA
    fabric_health_summary: IntOrNA
    # device-static:end


class NvLinkReading(TypedDict, total=False):
    """One NVLink link of a device (:meth:`GpuBackend.nvlink`); a recording made by an older
    gpudoctor may lack a key."""

    link: int
    active: bool
    version: int | None  # the raw unsigned int NVML answered (nvmlDeviceGetNvLinkVersion)
    version_name: str | None  # that value read as the binding's nvmlNvlinkVersion_t, None if none
    remote_pci_bus_id: str | None
    remote_type: str | None  # gpu, switch, ibmnpu, unknown


@runtime_checkable
class GpuBackend(Protocol):
    """What the probes, the sampling core and the recorder may ask of a GPU backend.

    No method raises for a driver failure: a failing call is NA with the reason.
    ``kind`` is "nvml" or "replay".
    """

    kind: ClassVar[str]
    source: str  # the recording's file for a replay; empty for live NVML

    def status(self) -> NA | None:
        """None when the backend can answer; else NA with the reason (NVML missing...)."""

    def driver_version(self) -> str | NA: ...

    def cuda_driver_version(self) -> str | NA: ...

    def nvml_version(self) -> str | NA: ...

    def device_count(self) -> int | NA: ...

    def identity(self, index: int) -> DeviceIdentity:
        """The device's ``pci_bus_id`` and ``uuid`` (what matches it to torch's device), cheap and kept."""

    def static(self, index: int) -> DeviceStatic:
        """Facts read once per device (name, uuid, bus id, limits): the catalogue's static facts."""

    def sample(self, index: int) -> GpuSample:
        """Every reading gpudoctor shows (PCIe counters, ECC and modes included)."""

    def fast_sample(self, index: int) -> GpuSample:
        """The readings cheap enough to take beside a training loop."""

    def memory(self, index: int) -> MemoryReading: ...

    def utilization(self, index: int) -> UtilizationReading: ...

    def processes(self, index: int) -> list[ProcessReading] | NA: ...

    def nvlink(self, index: int) -> list[NvLinkReading] | NA: ...

    def p2p(self, index: int, peer: int) -> P2PReading:
        """The path between two GPUs: NVML's topology level and P2P status per capability."""

    def total_energy_mj(self, index: int) -> int | NA: ...

    def compute_mode(self, index: int) -> int | NA: ...

    def gpm(self, index: int) -> dict[str, float | NA]:
        """The GPM readings of a whole GPU (SM, tensor, DRAM activity...) since the previous call,
        each NA with the reason where the device, the driver or the source has none."""

    def utilization_samples(self, index: int, since_us: int) -> list[tuple[int, float]] | NA:
        """NVML's own utilisation samples newer than ``since_us``: [(timestamp_us, percent)] or NA."""

    def mig_devices(self, index: int, readings: bool = True) -> list[MigDeviceReading] | NA:
        """The MIG devices of a GPU in MIG mode, in slot order; NA("MigDisabled") for a GPU not in
        MIG mode, NA("MigNotSupported") for one without MIG, else NA with the reason. With
        ``readings=False`` only what names each device (ids, UUID, name), the rest NA("NotRead"):
        what resolving CUDA_VISIBLE_DEVICES needs, without memory, process or GPM reads."""

    def reset(self) -> None:
        """Start again from nothing (after a driver reload); a recording has nothing to redo."""

    def close(self) -> None: ...


__all__ = ["GpuBackend", "GpuSample", "MemoryReading", "UtilizationReading", "ProcessReading", "MappingRecord", "IntOrNA",
           "FloatOrNA", "DeviceIdentity", "P2PReading", "MigDeviceReading"]
