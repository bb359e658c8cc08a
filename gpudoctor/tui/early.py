"""The TUI's first reading and quick verdict, worked out in one fork while the TUI imports Textual (issue 33).

``gpudoctor`` starts this before it imports Textual (:func:`begin_early_start`): one child
opens NVML, reads every GPU, the host and the GPUs' processes as the app's own sampling does
(:func:`take_reading`, which the app uses for every later reading) and hands the reading back
through a pipe at once; then it runs the quick report (the header's verdict) on the NVML it has
open and hands that back too. Its imports (pynvml, psutil) and NVML's start then cost another
core, once, and the first frame shows the GPUs and the verdict as soon as the app is mounted;
the app opens its own NVML after that frame, for the readings that follow. A recording's
first reading is the app's own (no NVML to start): only its quick report is forked
(:func:`gpudoctor.report.quick.begin_quick_report`).

The reading comes back pickled: the pipe is this process's own, written only by its own fork,
so nothing foreign is unpickled. Importing this module imports neither textual nor NVML.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from gpudoctor.system._fork import ForkedCall, ForkedPart
    from gpudoctor.sampling.presentation import ProcessRow
    from gpudoctor.sampling.sampler import Sampler, Snapshot

    Reading = tuple[Snapshot, list[ProcessRow], list[str], dict[int, dict[str, Any]]]

#: Seconds the first reading may take in its child; after that the app reads NVML itself.
FIRST_READING_LIMIT_S = 10.0


def take_reading(sampler: Sampler, process_info: Callable[..., dict[str, Any]]) -> Reading:
    """One reading as the TUI shows it: the snapshot, its process rows and notes, and the live
    summaries published by training processes (a file that cannot be read costs its column)."""
    from gpudoctor.system import _published
    from gpudoctor.sampling.presentation import process_rows

    snap = sampler.read()
    rows, notes = process_rows(snap, process_info)
    forget = getattr(process_info, "forget_except", None)
    if forget is not None:
        forget({r.pid for r in rows})
    try:
        published = _published.read_all()
    except Exception:
        published = {}
    return snap, rows, notes, published


def _reading_then_report() -> Iterator[bytes]:
    """The child's work: the first reading (pickled), then the quick report (JSON), on one NVML."""
    import pickle

    from gpudoctor.backends.host import PsutilProcessInfo, default_host_sampler
    from gpudoctor.backends.nvml import NvmlBackend
    from gpudoctor.sampling.sampler import Sampler

    gpu = NvmlBackend()
    try:
        yield pickle.dumps(take_reading(Sampler(gpu, default_host_sampler()), PsutilProcessInfo()))
        from gpudoctor.report.quick import quick_report

        yield quick_report(gpu=gpu).to_json(indent=None).encode()
    finally:
        gpu.close()


def begin_early_start(replay: str | None = None) -> tuple[ForkedPart | None, ForkedCall | ForkedPart | None]:
    """(the first reading, the quick report), started in one fork: read them with
    :func:`read_first_reading` and :func:`gpudoctor.report.quick.read_quick_report`. With a recording,
    only the quick report is forked. (None, None) where forking is not safe (other threads) or
    possible (not Linux): the app then works both out itself."""
    import sys

    from gpudoctor.system._fork import ForkedParts, one_thread

    if not sys.platform.startswith("linux") or not one_thread():
        return None, None
    if replay:
        from gpudoctor.report.quick import begin_quick_report

        return None, begin_quick_report(replay)
    call = ForkedParts(_reading_then_report, count=2, max_bytes=16 << 20)
    return call.part(0, FIRST_READING_LIMIT_S), call.part(1)


def read_first_reading(call: ForkedCall | ForkedPart) -> Reading | None:
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


__all__ = ["FIRST_READING_LIMIT_S", "begin_early_start", "read_first_reading", "take_reading"]
