"""Replay a recording made by ``gpudoctor record``.

A recording is one JSON document::

    {
      "format": "gpudoctor-recording", "format_version": 1,
      "meta":  {"created", "host", "device_names", "driver_version", "gpudoctor_version",
                "hand_made": false, "scenario": ""},
      "nvml":  {"status": null | NA, "driver_version", "cuda_driver_version", "nvml_version",
                "device_count", "static": [ {...}, ... ],
                "samples": [ {"t": seconds_since_start, "devices": [ {...} ], "processes": [ [...] ]} ]},
      "torch": { torch facts } | null,
      "host":  { host facts }
    }

NA values are stored as ``{"__na__": reason}``. Hand-made recordings (fault scenarios
only: GPU lost, field not supported) set ``meta.hand_made`` and say so in their file name.
The full format, with its bounds, is docs/recording.schema.json (gpudoctor.backends.recording).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, cast

# The loader lives in gpudoctor.backends.recording (bounded reading, the schema); re-exported here.
from gpudoctor.backends.recording import (
    RECORDING_FORMAT, RECORDING_FORMAT_VERSION, RecordingError, load_recording,  # noqa: F401
)

from . import catalogue
from .base import (DeviceIdentity, GpuSample, MemoryReading, MigDeviceReading, NvLinkReading, P2PReading,
                   ProcessReading, UtilizationReading)
from .na import NA, is_na
from .plausible import screen, screen_mig
from .base import DeviceStatic  # the static facts' type, made from the catalogue

if TYPE_CHECKING:  # pathlib costs `report --quick` ~5 ms of imports; only replays need it
    from pathlib import Path


def torch_not_installed(facts: object) -> bool:
    """Whether torch facts only say that torch is absent from the environment that read them
    (``No module named 'torch'``): not a broken torch, just none there to record."""
    if not isinstance(facts, dict) or facts.get("importable") is not False:
        return False
    error = str(facts.get("import_error") or "")
    return error.startswith("ModuleNotFoundError") and "'torch'" in error


class ReplayBackend:
    """Serves a recording through the same methods as :class:`NvmlBackend`.

    Each call to :meth:`sample` for a device returns that device's next recorded
    sample; after the last one it holds the last (``loop=False``, so a "GPU lost"
    recording stays lost) or starts again (``loop=True``, for the TUI).
    """

    kind: ClassVar[str] = "replay"

    def __init__(self, recording: dict[str, Any], *, loop: bool = False, source: str = "") -> None:
        self.recording = recording
        self.source = source
        self.loop = loop
        self._nvml = recording.get("nvml") or {}
        self._cursor: dict[int, int] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path, *, loop: bool = False) -> "ReplayBackend":
        return cls(load_recording(path), loop=loop, source=str(path))

    @property
    def meta(self) -> dict[str, Any]:
        return self.recording.get("meta") or {}

    def status(self) -> NA | None:
        status = self._nvml.get("status")
        return status if is_na(status) else None

    def driver_version(self) -> str | NA:
        return self._nvml.get("driver_version", NA("NotRecorded"))

    def cuda_driver_version(self) -> str | NA:
        return self._nvml.get("cuda_driver_version", NA("NotRecorded"))

    def nvml_version(self) -> str | NA:
        return self._nvml.get("nvml_version", NA("NotRecorded"))

    def device_count(self) -> int | NA:
        return self._nvml.get("device_count", NA("NotRecorded"))

    def _check(self, index: int) -> NA | None:
        status = self.status()
        if status is not None:
            return status
        count = self.device_count()
        if is_na(count):
            return count
        if not 0 <= index < count:
            return NA("InvalidArgument")
        return None

    def identity(self, index: int) -> DeviceIdentity:
        static = self.static(index)
        return DeviceIdentity(static.get("pci_bus_id", NA("NotRecorded")), static.get("uuid", NA("NotRecorded")))

    def static(self, index: int) -> DeviceStatic:
        """The recorded static facts of the device (the catalogue's static facts, as recorded: an
        older recording may lack some), screened with their plausible ranges."""
        na = self._check(index)
        static = self._nvml.get("static") or []
        if na is not None or index >= len(static):
            return {"index": index, "name": na if na is not None else NA("NotRecorded")}
        return cast(DeviceStatic, screen(dict(static[index])))

    def _next_sample(self, index: int) -> dict[str, Any] | None:
        samples = self._nvml.get("samples") or []
        if not samples:
            return None
        with self._lock:
            pos = self._cursor.get(index, 0)
            if pos >= len(samples):
                pos = 0 if self.loop else len(samples) - 1
            self._cursor[index] = pos + 1
        return samples[pos]

    def sample(self, index: int) -> GpuSample:
        na = self._check(index)
        if na is not None:
            return {"gpu_util_pct": na}
        entry = self._next_sample(index)
        if entry is None:
            return {"gpu_util_pct": NA("NotRecorded")}
        devices = entry.get("devices") or []
        if index >= len(devices):
            return {"gpu_util_pct": NA("NotRecorded")}
        return cast(GpuSample, screen(dict(devices[index])))

    # Recordings hold whole samples; the cheaper views are cuts of the next one: the catalogue's
    # "fast" readings (catalogue.fast_keys(), read at each call).

    @staticmethod
    def _missing(full: Mapping[str, Any]) -> NA:
        """What a field absent from a sample reads as: the device's fault if it has one."""
        return next((v for v in full.values() if is_na(v)), NA("NotRecorded"))

    def fast_sample(self, index: int) -> GpuSample:
        full = self.sample(index)
        missing = self._missing(full)
        fast = {k: full.get(k, missing) for k in catalogue.fast_keys()}
        if "memory_reserved_bytes" not in full and "memory_used_bytes" in full:
            fast["memory_reserved_bytes"] = NA("NotRecorded")  # recorded before reserved was read
        return cast(GpuSample, fast)

    def total_energy_mj(self, index: int) -> int | NA:
        """The energy counter of the device's next recorded sample (``energy_mj``), or NA."""
        sample = self.sample(index)
        return sample.get("energy_mj", NA("NotRecorded"))

    def memory(self, index: int) -> MemoryReading:
        full = self.sample(index)
        missing = self._missing(full)
        reserved = full.get("memory_reserved_bytes",
                            NA("NotRecorded") if "memory_used_bytes" in full else missing)
        return MemoryReading(full.get("memory_used_bytes", missing), full.get("memory_free_bytes", missing),
                             full.get("memory_total_bytes", missing), reserved)

    def utilization(self, index: int) -> UtilizationReading:
        full = self.sample(index)
        missing = self._missing(full)
        t = full.get("t")
        return UtilizationReading(float(t) if isinstance(t, (int, float)) else 0.0,
                                  full.get("gpu_util_pct", missing), full.get("mem_util_pct", missing))

    def utilization_samples(self, index: int, since_us: int) -> list[tuple[int, float]] | NA:
        """The recorded ``gpu_util_pct`` readings newer than ``since_us`` as
        ``[(timestamp_us, percent)]``, timed by the recording's own clock (its ``t``, seconds
        from the recording's start), which is not the host's. Does not move the replay on."""
        na = self._check(index)
        if na is not None:
            return na
        out = []
        for entry in self._nvml.get("samples") or []:
            devices = entry.get("devices") or []
            t = entry.get("t")
            if index >= len(devices) or not isinstance(t, (int, float)):
                continue
            value = screen(dict(devices[index])).get("gpu_util_pct")
            stamp = round(t * 1_000_000)
            if isinstance(value, (int, float)) and not is_na(value) and stamp > since_us:
                out.append((stamp, float(value)))
        return sorted(out)

    def compute_mode(self, index: int) -> int | NA:
        """The compute mode of the device's next recorded sample, or NA."""
        return self.sample(index).get("compute_mode", NA("NotRecorded"))

    def processes(self, index: int) -> list[ProcessReading] | NA:
        na = self._check(index)
        if na is not None:
            return na
        entries = self._served(index, "processes")
        if entries is None or is_na(entries):
            return NA("NotRecorded") if entries is None else entries
        return [ProcessReading.from_mapping(p) for p in entries]

    def _served(self, index: int, key: str) -> list[dict[str, Any]] | NA | None:
        """The device's entries under ``key`` (``samples[].<key>[index]``, a list per device) in the
        sample last served for it: None where the recording holds nothing for it, NA where it
        recorded the reading's failure (or holds something that is not a list)."""
        samples = self._nvml.get("samples") or []
        if not samples:
            return None
        with self._lock:
            pos = max(0, min(self._cursor.get(index, 1) - 1, len(samples) - 1))
        per_device = samples[pos].get(key)
        if not isinstance(per_device, list) or index >= len(per_device) or per_device[index] is None:
            return None
        entry = per_device[index]
        if is_na(entry) or not isinstance(entry, list):
            return entry if is_na(entry) else NA("NotRecorded")
        return [item for item in entry if isinstance(item, dict)]

    def nvlink(self, index: int) -> list[NvLinkReading] | NA:
        """Recorded NVLink links of a device (``nvml.nvlink[index]``), else NA."""
        na = self._check(index)
        if na is not None:
            return na
        links = self._nvml.get("nvlink")
        if not isinstance(links, list) or index >= len(links):
            return NA("NotRecorded")
        return links[index]

    def p2p(self, index: int, peer: int) -> P2PReading:
        """Recordings hold no peer-to-peer path: every field NA("NotRecorded") (or the device's NA)."""
        na = self._check(index)
        if na is None:
            na = self._check(peer)
        return P2PReading.unknown(NA("NotRecorded") if na is None else na)

    def mig_devices(self, index: int, readings: bool = True) -> list[MigDeviceReading] | NA:
        """The MIG devices of the sample last served for the device (``samples[].mig[index]``):
        NA("MigDisabled") for a device recorded out of MIG mode, NA("NotRecorded") where the
        recording holds no MIG devices (recordings before them)."""
        na = self._check(index)
        if na is not None:
            return na
        entries = self._served(index, "mig")
        if entries is None:
            return NA("MigDisabled") if self.static(index).get("mig_mode") == 0 else NA("NotRecorded")
        if is_na(entries):
            return entries
        return [MigDeviceReading.from_mapping(screen_mig(dict(m))) for m in entries]

    def gpm(self, index: int) -> dict[str, float | NA]:
        """A recording's GPM readings come with its samples (:meth:`sample`); a GPM read of its own
        has nothing to give: every reading NA("NotRecorded"), so a caller stops asking."""
        return {r.key: NA("NotRecorded") for r in catalogue.gpm_readings()}

    def torch_facts(self) -> Any:
        """The recorded torch facts, or NA("NotRecorded"): none recorded (``record --no-torch``), or
        the recording's environment had no torch (the light install), which says nothing about torch."""
        facts = self.recording.get("torch")
        if facts is None or torch_not_installed(facts):
            return NA("NotRecorded")
        return facts

    def host_facts(self) -> dict[str, Any]:
        return dict(self.recording.get("host") or {})

    def reset(self) -> None:
        """A recording has no driver to start again: nothing to do."""

    def close(self) -> None:
        pass
