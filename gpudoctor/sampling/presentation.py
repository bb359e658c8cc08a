"""Presentation shared by every front end: units, "not available" text, status words and
styles, and the one function that makes foreign text safe to show.

The text report (:mod:`gpudoctor.console.render`), the TUI (:mod:`gpudoctor.tui`) and ``gpudoctor
watch`` all format values here, so a reading looks the same everywhere. Nothing here reads
hardware, and this module imports neither textual, nor torch, nor pynvml.

Text that gpudoctor did not write (GPU and driver names, process command lines, anything
read from a file or a recording) is data. :func:`plain_text` turns it into one bounded line
with control characters and terminal escape sequences replaced by visible placeholders;
front ends then show it as literal text (``rich.text.Text``), never as markup.
"""

from __future__ import annotations

import datetime as _dt
import math
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from gpudoctor.core._num import is_number as _is_number, number
from gpudoctor.core import findings
from gpudoctor.core._text import MAX_TEXT, plain_text
from gpudoctor.backends import busy, catalogue
from gpudoctor.backends.na import NA, is_na
from gpudoctor.backends.clock_reasons import throttle_reason_names, throttle_reason_words
from gpudoctor.core.model import Finding

if TYPE_CHECKING:
    from gpudoctor.backends.base import MigDeviceReading
    from gpudoctor.backends.events import GpuEvent
    from gpudoctor.core.model import Status
    from gpudoctor.sampling.sampler import DeviceSnapshot, Snapshot

# --------------------------------------------------------------------------- status words
#: Word and Rich style of each status, for the report, the TUI and the markdown summary.
STATUS_STYLE: dict[str, tuple[str, str]] = {
    "pass": ("PASS", "bold green"),
    "skip": ("SKIP", "dim"),
    "warn": ("WARN", "bold yellow"),
    "fail": ("FAIL", "bold red"),
    "error": ("ERROR", "bold magenta"),
}


def status_word(status: Status | str | None) -> str:
    """``PASS``, ``WARN``... for a :class:`~gpudoctor.core.model.Status` or its value."""
    return status_style(status)[0]


def status_style(status: object) -> tuple[str, str]:
    """(word, Rich style) of a status (a :class:`~gpudoctor.core.model.Status` or its value); anything else
    (a status not yet settled, a report's unknown word) is shown as itself, unstyled."""
    key = str(getattr(status, "value", status))
    return STATUS_STYLE.get(key, (plain_text(key, limit=12).upper() or "?", ""))


# --------------------------------------------------------------------------- foreign text
# plain_text and its bound live in the foundation (gpudoctor.core._text) so that the backends can
# make a recording's strings plain where they are read; re-exported here for the front ends.


# --------------------------------------------------------------------------- wrapping
def wrap_hanging(text: str, width: int, first: str = "", indent: int | None = None) -> list[str]:
    """``first`` + ``text`` wrapped at ``width``, continuation lines indented under the text.

    Used by the text report and the TUI Doctor: each line it returns fits ``width`` and is
    printed as is (no second wrap). ``width`` None or <= 0: one line, no wrap (pipes).
    """
    hang = " " * (len(first) if indent is None else indent)
    if not width or width <= 0:
        return [first + text]
    width = max(width, len(first) + 20)
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=hang,
                         break_on_hyphens=False) or [first.rstrip()]


# --------------------------------------------------------------------------- readings
SPARK_CHARS = "▁▂▃▄▅▆▇█"


def fmt_age(seconds: float) -> str:
    """How long ago, in the largest whole unit: "45 s", "12 min", "5 h", "3 d"."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def sparkline(values: Iterable[float | None], width: int, lo: float = 0.0, hi: float | None = None) -> str:
    """The last ``width`` values as block characters on a fixed scale [lo, hi].

    A fixed scale (0-100 % for utilisation) keeps a flat 100 % line from looking like a
    flat 0 % line, which an auto-scaled sparkline would show identically. Gaps (None)
    are blanks. ``hi`` None: the largest value seen (for watts, MHz, bytes/s).
    """
    if width <= 0:
        return ""
    data = list(values)[-width:]
    if hi is None:
        hi = max((v for v in data if v is not None and v == v), default=1.0)  # v == v: not NaN
    # Drawn for every panel cell on every reading: characters come from a table per scale,
    # one C-level lookup per value once a value has been seen.
    table = _SPARK_TABLES.get((lo, hi))
    if table is None:
        if len(_SPARK_TABLES) > 64:  # auto-scaled series make a new scale now and then
            _SPARK_TABLES.clear()
        table = _SPARK_TABLES[(lo, hi)] = _SparkTable(lo, hi)
    return "".join(map(table.__getitem__, data)).rjust(width)


class _SparkTable(dict[float | None, str]):
    """The block character of each value seen, on the fixed scale [lo, hi]."""

    def __init__(self, lo: float, hi: float) -> None:
        super().__init__()
        self.lo, self.span = lo, (hi - lo) or 1.0

    def __missing__(self, value: float | None) -> str:
        if value is None or value != value:  # a gap, or NaN
            return " "
        steps = len(SPARK_CHARS) - 1
        frac = min(1.0, max(0.0, (value - self.lo) / self.span))
        char = SPARK_CHARS[min(steps, int(frac * steps + 0.5))]
        if len(self) < 4096:
            self[value] = char
        return char


_SPARK_TABLES: dict[tuple[float, float], _SparkTable] = {}


def short_na(value: NA) -> str:
    """``n/a (reason in words)``: the reason's words in ``findings.NA_REASONS``, else its name."""
    said = findings.NA_REASONS.get(value.reason)
    return f"n/a ({said.words if said is not None else plain_text(value.reason, limit=40)})"


def tiny_na(value: NA) -> str:
    """``n/a`` with an abbreviated reason (its ``short`` words), for the TUI's narrow value cells."""
    said = findings.NA_REASONS.get(value.reason)
    return f"n/a ({said.short if said is not None else plain_text(value.reason, limit=40)})"


def fmt_bytes(n: object) -> str:
    if is_na(n):
        return short_na(n)
    if not _is_number(n):
        return "n/a"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit in ("B", "KiB") else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def fmt_rate_kbps(kbps: object) -> str:
    """PCIe throughput as NVML gives it ("KB/s", which is KiB/s: x1024, as the exporter and
    nvitop read it), in binary units: ``512 KiB/s``, ``1.2 GiB/s``."""
    if is_na(kbps):
        return short_na(kbps)
    if not _is_number(kbps):
        return "n/a"
    bps = float(kbps) * 1024.0
    for unit in ("B/s", "KiB/s", "MiB/s", "GiB/s"):
        if bps < 1024 or unit == "GiB/s":
            return f"{bps:.0f} {unit}" if unit in ("B/s", "KiB/s") else f"{bps:.1f} {unit}"
        bps /= 1024.0
    return f"{bps:.1f} GiB/s"


def fmt_num(value: object, unit: str = "", digits: int = 0) -> str:
    if is_na(value):
        return short_na(value)
    if not _is_number(value):
        return "n/a"
    text = f"{value:.{digits}f}"
    return f"{text}{unit}" if unit in ("%", "°C") else f"{text} {unit}".rstrip()


def fmt_memory(dev: DeviceSnapshot, *, reserved: bool = True) -> str:
    """Used/total memory of a device snapshot: ``31.2/40.0 GiB``, and the memory the driver
    reserves for itself when NVML gave it apart (``31.2/80.0 GiB +0.5 reserved``; left out with
    ``reserved=False``, for a cell too narrow to hold it whole)."""
    used, total = dev.sample.get("memory_used_bytes", NA("NotRecorded")), dev.memory_total
    if is_na(used):
        return short_na(used)
    held = dev.sample.get("memory_reserved_bytes") if reserved else None
    extra = f" +{held / 2**30:.1f} reserved" if _is_number(held) and held > 0 else ""
    if isinstance(used, (int, float)) and isinstance(total, (int, float)) and total > 0:
        return f"{used / 2**30:.1f}/{total / 2**30:.1f} GiB{extra}"
    return fmt_bytes(used) + extra


def fmt_power(dev: DeviceSnapshot) -> str:
    power = dev.get("power_w")
    limit = dev.sample.get("power_limit_w", dev.static.get("power_limit_w"))
    if is_na(power) or not isinstance(power, (int, float)):
        return fmt_num(power)
    if isinstance(limit, (int, float)) and not is_na(limit):
        return f"{power:.0f}/{limit:.0f} W"
    return f"{power:.0f} W"


def throttle_text(value: object, *, words: bool = True) -> str:
    """Throttle (clock event) reasons in words; "none" when the clocks run free."""
    if is_na(value):
        return short_na(value)
    if not isinstance(value, int):
        return "n/a"
    if value == 0:
        return "none"
    names = throttle_reason_words(value) if words else throttle_reason_names(value)
    return "; ".join(names) if names else f"unknown reason bits 0x{value:x}"


# --------------------------------------------------------------------------- watch lines
def reading_text(dev: DeviceSnapshot, reading: catalogue.Reading) -> str:
    """One reading of a device snapshot for people, by its catalogue ``fmt``: ``87%``,
    ``31.2/40.0 GiB +0.5 reserved``, ``338/350 W``, ``1.2 GiB/s``, ``1860 MHz``; NA in words."""
    value = dev.get(reading.key)
    if reading.fmt == "memory":
        return fmt_memory(dev)
    if reading.fmt == "power":
        return fmt_power(dev)
    if reading.fmt == "rate":
        return fmt_rate_kbps(value)
    if reading.fmt == "throttle":
        return throttle_text(value)
    return fmt_num(value, reading.unit)


def busy_verdict(dev: DeviceSnapshot) -> Finding:
    """Is this device snapshot's GPU really busy (gpudoctor.backends.busy), from its readings."""
    return busy.verdict({key: dev.get(key) for key in busy.READS})


def _iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


#: The width a default (short) ``watch`` line keeps to.
WATCH_WIDTH = 100


def watch_line(snap: Snapshot, dev: DeviceSnapshot, *, verbose: bool = True) -> str:
    """One log line for one device, e.g. ``2026-...Z gpu0 util 87% | mem 31.2/40.0 GiB | ...``.

    ``verbose=False`` (``gpudoctor watch`` without ``-v``): the readings nvidia-smi and nvitop
    users look at first, within :data:`WATCH_WIDTH` columns (:func:`watch_line_short`). A FAULT
    line is the same in both: its advice is never cut."""

    head = f"{_iso(snap.time)} gpu{dev.index}"
    fault = dev.fault
    if fault is not None:
        reason = plain_text(fault.reason, limit=60)
        return f"{head} FAULT {reason}: {plain_text(fault_words(fault.reason))}"
    if not verbose:
        return watch_line_short(head, dev)
    parts: list[str] = []
    gpm_na: set[str] = set()  # GPM readings NA for one reason (no GPM on this GPU): said once
    for reading in catalogue.placed("line"):
        value = dev.get(reading.key)
        if reading.gpm is not None and is_na(value):
            if value.reason in gpm_na:
                continue
            gpm_na.add(value.reason)
        if reading.fmt == "throttle":
            text = throttle_text(dev.get(reading.key), words=False).replace("; ", ",")
        else:
            text = reading_text(dev, reading)
        if reading.word.startswith("+") and parts:  # joins the part before it: "pcie rx .. tx .."
            parts[-1] += f" {reading.word[1:]} {text}"
        else:
            parts.append(f"{reading.word} {text}")
    parts.append(f"verdict {busy.headline(busy_verdict(dev))}")
    return head + " " + " | ".join(parts)


def watch_line_short(head: str, dev: DeviceSnapshot) -> str:
    """``HEAD util 95% smact 9% mem 20.5/24.0 GiB 74°C 338/350W sm 1860MHz throttle sw_power_cap``.

    GPU utilisation, SM activity (GPM, where read), memory used/total (whole GiB on boards of 64
    GiB or more, where a tenth is below a glance; ``-v`` keeps it), temperature, power/limit, SM
    clock and the throttle reasons' short names; a reading not available is ``n/a`` (``-v`` and
    ``--json`` say why). Past :data:`WATCH_WIDTH` columns the throttle reasons become the first and
    a count (``sw_power_cap+3``), or only the count (``+4``); then the readings give way whole by
    their catalogue ``short_drop`` (SM clock first, SM activity last).
    """
    parts = short_parts(dev)
    throttle = next((p for p in parts if p.key == "throttle_reasons"), None)
    if throttle is not None and throttle.names:
        names = throttle.names
        for shorter in ((f"{names[0]}+{len(names) - 1}",) if len(names) > 1 else ()) + (f"+{len(names)}",):
            if len(" ".join([head, *(p.text for p in parts)])) <= WATCH_WIDTH:
                break
            throttle.text = f"{throttle.word} {shorter}"
    kept = fit_ranked([(p.text, p.drop if p is not throttle else 0) for p in parts], WATCH_WIDTH - len(head) - 1)
    return " ".join([head, *kept])


@dataclass
class ShortPart:
    """One reading of the short line: its catalogue key, text (``util 95%``), how soon it gives way
    (``short_drop``), and for the throttle reasons their word and short names."""

    key: str
    text: str
    drop: int
    word: str = ""
    names: list[str] | None = None


def short_parts(dev: DeviceSnapshot) -> list[ShortPart]:
    """The readings of the short ``watch`` line and of the compact Overview, in catalogue order
    (``placed("short")``); a GPM reading only where it is a number (a warming first read shows none)."""
    parts: list[ShortPart] = []
    for reading in catalogue.placed("short"):
        if reading.fmt == "throttle":
            reasons = dev.get(reading.key)
            names = (throttle_reason_names(reasons) or [f"0x{reasons:x}"]) if isinstance(reasons, int) and reasons else []
            text = ",".join(names) if names else ("none" if isinstance(reasons, int) else "n/a")
            parts.append(ShortPart(reading.key, f"{reading.short_word} {text}", reading.short_drop,
                                   reading.short_word, names))
            continue
        text = _short_text(dev, reading)
        if reading.gpm is not None and text == "n/a":
            continue
        parts.append(ShortPart(reading.key, f"{reading.short_word} {text}" if reading.short_word else text,
                               reading.short_drop))
    return parts


def fit_ranked(parts: list[tuple[str, int]], width: int, sep: str = " ") -> list[str]:
    """The texts of ``parts`` (text, rank) that fit ``width`` joined by ``sep``, in their order: the
    highest rank (the later of equal ranks) gives way first, whole; rank 0 always stays."""
    return [parts[i][0] for i in fit_indices([(len(t), r) for t, r in parts], width, len(sep))]


def fit_indices(parts: list[tuple[int, int]], width: int, sep: int = 1) -> list[int]:
    """Which of ``parts`` (length, rank) fit ``width`` with ``sep`` columns between two: the highest
    rank (the later of equal ranks) gives way first; rank 0 always stays."""
    kept = list(range(len(parts)))

    def used() -> int:
        return sum(parts[i][0] for i in kept) + sep * max(0, len(kept) - 1)

    while kept and used() > width:
        droppable = [i for i in kept if parts[i][1] > 0]
        if not droppable:
            break
        kept.remove(max(droppable, key=lambda i: (parts[i][1], i)))
    return kept


def _short_text(dev: DeviceSnapshot, reading: catalogue.Reading) -> str:
    """A reading in the short watch line: whole numbers, the unit joined, ``n/a`` without its reason."""
    def num(key: str, unit: str) -> str:
        value = dev.get(key)
        return f"{value:.0f}{unit}" if _is_number(value) and math.isfinite(value) else "n/a"

    if reading.fmt == "memory":
        used, total = dev.sample.get("memory_used_bytes"), dev.memory_total
        if _is_number(used) and _is_number(total) and total >= 64 * 2**30:
            return f"{used / 2**30:.0f}/{total / 2**30:.0f} GiB"
        memory = fmt_memory(dev, reserved=False)
        return "n/a" if memory.startswith("n/a") else memory
    if reading.fmt == "power":
        power, limit = dev.get("power_w"), dev.sample.get("power_limit_w", dev.static.get("power_limit_w"))
        if _is_number(power) and _is_number(limit) and math.isfinite(power) and math.isfinite(limit):
            return f"{power:.0f}/{limit:.0f}W"
    if reading.fmt == "rate":
        text = fmt_rate_kbps(dev.get(reading.key))
        return "n/a" if text.startswith("n/a") else text.replace(" ", "")
    return num(reading.key, reading.unit)


# --------------------------------------------------------------------------- compact view
#: Ranks of the compact row's own parts (the readings' come from the catalogue's ``short_drop``).
_WORK_DROP, _PROCS_DROP, _NAME_DROP = 1, 2, 6
#: Columns between two columns of GPUs.
COLUMN_GAP = 3


@dataclass
class CompactCell:
    """One part of a GPU's compact row: its text, a style name ("index", "name", "value", "fault",
    "work:<verdict code>") for front ends that colour, and how soon it gives way (0: never)."""

    key: str
    text: str
    style: str = "value"
    drop: int = 0


def work_tag(code: str) -> str:
    """The word of an "is the GPU really busy?" verdict (gpudoctor.backends.busy) in the compact view:
    its ``tag`` in the findings table."""
    try:
        return findings.wording(f"work:{code}").tag or code
    except KeyError:
        return code


def compact_cells(dev: DeviceSnapshot, processes: int | None = None) -> list[CompactCell]:
    """A GPU's compact row: index, name, the short line's readings (utilisation, SM activity,
    memory, temperature, power, SM clock, throttle), the ``work`` verdict's word and its processes."""
    name = plain_text(dev.name, limit=40).removeprefix("NVIDIA ")
    cells = [CompactCell("index", f"{dev.index:>2}", "index"), CompactCell("name", name, "name", _NAME_DROP)]
    fault = dev.fault
    if fault is not None:
        return cells + [CompactCell("fault", f"FAULT {plain_text(fault.reason, limit=40)} (Enter: what to do)",
                                    "fault")]
    cells += [CompactCell(p.key, p.text, "value", p.drop) for p in short_parts(dev)]
    verdict = busy_verdict(dev)
    cells.append(CompactCell("work", f"work {work_tag(verdict.code)}", f"work:{verdict.code}",
                             _WORK_DROP))
    if processes is not None:
        cells.append(CompactCell("procs", f"{processes} proc{'s' if processes != 1 else ''}", "value", _PROCS_DROP))
    return cells


def compact_rows(devices: list[DeviceSnapshot], width: int, processes: Mapping[int, int] | None = None
                 ) -> list[list[CompactCell]]:
    """Every GPU's compact row for ``width`` columns, aligned: a part is as wide as its widest value
    across the GPUs, and the parts that give way (by rank) give way on every row, whole."""
    rows = [compact_cells(d, None if processes is None else processes.get(d.index, 0)) for d in devices]
    widths: dict[str, int] = {}
    ranks: dict[str, int] = {}
    order: list[str] = []
    for row in rows:
        for cell in row:
            if cell.key not in widths:
                order.append(cell.key)
            widths[cell.key] = max(widths.get(cell.key, 0), len(cell.text) if cell.key != "fault" else 0)
            ranks[cell.key] = cell.drop
    keep = {order[i] for i in fit_indices([(widths[k], ranks[k]) for k in order], width)}
    out: list[list[CompactCell]] = []
    for row in rows:
        cells = []
        for cell in row:
            if cell.key == "fault":
                cells.append(cell)
            elif cell.key in keep:
                pad = cell.text.rjust if cell.key in ("index",) else cell.text.ljust
                cells.append(CompactCell(cell.key, pad(widths[cell.key]), cell.style, cell.drop))
        out.append(cells)
    return out


#: The compact row's parts a column of GPUs keeps (rank at most this): utilisation, SM activity,
#: memory, power, temperature, the work word and the processes; the name and clocks give way.
COLUMN_KEEPS = 3


def compact_columns(count: int, width: int, column_width: int) -> int:
    """How many columns of GPUs ``width`` holds, each ``column_width`` wide."""
    if count < 2 or column_width <= 0:
        return 1
    return max(1, min(count, (width + COLUMN_GAP) // (column_width + COLUMN_GAP)))


def compact_grid(devices: list[DeviceSnapshot], width: int, processes: Mapping[int, int] | None = None
                 ) -> list[list[tuple[int, list[CompactCell]]]]:
    """The compact rows laid out in as many columns as ``width`` holds with the parts a column keeps
    (:data:`COLUMN_KEEPS`; GPUs run down the first column, then the next): one list per screen line
    of (GPU index, cells)."""
    full = compact_rows(devices, 10_000, processes)
    kept = max((len(" ".join(c.text for c in row if c.drop <= COLUMN_KEEPS)) for row in full), default=0)
    columns = compact_columns(len(devices), width, kept)
    column_width = (width - COLUMN_GAP * (columns - 1)) // columns
    rows = compact_rows(devices, column_width, processes)
    per_column = -(-len(devices) // columns)
    return [[(devices[i].index, rows[i]) for i in range(line, len(devices), per_column)]
            for line in range(per_column)]


def fmt_elapsed(seconds: object) -> str:
    """How long a process has run, as ps's etime: ``42:07``, ``3:02:01``, ``2-03:04:05``."""
    if not _is_number(seconds) or not math.isfinite(seconds) or seconds < 0:
        return "n/a"
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{s:02d}"
    return f"{hours}:{minutes:02d}:{s:02d}" if hours else f"{minutes:02d}:{s:02d}"


#: The compact process table's columns: (header, right-aligned, how soon it gives way: 0 never); the
#: command takes the room left, at least :data:`COMMAND_MIN` columns of it.
PROCESS_TABLE = (("GPU", True, 0), ("PID", True, 0), ("USER", False, 3), ("GPU-MEM", True, 0), ("SM%", True, 2),
                 ("CPU%", True, 4), ("TIME", True, 1))
COMMAND_MIN = 16


def process_cells(row: ProcessRow, now: float) -> list[str]:
    """A process's cells in the compact table (:data:`PROCESS_TABLE`), its command last."""
    return [row.gpu_text, str(row.pid), plain_text(row.user or "-", limit=16),
            fmt_bytes(row.gpu_memory_bytes) if row.gpu_memory_bytes is not None else "n/a",
            str(row.sm_util_pct) if row.sm_util_pct is not None else "n/a",
            f"{row.cpu_pct:.0f}" if _is_number(row.cpu_pct) else "n/a",
            fmt_elapsed(now - row.started) if row.started is not None else "n/a",
            plain_text(row.command)]


def process_table(rows: list[list[str]], width: int) -> list[str]:
    """The compact process table, header first, in ``width`` columns: each column as wide as its
    widest cell, the columns that give way (by rank) left out whole, the command cut with "…" (a
    command line is data, often longer than a line)."""
    header = [h for h, _, _ in PROCESS_TABLE]
    widths = [max(len(r[k]) for r in [header, *rows]) for k in range(len(header))]
    kept = fit_indices([(w, rank) for w, (_, _, rank) in zip(widths, PROCESS_TABLE)], width - COMMAND_MIN - 1)
    out = []
    for cells in [header + ["COMMAND"], *rows]:
        fixed = [cells[k].rjust(widths[k]) if PROCESS_TABLE[k][1] else cells[k].ljust(widths[k]) for k in kept]
        line = " ".join(fixed + [cells[-1]])
        out.append(line if len(line) <= width else line[:max(0, width - 1)] + "…")
    return out


def once_lines(snap: Snapshot, rows: list[ProcessRow], width: int, headline: str = "", reason: str = "") -> list[str]:
    """``gpudoctor --once``: the compact view as plain lines of at most ``width`` columns: a title
    (the doctor's verdict ``headline`` and the source kept, its ``reason`` and the rest where they
    fit), every GPU's row, and every GPU process."""
    width = max(40, width)
    title = [("gpudoctor", 0), (_iso(snap.time), 2), (headline, 0), (reason, 1),
             ("live" if snap.source == "live" else "replay", 0), (snap.source.partition(": ")[2], 3)]
    if isinstance(snap.driver_version, str) and snap.driver_version:
        title.append((f"driver {plain_text(snap.driver_version, limit=40)}", 4))
    lines = [" · ".join(fit_ranked([(plain_text(t, limit=80), r) for t, r in title if t], width, " · "))]
    if not snap.has_gpu:
        reason = snap.nvml_status.reason if snap.nvml_status is not None else "NoDevices"
        lines += wrap_hanging(f"No GPU: {no_gpu_words(reason)}.", width)
        return lines
    counts: dict[int, int] = {}
    for r in rows:
        counts[r.gpu] = counts.get(r.gpu, 0) + 1
    gap = " " * COLUMN_GAP
    for line in compact_grid(snap.devices, width, counts):
        text = gap.join(" ".join(c.text for c in cells) for _, cells in line).rstrip()
        lines.append(text if len(text) <= width else text[:width - 1] + "…")
    lines.append("")
    if rows:
        lines += process_table([process_cells(r, snap.time) for r in rows], width)
    else:
        lines.append("No process holds a context on any GPU.")
    return lines


def event_words(kind: str) -> str:
    """A critical GPU event other than an Xid in words (``findings.GPU_EVENTS``), or its kind."""
    return findings.GPU_EVENTS.get(kind, kind)


def event_line(index: int, event: GpuEvent) -> str:
    """One log line for a critical GPU event (gpudoctor.backends.events.GpuEvent)."""
    from gpudoctor.core import xid

    when = _iso(event.time) if event.time > 0 else "(time unknown)"
    head = f"{when} gpu{index} EVENT"
    if event.kind == "xid":
        info = xid.explain(int(event.code or 0))
        return f"{head} Xid {event.code} ({info.severity}): {plain_text(info.words)}; {plain_text(info.action)}"
    return f"{head} {plain_text(event_words(event.kind))}"


def event_record(index: int, event: GpuEvent) -> dict[str, Any]:
    from gpudoctor.core import xid

    record = {"time": _iso(event.time) if event.time > 0 else None, "gpu": index, "event": event.kind, "code": event.code,
              "source": event.source}
    if event.kind == "xid":
        info = xid.explain(int(event.code or 0))
        record.update(severity=info.severity, words=info.words, action=info.action)
    return record


def watch_record(snap: Snapshot, dev: DeviceSnapshot) -> dict[str, Any]:
    """One JSON-lines record: readings as numbers, NA as null with its reason in ``na``.

    JSON escapes control characters itself; the name is still bounded in length."""
    record: dict[str, Any] = {"time": _iso(snap.time), "gpu": dev.index, "name": plain_text(dev.name)}
    na: dict[str, str] = {}
    fault = dev.fault
    record["fault"] = fault.reason if fault is not None else None
    for key in catalogue.watch_keys():
        value = dev.get(key)
        if is_na(value):
            record[key] = None
            na[key] = value.reason
        elif isinstance(value, float) and not math.isfinite(value):
            record[key] = None
        else:
            record[key] = value
    if "memory_reserved_bytes" in dev.sample:  # read apart (NVML v2); recordings before it lack it
        reserved = dev.sample["memory_reserved_bytes"]
        record["memory_reserved_bytes"] = reserved if _is_number(reserved) else None
        if is_na(reserved):
            na["memory_reserved_bytes"] = reserved.reason
    reasons = dev.get("throttle_reasons")
    record["throttle"] = throttle_reason_names(reasons) if isinstance(reasons, int) else None
    record["verdict"] = busy.record(busy_verdict(dev)) if fault is None else None
    record["na"] = na
    return record




# --------------------------------------------------------------------------- MIG devices
# Every MIG reading a front end shows comes from the catalogue (catalogue.MIG_READINGS): its word,
# place, formatter and whole-GPU words; the identity (ids, profile, UUID) and the processes are no
# readings and are written here.
#: NA reasons on a MIG handle that mean "NVML does not give this per slice".
_NOT_PER_SLICE_REASONS = frozenset({"NotSupported", "FunctionNotFound", "InvalidArgument"})


def mig_not_per_slice(value: object) -> bool:
    """Whether a MIG device's reading is NA because NVML does not give it per slice."""
    return is_na(value) and value.reason in _NOT_PER_SLICE_REASONS


def _mig_ids(mig: MigDeviceReading) -> str:
    def one(value: object) -> str:
        return str(value) if isinstance(value, int) else "?"
    return f"mig{one(mig.gpu_instance_id)}.{one(mig.compute_instance_id)}"


def _mig_memory(mig: MigDeviceReading) -> str:
    used, total = mig.memory_used_bytes, mig.memory_total_bytes
    if _is_number(used) and _is_number(total):
        return f"{used / 2**30:.1f}/{total / 2**30:.1f} GiB"
    return "n/a" if not is_na(used) else short_na(used)


def _mig_processes_text(mig: MigDeviceReading, *, verbose: bool) -> str:
    procs = mig.processes
    if is_na(procs):
        if not verbose:
            return "n/a"
        why = " (in MIG mode NVML asks for privileges: run as root)" if procs.reason == "NoPermission" else ""
        return short_na(procs) + why
    if not verbose or not procs:
        return str(len(procs))
    shown = [f"{p.pid} {fmt_bytes(p.gpu_memory_bytes)}" if p.gpu_memory_bytes is not None else str(p.pid)
             for p in procs[:8]]
    more = f", +{len(procs) - 8}" if len(procs) > 8 else ""
    return f"{len(procs)} ({', '.join(shown)}{more})"


def mig_reading_text(mig: MigDeviceReading, reading: catalogue.MigReading, *, verbose: bool) -> str:
    """A MIG reading's value as people see it (its ``fmt``): ``12.0/39.5 GiB``, ``42%`` (``41.5 %``
    in the verbose line), ``60``; NA in words (the whole-GPU words for a reading NVML gives for the
    whole GPU only, in the verbose line)."""
    value = mig.get(reading.key)
    if reading.fmt == "memory":
        return _mig_memory(mig)
    if verbose and reading.whole_gpu and mig_not_per_slice(value):
        return f"n/a: {reading.whole_gpu}"
    if verbose and reading.fmt == "activity" and _is_number(value):
        return f"{value:.1f} {reading.unit}"
    return fmt_num(value, reading.unit)


def _mig_parts(mig: MigDeviceReading, place: str, processes: str) -> list[str]:
    """The catalogue's MIG readings placed in ``place`` ("line", "short" or "panel"), each as
    ``word value`` (the value alone where the word is ""), with ``processes`` at its place. Outside
    the verbose line only numbers are shown (and a "memory" pair, which says n/a itself)."""
    verbose = place == "line"
    placed: list[tuple[int, str]] = [(catalogue.MIG_PROCESSES_PLACE, processes)]
    for r in catalogue.mig_placed(place):
        if not verbose and r.fmt != "memory" and not _is_number(mig.get(r.key)):
            continue
        word = {"line": r.word, "short": r.short_word, "panel": r.label}[place]
        text = mig_reading_text(mig, r, verbose=verbose)
        placed.append((getattr(r, place), f"{word} {text}" if word else text))
    return [text for _, text in sorted(placed, key=lambda part: part[0])]


def mig_panel_note() -> str:
    """What the TUI's GPU panel says under a GPU's MIG devices: the ``whole_gpu_panel`` words of the
    catalogue's MIG readings (``util n/a in MIG mode; power and energy are the whole GPU's``)."""
    return "; ".join(r.whole_gpu_panel for r in catalogue.mig_readings() if r.whole_gpu_panel)


def mig_summary(mig: MigDeviceReading) -> str:
    """One MIG device in a few words, for a panel row: ``mig1.0 3g.40gb 12.0/39.5 GiB smact 42% 2 procs``
    (the catalogue's MIG readings with a ``panel`` place)."""
    profile = plain_text(mig.profile, limit=20) if isinstance(mig.profile, str) else "?"
    procs = mig.processes
    processes = (f"{len(procs)} proc{'s' if len(procs) != 1 else ''}" if isinstance(procs, list)
                 else f"procs {short_na(procs)}")
    return " ".join([_mig_ids(mig), profile, *_mig_parts(mig, "panel", processes)])


def mig_lines(snap: Snapshot, dev: DeviceSnapshot, *, verbose: bool = True) -> list[str]:
    """The lines ``watch`` prints under a GPU in MIG mode, one per MIG device, e.g.
    ``...Z gpu0 mig1.0 3g.40gb mem 12.0/39.5 GiB smact 41% procs 2 power/energy: whole GPU``
    (``mig<GPU instance>.<compute instance>``): the catalogue's MIG readings placed in the short
    line (``short``) or the verbose one (``line``). NVML gives power and energy for the whole GPU
    only, and no utilisation rates in MIG mode (the GPU's line shows ``util n/a``): the line says so
    instead of a number (the readings' ``whole_gpu`` words; ``-v`` says each in words). Empty for a
    GPU not in MIG mode."""
    head = f"{_iso(snap.time)} gpu{dev.index}"
    migs = dev.mig
    if migs is None or dev.fault is not None:
        return []
    if is_na(migs):
        return [f"{head} mig {short_na(migs)}"]
    lines = []
    for mig in migs:
        ids = _mig_ids(mig)
        profile = plain_text(mig.profile, limit=20) if isinstance(mig.profile, str) else "?"
        if not verbose:
            line = " ".join([f"{head} {ids} {profile}",
                             *_mig_parts(mig, "short", f"procs {_mig_processes_text(mig, verbose=False)}")])
            for r in catalogue.mig_readings():  # the whole-GPU words, while the line has room
                if r.whole_gpu_short and mig_not_per_slice(mig.get(r.key)) \
                        and len(line) + 1 + len(r.whole_gpu_short) <= WATCH_WIDTH:
                    line += " " + r.whole_gpu_short
            lines.append(line)
            continue
        uuid = plain_text(mig.uuid, limit=60) if isinstance(mig.uuid, str) else short_na(mig.uuid)
        parts = [f"{head} {ids} {profile}", f"uuid {uuid}",
                 *_mig_parts(mig, "line", f"procs {_mig_processes_text(mig, verbose=True)}")]
        lines.append(" | ".join(parts))
    return lines


def mig_records(snap: Snapshot, dev: DeviceSnapshot) -> list[dict[str, Any]]:
    """``watch --json``'s records for the MIG devices of a GPU in MIG mode: one per MIG device,
    ``{"time", "gpu": parent index, "mig": {ids, uuid, profile, every MIG reading, processes},
    "notes": {key: why NVML gives no number per slice (its ``whole_gpu`` words)}, "na": {key: reason}}``;
    when the slices cannot be read, one record whose ``mig`` is null with the reason in ``na``."""
    migs = dev.mig
    if migs is None or dev.fault is not None:
        return []
    time_text = _iso(snap.time)
    if is_na(migs):
        return [{"time": time_text, "gpu": dev.index, "mig": None, "notes": {}, "na": {"mig": migs.reason}}]
    records = []
    not_per_slice = {r.key: r.whole_gpu for r in catalogue.mig_readings() if r.whole_gpu}
    for mig in migs:
        fields: dict[str, Any] = {}
        na: dict[str, str] = {}
        notes: dict[str, str] = {}
        for key, value in mig.to_dict().items():
            if key == "parent":
                continue
            if is_na(value):
                fields[key] = None
                na[key] = value.reason
                if key in not_per_slice and mig_not_per_slice(value):
                    notes[key] = not_per_slice[key]
            elif isinstance(value, str):
                fields[key] = plain_text(value, limit=120)
            elif isinstance(value, float) and not math.isfinite(value):
                fields[key] = None
            elif key == "processes":
                fields[key] = [{"pid": p["pid"], "gpu_memory_bytes": p["gpu_memory_bytes"]} for p in value]
            else:
                fields[key] = value
        records.append({"time": time_text, "gpu": dev.index, "mig": fields, "notes": notes, "na": na})
    return records


# --------------------------------------------------------------------------- device faults
# NVML gate reasons that mean "there is no NVML at all" (as opposed to one device failing).
NO_NVML_REASONS = {"LibraryNotFound", "DriverNotLoaded", "PythonBindingMissing", "NoPermission",
                   "Uninitialized", "Unknown"}


def fault_words(reason: str) -> str:
    """What a device-wide NA reason means, and what to do about it: the words of its code in the
    wording tables (``findings.DEVICE_FAULTS``; ``gpu_lost``'s ``short`` for a GPU lost)."""
    worded = findings.wording(findings.DEVICE_FAULTS.get(reason, "device_fault"))
    return (worded.short or worded.summary).format(reason=reason)


def no_gpu_words(reason: str) -> str:
    """One sentence for a machine where NVML is unusable: the ``no_gpu`` words of the reason's code in the
    wording tables (``findings.NO_GPU_CODES``; the summary of a code only the live views say)."""
    worded = findings.wording(findings.NO_GPU_CODES.get(reason, "nvidia_driver_unavailable"))
    return (worded.no_gpu or worded.summary).format(reason=reason)


# --------------------------------------------------------------------------- process rows
@dataclass
class ProcessRow:
    pid: int
    gpu: int
    gpu_memory_bytes: int | None
    sm_util_pct: int | None
    kind: str
    user: str = ""
    cpu_pct: float | None = None
    host_memory_bytes: int | None = None
    command: str = ""
    #: The MIG device the process runs on (``mig1.0``: GPU instance 1, compute instance 0), or "".
    mig: str = ""
    #: When the process started (seconds since the epoch) and its real user id, where known.
    started: float | None = None
    uid: int | None = None

    def matches(self, text: str) -> bool:
        if not text:
            return True
        needle = text.lower()
        return any(needle in str(v).lower() for v in (self.pid, self.user, self.command, self.kind,
                                                       f"gpu{self.gpu}", self.mig))

    @property
    def gpu_text(self) -> str:
        """The GPU column: its index, with the MIG device where the process runs on one (``0 mig1.0``)."""
        if self.gpu < 0:
            return "-"
        return f"{self.gpu} {self.mig}" if self.mig else str(self.gpu)


PROCESS_SORT_KEYS: dict[str, Callable[[ProcessRow], Any]] = {
    "gpu memory": lambda r: -(r.gpu_memory_bytes or 0),
    "sm util": lambda r: -(r.sm_util_pct or 0),
    "cpu": lambda r: -(r.cpu_pct or 0.0),
    "host memory": lambda r: -(r.host_memory_bytes or 0),
    "pid": lambda r: r.pid,
    "gpu": lambda r: (r.gpu, r.pid),
    "user": lambda r: (r.user, r.pid),
    "command": lambda r: (r.command, r.pid),
}


def recorded_process_info(pid: int, recorded: Mapping[str, Any]) -> dict[str, Any]:
    """For replays: the recorded pids are not this machine's; use only what was recorded."""
    return {
        "user": recorded.get("user") or "",
        "cpu_pct": recorded.get("cpu_pct"),
        "host_memory_bytes": recorded.get("host_memory_bytes"),
        "command": recorded.get("command") or "(not recorded)",
        "started": recorded.get("started"),
    }


def process_rows(snap: "Snapshot", info: Callable[[int, Mapping[str, Any]], dict[str, Any]]) -> tuple[list[ProcessRow], list[str]]:
    """All GPU processes of a snapshot, and a note per device whose list could not be read.

    On a GPU in MIG mode each process is attributed to its MIG device (read on the slice's own
    handle); the slices' lists stand in for the GPU's when NVML refuses that (NoPermission)."""
    rows: list[ProcessRow] = []
    notes: list[str] = []
    for dev in snap.devices:
        procs = dev.processes
        on_slices = _mig_processes(dev.mig)
        if is_na(procs) and not on_slices:
            notes.append(f"GPU {dev.index}: process list {short_na(procs)}")
            continue
        # a process on a MIG slice is a row per slice (one PID may be listed on two); the GPU's
        # own list adds the processes no slice lists
        on_a_slice = {pid for _, pid, _ in on_slices}
        listed = [("", p) for p in (procs if isinstance(procs, list) else [])
                  if not isinstance(p, Mapping) or p.get("pid") not in on_a_slice]
        for label, p in listed + [(label, p) for label, _, p in on_slices]:
            try:
                pid = int(p["pid"])
            except (KeyError, TypeError, ValueError):
                continue
            extra = info(pid, p)
            mem = p.get("gpu_memory_bytes")
            sm = p.get("sm_util_pct")
            rows.append(ProcessRow(
                pid=pid, gpu=dev.index,
                gpu_memory_bytes=mem if isinstance(mem, int) else None,
                sm_util_pct=sm if isinstance(sm, int) else None,
                kind=str(p.get("type", "")),
                user=str(extra.get("user") or ""),
                cpu_pct=extra.get("cpu_pct"),
                host_memory_bytes=extra.get("host_memory_bytes"),
                command=str(extra.get("command") or ""),
                mig=label,
                started=number(extra.get("started"), finite=True),
                uid=extra.get("uid") if isinstance(extra.get("uid"), int) else None,
            ))
    return rows, notes


def _mig_processes(migs: list[MigDeviceReading] | NA | None) -> list[tuple[str, int, Any]]:
    """(MIG device label, pid, process) for every process the MIG devices of a GPU list."""
    found: list[tuple[str, int, Any]] = []
    if not isinstance(migs, list):
        return found
    for mig in migs:
        if not isinstance(mig.processes, list):
            continue
        for p in mig.processes:
            try:
                found.append((_mig_ids(mig), int(p["pid"]), p))
            except (KeyError, TypeError, ValueError):
                continue
    return found


__all__ = [
    "busy_verdict", "event_words", "event_line", "event_record", "fmt_age", "MAX_TEXT", "SPARK_CHARS", "STATUS_STYLE", "fmt_bytes", "fmt_memory",
    "fmt_num", "fmt_power", "fmt_rate_kbps", "plain_text", "short_na", "sparkline", "status_style",
    "status_word", "throttle_text", "tiny_na", "WATCH_WIDTH", "watch_line", "watch_line_short", "watch_record", "reading_text", "wrap_hanging",
    "NO_NVML_REASONS", "fault_words", "no_gpu_words", "ProcessRow", "PROCESS_SORT_KEYS",
    "process_rows", "recorded_process_info",
]
