"""The TUI's first reading, taken in a fork while the TUI imports Textual (issue 33).

``gpudoctor`` starts this before it imports Textual, beside the quick report's fork
(:func:`gpudoctor.quick.begin_quick_report`): the child opens NVML, reads every GPU, the host
and the GPUs' processes as the app's own sampling does (:func:`take_reading`, which the app
uses for every later reading), and hands the reading back through a pipe. Its imports (pynvml,
psutil) and NVML's start then cost another core, and the first frame shows the GPUs as soon
as the app is mounted; the app opens its own NVML after that frame, for the readings that
follow.

The reading comes back pickled: the pipe is this process's own, written only by its own fork,
so nothing foreign is unpickled. Importing this module imports neither textual nor NVML.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from gpudoctor._fork import ForkedCall
    from gpudoctor.presentation import ProcessRow
    from gpudoctor.sampling import Sampler, Snapshot

    Reading = tuple[Snapshot, list[ProcessRow], list[str], dict[int, dict[str, Any]]]

#: Seconds the first reading may take in its child; after that the app reads NVML itself.
FIRST_READING_LIMIT_S = 10.0


def take_reading(sampler: Sampler, process_info: Callable[..., dict[str, Any]]) -> Reading:
    """One reading as the TUI shows it: the snapshot, its process rows and notes, and the live
    summaries published by training processes (a file that cannot be read costs its column)."""
    from gpudoctor import _published
    from gpudoctor.presentation import process_rows

    snap = sampler.read()
    rows, notes = process_rows(snap, process_info)  # type: ignore[arg-type]
    forget = getattr(process_info, "forget_except", None)
    if forget is not None:
        forget({r.pid for r in rows})
    try:
        published = _published.read_all()
    except Exception:
        published = {}
    return snap, rows, notes, published


def _first_reading() -> bytes:
    import pickle

    from gpudoctor.backends.host import PsutilProcessInfo, default_host_sampler
    from gpudoctor.backends.nvml import NvmlBackend
    from gpudoctor.sampling import Sampler

    gpu = NvmlBackend()
    try:
        reading = take_reading(Sampler(gpu, default_host_sampler()), PsutilProcessInfo())
    finally:
        gpu.close()
    return pickle.dumps(reading)


def begin_first_reading() -> ForkedCall | None:
    """Start the first live reading in a fork; None where forking is not safe (other threads)
    or possible (not Linux): the app then takes it itself."""
    import sys

    from gpudoctor._fork import ForkedCall, one_thread

    if not sys.platform.startswith("linux") or not one_thread():
        return None
    return ForkedCall(_first_reading, limit_s=FIRST_READING_LIMIT_S, max_bytes=16 << 20)


def read_first_reading(call: ForkedCall) -> Reading | None:
    """The reading the child took (waits for it, at most its limit); None when it gave none."""
    import pickle

    raw, why = call.answer_bytes()
    if why:
        return None
    try:
        reading = pickle.loads(raw)  # noqa: S301 - our own fork's answer (see the module's docstring)
    except Exception:
        return None
    return reading if isinstance(reading, tuple) and len(reading) == 4 else None


__all__ = ["FIRST_READING_LIMIT_S", "begin_first_reading", "read_first_reading", "take_reading"]
