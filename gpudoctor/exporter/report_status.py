"""The last report the exporter exposes: the quick report run in a background thread every
``--report-interval`` seconds, or a report file written by someone else, re-read when it
changes, within bounds (16 MiB, 64 levels): a bad file only sets ``gpudoctor_report_up`` to 0.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from gpudoctor.core._num import is_number

if TYPE_CHECKING:
    from gpudoctor.backends.events import EventSource

DEFAULT_REPORT_INTERVAL_S = 300.0
STATUSES = ("pass", "skip", "warn", "fail", "error")

REPORT_FILE_MAX_BYTES = 16 << 20  # a full report of 64 GPUs is well under 1 MiB
REPORT_FILE_MAX_DEPTH = 64
REPORT_FILE_MAX_RESULTS = 1000


def _report_duration(data: object) -> float:
    """Sum of the results' durations, after checking the fields the collector reads.

    ValueError for anything that is not a gpudoctor report of the expected shape.
    """
    if not isinstance(data, dict):
        raise ValueError("not a gpudoctor report")
    results = data.get("results")
    if not isinstance(results, list):
        raise ValueError("not a gpudoctor report")
    if len(results) > REPORT_FILE_MAX_RESULTS:
        raise ValueError(f"more than {REPORT_FILE_MAX_RESULTS} results")
    if not isinstance(data.get("status"), (str, type(None))):
        raise ValueError("status is not a string")
    total = 0.0
    for result in results:
        if not isinstance(result, dict) or not isinstance(result.get("probe"), str) \
                or len(result["probe"]) > 200 or not isinstance(result.get("status"), (str, type(None))):
            raise ValueError("a result is not a probe result")
        duration = result.get("duration_s")
        if is_number(duration) and duration == duration:  # NaN is no duration
            total += float(duration)
    return total


class ReportStatus:
    """The last report: run periodically by ``produce`` or read from ``path`` when it changes."""

    def __init__(self, produce: Callable[[], Any] | None = None, path: str | None = None,
                 interval: float = DEFAULT_REPORT_INTERVAL_S) -> None:
        self.produce = produce
        self.path = path
        self.interval = interval
        self.report: dict[str, Any] | None = None
        self.up = 0
        self.finished_at: float | None = None
        self.duration_s: float | None = None
        self._mtime: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> None:
        if self.path is not None:
            self._read_file()
        elif self.produce is not None:
            start = time.monotonic()
            try:
                report = self.produce()
                self.report = report.to_dict() if hasattr(report, "to_dict") else dict(report)
                self.up = 1
            except Exception:
                self.up = 0
            self.duration_s = time.monotonic() - start
            self.finished_at = time.time()

    def _read_file(self) -> None:
        """Read the report file if it changed. A file that is missing, too big, nested too deep,
        not JSON or not a report sets ``up`` to 0; the next change is read again."""
        from gpudoctor.system.safejson import JsonFileError, read_json_file

        try:
            st = os.stat(self.path)  # type: ignore[arg-type]
        except (OSError, ValueError):
            self.up = 0
            return
        mtime = st.st_mtime
        if mtime == self._mtime and self.report is not None:
            return
        try:
            data = read_json_file(self.path, max_bytes=REPORT_FILE_MAX_BYTES,  # type: ignore[arg-type]
                                  max_depth=REPORT_FILE_MAX_DEPTH)
            duration = _report_duration(data)
        except (JsonFileError, ValueError):
            self.up = 0
            return
        self.report, self.up, self._mtime, self.finished_at = data, 1, mtime, mtime
        self.duration_s = duration

    def _loop(self) -> None:
        while True:
            try:
                self.refresh()
            except Exception as exc:  # never let one bad file or report end the thread for good
                self.up = 0
                print(f"gpudoctor exporter: report: {type(exc).__name__}: {str(exc)[:200]}",
                      file=sys.stderr, flush=True)
            wait = 5.0 if self.path is not None else self.interval
            if wait <= 0 or self._stop.wait(wait):
                return

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gpudoctor-report", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()


def quick_report_producer(replay: str | None, events: EventSource | None = None) -> Callable[[], Any]:
    """The quick report, run on demand; ``events``: the exporter's running event watcher, whose
    NVML stream the report's events probe reads."""
    def produce() -> Any:
        from gpudoctor.report.quick import quick_report  # the verdict report --quick and the TUI give

        return quick_report(replay=replay, events=events)

    return produce

