"""``gpudoctor record``: capture real NVML and torch readings for replay.

The recording (format in :mod:`gpudoctor.backends.replay`) holds the device names, the
driver version and the date, so a replayed test says which hardware it stands for.
torch facts are gathered in a child process (with a time limit), like every torch probe.
"""

from __future__ import annotations

import multiprocessing as mp
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from gpudoctor.system import _proc
from gpudoctor import _version
from gpudoctor.backends.na import NA, encode, is_na
from gpudoctor.backends.replay import RECORDING_FORMAT, RECORDING_FORMAT_VERSION, torch_not_installed
from gpudoctor.core.model import utc_now_iso
from gpudoctor.sampling.sampler import Sampler, Snapshot

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from gpudoctor.backends.base import GpuBackend
    from gpudoctor.backends.events import DeviceEvents, GpuEvent


def _torch_facts_child(conn: Connection) -> None:
    from gpudoctor.backends.torch_cuda import torch_facts

    _proc.own_group()

    try:
        try:
            facts = encode(torch_facts())
        except BaseException as exc:
            facts = {"importable": False, "import_error": f"{type(exc).__name__}: {exc}"}
        conn.send(facts)
    except OSError:  # the parent stopped waiting (Ctrl-C, SIGTERM): nothing to say, no traceback
        pass


def torch_facts_in_child(timeout: float = 120.0) -> Any:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_torch_facts_child, args=(child,), daemon=True)
    with _proc.starting():
        process.start()
        if process.pid is not None:
            _proc.track(process.pid)
    child.close()
    try:
        if parent.poll(timeout):
            return parent.recv()
        return NA("Timeout")
    except EOFError:
        return NA(f"ChildDied:{process.exitcode}")
    finally:
        process.join(2)
        if process.pid is not None:  # the child and anything torch started in it
            _proc.end_tree(process.pid, grace_s=1.0, leader=process.is_alive())
            process.join(2)
            _proc.untrack(process.pid)
        parent.close()


def _header(gpu: GpuBackend, interval: float) -> tuple[dict[str, Any], int]:
    """A recording without samples yet: the device count, the static facts, the versions and the
    host; with the number of devices to sample."""
    from gpudoctor.backends.host import host_facts
    from gpudoctor.sampling.sampler import bounded_call

    # Every NVML call below may hang on a failing GPU: each group is bounded (sampling.bounded_call),
    # and a blocked driver is recorded as what it answers then, DriverNotAnswering.
    status = bounded_call(gpu.status)
    count = bounded_call(gpu.device_count)
    n = count if isinstance(count, int) else 0
    static = bounded_call(lambda: [gpu.static(i) for i in range(n)])
    versions = bounded_call(lambda: (gpu.driver_version(), gpu.cuda_driver_version(), gpu.nvml_version()))
    recording: dict[str, Any] = {
        "format": RECORDING_FORMAT,
        "format_version": RECORDING_FORMAT_VERSION,
        "meta": {
            "created": utc_now_iso(),
            "gpudoctor_version": _version.__version__,
            "device_names": [s.get("name") for s in static],
            "driver_version": versions[0],
            "cuda_driver_version": versions[1],
            "host": platform.node(),
            "hand_made": False,
            "scenario": "",
            "interval_s": interval,
        },
        "nvml": {
            "status": status,
            "driver_version": versions[0],
            "cuda_driver_version": versions[1],
            "nvml_version": versions[2],
            "device_count": count,
            "static": static,
            "samples": [],
        },
        "torch": None,
        "host": host_facts(),
    }
    return recording, n


#: What a recording keeps of each GPU process besides NVML's readings: the host's facts (the
#: recording schema's process fields), so that a replay shows who ran what.
PROCESS_FACTS = ("user", "command", "cpu_pct", "host_memory_bytes")


class _ProcessFacts:
    """Adds the user, command line, CPU % and resident memory of each process NVML lists (read
    through ``info``, the TUI's process reader) to its recorded entry; a process the host cannot
    show (another container, access denied) keeps NVML's readings alone."""

    def __init__(self, info: Callable[[int, Any], dict[str, Any]]) -> None:
        self.info = info

    def add(self, procs: Any) -> Any:
        if not isinstance(procs, list):
            return procs
        import dataclasses

        from gpudoctor.backends.base import ProcessReading

        out = []
        for proc in procs:
            if isinstance(proc, ProcessReading):
                found = self.info(proc.pid, proc.recorded)
                if found.get("user") not in (None, "", "?"):
                    facts = {k: found[k] for k in PROCESS_FACTS if found.get(k) is not None}
                    proc = dataclasses.replace(proc, recorded={**proc.recorded, **facts})
            out.append(proc)
        return out


def _sample_into(keep_sample: Callable[[dict[str, Any]], None], gpu: GpuBackend, n: int, *, seconds: float,
                 interval: float) -> None:
    """Append a sample of the first ``n`` devices (readings, processes, and the MIG devices of a GPU
    in MIG mode) every ``interval`` for ``seconds``, timed from the first."""
    from gpudoctor.backends.host import PsutilProcessInfo

    t0 = time.perf_counter()
    facts = _ProcessFacts(PsutilProcessInfo())

    def keep(snap: Snapshot) -> None:
        sample: dict[str, Any] = {"t": round(snap.t_mono - t0, 3), "devices": [d.sample for d in snap.devices[:n]],
                                  "processes": [facts.add(d.processes) for d in snap.devices[:n]]}
        if any(d.mig is not None for d in snap.devices[:n]):  # a GPU in MIG mode: its MIG devices
            sample["mig"] = [d.mig if d.mig is None or is_na(d.mig) else [m.to_dict() for m in d.mig]
                             for d in snap.devices[:n]]
        keep_sample(sample)

    for _snap in Sampler(gpu, None, with_processes=True, reads="full", interval_s=interval, history_length=1,
                         on_sample=keep).paced(seconds=seconds):
        pass


def capture(gpu: GpuBackend, *, seconds: float, interval: float, with_torch: bool = True,
            log: Callable[[str], None] | None = None,
            stream: Callable[[dict[str, Any], Callable[[], dict[str, Any]]], Callable[[dict[str, Any]], None]]
            | None = None) -> tuple[dict[str, Any], bool]:
    """Sample ``gpu`` for ``seconds``; returns (recording, interrupted). With ``stream``, each
    sample goes to ``stream(header, so_far)``'s answer as it is taken (the recording's samples
    stay empty; ``so_far()`` gives the events and the duration at that moment)."""
    from gpudoctor.backends.events import open_event_watcher
    from gpudoctor.sampling.sampler import bounded_call

    recording, n = _header(gpu, interval)
    interrupted = False
    start = time.monotonic()
    events = bounded_call(lambda: open_event_watcher(gpu))
    try:
        bounded_call(events.start)  # Xids and ECC events during the recording, and those in the kernel log before it
        if with_torch:
            if log:
                log("gpudoctor: reading torch facts in a child process ...")
            facts = torch_facts_in_child()
            # No torch in this environment (the light install): nothing about torch to record, and a
            # replay must not read the absence as a broken torch.
            recording["torch"] = None if torch_not_installed(facts) else facts
        if log:
            log(f"gpudoctor: sampling {n} device(s) every {interval:g} s for {seconds:g} s ...")
        def so_far() -> dict[str, Any]:
            return _tail(events, n, start)

        keep = stream(recording, so_far) if stream is not None else recording["nvml"]["samples"].append
        _sample_into(keep, gpu, n, seconds=seconds, interval=interval)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        events.stop(join_s=1.0)
    tail = _tail(events, n, start)
    recording["nvml"].update(tail["nvml"])
    recording["meta"].update(tail["meta"])
    return recording, interrupted


def _tail(events: Any, n: int, start: float) -> dict[str, Any]:
    """What a recording knows only as it goes: the events seen so far and the duration."""
    return {"nvml": {"events": [[dict(e.to_dict(), source="kernel_log" if e.source == "kernel_log" else "nvml")
                                 for e in _events_of(events.snapshot(i))] for i in range(n)],
                     "kernel_log": {"readable": getattr(events, "kernel_log_readable", None),
                                    "reason": getattr(events, "kernel_log_reason", "")}},
            "meta": {"duration_s": round(time.monotonic() - start, 3)}}


def _clean_sample(sample: dict[str, Any]) -> dict[str, Any]:
    """Process entries replay would refuse (a PID of -1, or past any PID a process can have)
    removed from a sample: a GPU's list and each MIG slice's, by the recording schema's own
    validator (:func:`gpudoctor.backends.recording.valid_process`)."""
    from gpudoctor.backends.recording import valid_process

    def kept(procs: object) -> object:
        return [p for p in procs if valid_process(p)] if isinstance(procs, list) else procs

    if isinstance(sample.get("processes"), list):
        sample["processes"] = [kept(procs) for procs in sample["processes"]]
    for slices in sample.get("mig") or []:
        for mig in slices if isinstance(slices, list) else []:
            if isinstance(mig, dict) and "processes" in mig:
                mig["processes"] = kept(mig["processes"])
    return sample


# A part of a recording stays below what --replay reads (100,000 samples), with room for the
# part's header (static facts, torch facts, events).
PART_SAMPLES = 90_000


def part_paths(path: str | Path, parts: int) -> list[Path]:
    """Where a recording of ``parts`` parts is written: FILE, then FILE's stem -2, -3, ..."""
    path = Path(path)
    return [path] + [path.with_name(f"{path.stem}-{k}{path.suffix or '.json'}") for k in range(2, parts + 1)]


def _events_of(state: DeviceEvents) -> list[GpuEvent]:
    return sorted(state.logged_xids + state.recent, key=lambda e: e.time)


#: A recording written as it is taken is cut into parts of at most this much JSON, and the
#: part being taken is written again (atomically) every FLUSH_S seconds at least: a record that
#: is killed keeps what it took up to its last write, and memory holds one part at most.
STREAM_PART_BYTES = 16 * 1024 * 1024
FLUSH_S = 5.0


class PartWriter:
    """Writes a recording while it is taken: each sample cleaned and checked by the schema replay
    applies (one validator), then kept in the part being taken; a part that is full is written and
    let go, the part being taken is written again at least every ``flush_s`` (each write atomic,
    so a file on disk always replays). Parts: FILE, then FILE's stem -2, -3 ... (:func:`part_paths`);
    a part of several says which it is (``meta.part``), and the last how many there are
    (``meta.parts``)."""

    def __init__(self, path: str | Path, header: dict[str, Any], so_far: Callable[[], dict[str, Any]], *,
                 anonymize: bool = False, max_bytes: int = STREAM_PART_BYTES, max_samples: int = PART_SAMPLES,
                 flush_s: float = FLUSH_S) -> None:
        self.path, self.so_far, self.anonymize = Path(path), so_far, anonymize
        self.max_bytes, self.max_samples, self.flush_s = max_bytes, max_samples, flush_s
        self.hostname = header.get("host", {}).get("hostname")
        self.header = self._encoded(header)
        self.samples: list[dict[str, Any]] = []
        self.size = 0
        self.part = 1
        self.cut = False  # a part was cut: every part says its number
        self.refused = 0
        self.paths: list[Path] = []
        self.last_write = time.monotonic()

    def _encoded(self, value: dict[str, Any]) -> dict[str, Any]:
        from gpudoctor.backends.recording import finite_for_file, plain_strings

        data: dict[str, Any] = plain_strings(finite_for_file(encode(value)))
        if self.anonymize:
            from gpudoctor.backends.catalogue import identifying_keys
            from gpudoctor.core.anonymize import anonymize_dict

            data = anonymize_dict(data, identifying_keys(), hostname=self.hostname)
        return data

    def add(self, sample: dict[str, Any]) -> None:
        import json

        from gpudoctor.backends.recording import SchemaError, validate_sample

        try:
            checked = validate_sample(_clean_sample(self._encoded(sample)))
        except SchemaError:
            self.refused += 1  # said in meta.samples_refused: never a file replay refuses
            return
        length = len(json.dumps(checked, separators=(",", ":"))) + 1
        if self.samples and (self.size + length > self.max_bytes or len(self.samples) >= self.max_samples):
            self.cut = True
            self._write(last=False)
            self.part += 1
            self.samples, self.size = [], 0
        self.samples.append(checked)
        self.size += length
        if time.monotonic() - self.last_write >= self.flush_s:
            self._write(last=False)

    def _write(self, last: bool, tail: dict[str, Any] | None = None) -> None:
        from gpudoctor.system.fileio import write_json

        tail = self._encoded(tail if tail is not None else self.so_far())
        meta = {**self.header["meta"], **tail["meta"]}
        if self.anonymize:
            from gpudoctor.core.anonymize import REDACTED

            meta["host"] = REDACTED
        if self.cut:
            meta["part"] = self.part
            if last:
                meta["parts"] = self.part
        if self.refused:
            meta["samples_refused"] = self.refused
        data = {**self.header, "meta": meta, "nvml": {**self.header["nvml"], **tail["nvml"], "samples": self.samples}}
        where = part_paths(self.path, self.part)[-1]
        write_json(where, data)
        if where not in self.paths:
            self.paths.append(where)
        self.last_write = time.monotonic()

    def finish(self, recording: dict[str, Any]) -> list[Path]:
        """Write the last part with what the recording knew at its end; the paths written."""
        self._write(last=True, tail={"nvml": {k: recording["nvml"][k] for k in ("events", "kernel_log")},
                                     "meta": {"duration_s": recording["meta"].get("duration_s")}})
        return self.paths


def record_parts(path: str | Path, *, seconds: float = 5.0, interval: float = 0.5,
                 with_torch: bool = True, anonymize: bool = False, gpu: GpuBackend | None = None,
                 log: Callable[[str], None] | None = None) -> tuple[list[Path], bool]:
    """Record ``gpu`` into ``path`` while sampling (:class:`PartWriter`: parts written as they
    fill, the part being taken written again every few seconds); returns (the paths written,
    interrupted). A write that fails raises ``OSError``."""
    from gpudoctor.backends import NvmlBackend

    own = gpu is None
    gpu = gpu or NvmlBackend()
    writers: list[PartWriter] = []

    def stream(header: dict[str, Any], so_far: Callable[[], dict[str, Any]]) -> Callable[[dict[str, Any]], None]:
        writers.append(PartWriter(path, header, so_far, anonymize=anonymize))
        writers[0]._write(last=False)  # the file exists, and replays, before the first sample
        return writers[0].add

    try:
        recording, interrupted = capture(gpu, seconds=seconds, interval=interval, with_torch=with_torch, log=log,
                                         stream=stream)
    finally:
        if own:
            gpu.close()
    if not writers:  # the sampling never started (Ctrl-C while reading torch): the header alone
        writers.append(PartWriter(path, recording, lambda: {"nvml": {}, "meta": {}}, anonymize=anonymize))
    return writers[0].finish(recording), interrupted


__all__ = ["capture", "record_parts", "PartWriter", "torch_facts_in_child", "is_na"]
