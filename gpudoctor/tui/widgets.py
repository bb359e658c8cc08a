"""Widgets of the TUI. They render plain data handed to them by screen handlers.

Every widget here is passive: it never reads a backend. A handler on the UI thread
calls ``show(...)`` with a snapshot and the history; ``render()`` lays the data out for
the widget's current width, so a terminal resize re-flows without new readings.
"""

from __future__ import annotations

import functools
import textwrap
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

from rich.console import Group
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from gpudoctor.core._num import number
from gpudoctor.backends import busy, catalogue
from gpudoctor.backends.clock_reasons import throttle_reason_names
from gpudoctor.core.findings import CLOCK_EVENTS, CLOCKS_FREE, IDLE_BETWEEN_KERNELS
from gpudoctor.backends.na import NA, is_na
from gpudoctor.sampling.presentation import busy_verdict, fault_words, mig_panel_note, mig_summary, no_gpu_words
from gpudoctor.sampling.sampler import DeviceSnapshot, History, Snapshot
from gpudoctor.core.model import ProbeResult
from gpudoctor.sampling.presentation import (
    COLUMN_GAP, ProcessRow, compact_grid, process_cells, process_table,
    fmt_bytes, fmt_memory, fmt_num, plain_text, reading_text, sparkline, status_style,
    throttle_text, tiny_na, wrap_hanging,
)
from gpudoctor.tui.workload_runner import field_of

if TYPE_CHECKING:
    from gpudoctor.backends.events import DeviceEvents

# Panel cell: label, value, sparkline.
LABEL_W = 7
VALUE_W = 14
TWO_COLUMNS_MIN = 70

def _na_text(value: NA) -> str:
    return tiny_na(value)


#: A run of text and its style: a panel line is built from runs in one go, not appended piece by
#: piece (a panel rebuilds every line on every reading).
Run = tuple[str, str]


class Runs(tuple[Run, ...]):
    """A panel line as runs of ``(text, style)`` side by side, each style complete (what a
    Rich text's overlapping spans add up to, written out: ``"cyan bold"``).

    The lines that change on every reading (readings with their sparklines, the history
    graphs, the host) are built this way: comparing two is comparing tuples, and drawing one
    looks each style up once per panel instead of rendering a Rich text."""

    __slots__ = ()

    @property
    def plain(self) -> str:
        return "".join(text for text, _ in self)


#: A panel line: runs, or a Rich text for the lines that seldom change (clock reasons, events).
Line = Text | Runs


def _layered(under: str, over: str) -> str:
    """The style of ``over`` laid on ``under``, as one style string."""
    return f"{under} {over}" if under and over else under or over


def _value(text: str, raw: object = None) -> Run:
    """A cell's value, whole: the cell pads it (:func:`_cell`), never cuts it."""
    if is_na(raw):
        return _na_text(raw), "dim"
    return text, "bold"


def _value_width(values: list[Run], width: int) -> int:
    """The width of the values of one column of cells ``width`` wide: the longest value (at least
    VALUE_W, so short values keep their sparklines aligned), as far as the cell has room. The
    sparklines beside them get what is left."""
    return max(1, min(max([VALUE_W] + [len(text) for text, _ in values]), width - LABEL_W))


def _cell(label: str, value: Run, spark: str, width: int, value_w: int = VALUE_W) -> list[Run]:
    text, style = value
    runs = [(label[:LABEL_W].ljust(LABEL_W), "cyan"), (text[:value_w].ljust(value_w), style)]
    spark_w = max(0, width - LABEL_W - value_w - 1)
    if spark_w:
        runs.append((" " + spark[-spark_w:].rjust(spark_w), "green"))
    return runs


def _cells_line(*cells: list[Run]) -> Runs:
    """Cells side by side, one space apart. The first cell's first run is the line's base style
    and every later cell's first run styles that whole cell, as appending each cell's Text to the
    first would."""
    base = cells[0][0][1]
    out: list[Run] = []
    for k, runs in enumerate(cells):
        cell_style = _layered(base, runs[0][1]) if k else base
        if k:
            out.append((" ", base))
        for j, (text, style) in enumerate(runs):
            if text:
                out.append((text, _layered(cell_style, style) if j else cell_style))
    return Runs(out)


class _LinesPanel(Widget):
    """A panel whose content is ``self.lines(width)`` (each subclass defines it) and whose
    height is the number of those lines.

    It draws line by line (Textual's line API): a new reading re-renders and repaints only the
    lines whose text changed; an idle GPU's panel sends nothing.
    """

    _line_count: int | None = None
    #: The lines on screen, and the width they were built for.
    _shown: list[Line] | None = None
    _shown_width = -1
    #: Rendered lines by row, and the base style they were rendered with.
    _strips: dict[int, Strip] | None = None
    _strips_style: Style | None = None
    #: Style strings of runs, as styles on top of that base style.
    _run_styles: dict[str, Style]

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.lines(width))

    @staticmethod
    def waiting() -> list[Line]:
        """What a panel shows before its first reading."""
        return [Text("waiting for the first reading ...", style="dim")]

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        if self._shown is None or width != self._shown_width:
            self._shown, self._shown_width = self.lines(width), width
            self._strips = None
        base = self.visual_style.rich_style
        if self._strips is None or base != self._strips_style:  # a new width, a class or theme change
            self._strips, self._strips_style, self._run_styles = {}, base, {}
        strip = self._strips.get(y)
        if strip is None:
            if y >= len(self._shown):
                return Strip.blank(width, base)
            strip = self._strips[y] = self._strip(self._shown[y], width, base)
        return strip

    def _strip(self, line: Line, width: int, base: Style) -> Strip:
        """One line rendered as Textual renders a Rich text: the widget's style beneath the
        line's own, cropped to the width."""
        console = self.app.console
        if isinstance(line, Runs):
            styles = self._run_styles  # each style string looked up once for this base style
            segments = []
            for text, name in line:
                style = styles.get(name)
                if style is None:
                    style = styles[name] = base + console.get_style(name) if name else base
                segments.append(Segment(text, style))
            strip = Strip(segments)
            return strip.crop(0, width) if strip.cell_length > width else strip
        if line.spans:
            rendered: Any = line.render(console)
        else:  # rich's Text.render leaves the base style out of a text without spans
            rendered = [Segment(line.plain, console.get_style(line.style) if line.style else None)]
        segments = [Segment(text, base + style if style is not None else base, None)
                    for text, style, _ in rendered if text]
        strip = Strip(segments)
        return strip.crop(0, width) if strip.cell_length > width else strip

    def refresh_sized(self) -> None:
        """Repaint what changed; re-layout too when the number of lines changed (a GPU lost, a
        resize)."""
        width = self.content_size.width
        lines = self.lines(width)
        old, strips = self._shown, self._strips
        if width == self._shown_width and old is not None and len(old) == len(lines) == self._line_count:
            # Same size: re-render only the lines that changed, each across the whole panel, border
            # included. (Repainting a line only up to its last changed cell sent a third fewer
            # bytes but cost 10 % more CPU: Textual then crops every line of the panel on each
            # update, and writes the changed lines in pieces.)
            gutter = self.gutter
            dirty: list[Region] = []
            for y, (new, before) in enumerate(zip(lines, old)):
                if _same_line(new, before):
                    continue
                if strips is not None:
                    strips.pop(y, None)
                dirty.append(Region(-gutter.left, y, width + gutter.width, 1))
            self._shown = lines
            if dirty:
                self.refresh(*dirty)
            return
        self._shown, self._shown_width, self._strips = lines, width, None
        self.refresh(layout=len(lines) != self._line_count)
        self._line_count = len(lines)

    def set_borders(self, title: str, subtitle: str = "") -> None:
        """Border texts, as plain text (never markup); set only when they change, since setting
        one repaints the whole panel."""
        if (title, subtitle) == getattr(self, "_borders", None):
            return
        self._borders = (title, subtitle)
        self.border_title = Text(title)
        self.border_subtitle = Text(subtitle) if subtitle else None


def _same_line(a: Line, b: Line) -> bool:
    """The same text with the same styles (rich's Text equality leaves the base style out)."""
    if isinstance(a, Runs) or isinstance(b, Runs):
        return a == b
    return a.plain == b.plain and a.style == b.style and a.spans == b.spans


class GpuPanel(_LinesPanel):
    """One GPU: readings with their history, or what went wrong with it."""

    def __init__(self, index: int, **kw: Any) -> None:
        super().__init__(id=f"gpu-{index}", classes="panel gpu-panel", **kw)
        self.index = index
        self.device: DeviceSnapshot | None = None
        self.history: History | None = None
        self.events: DeviceEvents | None = None
        self._built: dict[tuple[int, int], list[Line]] = {}
        #: Rows of the tall utilisation graph (0: none); the Overview gives free rows here.
        self.graph_rows = 0
        #: Seconds between samples, for the graph's time axis.
        self.interval_s = 1.0

    def show(self, device: DeviceSnapshot, history: History, events: DeviceEvents | None = None) -> None:
        static = device.static
        # The name comes from the driver (or a replayed file): literal text, never markup.
        title = f"GPU {device.index}: {plain_text(device.name, limit=80)}"
        fault = device.fault
        self.device, self.history, self.events = device, history, events
        self._built.clear()
        self.set_class(fault is not None, "fault")
        if fault is None:
            bits = []
            pstate = device.sample.get("performance_state")
            if isinstance(pstate, int):
                bits.append(f"P{pstate}")
            bus = static.get("pci_bus_id")
            if isinstance(bus, str):
                bits.append(plain_text(bus, limit=40))
            procs = device.processes
            if isinstance(procs, list):
                bits.append(f"{len(procs)} proc{'s' if len(procs) != 1 else ''}")
            if isinstance(device.mig, list):
                bits.append(f"MIG: {len(device.mig)} device{'s' if len(device.mig) != 1 else ''}")
            self.set_borders(title, " · ".join(bits))
        else:
            self.set_borders(title, plain_text(fault.reason, limit=60))
        self.refresh_sized()

    def height_without_graph(self, width: int) -> int:
        """Lines the panel needs at ``width`` without its tall utilisation graph (drawn, with its
        axis, under readings only: ``graph_rows + 1`` lines)."""
        return len(self.lines(width)) - (self.graph_rows + 1 if self._draws_graph() else 0)

    def _draws_graph(self) -> bool:
        """Whether the panel ends in the tall graph: readings (no fault) and room for it."""
        dev = self.device
        return self.graph_rows >= 2 and dev is not None and self.history is not None and dev.fault is None

    def lines(self, width: int) -> list[Line]:
        """The panel's lines for a content ``width`` (Textual asks for the height of any width),
        built once per reading, width and graph height."""
        key = (width, self.graph_rows)
        cached = self._built.get(key)
        if cached is None:
            if len(self._built) > 8:
                self._built.clear()
            cached = self._built[key] = self._build_lines(width)
        return cached

    def _build_lines(self, width: int) -> list[Line]:
        dev, hist = self.device, self.history
        if dev is None or hist is None:
            return self.waiting()
        width = max(20, width)
        fault = dev.fault
        if fault is not None:
            return self._render_fault(dev, hist, fault, width) + event_lines(self.events, width)
        return self._render_readings(dev, hist, width)

    def _render_fault(self, dev: DeviceSnapshot, hist: History, fault: NA, width: int) -> list[Line]:
        lines: list[Line] = [Text(f"No readings: {plain_text(fault.reason, limit=60)}", style="bold red")]
        for line in textwrap.wrap(plain_text(fault_words(fault.reason)), width)[:3]:
            lines.append(Text(line))
        label = "util"
        spark_w = max(0, width - LABEL_W - 1)
        lines.append(Text(label.ljust(LABEL_W), style="cyan") + Text(
            " " + sparkline(hist.series(dev.index, "gpu_util_pct"), spark_w, 0, 100), style="dim"))
        return lines

    def _render_readings(self, dev: DeviceSnapshot, hist: History, width: int) -> list[Line]:
        g = dev.get
        # The driver's reserved memory makes the longest value (`31.4/40.0 GiB +0.5 reserved`): the
        # value keeps it whole and its sparkline gets shorter; only a cell too narrow for it
        # shows used/total alone.
        col = (width - 1) // 2 if width >= TWO_COLUMNS_MIN else width
        cells = [self._cell_of(dev, hist, reading, col) for reading in catalogue.placed("panel")]
        lines: list[Line] = []
        if width >= TWO_COLUMNS_MIN:
            # Cells in two columns, row by row; the ECC count takes the place beside the last cell
            # (or a row of its own when the cells fill their rows).
            left_w = _value_width([c[1] for c in cells[0::2]], col)
            right_w = _value_width([c[1] for c in cells[1::2]], col)
            for k in range(0, len(cells), 2):
                left = _cell(cells[k][0], cells[k][1], cells[k][2](col), col, left_w)
                if k + 1 < len(cells):
                    right = cells[k + 1]
                    lines.append(_cells_line(left, _cell(right[0], right[1], right[2](col), col, right_w)))
                else:
                    lines.append(_cells_line(left, self._ecc_runs(dev)))
            if len(cells) % 2 == 0:
                lines.append(_cells_line(self._ecc_runs(dev)))
        else:
            value_w = _value_width([c[1] for c in cells], width)
            for label, value, spark in cells:
                lines.append(_cells_line(_cell(label, value, spark(width), width, value_w)))
        reasons = g("throttle_reasons")
        text = throttle_text(reasons)
        if text == "none":
            text = CLOCKS_FREE
        util = number(g("gpu_util_pct"))
        if isinstance(reasons, int) and "gpu_idle" in throttle_reason_names(reasons) and util:
            # NVML's idle reason is the state at the instant of reading; utilisation covers the
            # last sample period. Never say "nothing is running" beside a busy reading.
            words = [w for w in text.split("; ") if w != CLOCK_EVENTS["gpu_idle"].words]
            text = "; ".join([IDLE_BETWEEN_KERNELS] + words)
        style = "dim" if (isinstance(reasons, int) and reasons in (0, 1)) else "yellow"
        if is_na(reasons):
            style = "dim"
        # Whole, on as many lines as it takes: a reason cut mid-word ("hardware slowdown…") hides
        # the one a user must act on.
        for n, part in enumerate(textwrap.wrap(text, max(10, width - LABEL_W)) or [""]):
            lines.append(Text(("clocks" if n == 0 else "").ljust(LABEL_W), style="cyan") + Text(part, style=style))
        lines += self._verdict_lines(dev, width)
        lines += self._mig_lines(dev, width)
        lines += event_lines(self.events, width)
        if self._draws_graph():
            graphs = [("util", hist.series(dev.index, "gpu_util_pct"), "dim green")]
            if self.graph_rows >= SPLIT_GRAPH_ROWS:
                sm = hist.series(dev.index, "sm_active_pct")
                # GPM (Hopper and later): SM activity under utilisation, where each of three
                # graphs keeps three rows (its 100%, name and 0% marks)
                if self.graph_rows >= 3 * 3 and any(v is not None for v in sm):
                    graphs.append(("SM act", sm, "dim magenta"))
                graphs.append(("mem", hist.series(dev.index, "memory_used_pct"), "dim cyan"))
            lines += history_graph(graphs, self.graph_rows, width, self.interval_s)
        return lines

    @staticmethod
    def _verdict_lines(dev: DeviceSnapshot, width: int) -> list[Line]:
        """Is the GPU really working (gpudoctor.backends.busy), in words, on one line: the verdict and
        its fix where they fit, else the verdict, else its headline."""
        verdict = busy_verdict(dev)
        style = VERDICT_STYLES.get(verdict.code, "")
        if busy.basis(verdict) in ("none", "power"):
            style = "dim"
        room = max(10, width - LABEL_W)
        text = next((t for t in (busy.text(verdict), verdict.summary, busy.headline(verdict)) if len(t) <= room),
                    busy.headline(verdict))
        line = Text("work".ljust(LABEL_W), style="cyan") + Text(plain_text(text), style=style)
        line.truncate(width, overflow="ellipsis")
        return [line]

    @staticmethod
    def _mig_lines(dev: DeviceSnapshot, width: int) -> list[Line]:
        """A GPU in MIG mode: one row per MIG device (the catalogue's MIG readings with a panel place:
        memory, SM activity; its processes), then what NVML gives for the whole GPU only. Nothing for a
        GPU not in MIG mode."""
        migs = dev.mig
        if migs is None:
            return []
        label = Text("MIG".ljust(LABEL_W), style="cyan")
        rows: list[Text] = []
        if is_na(migs):
            rows.append(label + Text(f"devices {_na_text(migs)}", style="dim"))
        else:
            for mig in migs:
                rows.append(label + Text(mig_summary(mig)))
                label = Text(" " * LABEL_W)
            rows.append(label + Text(mig_panel_note(), style="dim"))
        for row in rows:
            row.truncate(width, overflow="ellipsis")
        return list(rows)

    @staticmethod
    def _cell_of(dev: DeviceSnapshot, hist: History, reading: catalogue.Reading,
                 col: int) -> tuple[str, Run, Callable[[int], str]]:
        """One reading's cell: its label, its value, and its sparkline for a width."""
        if reading.fmt == "memory":
            text = fmt_memory(dev)
            if LABEL_W + len(text) > col:
                text = fmt_memory(dev, reserved=False)
        else:
            text = reading_text(dev, reading)
            for joined in catalogue.readings():
                if joined.beside == reading.key and number(dev.get(joined.key)) is not None:
                    text += f" · {joined.label} {reading_text(dev, joined)}"
        top_key, top = reading.spark_top
        if top_key:
            top = number(dev.sample.get(top_key)) or number(dev.static.get(top_key)) or top
        metric = reading.spark or (reading.key if reading.history else "")
        series = hist.series(dev.index, metric) if metric else []
        return reading.label, _value(text, dev.get(reading.key)), lambda w: sparkline(series, w, 0.0, top)

    @staticmethod
    def _ecc_runs(dev: DeviceSnapshot) -> list[Run]:
        value = dev.get("ecc_volatile_uncorrected")
        label = ("ECC".ljust(LABEL_W), "cyan")
        if is_na(value):
            return [label, (_na_text(value), "dim")]
        if isinstance(value, int):
            return [label, (f"{value} uncorrected", "bold red" if value else "")]
        return [label, ("n/a", "dim")]


def event_lines(events: DeviceEvents | None, width: int, now: float | None = None) -> list[Text]:
    """The GPU's critical events (Xid, ECC) in words: nothing when there are none.

    Xids from the kernel log (before gpudoctor started) count too, marked "logged"."""
    if events is None:
        return []
    from gpudoctor.core import xid
    from gpudoctor.sampling.presentation import event_words

    now = time.time() if now is None else now
    counts = {k: v for k, v in events.counts.items() if v and k != "clock_change"}
    last = events.last_xid()
    serious = [e for e in events.recent if e.kind not in ("xid", "clock_change")]
    if not counts and last is None:
        return []
    lines: list[Text] = []
    if last is not None:
        info = xid.explain(int(last.code or 0))
        total = events.xid_count
        when = "logged before start" if last.source == "kernel_log" else _ago(now - last.time)
        head = Text("Xid".ljust(LABEL_W), style="cyan")
        head.append(f"{last.code} ({info.severity}), {when}", style="bold red" if info.severity == "critical" else "yellow")
        if total > 1:
            head.append(f"; {total} since start", style="dim")
        head.truncate(width, overflow="ellipsis")
        lines.append(head)
        # All of it: the advice ends with what to check (slot, riser, power, cooling), the part
        # a user most needs; the Overview scrolls when the panels outgrow the screen.
        for wrapped in textwrap.wrap(plain_text(f"{info.words}; {info.action}"), max(10, width - LABEL_W)):
            lines.append(Text(" " * LABEL_W + wrapped))
    if serious:
        event = serious[-1]
        line = Text("events".ljust(LABEL_W), style="cyan")
        line.append(f"{plain_text(event_words(event.kind))}, {_ago(now - event.time)}",
                    style="bold red")
        others = sum(v for k, v in counts.items() if k != "xid") - 1
        if others > 0:
            line.append(f" (+{others} more)", style="dim")
        line.truncate(width, overflow="ellipsis")
        lines.append(line)
    return lines


def _ago(seconds: float) -> str:
    from gpudoctor.sampling.presentation import fmt_age

    return f"{fmt_age(seconds)} ago"


class NoGpuPanel(Widget):
    """Shown when NVML is unusable: why, and where to look next."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(id="no-gpu", classes="panel warn", **kw)
        self.reason: NA | None = None

    def show(self, reason: NA) -> None:
        self.reason = reason
        self.border_title = "No GPU"
        self.refresh()

    def render(self) -> Any:
        reason = self.reason.reason if self.reason is not None else "Unknown"
        return Group(
            Text(f"{plain_text(no_gpu_words(reason), limit=2000)}.", style="bold yellow"),
            Text("Host readings below still work. Press d for the doctor's findings on why there is no GPU.",
                 style=""),
        )


class HostPanel(_LinesPanel):
    """Host CPU and RAM with their history."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(id="host", classes="panel", **kw)
        #: The snapshot and history shown (None before the first reading).
        self.shown: tuple[Snapshot, History] | None = None

    def show(self, snapshot: Snapshot, history: History) -> None:
        self.shown = snapshot, history
        self.set_borders("Host")
        self.refresh_sized()

    def lines(self, width: int) -> list[Line]:
        if self.shown is None:
            return self.waiting()
        snap, hist = self.shown
        width = max(20, width)
        host = snap.host
        if not isinstance(host, dict):
            reason = host.reason if is_na(host) else "Unknown"
            text = Text(f"host readings not available ({plain_text(reason, limit=60)}; is psutil installed?)"
                        if reason != "NotRecorded" else
                        "host readings are not in the recording (this machine's are not shown beside it)",
                        style="dim")
            text.truncate(width, overflow="ellipsis")
            return [text]
        cores = host.get("cpu_per_core_pct") or []
        cpu = f"CPU {fmt_num(host.get('cpu_pct'), '%', 0):>4} of {len(cores) or '?'} cores"
        used, total = host.get("ram_used_bytes"), host.get("ram_total_bytes")
        ram = f"RAM {fmt_bytes(used)}/{fmt_bytes(total)}"

        def spark(label: str, series: Iterable[float | None], w: int) -> list[Run]:
            return [(label, "bold"), (" " + sparkline(series, max(0, w - len(label) - 1), 0, 100), "bold green")]

        lines: list[Line]
        if width >= TWO_COLUMNS_MIN:
            col = (width - 1) // 2
            lines = [Runs(spark(cpu, hist.host["cpu"], col) + [(" ", "bold")] + spark(ram, hist.host["ram"], col))]
        else:
            lines = [Runs(spark(cpu, hist.host["cpu"], width)), Runs(spark(ram, hist.host["ram"], width))]
        if cores:
            lines.append(Runs((("cores ", "cyan"), (sparkline(cores, min(len(cores), width - 6), 0, 100), "cyan green"))))
        return lines


# --------------------------------------------------------------------------- tall graph
GRAPH_FILL = " ▁▂▃▄▅▆▇█"
#: Marks on the graph's time axis, seconds before now (as nvitop marks 30/60/120 s); longer
#: ones for long refresh intervals. A mark is drawn only where the history reaches.
AXIS_MARKS_S = (30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 43200)


def _mark(seconds: int) -> str:
    if seconds <= 120:
        return f"{seconds}s"
    return f"{seconds // 60}m" if seconds < 3600 else f"{seconds // 3600}h"


#: How each verdict of gpudoctor.backends.busy is drawn: a warning colour where the GPU is busy
#: without working, green where it does the right work.
VERDICT_STYLES = {"busy_small_kernels": "yellow", "memory_bound": "yellow", "waiting": "yellow",
                  "tensor_bound": "green", "sm_bound": "", "partly_busy": "", "idle": "dim", "warming": "dim",
                  "no_gpm": "dim", "no_reading": "dim"}

#: Graph rows (7: four and three, each with its 100%, name and 0% marks; the verdict line took the
#: eighth) from which the tall graph is two: utilisation above, memory used below (nvitop
#: shows both); with fewer, utilisation alone.
SPLIT_GRAPH_ROWS = 7


def util_graph(values: list[float | None], rows: int, width: int, interval_s: float) -> list[Runs]:
    """Utilisation history ``rows`` tall on a fixed 0-100 % scale, newest on the right, and a
    time axis under it with marks at 30/60/120 s ago where the history reaches."""
    return history_graph([("util", values, "dim green")], rows, width, interval_s)


def history_graph(series: list[tuple[str, list[float | None], str]], rows: int, width: int,
                  interval_s: float) -> list[Runs]:
    """Histories of percentages (name, values, style), stacked in ``rows`` rows shared out
    from the top (the first takes the odd row), each on a fixed 0-100 % scale with its name
    on its middle row, and one time axis under them all."""
    label_w = LABEL_W
    plot_w = max(1, width - label_w)
    out: list[Runs] = []
    known = 1
    left = rows
    for k, (name, values, style) in enumerate(series):
        height = -(-left // (len(series) - k))  # the rows left, shared out (rounded up)
        left -= height
        data = list(values)[-plot_w:]
        padding: list[float | None] = [None] * (plot_w - len(data))
        data = padding + data
        known = max(known, sum(1 for v in data if v is not None))
        # Each reading as one character that stands for its height in eighths of a row; each
        # row of the graph is then that string translated by the row's table.
        levels = _GraphLevels.of(height)
        heights = "".join(map(levels.__getitem__, data))
        for r, table in enumerate(_graph_rows(height)):
            label = "100%" if r == 0 else "0%" if r == height - 1 else name if r == height // 2 else ""
            out.append(Runs(((label.rjust(label_w - 1) + " ", "dim"), (heights.translate(table), style))))
    axis = ["─"] * plot_w
    free_from = plot_w  # marks are placed right to left without overlapping
    for seconds in AXIS_MARKS_S:
        k = int(round(seconds / interval_s)) if interval_s > 0 else 0
        mark = _mark(seconds)
        end = plot_w - k  # the column of the sample taken `seconds` ago: the mark ends there
        start = end - len(mark)
        if k < 1 or start < 0 or k > min(HISTORY_SAMPLES, known) or end >= free_from:
            continue
        axis[start:end] = list(mark)
        free_from = start - 1
    out.append(Runs(((" " * label_w, "dim"), ("".join(axis), "dim"))))
    return out


class _GraphLevels(dict[float | None, str]):
    """Reading (0-100 %, or None) -> the character standing for its height in a graph ``rows``
    tall: chr(1 + eighths of a row, rounded), or chr(0) for no reading (or NaN). Filled in as
    readings come (they repeat: integer percentages)."""

    _by_rows: dict[int, "_GraphLevels"] = {}

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.rows = rows

    @classmethod
    def of(cls, rows: int) -> "_GraphLevels":
        levels = cls._by_rows.get(rows)
        if levels is None:
            levels = cls._by_rows[rows] = cls(rows)
        return levels

    def __missing__(self, value: float | None) -> str:
        if value is None or value != value:  # no reading, or NaN
            return "\0"
        char = chr(1 + round(max(0.0, min(100.0, float(value))) / 100.0 * self.rows * 8))
        if len(self) < 4096:
            self[value] = char
        return char


@functools.lru_cache(maxsize=16)
def _graph_rows(rows: int) -> tuple[dict[int, str], ...]:
    """For each row of a graph ``rows`` tall, top first, the table that turns a height character
    (see ``_GraphLevels``) into that row's cell: eighths of a cell filled, a reading (even 0 %)
    showing at least a sliver in the bottom row, and blank where there is no reading."""
    tables = []
    for level in range(rows - 1, -1, -1):  # rows below this one
        table = {0: " "}
        for eighths in range(rows * 8 + 1):
            fill = max(0, min(8, eighths - level * 8))
            table[1 + eighths] = GRAPH_FILL[max(fill, 1) if level == 0 else fill]
        tables.append(table)
    return tuple(tables)


#: Samples a History keeps (the graph's time axis stops where the history does).
from gpudoctor.sampling.sampler import HISTORY_LENGTH as HISTORY_SAMPLES  # noqa: E402


# --------------------------------------------------------------------------- doctor
def _fitted(line: str, spans: list[tuple[int, int, str]]) -> Text:
    """A line already wrapped to the width: printed as is (never wrapped a second time)."""
    text = Text(line, no_wrap=True, overflow="crop")
    for begin, end, style in spans:
        if style:
            text.stylize(style, begin, end)
    return text


def doctor_renderable(probes: list[tuple[str, str]], results: dict[str, ProbeResult], running: str | None,
                      width: int) -> Any:
    """Probe list with statuses; findings (not passes) with why and fix, as they arrive.

    Every line is wrapped here, at ``width``, with hanging indents, and shown as is. Probe
    text may quote the driver: it is made plain (:func:`plain_text`) first.
    """
    width = max(20, width)
    out: list[Any] = []

    def para(text: str, first: str, first_style: str = "", style: str = "") -> None:
        for k, line in enumerate(wrap_hanging(plain_text(text, limit=2000), width, first)):
            spans = [(0, len(line), style)] if style else []
            if k == 0:
                spans.append((len(first) - len(first.lstrip()), len(first), first_style))
            out.append(_fitted(line, spans))

    for name, title in probes:
        result = results.get(name)
        shown = plain_text(name, limit=60)
        if result is None:
            mark, style = ("....", "bold cyan") if name == running else ("    ", "dim")
            first = f"[{mark}] "
            rest = f"  {plain_text(title)}" + ("  running ..." if name == running else "  waiting")
            for k, line in enumerate(wrap_hanging(shown + rest, width, first)):
                spans = [(0, len(line), "dim")]
                if k == 0:
                    spans += [(0, len(first), style), (len(first), len(first) + len(shown), "bold")]
                out.append(_fitted(line, spans))
            continue
        label, style = status_style(result.status)
        first = f"[{label}] "
        summary = plain_text(result.summary or "", limit=2000)
        duration = f"({result.duration_s:.1f} s)"
        lines = wrap_hanging("  ".join(x for x in (shown, summary, duration) if x), width, first)
        for k, line in enumerate(lines):
            spans = [(0, len(first), style), (len(first), len(first) + len(shown), "bold")] if k == 0 else []
            if k == len(lines) - 1 and line.endswith(duration):
                spans.append((len(line) - len(duration), len(line), "dim"))
            out.append(_fitted(line, spans))
        for finding in result.findings:
            if str(finding.status) == "pass":
                continue
            flabel, fstyle = status_style(finding.status)
            if finding.summary and finding.summary != result.summary:
                para(finding.summary, f"    {flabel.lower()}: ", fstyle)
            if finding.why:
                para(finding.why, "      why: ", style="dim")
            if finding.fix:
                para(finding.fix, "      fix: ", "bold")
    return Group(*out)


# --------------------------------------------------------------------------- workload
def bar(value: float, top: float, width: int) -> str:
    """A horizontal bar with eighth-block resolution."""
    if width <= 0 or top <= 0:
        return ""
    cells = max(0.0, min(1.0, value / top)) * width
    full = int(cells)
    rest = int((cells - full) * 8)
    return ("█" * full + (" ▏▎▍▌▋▊▉"[rest] if rest and full < width else "")).ljust(width)


def workload_chart(runs: list[dict[str, Any]], width: int) -> Any:
    """samples/s and GPU utilisation against batch size, one block per mode."""
    rows = [r for r in runs if field_of(r, "batch_size") is not None]
    if not rows:
        return Text("no finished runs yet", style="dim")
    rates = [float(field_of(r, "samples_per_s")) for r in rows
             if isinstance(field_of(r, "samples_per_s"), (int, float))]
    top = max(rates) if rates else 1.0
    bar_w = max(6, (width - 34) // 2)
    out: list[Any] = [Text(f"{'mode':<10}{'batch':>7}  {'samples/s':<{bar_w + 9}} GPU util", style="bold")]
    modes: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        modes.setdefault(str(field_of(r, "mode") or "-"), []).append(r)
    for mode, items in modes.items():
        items.sort(key=lambda r: (float(field_of(r, "batch_size")) if isinstance(field_of(r, "batch_size"), (int, float)) else 0))
        for k, r in enumerate(items):
            rate = field_of(r, "samples_per_s")
            util = field_of(r, "gpu_util")
            status = field_of(r, "status")
            line = Text(f"{(mode if k == 0 else ''):<10}{field_of(r, 'batch_size')!s:>7}  ", style="")
            if isinstance(rate, (int, float)):
                line.append(bar(float(rate), top, bar_w), style="green")
                line.append(f" {rate:>8,.0f}")
            else:
                line.append(f"{str(status or 'n/a'):<{bar_w + 9}}", style="yellow")
            line.append(" ")
            if isinstance(util, (int, float)):
                line.append(bar(float(util), 100.0, bar_w), style="magenta")
                line.append(f" {util:>3.0f}%")
            else:
                line.append("n/a (no GPU reading)", style="dim")
            out.append(line)
    return Group(*out)


# --------------------------------------------------------------------------- compact overview
#: Styles of the compact row's parts (gpudoctor.sampling.presentation.CompactCell.style).
COMPACT_STYLES = {"index": "bold", "name": "cyan", "value": "", "fault": "bold red"}


def detailed_rows(snapshot: Snapshot, history: History, events: dict[int, Any], width: int) -> int:
    """Rows the detailed GPU panels and the host panel take at ``width`` (borders included, no tall
    graph): whether they fit the screen decides the Overview's view."""
    host = HostPanel()
    host.shown = snapshot, history
    total = len(host.lines(max(20, width - 2))) + 2
    for dev in snapshot.devices:
        panel = GpuPanel(dev.index)
        panel.device, panel.history, panel.events = dev, history, events.get(dev.index)
        total += len(panel.lines(max(20, width - 2))) + 2
    return total


class CompactView(_LinesPanel):
    """Every GPU on one or two lines (``gpudoctor.sampling.presentation.compact_grid``: columns on wide
    screens), the selected one marked, and below them the processes of every GPU."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(id="compact", **kw)
        self.devices: list[DeviceSnapshot] = []
        self.processes: list[ProcessRow] = []
        self.selected = 0
        self.now = 0.0
        self.note = ""
        self.grid_lines = 0
        self.events: dict[int, Any] = {}

    def show(self, devices: list[DeviceSnapshot], processes: list[ProcessRow], now: float, note: str = "",
             events: dict[int, Any] | None = None) -> None:
        self.devices, self.processes, self.now, self.note = devices, processes, now, note
        self.events = events or {}
        self.refresh_sized()

    def _event_lines(self, width: int) -> list[Line]:
        """Critical events (Xid, ECC) of any GPU, with their advice whole: the compact rows cannot
        hold them, and they matter most."""
        out: list[Line] = []
        for dev in self.devices:
            lines = event_lines(self.events.get(dev.index), max(20, width - 4))
            if lines:
                out.append(Text(f"GPU {dev.index}: {plain_text(dev.name, limit=60)}", style="bold red"))
                out += lines
        return out

    def lines(self, width: int) -> list[Line]:
        width = max(20, width)
        counts: dict[int, int] = {}
        for r in self.processes:
            counts[r.gpu] = counts.get(r.gpu, 0) + 1
        out: list[Line] = []
        for grid_row in compact_grid(self.devices, width, counts):
            runs: list[Run] = []
            for n, (index, cells) in enumerate(grid_row):
                if n:
                    runs.append((" " * COLUMN_GAP, ""))
                for k, cell in enumerate(cells):
                    if k:
                        runs.append((" ", ""))
                    style = COMPACT_STYLES.get(cell.style) or VERDICT_STYLES.get(cell.style.partition(":")[2], "")
                    if cell.key == "index" and index == self.selected:
                        style = "bold reverse"
                    runs.append((cell.text, style))
            out.append(Runs(runs))
        self.grid_lines = len(out)
        out += self._event_lines(width)
        table = process_table([process_cells(r, self.now) for r in self.processes], width)
        out.append(Runs(((table[0], "bold reverse"),)))
        if self.note:
            out.append(Text(plain_text(self.note), style="yellow"))
        for r, line in zip(self.processes, table[1:]):
            out.append(Runs(((line, "bold" if r.gpu == self.selected else ""),)))
        if not self.processes:
            out.append(Text("No process holds a context on any GPU.", style="dim"))
        return out
