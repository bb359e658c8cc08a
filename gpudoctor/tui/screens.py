"""Screens: Overview, Processes, Doctor, Workload, Help.

Screens read the app's state (``self.app.state``) in ``refresh_view()``, which the app
calls from its message handlers when new data arrives and which each screen calls when
it is shown again. No screen talks to a backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Input, Static

from gpudoctor.backends.na import NA
from gpudoctor.presentation import PROCESS_SORT_KEYS, ProcessRow
from gpudoctor.presentation import fmt_bytes, plain_text, status_style, wrap_hanging
from gpudoctor.tui.widgets import GpuPanel, HostPanel, NoGpuPanel, bar, doctor_renderable, workload_chart
from gpudoctor.tui.workload_runner import field_of

if TYPE_CHECKING:
    from gpudoctor.tui.app import GpudoctorApp


class TitleBar(Static):
    """One line: screen name, data source, and anything wrong with the sampling."""

    _shown: Text | None = None

    def show(self, text: Text) -> None:
        """Update only when the line changed: ``Static.update`` re-lays out the screen, and a
        re-layout repaints the whole terminal."""
        old = self._shown
        if old is not None and old.plain == text.plain and old.spans == text.spans and old.style == text.style:
            return
        self._shown = text
        self.update(text)

    def render(self) -> Any:
        """The line as wide as the terminal allows, cut between its `·` parts: a narrow terminal
        loses the last parts whole (`· every 1 s`), never half of one (`· every`)."""
        text, width = self._shown, self.size.width
        if text is None or width <= 0 or text.cell_len <= width:
            return super().render()
        return fit_parts(text, width)


def fit_parts(text: Text, width: int) -> Text:
    """``text`` cut to ``width`` at the start of a ` · ` part; with no such place, cut with "…"."""
    cut = text.plain.rfind("·", 0, width + 1)
    if cut > 0:
        return text[:cut]
    fitted = text.copy()
    fitted.truncate(width, overflow="ellipsis")
    return fitted


class BaseScreen(Screen):
    TITLE = ""

    @property
    def gapp(self) -> "GpudoctorApp":
        return self.app  # type: ignore[return-value]

    _title: tuple[tuple[Any, ...], Text] | None = None

    def title_text(self, extra: str = "") -> Text:
        """The title line; built again only when what it shows changed (it is asked for on every
        reading)."""
        state = self.gapp.state
        snap = state.snapshot
        key = (state.stalled_s, state.sample_error, getattr(self.gapp, "headline", None), extra,
               None if snap is None else (snap.source, snap.driver_version), self.gapp.interval)
        if self._title is not None and self._title[0] == key:
            return self._title[1]
        text = self._title_text(extra)
        self._title = (key, text)
        return text

    def _title_text(self, extra: str) -> Text:
        state = self.gapp.state
        text = Text(" gpudoctor ", style="bold reverse")
        text.append(f" {self.TITLE} ", style="bold")
        # Trouble first: a narrow terminal cuts the end of this line.
        if state.stalled_s is not None:
            text.append(f"· driver not answering for {state.stalled_s:.0f} s ", style="bold red")
        elif state.sample_error:
            text.append(f"· {plain_text(state.sample_error, limit=120)} ", style="bold red")
        headline = getattr(self.gapp, "headline", None)
        if headline is not None and self.TITLE != "Doctor":  # the Doctor screen shows it in full
            status, reason, _level = headline
            word, style = status_style(status)
            text.append("· Doctor: ", style="bold")
            text.append(word, style=style)
            if reason:
                text.append(f": {plain_text(reason, limit=60)}")
            text.append(" · d ", style="dim")
        if extra:
            text.append(extra)
        snap = state.snapshot
        if snap is not None:
            text.append(f"· {plain_text(snap.source, limit=80)} ", style="dim")
            if isinstance(snap.driver_version, str) and snap.driver_version:
                text.append(f"· driver {plain_text(snap.driver_version, limit=40)} ", style="dim")
        text.append(f"· every {self.gapp.interval:g} s ", style="dim")
        return text

    def on_screen_resume(self) -> None:
        self.refresh_view()

    def refresh_view(self) -> None:  # pragma: no cover - overridden
        pass


# --------------------------------------------------------------------------- overview
class OverviewScreen(BaseScreen):
    TITLE = "Overview"

    def compose(self) -> ComposeResult:
        yield TitleBar(id="title")
        yield VerticalScroll(id="panels")
        yield Footer()

    def refresh_view(self) -> None:
        state = self.gapp.state
        self.query_one("#title", TitleBar).show(self.title_text())
        snap = state.snapshot
        if snap is None:
            return
        panels = self.query_one("#panels", VerticalScroll)
        wanted: list[str] = []
        if snap.nvml_status is not None:
            wanted.append("no-gpu")
        elif not snap.devices:
            wanted.append("no-gpu")
        wanted += [f"gpu-{d.index}" for d in snap.devices]
        wanted.append("host")
        have = [w.id for w in panels.children]
        if have != wanted:
            panels.remove_children()
            new: list[Any] = []
            for ident in wanted:
                if ident == "no-gpu":
                    new.append(NoGpuPanel())
                elif ident == "host":
                    new.append(HostPanel())
                else:
                    new.append(GpuPanel(int(ident.split("-")[1])))
            panels.mount_all(new)
        by_id = {child.id: child for child in panels.children}  # mounted above, or earlier
        gpu_panels = []
        for dev in snap.devices:
            panel = by_id.get(f"gpu-{dev.index}")
            if isinstance(panel, GpuPanel):
                panel.interval_s = self.gapp.interval
                panel.show(dev, state.history, state.events.get(dev.index))
                gpu_panels.append(panel)
        no_gpu = by_id.get("no-gpu")
        if isinstance(no_gpu, NoGpuPanel):
            no_gpu.show(snap.nvml_status if snap.nvml_status is not None else NA("NoDevices"))
        host = by_id.get("host")
        if isinstance(host, HostPanel):
            host.show(snap, state.history)
        self._share_free_rows(panels, gpu_panels)

    def on_resize(self) -> None:
        self.refresh_view()

    @staticmethod
    def _share_free_rows(panels: VerticalScroll, gpu_panels: list[GpuPanel]) -> None:
        """Rows the panels leave free become taller utilisation graphs, shared by the GPUs."""
        if not gpu_panels or panels.size.height <= 0:
            return
        used = 0
        for child in panels.children:
            lines = getattr(child, "lines", None)
            width = child.content_size.width or max(20, panels.size.width - 2)
            if isinstance(child, GpuPanel):
                used += child.height_without_graph(width) + 2
            elif lines is not None:
                used += len(lines(width)) + 2
            else:
                used += child.outer_size.height
        spare = (panels.size.height - used) // len(gpu_panels)
        rows = spare - 1 if spare >= 4 else 0  # the axis takes a row; under 3 graph rows is no graph
        for panel in gpu_panels:
            if panel.graph_rows != rows:
                panel.graph_rows = rows
                panel.refresh_sized()


# --------------------------------------------------------------------------- processes
PROCESS_COLUMNS = (("pid", "pid"), ("user", "user"), ("gpu", "GPU"), ("gpu memory", "GPU mem"),
                   ("sm util", "SM %"), ("cpu", "CPU %"), ("host memory", "host mem"), ("diagnosis", "why"),
                   ("command", "command"))
SORT_ORDER = [key for key, _ in PROCESS_COLUMNS if key in PROCESS_SORT_KEYS]  # "why" sorts by a header click



def _row_key(row: ProcessRow, taken: set[str]) -> str:
    """A row key unique in the table: GPU, MIG slice and PID (one PID may be listed on two slices,
    or twice by a driver), numbered when it repeats; DataTable refuses a key twice."""
    base = f"{row.gpu}:{row.mig}:{row.pid}"
    key, n = base, 1
    while key in taken:
        n += 1
        key = f"{base}#{n}"
    taken.add(key)
    return key

class ProcessesScreen(BaseScreen):
    TITLE = "Processes"
    BINDINGS = [
        Binding("s", "cycle_sort", "sort"),
        Binding("slash", "focus_filter", "filter"),
        Binding("escape", "clear_filter", "clear filter", show=False),
        Binding("y", "why_selected", "why"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.sort_key = "gpu memory"
        self.filter_text = ""

    def compose(self) -> ComposeResult:
        yield TitleBar(id="title")
        yield Input(placeholder="filter: pid, user, command (press / to type, Esc to clear)", id="filter")
        table: DataTable[Any] = DataTable(id="procs", cursor_type="row", zebra_stripes=True)
        yield table
        yield Static(id="proc-notes")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#procs", DataTable)
        for key, label in PROCESS_COLUMNS:
            table.add_column(label, key=key)
        table.focus()

    def action_cycle_sort(self) -> None:
        i = SORT_ORDER.index(self.sort_key)
        self.sort_key = SORT_ORDER[(i + 1) % len(SORT_ORDER)]
        self.refresh_view()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        self.sort_key = str(event.column_key.value)
        self.refresh_view()

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        self.query_one("#procs", DataTable).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self.refresh_view()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#procs", DataTable).focus()

    def action_why_selected(self) -> None:
        """Sample the selected process with `gpudoctor why` (in a worker) and show the answer."""
        table = self.query_one("#procs", DataTable)
        if not table.row_count or table.cursor_row is None:
            self.app.notify("No process selected.", severity="warning")
            return
        key = str(table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value)
        self.gapp.start_why(int(key.rpartition(":")[2]))

    def _rows(self) -> list[Any]:
        """GPU processes, and the processes that publish a training summary without holding a GPU."""
        state = self.gapp.state
        rows = list(state.processes)
        shown = {r.pid for r in rows}
        for pid, record in sorted(state.published.items()):
            if pid not in shown:
                rows.append(ProcessRow(pid=pid, gpu=-1, gpu_memory_bytes=None, sm_util_pct=None, kind="training",
                                       command=str(record.get("command", ""))))
        return rows

    def _diagnosis(self, pid: int) -> str:
        state = self.gapp.state
        answer = state.why_results.get(pid)
        if isinstance(answer, dict):
            return f"why: {answer['verdict']['words']}"
        if isinstance(answer, str):
            return answer
        record = state.published.get(pid)
        if record is None:
            return ""
        verdict = str(record.get("verdict", ""))
        return "ok" if verdict == "ok" else verdict.replace("_", "-")

    def refresh_view(self) -> None:
        state = self.gapp.state
        every = self._rows()
        rows = [r for r in every if r.matches(self.filter_text)]
        rows.sort(key=PROCESS_SORT_KEYS.get(self.sort_key, lambda r: self._diagnosis(r.pid) or "~"))
        shown = f"· {len(rows)} of {len(every)} · sorted by {self.sort_key} (s) "
        if self.filter_text:
            shown += f"· filter {plain_text(self.filter_text, limit=40)!r} "
        self.query_one("#title", TitleBar).show(self.title_text(shown))
        table = self.query_one("#procs", DataTable)
        if not table.columns:
            # A redraw between switch_screen and this screen's mount (a sample landing on a busy
            # machine): on_mount adds the columns and the screen's resume draws the rows.
            return
        selected = None
        if table.row_count and table.cursor_row is not None and 0 <= table.cursor_row < table.row_count:
            try:
                selected = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
            except Exception:
                selected = None
        table.clear()
        keys: set[str] = set()
        for r in rows:
            # Cells are Text, never str: DataTable parses a str as markup, and a command line
            # such as `train.py data=[/data/a,/data/b]` is data, not markup.
            cells = (
                str(r.pid), plain_text(r.user or "-", limit=32), r.gpu_text,
                fmt_bytes(r.gpu_memory_bytes) if r.gpu_memory_bytes is not None else "n/a",
                f"{r.sm_util_pct}" if r.sm_util_pct is not None else "n/a",
                f"{r.cpu_pct:.0f}" if isinstance(r.cpu_pct, (int, float)) else "n/a",
                fmt_bytes(r.host_memory_bytes) if r.host_memory_bytes is not None else "n/a",
                plain_text(self._diagnosis(r.pid), limit=40),
                plain_text(r.command),
            )
            table.add_row(*(Text(c) for c in cells), key=_row_key(r, keys))
        if selected is not None:
            try:
                table.move_cursor(row=table.get_row_index(selected), animate=False)
            except Exception:
                pass
        notes = list(state.process_notes)
        if not every and not notes:
            snap = state.snapshot
            if snap is not None and not snap.has_gpu:
                notes.append("No GPU, so no GPU processes.")
            elif snap is not None:
                notes.append("No process holds a context on any GPU.")
        self.query_one("#proc-notes", Static).update(
            Text("\n".join(plain_text(n) for n in notes), style="yellow"))


class PageScreen(BaseScreen):
    """The title, one scrolling page of text and the footer: the Doctor and the Workload screens.
    ``PAGE`` names the page's widgets ``#PAGE-scroll`` and ``#PAGE-body`` (gpudoctor.tcss)."""

    PAGE = ""

    def compose(self) -> ComposeResult:
        yield TitleBar(id="title")
        with VerticalScroll(id=f"{self.PAGE}-scroll"):
            yield Static(id=f"{self.PAGE}-body")
        yield Footer()

    def page_width(self) -> int:
        """The width the page's text is laid out for (at least 30 columns)."""
        return max(30, self.size.width - 4)

    def show_page(self, parts: list[Any]) -> None:
        self.query_one(f"#{self.PAGE}-body", Static).update(Group(*parts))


# --------------------------------------------------------------------------- doctor
class DoctorScreen(PageScreen):
    TITLE = "Doctor"
    PAGE = "doctor"
    BINDINGS = [Binding("r", "rerun", "re-run")]

    def on_screen_resume(self) -> None:
        if self.gapp.doctor.run_id == 0:
            self.gapp.start_doctor()
        super().on_screen_resume()

    def action_rerun(self) -> None:
        self.gapp.start_doctor()

    def refresh_view(self) -> None:
        doc = self.gapp.doctor
        if doc.running:
            extra = f"· level {doc.level} · running {len(doc.results)}/{len(doc.probes) or '?'} "
        elif doc.finished:
            counts: dict[str, int] = {}
            for r in doc.results.values():
                counts[str(r.status)] = counts.get(str(r.status), 0) + 1
            extra = f"· level {doc.level} · done: " + ", ".join(f"{n} {k}" for k, n in counts.items()) + " · r re-run "
        else:
            extra = f"· level {doc.level} "
        self.query_one("#title", TitleBar).show(self.title_text(extra))
        width = self.page_width()
        parts: list[Any] = []
        if doc.error:
            parts.append(Text(f"The doctor could not run: {plain_text(doc.error)}", style="bold red"))
        if doc.run_id and not doc.probes and not doc.running and not doc.error:
            parts.append(Text("No probes are installed in this build (gpudoctor.probes is empty).", style="yellow"))
        elif doc.run_id == 0:
            parts.append(Text("Press r to run the doctor.", style="dim"))
        if doc.probes:
            parts.append(doctor_renderable(doc.probes, doc.results, doc.current, width))
        if doc.finished and doc.verdict:
            parts.append(Text(""))
            parts.append(Text("\n".join(wrap_hanging(doc.verdict, width, "", indent=9)), style="bold", no_wrap=True))
        self.show_page(parts)


# --------------------------------------------------------------------------- workload
class WorkloadScreen(PageScreen):
    TITLE = "Workload"
    PAGE = "workload"
    BINDINGS = [
        Binding("s", "start_quick", "quick sweep"),
        Binding("f", "start_full", "full sweep"),
        Binding("x", "cancel", "cancel"),
    ]

    def action_start_quick(self) -> None:
        self.gapp.start_workload({"quick": True})

    def action_start_full(self) -> None:
        self.gapp.start_workload({})

    def action_cancel(self) -> None:
        self.gapp.cancel_workload()

    def refresh_view(self) -> None:
        wl = self.gapp.workload
        extra = f"· {wl.phase} "
        self.query_one("#title", TitleBar).show(self.title_text(extra))
        width = self.page_width()
        parts: list[Any] = []
        if wl.unavailable:
            parts.append(Text(wl.unavailable, style="bold yellow"))
            parts.append(Text("The MNIST sweep (gpudoctor bench mnist) is not part of this build yet.", style="dim"))
            self.show_page(parts)
            return
        parts.append(Text("The MNIST reference sweep runs in a separate process (all CUDA work happens there). "
                          "s: quick sweep · f: full sweep · x: cancel", style="dim"))
        if wl.pid:
            parts.append(Text(f"workload process pid {wl.pid}" + (f", options {wl.options}" if wl.options else "")
                              + (f" (not accepted by this sweep: {', '.join(wl.dropped)})" if wl.dropped else ""),
                              style="dim"))
        if wl.fraction is not None:
            bar_w = max(10, width - 12)
            parts.append(Text("progress ") + Text(bar(wl.fraction, 1.0, bar_w), style="cyan")
                         + Text(f" {wl.fraction * 100:3.0f}%"))
        if wl.last_message:
            parts.append(Text(plain_text(wl.last_message, limit=1000)))
        if wl.error:
            parts.append(Text(plain_text(wl.error, limit=1000), style="bold red"))
        notes = wl.result.get("notes") if isinstance(wl.result, dict) else None
        for note in notes if isinstance(notes, list) else []:
            # The CLI prints these too: a busy machine, capped worker counts.
            parts.append(Text("note: " + plain_text(note, limit=1000), style="yellow"))
        if wl.runs:
            parts.append(Text(""))
            parts.append(workload_chart(wl.runs, width))
            parts.append(Text(""))
            parts.append(self._runs_table(wl.runs))
        self.show_page(parts)

    @staticmethod
    def _runs_table(runs: list[dict[str, Any]]) -> Table:
        table = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("mode", "device", "batch", "workers", "samples/s", "GPU util", "status"):
            table.add_column(col, justify="right" if col in ("batch", "workers", "samples/s", "GPU util") else "left")
        for r in runs[-12:]:
            rate = field_of(r, "samples_per_s")
            util = field_of(r, "gpu_util")
            table.add_row(
                str(field_of(r, "mode") or "-"), str(field_of(r, "device") or "-"),
                str(field_of(r, "batch_size") or "-"), str(field_of(r, "workers") if field_of(r, "workers") is not None else "-"),
                f"{rate:,.0f}" if isinstance(rate, (int, float)) else "n/a",
                f"{util:.0f}%" if isinstance(util, (int, float)) else "n/a",
                str(field_of(r, "status") or "ok"),
            )
        return table


# --------------------------------------------------------------------------- help
HELP_KEYS = [
    ("o  1", "Overview: a panel per GPU with history, host CPU and RAM"),
    ("p  2", "Processes: who uses the GPUs"),
    ("d  3", "Doctor: run the report's checks in the background"),
    ("w  4", "Workload: the MNIST reference sweep"),
    ("n  5", "Fleet: every node's GPUs from Prometheus (with --prometheus URL)"),
    ("?  h  F1", "this help"),
    ("q", "quit"),
    ("", ""),
    ("Processes", ""),
    ("s", "next sort column (or click a column header)"),
    ("/", "type a filter (pid, user, command); Enter keeps, Esc clears"),
    ("y", "why: sample the selected process, say what holds it back"),
    ("Doctor", ""),
    ("r", "run the checks again"),
    ("Workload", ""),
    ("s / f", "start the quick / full sweep"),
    ("x", "cancel the running sweep"),
]


class WhyScreen(ModalScreen[None]):
    """The answer of `gpudoctor why` for one process (or its one-line error)."""

    BINDINGS = [Binding("escape", "close", "close"), Binding("y", "close", "close", show=False),
                Binding("q", "close", "close", show=False)]

    def __init__(self, pid: int, answer: dict[str, Any] | str) -> None:
        super().__init__()
        self.pid = pid
        self.answer = answer

    def compose(self) -> ComposeResult:
        from gpudoctor.why.text import render_text

        if isinstance(self.answer, dict):
            body = Text(render_text(self.answer, width=74).rstrip())
        else:
            body = Text(plain_text(f"pid {self.pid}: {self.answer}", limit=600), style="yellow")
        yield Static(Group(Text(f"gpudoctor why {self.pid}", style="bold"), Text(""), body, Text(""),
                           Text("Esc closes this.", style="dim")), id="why-body")

    def action_close(self) -> None:
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss_help", "close"),
        Binding("question_mark", "dismiss_help", "close", show=False),
        Binding("h", "dismiss_help", "close", show=False),
        Binding("f1", "dismiss_help", "close", show=False),
        Binding("q", "quit_from_help", "quit", show=False),
    ]

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, pad_edge=False)
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for key, what in HELP_KEYS:
            if key and not what:
                table.add_row(Text(key, style="bold underline"), "")
            else:
                table.add_row(key, what)
        body = Group(Text("gpudoctor keys", style="bold"), Text(""), table, Text(""),
                     Text("Esc or ? closes this help.", style="dim"))
        yield Static(body, id="help-body")

    def action_dismiss_help(self) -> None:
        self.dismiss(None)

    def action_quit_from_help(self) -> None:
        self.app.action_quit_app()  # type: ignore[attr-defined]


__all__ = ["OverviewScreen", "ProcessesScreen", "DoctorScreen", "WorkloadScreen", "HelpScreen", "WhyScreen",
           "HELP_KEYS"]
