"""The one catalogue of per-GPU readings: each reading defined once, every consumer derived from it.

A reading (``gpu_util_pct``, ``temperature_c``...) has one name, its :attr:`Reading.key`, from the
NVML backend to the TUI: the sample dictionaries (:class:`~gpudoctor.backends.base.GpuSample`), the
recording schema (docs/recording.schema.json), the replay backend's cheap reads, the sampler's
history, ``gpudoctor watch`` (its lines and ``--json`` records), the Prometheus exporter's per-GPU
gauges, ``gpudoctor fleet``'s queries and the TUI panel's cells are all read from :data:`READINGS`.
Names outside gpudoctor (the Prometheus name, the DCGM field, fleet's JSON field) are attributes of
the reading, never keys of their own.

A new NVML reading is one :class:`Reading` here: with an :class:`NvmlRead` the live backend reads it
(through the gate, an error becomes NA), recordings store and replay it, and the front ends whose
attributes it sets show it. Readings that take more than one call's answer (utilisation, memory)
are read by their own backend methods and carry ``nvml=None``.

The facts read once per device (``static()``: name, identity, limits, modes) are :data:`STATIC_FACTS`,
one :class:`StaticFact` each, in the same way: the live backend reads each through the gate (its
``NvmlRead``, or a reader of the backend for a fact that takes more than one call), the recording
schema's ``static`` part and ``DeviceStatic`` are made from them, and the exporter and the report
show those whose attributes say so.

Consumers call the functions below (:func:`readings`, :func:`fast_keys`...) when they need the list,
rather than copying it at import, so a reading added to :data:`READINGS` (a test may monkeypatch it)
reaches every one of them.

This module sits in the backends layer and imports nothing of gpudoctor's.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from gpudoctor.core._record import record

# --------------------------------------------------------------------------- plausible ranges
# The wide bounds of what a reading can possibly be (gpudoctor.backends.plausible applies them):
# they catch values no present or near-future GPU can have, never a reading that is merely unusual.
C_SENSOR = (-40, 150)
# A GPU die is read from -40 C (a board in cold storage, the lowest rating of the sensors)
# up to 150 C: silicon shuts the board down near 90-110 C, so a hotter reading is a broken
# sensor or a garbage answer, not a temperature.
C_THRESHOLD = (30, 150)
# The driver's slowdown/shutdown thresholds are 80-110 C on every board; one at or below 30 C
# (an idle GPU's temperature) would throttle or power off every GPU at rest: a garbage answer.
PCT = (0, 100)
# NVML's utilisation rates are shares of a sample period.
FAN_PCT = (0, 200)
# Fan speed is a share of the "maximum noise tolerance" speed and NVML documents that it may
# exceed 100 %; twice that is beyond any fan.
WATTS = (0, 5000)
# The largest single GPUs draw about 1-1.4 kW (B200, GB200's per-GPU share); 5 kW leaves room.
SM_MHZ = (0, 10_000)
# GPU core clocks top out near 3 GHz; 10 GHz is beyond any silicon in sight.
MEM_MHZ = (0, 100_000)
# NVML reports GDDR data rates as clocks (an RTX 4090: 10501 MHz; GDDR7 near 15000 MHz).
BYTES = (0, 1 << 44)
# The largest GPU memories are under 300 GB; 16 TiB is beyond any board in sight.
PCIE_GEN = (1, 7)
# PCIe generations 1 to 6 exist and 7 is specified; a link has no generation 0.
PCIE_WIDTH = (1, 32)
# x32 is the widest link the PCIe specification defines.
PCIE_KBPS = (0, 1 << 30)
# NVML gives KB/s; a gen 6 x16 link moves about 1.3e8 KB/s per direction, 2**30 is 8x that.
ERROR_COUNT = (0, 1 << 48)
# Failing boards log millions of ECC errors, never 2**48; 2**64 - 1 is NVML's "not available"
# sentinel (or a counter read as -1), not a count.
ROWS = (0, 1 << 20)
# Spare rows are a few per memory bank: a board has thousands, never a million.
ENERGY_MJ = (0, 1 << 53)
# 2**53 mJ is 285 years at 1 kW: no counter since the driver loaded holds that much.
PSTATE = (0, 32)
# P0..P15, and 32 for NVML_PSTATE_UNKNOWN.
GPM_MIBPS = (0, 1 << 24)
# GPM's PCIe and NVLink rates are MiB/s; NVLink 5 moves about 1.8e6 MiB/s per GPU in both
# directions together, so 2**24 MiB/s (16 TiB/s) is beyond any link in sight.

# --------------------------------------------------------------------------- the records
@record(frozen=True)
class NvmlRead:
    """How the live backend reads a reading with NVML calls of its own: the first of
    ``functions`` that answers (an older driver names it differently), called with the device
    handle (a MIG device's own handle for a :class:`MigReading`) and ``args`` (NVML constants by
    name, with nvml.h's value for a binding that lacks them); then ``item`` of a tuple answer or
    ``attribute`` of a structure answer (a mapping's key, for a MIG reader's mapping), ``convert``
    ("int", "bool", "len": how many in a list; "field": ``args`` are field ids of
    ``nvmlDeviceGetFieldValues``, passed as one list, and the answer is the first field's value, or
    NA with its own return code), ``multiply`` (MiB -> B: 1 << 20) and ``divide`` (mW -> W: 1000)."""

    functions: tuple[str, ...]
    args: tuple[tuple[str, int], ...] = ()
    item: int | None = None
    convert: str = ""
    divide: int = 1
    attribute: str = ""
    multiply: int = 1



@record(frozen=True)
class Reading:
    """One per-GPU reading. Only ``key``, ``unit``, ``value`` and ``read`` are required; every
    other attribute says where the reading appears (left at its default: not there)."""

    #: The one name inside gpudoctor: sample, recording, history, ``watch --json``.
    key: str
    #: The unit of the stored value: "%", "B", "°C", "W", "MHz", "KiB/s", "mJ", "s", "" (a count,
    #: a state or a mask).
    unit: str
    #: Its JSON type in recordings: "number", "integer" or "flag" (true/false or an integer).
    value: str
    #: "fast" (read by ``fast_sample``, cheap beside a training loop) or "full" (``sample`` only).
    read: str
    #: "gauge" (a level, or a count kept across reboots: retired pages, remapped rows) or "counter"
    #: (only grows while the driver is loaded, restarts with it: ECC volatile counts, energy).
    kind: str = "gauge"
    #: The lowest and highest possible values, both included (None: no bound; flags, masks).
    plausible: tuple[int, int] | None = None
    #: How live NVML reads it; None when a backend method reads it with others (utilisation, memory).
    nvml: NvmlRead | None = None
    #: The nvidia-smi --query-gpu field it corresponds to.
    smi: str = ""
    #: The NVML GPM metric that gives it (NVML_GPM_METRIC_* by name, with nvml.h's value): read by
    #: the backend's GPM reader from two GPM samples (Hopper and later), never by an NvmlRead.
    gpm: tuple[str, int] | None = None
    # -- for people ---------------------------------------------------------------------------
    #: Kept in the sampler's history (the TUI's sparklines), under ``key``.
    history: bool = False
    #: The history series the TUI cell draws, when not the reading's own: "memory_used_pct" is
    #: the share of memory in use, a series the sampler derives (gpudoctor.sampling.sampler).
    spark: str = ""
    #: The TUI cell's label (at most six characters) and its place among the panel's cells
    #: (0: no cell).
    label: str = ""
    panel: int = 0
    #: The panel cell (a reading's key) whose value it joins, as ``label`` and its value, when it is
    #: a number ("util 80% · SM 9%"); where it is not, the cell stays as it was.
    beside: str = ""
    #: The sparkline's top: the reading or static fact that gives it (the sample's value first,
    #: then the static one), else the number given (None: the series' own top).
    spark_top: tuple[str, float | None] = ("", None)
    #: Its label and place in the verbose ``watch`` line (0: not there). A reading whose label
    #: starts with "+" joins the part before it ("pcie rx 1 MiB/s tx 2 MiB/s").
    word: str = ""
    line: int = 0
    #: Its label and place in the short ``watch`` line (0: not there; label "" shows the value alone).
    short_word: str = ""
    short: int = 0
    #: How soon it gives way when the short line (and the TUI's compact Overview, ``--once``) runs
    #: out of room: 0 never, higher sooner. SM activity stays longest after utilisation and memory:
    #: it says whether a busy GPU really works.
    short_drop: int = 0
    #: Its place in ``watch --json`` records (0: not there).
    watch: int = 0
    #: How people see it (gpudoctor.sampling.presentation): "" a number and its unit; "memory" used/total;
    #: "power" draw/limit; "rate" a throughput in binary units; "throttle" the reasons' names.
    fmt: str = ""
    #: Kept by the training hooks' sampler for their diagnosis.
    hooks: bool = False
    # -- for machines -------------------------------------------------------------------------
    #: The exporter's per-GPU metric ("": not exported), a gauge or a counter as ``kind`` says; the
    #: factor to its base unit; its help; and for readings that share one metric (ECC counts),
    #: the labels that tell them apart.
    prometheus: str = ""
    scale: float = 1.0
    help: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    #: The DCGM field (dcgm-exporter's metric name up to 4.8, DCGM's name before 4.7) that carries
    #: the same reading, and its unit there (a key of :data:`DCGM_UNITS`; "" where no source read
    #: for it states one: fleet does not read it).
    dcgm: str = ""
    dcgm_unit: str = ""
    #: The same reading's name and unit from dcgm-exporter 4.9.0 on (DCGM 4.7 renamed the fields it
    #: deprecates; some changed unit): ("", "") where unchanged or not confirmed from a source.
    dcgm_new: tuple[str, str] = ("", "")
    #: ``gpudoctor fleet``: the row field that holds it (a name in fleet's JSON output). Fleet reads
    #: the gpudoctor gauge, and the DCGM fields above where their unit is known, each scaled to the
    #: gauge's unit (:func:`dcgm_fields`).
    fleet: str = ""
    #: Its column in fleet's table and the TUI's Fleet screen: (header, place, width); place 0: none.
    #: The value is shown in the reading's own unit (the gauge's value divided by ``scale``), or as
    #: used/total GiB where ``fmt`` is "memory".
    column: tuple[str, int, int] = ("", 0, 0)
    #: More words for docs/fleet.md's metric table, after ``help`` (where it is absent, since when).
    doc: str = ""
    #: The health probe's measurement name in ``gpudoctor report`` ("": not measured there). The
    #: report's JSON kept its names when the catalogue came: ``gpu_utilization`` for ``gpu_util_pct``.
    report: str = ""


def _c(name: str, value: int) -> tuple[str, int]:
    return (name, value)


def _g(name: str, value: int) -> tuple[str, int]:
    return (name, value)


def _q(*functions: str, args: tuple[tuple[str, int], ...] = (), **how: object) -> NvmlRead:
    return NvmlRead(tuple(functions), args, **how)  # type: ignore[arg-type]


_ECC_CORRECTED = _c("NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
_ECC_UNCORRECTED = _c("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
_ECC_VOLATILE, _ECC_AGGREGATE = _c("NVML_VOLATILE_ECC", 0), _c("NVML_AGGREGATE_ECC", 1)
_ECC, _ECC_HELP = "gpudoctor_gpu_ecc_errors_total", "ECC error counts (labels error_type, counter)"
_PCIE_HELP = "throughput over NVML's 20 ms window (NVML reports KiB/s)"

#: Every per-GPU reading, in the order of a sample (and of the recording schema).
READINGS: tuple[Reading, ...] = (
    Reading("t", "s", "number", "fast"),
    Reading("gpu_util_pct", "%", "number", "fast", plausible=PCT, smi="utilization.gpu", report="gpu_utilization",
            column=("UTIL", 1, 5),
            history=True, label="util", panel=1, spark_top=("", 100.0), word="util", line=1,
            short_word="util", short=1,
            watch=1, hooks=True,
            prometheus="gpudoctor_gpu_utilization_ratio", scale=0.01,
            help="Share of the last sample period in which a kernel ran (NVML utilization.gpu)",
            dcgm="DCGM_FI_DEV_GPU_UTIL", dcgm_unit="%", dcgm_new=("DCGM_FI_DEV_GPU_UTIL_RATIO", "ratio"),
            fleet="utilization"),
    Reading("mem_util_pct", "%", "number", "fast", plausible=PCT, smi="utilization.memory", watch=2,
            prometheus="gpudoctor_gpu_memory_utilization_ratio", scale=0.01,
            help="Share of the last sample period in which device memory was read or written",
            dcgm="DCGM_FI_DEV_MEM_COPY_UTIL", dcgm_unit="%", dcgm_new=("DCGM_FI_DEV_MEMORY_UTIL_RATIO", "ratio")),
    Reading("memory_used_bytes", "B", "integer", "fast", plausible=BYTES, smi="memory.used", column=("MEM", 2, 9),
            label="mem", panel=2, spark="memory_used_pct", spark_top=("", 100.0), word="mem", line=2,
            short_word="mem", short=3, watch=3, fmt="memory",
            hooks=True, prometheus="gpudoctor_gpu_memory_used_bytes", help="Device memory in use",
            doc="as nvidia-smi shows it: without the reserved memory",
            dcgm="DCGM_FI_DEV_FB_USED", dcgm_unit="MiB",
            dcgm_new=("DCGM_FI_DEV_FB_USED_BYTES", "B"), fleet="memory_used_bytes"),
    Reading("memory_free_bytes", "B", "integer", "fast", plausible=BYTES, smi="memory.free",
            prometheus="gpudoctor_gpu_memory_free_bytes", help="Device memory free", dcgm="DCGM_FI_DEV_FB_FREE",
            dcgm_unit="MiB", dcgm_new=("DCGM_FI_DEV_FB_FREE_BYTES", "B")),
    Reading("memory_total_bytes", "B", "integer", "fast", plausible=BYTES, smi="memory.total", watch=4,
            hooks=True, prometheus="gpudoctor_gpu_memory_total_bytes", help="Device memory in total",
            dcgm="DCGM_FI_DEV_FB_TOTAL", dcgm_unit="MiB",
            dcgm_new=("DCGM_FI_DEV_FB_CAPACITY_BYTES", "B"), fleet="memory_total_bytes"),
    Reading("memory_reserved_bytes", "B", "integer", "fast", plausible=BYTES, smi="memory.reserved",
            prometheus="gpudoctor_gpu_memory_reserved_bytes",
            help="Device memory the driver reserves for itself, in neither used nor free (NVML v2 memory info)",
            doc="absent where the driver has no v2 call",
            dcgm="DCGM_FI_DEV_FB_RESERVED", dcgm_unit="MiB",
            dcgm_new=("DCGM_FI_DEV_FB_RESERVED_BYTES", "B")),
    Reading("temperature_c", "°C", "number", "fast", plausible=C_SENSOR, smi="temperature.gpu", report="temperature",
            column=("TEMP", 3, 5),
            # The versioned call first (nvmlDeviceGetTemperature is deprecated, marked for removal);
            # drivers and bindings without it answer FunctionNotFound and the old call is used.
            nvml=_q("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature", args=(_c("NVML_TEMPERATURE_GPU", 0),)),
            history=True, label="temp", panel=3, spark_top=("temperature_slowdown_c", 100.0), word="temp",
            line=3, short=4, short_drop=3,
            watch=5, hooks=True, prometheus="gpudoctor_gpu_temperature_celsius", help="GPU core temperature",
            dcgm="DCGM_FI_DEV_GPU_TEMP", dcgm_unit="°C",
            dcgm_new=("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "°C"), fleet="temperature_c"),
    # nvmlDeviceGetPowerUsage is a 1-second average on Ampere (except GA100) and later, the power at that
    # instant before (nvml.h); the instant power of every architecture is the field NVML_FI_DEV_POWER_INSTANT.
    Reading("power_w", "W", "number", "fast", plausible=WATTS, smi="power.draw", report="power_draw",
            column=("POWER", 4, 6),
            nvml=_q("nvmlDeviceGetPowerUsage", divide=1000),
            history=True, label="power", panel=4, spark_top=("power_limit_w", None), word="power", line=4, short=5,
            short_drop=2,
            watch=6, fmt="power", hooks=True, prometheus="gpudoctor_gpu_power_watts",
            help="Power draw as NVML reports it: averaged over 1 s on Ampere (except GA100) and later, "
                 "instantaneous on older GPUs (nvmlDeviceGetPowerUsage)",
            dcgm="DCGM_FI_DEV_POWER_USAGE", dcgm_unit="W",
            dcgm_new=("DCGM_FI_DEV_BOARD_POWER_WATTS", "W"), fleet="power_w"),
    Reading("power_instant_w", "W", "number", "fast", plausible=WATTS, smi="power.draw.instant", report="power_instant",
            nvml=_q("nvmlDeviceGetFieldValues", args=(_c("NVML_FI_DEV_POWER_INSTANT", 186),), convert="field",
                    divide=1000),
            prometheus="gpudoctor_gpu_power_instant_watts",
            help="Power draw at the instant of the sample (NVML field NVML_FI_DEV_POWER_INSTANT): the spikes "
                 "a 1-second average smooths out", doc="absent where the driver does not give it",
            dcgm="DCGM_FI_DEV_POWER_USAGE_INSTANT"),
    Reading("power_limit_w", "W", "number", "fast", plausible=WATTS, smi="enforced.power.limit",
            nvml=_q("nvmlDeviceGetEnforcedPowerLimit", divide=1000), watch=7, hooks=True,
            prometheus="gpudoctor_gpu_power_limit_watts", help="Enforced power limit",
            dcgm="DCGM_FI_DEV_POWER_MGMT_LIMIT",
            dcgm_new=("DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS", "W"), fleet="power_limit_w"),
    Reading("clock_sm_mhz", "MHz", "integer", "fast", plausible=SM_MHZ, smi="clocks.sm", report="sm_clock",
            nvml=_q("nvmlDeviceGetClockInfo", args=(_c("NVML_CLOCK_SM", 1),)),
            history=True, label="SM", panel=5, spark_top=("clock_sm_max_mhz", None), word="sm", line=5,
            short_word="sm",
            short=6, short_drop=4, watch=8, hooks=True, prometheus="gpudoctor_gpu_sm_clock_hertz", scale=1e6, help="SM clock",
            dcgm="DCGM_FI_DEV_SM_CLOCK", dcgm_unit="MHz", dcgm_new=("DCGM_FI_DEV_SM_CLOCK_HERTZ", "Hz")),
    Reading("clock_mem_mhz", "MHz", "integer", "fast", plausible=MEM_MHZ, smi="clocks.mem", report="memory_clock",
            nvml=_q("nvmlDeviceGetClockInfo", args=(_c("NVML_CLOCK_MEM", 2),)),
            history=True, label="memclk", panel=6, spark_top=("clock_mem_max_mhz", None), word="memclk",
            line=6, watch=9,
            prometheus="gpudoctor_gpu_memory_clock_hertz", scale=1e6, help="Memory clock",
            dcgm="DCGM_FI_DEV_MEM_CLOCK", dcgm_unit="MHz", dcgm_new=("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", "Hz")),
    Reading("clock_graphics_mhz", "MHz", "integer", "fast", plausible=SM_MHZ, smi="clocks.gr",
            nvml=_q("nvmlDeviceGetClockInfo", args=(_c("NVML_CLOCK_GRAPHICS", 0),)),
            prometheus="gpudoctor_gpu_graphics_clock_hertz", scale=1e6, help="Graphics clock"),
    Reading("throttle_reasons", "", "integer", "fast", smi="clocks_event_reasons.active", report="throttle_reasons",
            nvml=_q("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
            word="throttle", line=10, fmt="throttle", short_word="throttle", short=7, short_drop=5, watch=13,
            prometheus="gpudoctor_gpu_clock_event_reasons",
            help="Clock event (throttle) reason bit mask, nvmlClocksEventReason*",
            dcgm="DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
    Reading("performance_state", "", "integer", "fast", plausible=PSTATE, smi="pstate",
            nvml=_q("nvmlDeviceGetPerformanceState"), watch=14, prometheus="gpudoctor_gpu_performance_state",
            help="Performance state (0 = P0, fastest; 15 = slowest)", dcgm="DCGM_FI_DEV_PSTATE",
            dcgm_new=("DCGM_FI_DEV_GPU_PSTATE", "")),
    # full reads only
    Reading("pcie_gen_current", "", "integer", "full", plausible=PCIE_GEN, smi="pcie.link.gen.current",
            report="pcie_link_gen",
            nvml=_q("nvmlDeviceGetCurrPcieLinkGeneration"), prometheus="gpudoctor_gpu_pcie_link_generation",
            help="Current PCIe link generation (idle GPUs lower it)", dcgm="DCGM_FI_DEV_PCIE_LINK_GEN"),
    Reading("pcie_width_current", "", "integer", "full", plausible=PCIE_WIDTH, smi="pcie.link.width.current",
            report="pcie_link_width",
            nvml=_q("nvmlDeviceGetCurrPcieLinkWidth"), prometheus="gpudoctor_gpu_pcie_link_width",
            help="Current PCIe link width (lanes)", dcgm="DCGM_FI_DEV_PCIE_LINK_WIDTH"),
    Reading("pcie_tx_kbps", "KiB/s", "number", "full", plausible=PCIE_KBPS,
            nvml=_q("nvmlDeviceGetPcieThroughput", args=(_c("NVML_PCIE_UTIL_TX_BYTES", 0),)),
            history=True, label="PCIe↑", panel=8, fmt="rate", word="+tx", line=8, watch=11,
            prometheus="gpudoctor_gpu_pcie_tx_bytes_per_second", scale=1024.0, help="PCIe transmit " + _PCIE_HELP,
            dcgm="DCGM_FI_DEV_PCIE_TX_THROUGHPUT"),
    Reading("pcie_rx_kbps", "KiB/s", "number", "full", plausible=PCIE_KBPS,
            nvml=_q("nvmlDeviceGetPcieThroughput", args=(_c("NVML_PCIE_UTIL_RX_BYTES", 1),)),
            history=True, label="PCIe↓", panel=7, fmt="rate", word="pcie rx", line=7, watch=10,
            prometheus="gpudoctor_gpu_pcie_rx_bytes_per_second", scale=1024.0, help="PCIe receive " + _PCIE_HELP,
            dcgm="DCGM_FI_DEV_PCIE_RX_THROUGHPUT"),
    Reading("fan_pct", "%", "number", "full", plausible=FAN_PCT, smi="fan.speed", nvml=_q("nvmlDeviceGetFanSpeed"),
            report="fan_speed",
            history=True, label="fan", panel=9, spark_top=("", 100.0), word="fan", line=9, watch=12,
            prometheus="gpudoctor_gpu_fan_speed_ratio", scale=0.01, help="Fan speed as a share of its maximum",
            doc="absent on boards without fans",
            dcgm="DCGM_FI_DEV_FAN_SPEED"),
    # ECC error counts since the driver loaded (volatile) and over the board's life (aggregate):
    # one exporter counter, told apart by its labels.
    *(Reading(f"ecc_{counter}_{kind}", "", "integer", "full", "counter", ERROR_COUNT,
              _q("nvmlDeviceGetTotalEccErrors", args=(error_type, counter_type)),
              smi=f"ecc.errors.{kind}.{counter}.total", prometheus=_ECC, help=_ECC_HELP, report=f"ecc_{counter}_{kind}",
              doc="`error_type` corrected or uncorrected, `counter` volatile (since the driver loaded) or aggregate "
                  "(lifetime)",
              labels=(("error_type", kind), ("counter", counter)), dcgm=dcgm)
      for counter, counter_type, kind, error_type, dcgm in (
          ("volatile", _ECC_VOLATILE, "corrected", _ECC_CORRECTED, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"),
          ("volatile", _ECC_VOLATILE, "uncorrected", _ECC_UNCORRECTED, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
          ("aggregate", _ECC_AGGREGATE, "corrected", _ECC_CORRECTED, "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"),
          ("aggregate", _ECC_AGGREGATE, "uncorrected", _ECC_UNCORRECTED, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"))),
    # Pages retired for an ECC cause (before Ampere): one reading per cause, NVML's list of pages counted.
    *(Reading(f"retired_pages_{kind}", "", "integer", "full",
              nvml=_q("nvmlDeviceGetRetiredPages", args=(cause,), convert="len"),
              smi=f"retired_pages.{kind}", prometheus=f"gpudoctor_gpu_retired_pages_{words}",
              help=f"Pages retired for {why}", doc="before Ampere", dcgm=f"DCGM_FI_DEV_RETIRED_{kind.upper()}",
              dcgm_new=(f"DCGM_FI_DEV_PAGE_RETIRED_{kind.upper()}_TOTAL", ""))
      for kind, words, why, cause in (
          ("sbe", "single_bit", "repeated single-bit ECC errors",
           _c("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0)),
          ("dbe", "double_bit", "double-bit ECC errors", _c("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1)))),
    Reading("retired_pages_pending", "", "flag", "full", nvml=_q("nvmlDeviceGetRetiredPagesPendingStatus"),
            smi="retired_pages.pending", prometheus="gpudoctor_gpu_retired_pages_pending",
            help="1 when a page retirement waits for a GPU reset", dcgm="DCGM_FI_DEV_RETIRED_PENDING",
            dcgm_new=("DCGM_FI_DEV_PAGE_RETIRED_PENDING", "")),
    # Rows remapped (Ampere and later), by the kind of error: items 0 and 1 of nvmlDeviceGetRemappedRows.
    *(Reading(f"remapped_rows_{kind}", "", "integer", "full", "gauge", ROWS,
              _q("nvmlDeviceGetRemappedRows", item=item, convert="int"), smi=f"remapped_rows.{kind}",
              report=f"remapped_rows_{kind}", prometheus=f"gpudoctor_gpu_remapped_rows_{kind}",
              help=f"Rows remapped for {kind} errors", doc="Ampere and later",
              dcgm=f"DCGM_FI_DEV_{kind.upper()}_REMAPPED_ROWS",
              dcgm_new=(f"DCGM_FI_DEV_ROW_REMAP_{kind.upper()}_TOTAL", ""))
      for item, kind in ((0, "correctable"), (1, "uncorrectable"))),
    Reading("remapped_rows_pending", "", "flag", "full", nvml=_q("nvmlDeviceGetRemappedRows", item=2, convert="bool"),
            smi="remapped_rows.pending", prometheus="gpudoctor_gpu_remapped_rows_pending",
            help="1 when a row remap waits for a GPU reset", dcgm="DCGM_FI_DEV_ROW_REMAP_PENDING"),
    Reading("remapped_rows_failure", "", "flag", "full", nvml=_q("nvmlDeviceGetRemappedRows", item=3, convert="bool"),
            smi="remapped_rows.failure", prometheus="gpudoctor_gpu_remapped_rows_failure",
            help="1 when row remapping failed (replace the GPU)", dcgm="DCGM_FI_DEV_ROW_REMAP_FAILURE", dcgm_new=("DCGM_FI_DEV_ROW_REMAP_FAILED", "")),
    Reading("persistence_mode", "", "integer", "full", nvml=_q("nvmlDeviceGetPersistenceMode"),
            smi="persistence_mode", report="persistence_mode"),
    Reading("compute_mode", "", "integer", "full", nvml=_q("nvmlDeviceGetComputeMode"), smi="compute_mode",
            report="compute_mode"),
    # GPM (GPU performance monitoring, Hopper and later): shares of the time between two GPM samples
    # (at least nvml.GPM_MIN_INTERVAL_S apart), read in full reads only, each reading the DCGM profiling field's
    # counterpart (gpudoctor.backends.nvml reads them; docs/utilisation.md says what they mean).
    Reading("sm_active_pct", "%", "number", "full", plausible=PCT, gpm=_g("NVML_GPM_METRIC_SM_UTIL", 2),
            report="sm_activity",
            history=True, label="SM", beside="gpu_util_pct", word="sm act", line=12,
            short_word="smact", short=2, short_drop=1, watch=20,
            prometheus="gpudoctor_gpu_sm_active_ratio", scale=0.01,
            help="Share of SM cycles with at least one warp resident, averaged over all SMs (NVML GPM SM "
                 "utilisation; Hopper and later): low beside a high utilization_ratio means small kernels",
            doc="absent before Hopper, n/a on the first sample; see [utilisation.md](utilisation.md)",
            dcgm="DCGM_FI_PROF_SM_ACTIVE", dcgm_unit="ratio",
            dcgm_new=("DCGM_FI_PROF_SM_UTIL_RATIO", "ratio"), fleet="sm_active"),
    Reading("sm_occupancy_pct", "%", "number", "full", plausible=PCT, gpm=_g("NVML_GPM_METRIC_SM_OCCUPANCY", 3),
            word="+occ", line=13, watch=21, prometheus="gpudoctor_gpu_sm_occupancy_ratio", scale=0.01,
            help="Resident warps as a share of the SMs' maximum (NVML GPM SM occupancy; Hopper and later)",
            dcgm="DCGM_FI_PROF_SM_OCCUPANCY", dcgm_unit="ratio",
            dcgm_new=("DCGM_FI_PROF_SM_OCCUPANCY_RATIO", "ratio")),
    Reading("tensor_active_pct", "%", "number", "full", plausible=PCT, report="tensor_activity",
            gpm=_g("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5), word="tensor", line=14, watch=22,
            prometheus="gpudoctor_gpu_tensor_active_ratio", scale=0.01,
            help="Share of cycles the tensor cores were busy, any precision (NVML GPM; Hopper and later)",
            dcgm="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", dcgm_unit="ratio",
            dcgm_new=("DCGM_FI_PROF_TENSOR_UTIL_RATIO", "ratio"), fleet="tensor_active"),
    Reading("tensor_hmma_active_pct", "%", "number", "full", plausible=PCT,
            gpm=_g("NVML_GPM_METRIC_HMMA_TENSOR_UTIL", 7), watch=23,
            prometheus="gpudoctor_gpu_tensor_hmma_active_ratio", scale=0.01,
            help="Share of cycles the tensor cores ran fp16/bf16 (HMMA) math (NVML GPM; Hopper and later)",
            dcgm="DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", dcgm_unit="ratio",
            dcgm_new=("DCGM_FI_PROF_HMMA_UTIL_RATIO", "ratio")),
    Reading("dram_active_pct", "%", "number", "full", plausible=PCT, gpm=_g("NVML_GPM_METRIC_DRAM_BW_UTIL", 10),
            word="dram", line=15, watch=24, prometheus="gpudoctor_gpu_dram_active_ratio", scale=0.01,
            help="Device memory bandwidth used as a share of its peak (NVML GPM; Hopper and later)",
            dcgm="DCGM_FI_PROF_DRAM_ACTIVE", dcgm_unit="ratio",
            dcgm_new=("DCGM_FI_PROF_DRAM_UTIL_RATIO", "ratio")),
    *(Reading(f"{pipe}_active_pct", "%", "number", "full", plausible=PCT, gpm=_g(f"NVML_GPM_METRIC_{pipe.upper()}_UTIL", gid),
              watch=watch, prometheus=f"gpudoctor_gpu_{pipe}_pipe_active_ratio", scale=0.01,
              help=f"Share of cycles the SMs ran non-tensor {pipe} math (NVML GPM; Hopper and later)",
              dcgm=f"DCGM_FI_PROF_PIPE_{pipe.upper()}_ACTIVE", dcgm_unit="ratio",
              dcgm_new=(f"DCGM_FI_PROF_{pipe.upper()}_UTIL_RATIO", "ratio"))
      for pipe, gid, watch in (("fp64", 11, 25), ("fp32", 12, 26), ("fp16", 13, 27))),
    *(Reading(f"{link}_{way}_mibps", "MiB/s", "number", "full", plausible=GPM_MIBPS, gpm=_g(constant, gid),
              watch=watch, prometheus=f"gpudoctor_gpu_{metric}_{way}_bytes_per_second", scale=float(2 ** 20),
              help=f"{words} {'received' if way == 'rx' else 'sent'} per second between two GPM samples "
                   "(NVML GPM; Hopper and later)", dcgm=f"DCGM_FI_PROF_{dcgm}_{way.upper()}_BYTES")
      for link, metric, dcgm, words, way, constant, gid, watch in (
          ("gpm_pcie", "prof_pcie", "PCIE", "PCIe bytes", "tx", "NVML_GPM_METRIC_PCIE_TX_PER_SEC", 20, 28),
          ("gpm_pcie", "prof_pcie", "PCIE", "PCIe bytes", "rx", "NVML_GPM_METRIC_PCIE_RX_PER_SEC", 21, 29),
          ("nvlink", "nvlink", "NVLINK", "NVLink bytes (all links)", "rx", "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC",
           60, 30),
          ("nvlink", "nvlink", "NVLINK", "NVLink bytes (all links)", "tx", "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC",
           61, 31))),
    Reading("energy_mj", "mJ", "integer", "full", "counter", ENERGY_MJ,
            _q("nvmlDeviceGetTotalEnergyConsumption"), smi="total_energy_consumption",
            prometheus="gpudoctor_gpu_energy_joules_total", scale=1e-3,
            help="Energy the GPU used since the driver loaded (NVML total energy consumption; Volta and newer)",
            doc="absent where unsupported; `rate(...[5m])` is the average power",
            dcgm="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", dcgm_unit="mJ",
            dcgm_new=("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", "J")),
)


# --------------------------------------------------------------------------- static facts
@record(frozen=True)
class StaticFact:
    """One fact read once per device (``static()``): the device's name, identity, limits and modes.
    Only ``key``, ``unit``, ``value`` and how it is read are required; every other attribute says
    where it appears (left at its default: not there)."""

    #: The one name inside gpudoctor: ``static()``, ``DeviceStatic``, the recording's ``static`` part.
    key: str
    #: The unit of the stored value, as :attr:`Reading.unit`.
    unit: str
    #: Its JSON type in recordings: "index" (the device's index, 0..255), "text" (a string or NA),
    #: "optional_text" (a string, null or NA), "integer" or "number" (or NA).
    value: str
    #: How live NVML reads it with one call (the gate's first answering function, as for a reading).
    nvml: NvmlRead | None = None
    #: Or the backend's reader that makes it from more than one call or an answer's attribute
    #: (gpudoctor.backends.nvml's STATIC_READERS): "index", "pci" (the bus id, normalised),
    #: "memory" (the total of the memory answer), "compute_capability" ("8.0"), "fabric" (the
    #: NVLink fabric registration: six facts from one structure). A reader gives a dictionary of the
    #: facts it makes; each is called once per ``static()``.
    reader: str = ""
    #: The lowest and highest possible values, both included (None: no bound).
    plausible: tuple[int, int] | None = None
    #: The nvidia-smi --query-gpu field it corresponds to.
    smi: str = ""
    #: The exporter: its place among the labels of every per-GPU series (``gpu`` first; 0: not
    #: one); whether it is a label of ``gpudoctor_gpu_info`` only (the series labels are on it
    #: too); or a gauge of its own (name, factor to its base unit, help; "": none).
    series_label: int = 0
    info_label: bool = False
    prometheus: str = ""
    scale: float = 1.0
    help: str = ""
    #: Its measurement name in ``gpudoctor report`` ("": not measured). The health probe measures
    #: every fact named here that no probe measures itself (``probes/health.py``'s STATIC_CHECKED).
    report: str = ""
    #: Its value names this very board (a UUID, a serial number): ``--anonymize`` strips it from
    #: reports and recordings, under its key and under its ``report`` name (:func:`identifying_keys`).
    identifying: bool = False


_THRESHOLD = "NVML_TEMPERATURE_THRESHOLD_"
#: Every static fact, in the order of ``static()`` (and of the recording schema).
STATIC_FACTS: tuple[StaticFact, ...] = (
    StaticFact("index", "", "index", reader="index"),
    StaticFact("name", "", "text", _q("nvmlDeviceGetName"), smi="name", series_label=2),
    StaticFact("uuid", "", "text", _q("nvmlDeviceGetUUID"), smi="uuid", series_label=1,
               report="uuid", identifying=True),
    StaticFact("serial", "", "text", _q("nvmlDeviceGetSerial"), smi="serial", identifying=True),
    StaticFact("pci_bus_id", "", "optional_text", reader="pci", smi="pci.bus_id", series_label=3,
               report="pci_bus_id"),
    StaticFact("memory_total_bytes", "B", "integer", reader="memory", plausible=BYTES, smi="memory.total"),
    StaticFact("compute_capability", "", "text", reader="compute_capability", smi="compute_cap",
               report="compute_capability"),
    StaticFact("architecture", "", "integer", _q("nvmlDeviceGetArchitecture")),
    StaticFact("vbios_version", "", "text", _q("nvmlDeviceGetVbiosVersion"), smi="vbios_version"),
    *(StaticFact(f"temperature_{name}_c", "°C", "number",
                 _q("nvmlDeviceGetTemperatureThreshold", args=(_c(_THRESHOLD + constant, value),)),
                 plausible=C_THRESHOLD)
      for name, constant, value in (("slowdown", "SLOWDOWN", 1), ("shutdown", "SHUTDOWN", 0),
                                    ("gpu_max", "GPU_MAX", 3))),
    StaticFact("power_limit_w", "W", "number", _q("nvmlDeviceGetEnforcedPowerLimit", divide=1000), plausible=WATTS,
               smi="enforced.power.limit"),
    StaticFact("power_default_limit_w", "W", "number", _q("nvmlDeviceGetPowerManagementDefaultLimit", divide=1000),
               plausible=WATTS, smi="power.default_limit"),
    StaticFact("clock_sm_max_mhz", "MHz", "integer", _q("nvmlDeviceGetMaxClockInfo", args=(_c("NVML_CLOCK_SM", 1),)),
               plausible=SM_MHZ, smi="clocks.max.sm"),
    StaticFact("clock_mem_max_mhz", "MHz", "integer", _q("nvmlDeviceGetMaxClockInfo", args=(_c("NVML_CLOCK_MEM", 2),)),
               plausible=MEM_MHZ, smi="clocks.max.memory"),
    StaticFact("pcie_gen_max", "", "integer", _q("nvmlDeviceGetMaxPcieLinkGeneration"), plausible=PCIE_GEN,
               smi="pcie.link.gen.max"),
    StaticFact("pcie_gen_gpu_max", "", "integer", _q("nvmlDeviceGetGpuMaxPcieLinkGeneration"), plausible=PCIE_GEN,
               smi="pcie.link.gen.gpumax"),
    StaticFact("pcie_width_max", "", "integer", _q("nvmlDeviceGetMaxPcieLinkWidth"), plausible=PCIE_WIDTH,
               smi="pcie.link.width.max"),
    StaticFact("memory_bus_width_bits", "", "integer", _q("nvmlDeviceGetMemoryBusWidth")),
    StaticFact("mig_mode", "", "integer", _q("nvmlDeviceGetMigMode", item=0, convert="int"), smi="mig.mode.current"),
    StaticFact("ecc_mode", "", "integer", _q("nvmlDeviceGetEccMode", item=0, convert="int"), smi="ecc.mode.current"),
    StaticFact("num_fans", "", "integer", _q("nvmlDeviceGetNumFans")),
    # NVLink fabric registration (NvmlBackend.fabric); older recordings have none of these
    StaticFact("fabric_state", "", "integer", reader="fabric"),
    StaticFact("fabric_status", "", "text", reader="fabric"),
    StaticFact("fabric_clique_id", "", "integer", reader="fabric"),
    StaticFact("fabric_cluster_uuid", "", "optional_text", reader="fabric", identifying=True),
    StaticFact("fabric_health_mask", "", "integer", reader="fabric"),
    StaticFact("fabric_health_summary", "", "integer", reader="fabric"),
)


# --------------------------------------------------------------------------- MIG devices
#: What the front ends say for a MIG device's power and energy: NVML gives them for the whole GPU
#: only (NotSupported on a MIG handle). Never split between the slices.
WHOLE_GPU_ONLY = "whole-GPU figure only"
#: What they say for a MIG device's utilisation: NVML gives no utilisation rates on a GPU in MIG
#: mode, for a slice or for the whole GPU (nvidia-smi shows N/A); GPM's SM activity is read per GPU
#: instance instead.
MIG_NO_UTILISATION = "not given in MIG mode (no NVML utilisation rates, per slice or whole GPU); see SM activity"
#: The place of a MIG device's processes (no reading: a list) in watch's MIG lines, the TUI's MIG
#: rows and the report's measurements of a MIG device: a reading placed lower comes before it, higher after.
MIG_PROCESSES_PLACE = 10


@record(frozen=True)
class MigReading:
    """One reading of a MIG device (a compute instance of a GPU in MIG mode), read on its own MIG
    handle: a field of :class:`~gpudoctor.backends.base.MigDeviceReading` and of the recording's
    ``mig`` entries, by ``key``, and of ``watch --json``'s MIG records. Only ``key``, ``unit`` and
    ``value`` are required; every other attribute says how it is read and where it appears (left at
    its default: not there).

    Live NVML reads it as ``nvml`` says, on the MIG handle, through the gate (an error becomes NA;
    readings that share a call make it once per MIG device). A reading that takes more than one call
    names its ``reader`` instead (gpudoctor.backends.nvml.MIG_READERS: "memory", the v2 memory call
    with the v1 call as fallback; "gpm", the GPM readings of the device's GPU instance, read once per
    GPU instance), and ``nvml`` (with no functions) says how the reader's answer becomes the reading.
    The value is then screened with ``plausible`` (the lowest and highest possible values; None: no
    bound), live and in replay."""

    #: The one name inside gpudoctor: MigDeviceReading's field, the recording's, ``watch --json``'s.
    key: str
    #: The unit of the stored value ("%", "B", "mJ", "°C", "": a count).
    unit: str
    #: Its JSON type in recordings: "number" or "integer".
    value: str
    #: The exporter's gauge (labels gpu, gpu_instance, compute_instance, uuid; "": not exported),
    #: the factor to the gauge's unit, its help, and the words of docs/fleet.md's DCGM column.
    prometheus: str = ""
    scale: float = 1.0
    help: str = ""
    dcgm: str = "none"
    #: How live NVML reads it (above), its reader, and its plausible range.
    nvml: NvmlRead | None = None
    reader: str = ""
    plausible: tuple[int, int] | None = None
    # -- for people ---------------------------------------------------------------------------
    #: Its word and place in the verbose ``watch`` MIG line (0: not there; word "": the value alone),
    #: shown as a number or NA in words. Places are shared with the processes
    #: (:data:`MIG_PROCESSES_PLACE`).
    word: str = ""
    line: int = 0
    #: Its word and place in the short ``watch`` MIG line, and in the TUI panel's MIG row (``label``,
    #: ``panel``): shown there only when it is a number (a ``fmt`` "memory" pair always).
    short_word: str = ""
    short: int = 0
    label: str = ""
    panel: int = 0
    #: How people see its value (gpudoctor.sampling.presentation): "" a number and its unit;
    #: "memory" used/total GiB, with ``memory_total_bytes`` (a pair: "n/a" where either is missing);
    #: "activity" a share: ``42%`` in the short line and the TUI, ``41.5 %`` in the verbose line.
    fmt: str = ""
    #: For a reading NVML gives for the whole GPU only (NA NotSupported on a MIG handle): the words
    #: said instead of a number (the verbose line, ``watch --json``'s notes, the report's note), the
    #: words the short line ends with while it has room, and its part of the note under the TUI
    #: panel's MIG rows ("": none).
    whole_gpu: str = ""
    whole_gpu_short: str = ""
    whole_gpu_panel: str = ""
    #: The devices probe's measurement in ``gpudoctor report`` (``mig<GPU instance>.<compute
    #: instance>_<name>``, in ``unit``) and its place among the MIG device's measurements ("": not
    #: measured).
    report: tuple[str, int] = ("", 0)


#: Every per-MIG-device reading, in recording order. NVML gives power and energy for the whole GPU
#: only (NotSupported on a MIG handle) and no utilisation rates in MIG mode: ``gpu_util_pct`` and
#: ``energy_mj`` are recorded as NVML answers them (NA) and never exported per slice.
MIG_READINGS: tuple[MigReading, ...] = (
    MigReading("sm_count", "", "integer", "gpudoctor_mig_sm_count",
               help="Streaming multiprocessors of the MIG device (its attributes)",
               nvml=_q("nvmlDeviceGetAttributes", attribute="multiprocessorCount", convert="int"),
               word="sms", line=1, report=("sm_count", 1)),
    MigReading("memory_size_bytes", "B", "integer", plausible=BYTES,
               nvml=_q("nvmlDeviceGetAttributes", attribute="memorySizeMB", convert="int", multiply=1 << 20)),
    MigReading("memory_used_bytes", "B", "integer", "gpudoctor_mig_memory_used_bytes",
               help="Memory in use on the MIG device (its own figure, per slice)",
               dcgm="DCGM_FI_DEV_FB_USED per GPU instance", plausible=BYTES,
               reader="memory", nvml=_q(attribute="used", convert="int"),
               word="mem", line=2, short_word="mem", short=1, panel=1, fmt="memory", report=("memory_used", 2)),
    MigReading("memory_total_bytes", "B", "integer", "gpudoctor_mig_memory_total_bytes",
               help="Memory of the MIG device (its own figure, per slice)", dcgm="DCGM_FI_DEV_FB_TOTAL per GPU instance",
               plausible=BYTES, reader="memory", nvml=_q(attribute="total", convert="int"),
               report=("memory_total", 3)),
    MigReading("gpu_util_pct", "%", "integer", plausible=PCT,
               nvml=_q("nvmlDeviceGetUtilizationRates", attribute="gpu", convert="int"),
               word="util", line=11, short_word="util", short=11, whole_gpu=MIG_NO_UTILISATION,
               whole_gpu_panel="util n/a in MIG mode",
               report=("gpu_util", 12)),
    MigReading("energy_mj", "mJ", "integer", plausible=ENERGY_MJ, nvml=_q("nvmlDeviceGetTotalEnergyConsumption"),
               word="energy", line=12, whole_gpu=WHOLE_GPU_ONLY, whole_gpu_short="power/energy: whole GPU",
               whole_gpu_panel="power and energy are the whole GPU's",
               report=("energy", 13)),
    MigReading("sm_active_pct", "%", "number", "gpudoctor_mig_sm_active_ratio", 0.01,
               help="SM activity of the MIG device's GPU instance, 0-1 (GPM per GPU instance, Hopper and later; "
                    "shared by the compute instances of one GPU instance)",
               dcgm="DCGM_FI_PROF_SM_ACTIVE per GPU instance", plausible=PCT,
               reader="gpm", nvml=_q(attribute="sm_active_pct"),
               # "smact" in the short line and the TUI, as on the GPU's lines ("sm" is the SM clock there)
               word="sm_active", line=3, short_word="smact", short=2, label="smact", panel=2, fmt="activity",
               report=("sm_active", 11)),
)


# --------------------------------------------------------------------------- derived views
_F = TypeVar("_F", bound=Callable[[], Any])


def per_catalogue(derive: _F) -> _F:
    """``derive`` computed once per :data:`READINGS` and :data:`STATIC_FACTS` (again when either is
    replaced): the samplers ask for these views many times a second. What it gives is shared: read,
    never change."""
    cache: list[Any] = [None, None, None]

    @functools.wraps(derive)
    def view() -> Any:
        if cache[0] is not READINGS or cache[2] is not STATIC_FACTS:
            cache[1] = derive()
            cache[0], cache[2] = READINGS, STATIC_FACTS
        return cache[1]
    return view  # type: ignore[return-value]


def readings() -> tuple[Reading, ...]:
    """Every reading, in sample order (read at call time: see the module's docstring)."""
    return READINGS


@per_catalogue
def by_key() -> dict[str, Reading]:
    return {r.key: r for r in READINGS}


@per_catalogue
def keys() -> tuple[str, ...]:
    """The keys a sample may hold: ``GpuSample``'s fields and the recording schema's properties."""
    return tuple(r.key for r in READINGS)


@per_catalogue
def fast_keys() -> tuple[str, ...]:
    """What ``fast_sample`` gives."""
    return tuple(r.key for r in READINGS if r.read == "fast")


@per_catalogue
def history_keys() -> tuple[str, ...]:
    """The readings the sampler keeps a history of (the TUI's sparklines)."""
    return tuple(r.key for r in READINGS if r.history)


@per_catalogue
def watch_keys() -> tuple[str, ...]:
    """The readings of a ``watch --json`` record."""
    return tuple(r.key for r in sorted((r for r in READINGS if r.watch), key=lambda r: r.watch))


@per_catalogue
def hooks_keys() -> tuple[str, ...]:
    """The readings the training hooks keep per sample (``t`` first: the time of each)."""
    return ("t",) + tuple(r.key for r in READINGS if r.hooks)


def placed(place: str) -> list[Reading]:
    """The readings a front end shows, in its order: ``place`` is "panel" (the TUI's cells),
    "line" (the verbose watch line) or "short" (the short watch line)."""
    return sorted((r for r in READINGS if getattr(r, place)), key=lambda r: getattr(r, place))


@per_catalogue
def gpm_readings() -> tuple[Reading, ...]:
    """The readings of NVML GPM (Hopper and later), read together from two GPM samples."""
    return tuple(r for r in READINGS if r.gpm is not None)


@per_catalogue
def exported() -> tuple[Reading, ...]:
    """The readings the exporter writes (gauges and counters)."""
    return tuple(r for r in READINGS if r.prometheus)


@per_catalogue
def fleet_readings() -> tuple[Reading, ...]:
    """The readings ``gpudoctor fleet`` reads back from Prometheus into its rows."""
    return tuple(r for r in READINGS if r.fleet)


@per_catalogue
def report_readings() -> tuple[Reading, ...]:
    """The readings the health probe measures in ``gpudoctor report``, each under its ``report`` name."""
    return tuple(r for r in READINGS if r.report)


@per_catalogue
def fleet_columns() -> tuple[Reading, ...]:
    """The readings fleet's table and the TUI's Fleet screen show as columns, in their order."""
    return tuple(sorted((r for r in READINGS if r.column[1] and r.fleet), key=lambda r: r.column[1]))


def mig_readings() -> tuple[MigReading, ...]:
    """Every per-MIG-device reading (read at call time, as :func:`readings`)."""
    return MIG_READINGS


def mig_placed(place: str) -> list[MigReading]:
    """The MIG readings a front end shows, in its order: ``place`` is "line" (the verbose watch MIG
    line), "short" (the short one), "panel" (the TUI's MIG row) or "report" (the devices probe's
    measurements). The processes sit at :data:`MIG_PROCESSES_PLACE` among them."""
    def at(r: MigReading) -> int:
        return r.report[1] if place == "report" else int(getattr(r, place))
    return sorted((r for r in MIG_READINGS if at(r)), key=at)


#: A DCGM field's unit -> the factor to the unit of gpudoctor's exporter gauges (Prometheus base
#: units: ratio, bytes, hertz, joules, celsius, watts), which are fleet's units too.
DCGM_UNITS: dict[str, float] = {"%": 0.01, "ratio": 1.0, "MiB": float(2 ** 20), "B": 1.0, "MHz": 1e6, "Hz": 1.0,
                                "mJ": 1e-3, "J": 1.0, "°C": 1.0, "W": 1.0}
#: The exporter releases each DCGM name belongs to (dcgm-exporter's own version, not DCGM's).
DCGM_OLD, DCGM_NEW = "4.8 and earlier", "4.9 and later"


@record(frozen=True)
class DcgmField:
    """One DCGM field name fleet may find in Prometheus for a reading: the reading's key, the
    name, its unit, the dcgm-exporter releases that export it, and the factor to gpudoctor's unit
    (None: the unit is not known from a source, so fleet does not read it)."""

    key: str
    name: str
    unit: str
    exporters: str
    scale: float | None


@per_catalogue
def dcgm_fields() -> tuple[DcgmField, ...]:
    """Every DCGM name of every reading, old (dcgm-exporter 4.8 and earlier) and new (4.9 and later)."""
    out: list[DcgmField] = []
    for r in READINGS:
        if r.dcgm:
            out.append(DcgmField(r.key, r.dcgm, r.dcgm_unit, DCGM_OLD, DCGM_UNITS.get(r.dcgm_unit)))
        if r.dcgm_new[0]:
            name, unit = r.dcgm_new
            out.append(DcgmField(r.key, name, unit, DCGM_NEW, DCGM_UNITS.get(unit) if r.dcgm_unit else None))
    return tuple(out)


def dcgm_read(key: str) -> tuple[DcgmField, ...]:
    """The DCGM names fleet reads for the reading ``key`` (those with a known unit), old first."""
    return tuple(f for f in dcgm_fields() if f.key == key and f.scale is not None)


#: dcgm-exporter's labels that were renamed, (old, new, the release that renamed it): fleet reads both.
DCGM_LABELS: tuple[tuple[str, str, str], ...] = (
    ("Hostname", "hostname", "4.8.3"),
    ("DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION", "4.9.0"),
)


@per_catalogue
def plausible_ranges() -> dict[str, tuple[int, int]]:
    """Reading or static fact -> its (lowest, highest) possible value: the one table of ranges."""
    ranges = {r.key: r.plausible for r in READINGS if r.plausible is not None}
    for fact in STATIC_FACTS:
        if fact.plausible is not None:
            ranges.setdefault(fact.key, fact.plausible)
    return ranges


def static_facts() -> tuple[StaticFact, ...]:
    """Every static fact, in ``static()`` order (read at call time, as :func:`readings`)."""
    return STATIC_FACTS


@per_catalogue
def static_keys() -> tuple[str, ...]:
    """The keys ``static()`` may hold: ``DeviceStatic``'s fields and the recording schema's properties."""
    return tuple(f.key for f in STATIC_FACTS)


@per_catalogue
def series_labels() -> tuple[str, ...]:
    """The static facts that label every per-GPU series of the exporter (after ``gpu``), in order."""
    return tuple(f.key for f in sorted((f for f in STATIC_FACTS if f.series_label), key=lambda f: f.series_label))


@per_catalogue
def info_labels() -> tuple[str, ...]:
    """The static facts that label ``gpudoctor_gpu_info`` beside :func:`series_labels`, in catalogue order."""
    return tuple(f.key for f in STATIC_FACTS if f.info_label and not f.series_label)


#: The one label of the exporter's ``gpudoctor_gpu_info`` that is no static fact: the driver's version.
DRIVER_LABEL = "driver_version"


@per_catalogue
def gpu_info_labels() -> tuple[str, ...]:
    """The labels of the exporter's ``gpudoctor_gpu_info``, in order: ``gpu``, :func:`series_labels`,
    :data:`DRIVER_LABEL`, then :func:`info_labels` (the exporter's series and docs/fleet.md's row)."""
    return ("gpu",) + series_labels() + (DRIVER_LABEL,) + info_labels()


@per_catalogue
def static_gauges() -> tuple[StaticFact, ...]:
    """The static facts the exporter writes as gauges of their own."""
    return tuple(f for f in STATIC_FACTS if f.prometheus)


@per_catalogue
def identifying_keys() -> frozenset[str]:
    """The names under which a value that identifies a board is stored or reported (the keys and
    ``report`` names of the identifying static facts): what ``--anonymize`` strips, with the host's
    keys (``core.anonymize.HOST_KEYS``). A MIG device's ``uuid`` goes by the GPU's key."""
    return frozenset(name for f in STATIC_FACTS if f.identifying for name in (f.key, f.report) if name)


@per_catalogue
def report_static_facts() -> tuple[StaticFact, ...]:
    """The static facts ``gpudoctor report`` measures, each under its ``report`` name."""
    return tuple(f for f in STATIC_FACTS if f.report)


__all__ = ["Reading", "NvmlRead", "READINGS", "StaticFact", "STATIC_FACTS", "static_facts", "static_keys",
           "series_labels", "info_labels", "identifying_keys", "DRIVER_LABEL", "gpu_info_labels", "static_gauges", "report_static_facts", "readings", "by_key", "keys", "fast_keys",
           "history_keys", "per_catalogue", "DcgmField", "DCGM_UNITS", "DCGM_LABELS", "dcgm_fields", "dcgm_read", "gpm_readings", "watch_keys", "hooks_keys", "placed", "exported", "fleet_readings",
           "report_readings", "fleet_columns", "MigReading", "MIG_READINGS", "mig_readings", "mig_placed",
           "MIG_PROCESSES_PLACE", "WHOLE_GPU_ONLY", "MIG_NO_UTILISATION",
           "plausible_ranges"]
