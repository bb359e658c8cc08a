"""Screens: Overview, Processes, Doctor, Workload, Help.

Screens read the app's state (``self.app.state``) in ``refresh_view()``, which the app
calls from its message handlers when new data arrives and which each screen calls when
it is shown again. No screen talks to a backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.geometry import Region
from textual.screen import ModalScreen, Screen
from textual.events import Click
from textual.widget import Widget
from textual.widgets import Input, Static

from gpudoctor.backends.na import NA
from gpudoctor.sampling.presentation import PROCESS_SORT_KEYS, ProcessRow
from gpudoctor.sampling.presentation import compact_grid, fmt_bytes, fmt_elapsed, plain_text, status_style, wrap_hanging
from gpudoctor.tui.widgets import (
    CompactView, GpuPanel, HostPanel, NoGpuPanel, bar, detailed_rows, doctor_renderable, workload_chart,
)
from gpudoctor.tui.workload_runner import field_of

if TYPE_CHECKING:
    from textual.widgets import DataTable

    from gpudoctor.sampling.sampler import Snapshot
    from gpudoctor.tui.app import GpudoctorApp

def is_mine(row: ProcessRow) -> bool:
    """Whether the process runs under this user's real user id (never for a recorded process)."""
    import os

    return row.uid is not None and hasattr(os, "getuid") and row.uid == os.getuid()


def own_first(rows: list[ProcessRow]) -> list[ProcessRow]:
    """The processes of this user first (nvitop's order), then by GPU and memory."""
    return sorted(rows, key=lambda r: (not is_mine(r), r.gpu, -(r.gpu_memory_bytes or 0), r.pid))


class TitleBar(Static):
    """One line: screen name, the doctor's verdict, the data source (live or replay), and anything
    wrong with the sampling. Its parts have ranks: a narrow terminal drops the least important
    part whole (``· every 1 s`` first), never the verdict or the source marker (rank 0), and
    never half of a part."""

    _shown: Text | None = None
    _parts: "list[tuple[Text, float]] | None" = None

    def show(self, parts: "list[tuple[Text, float]]") -> None:
        """Update only when the line changed: ``Static.update`` re-lays out the screen, and a
        re-layout repaints the whole terminal."""
        text = Text("").join(part for part, _ in parts)
        old = self._shown
        if old is not None and old.plain == text.plain and old.spans == text.spans and old.style == text.style:
            return
        self._shown, self._parts = text, parts
        self.update(text)

    def render(self) -> Any:
        text, width = self._shown, self.size.width
        if text is None or self._parts is None or width <= 0 or text.cell_len <= width:
            return super().render()
        return fit_parts(self._parts, width)


def fit_parts(parts: "list[tuple[Text, float]]", width: int) -> Text:
    """The parts that fit ``width``, in their order: the part of the highest rank (the least
    important; the later one of equal ranks) goes first, whole. Parts of rank 0 always stay; only
    when they alone pass the width is the line cut, with "…"."""
    kept = list(range(len(parts)))
    while sum(parts[i][0].cell_len for i in kept) > width:
        droppable = [i for i in kept if parts[i][1] > 0]
        if not droppable:
            break
        kept.remove(max(droppable, key=lambda i: (parts[i][1], i)))
    fitted = Text("").join(parts[i][0] for i in kept)
    if fitted.cell_len > width:
        fitted.truncate(width, overflow="ellipsis")
    return fitted


class KeysFooter(Widget):
    """The key footer (`` v view  o overview ...``): the shown keys of the screen's active
    bindings, each whole. One that would pass the right edge (``q qu``) is left out with those
    after it, except help (``?`` lists every key) and quit. A click on a key presses it. Built
    on Textual's public API only (``Screen.active_bindings``, ``App.get_key_display``)."""

    DEFAULT_CSS = """
    KeysFooter {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
    }
    KeysFooter > .keys-footer--key {
        color: $footer-key-foreground;
        background: $footer-key-background;
        text-style: bold;
    }
    KeysFooter > .keys-footer--description {
        color: $footer-description-foreground;
        background: $footer-description-background;
    }
    """
    COMPONENT_CLASSES = {"keys-footer--key", "keys-footer--description"}

    #: Keys always shown (where the terminal holds them): help lists the others, and the way out.
    KEEP = ("help", "quit_app")

    #: The keys shown at the last render: (first column, past the last column, key).
    _spans: "list[tuple[int, int, str]]" = []

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def _bindings_changed(self, _screen: Any) -> None:
        self.refresh()

    def keys(self) -> "list[tuple[str, str, str, bool]]":
        """(key, what it shows, description, enabled) of each shown binding that fits, one per
        action, in their order."""
        seen: set[str] = set()
        keys = []
        for _node, binding, enabled, _tooltip in self.screen.active_bindings.values():
            if binding.show and binding.action not in seen:
                seen.add(binding.action)
                keys.append((binding.key, self.app.get_key_display(binding), binding.description, enabled,
                             binding.action.partition("(")[0] in self.KEEP))
        room = (self.size.width or self.app.size.width) - sum(len(k[1]) + len(k[2]) + 3 for k in keys if k[4])
        kept = []
        for key, shown, what, enabled, keep in keys:
            cost = len(shown) + len(what) + 3  # " k what "
            if not keep and cost > room:
                room = -1  # the keys after one left out are left out too: the order stays
                continue
            room -= 0 if keep else cost
            kept.append((key, shown, what, enabled))
        return kept

    def render(self) -> Text:
        key_style = self.get_component_rich_style("keys-footer--key")
        what_style = self.get_component_rich_style("keys-footer--description")
        line, spans = Text(no_wrap=True, overflow="crop"), []
        for key, shown, what, enabled in self.keys():
            start = line.cell_len
            line.append(f" {shown} ", key_style if enabled else key_style + Style(dim=True))
            line.append(f"{what} ", what_style if enabled else what_style + Style(dim=True))
            spans.append((start, line.cell_len, key))
        self._spans = spans
        return line

    def on_click(self, event: Click) -> None:
        for start, end, key in self._spans:
            if start <= event.x < end:
                self.app.simulate_key(key)
                return


#: Ranks of the title's parts (0: never dropped; higher: dropped sooner).
KEEP, TROUBLE, REASON, SCREEN_INFO, SOURCE_FILE, DOCTOR_KEY, DRIVER, INTERVAL = 0, 1, 2, 3, 5, 6, 7, 8


class Titled:
    """The header line of every screen and pop-up: the screen's name, the doctor's verdict and
    the live/replay marker (kept whole at every width), then what gives way first. A screen
    yields a :class:`TitleBar` with id ``title`` and calls :meth:`show_title`."""

    TITLE = ""
    app: Any

    @property
    def gapp(self) -> "GpudoctorApp":
        return self.app

    def every_s(self) -> float:
        """How often this screen's data is read (the header's ``· every N s``)."""
        return float(getattr(self.gapp, "interval", 0.0))

    def show_title(self, extra: str = "") -> None:
        self.query_one("#title", TitleBar).show(self.title_text(extra))  # type: ignore[attr-defined]

    _title: "tuple[tuple[Any, ...], list[tuple[Text, float]]] | None" = None

    def title_text(self, extra: str = "") -> "list[tuple[Text, float]]":
        """The title line's parts with their ranks (:func:`fit_parts`); built again only when
        what it shows changed (it is asked for on every reading)."""
        state = self._state()
        snap = state.snapshot
        key = (state.stalled_s, state.sample_error, getattr(self.gapp, "headline", None), extra,
               None if snap is None else (snap.source, snap.driver_version), self.every_s())
        if self._title is not None and self._title[0] == key:
            return self._title[1]
        parts = self._title_parts(extra)
        self._title = (key, parts)
        return parts

    def _state(self) -> Any:
        """The app's state (an empty one in an app that has none: a screen tried on its own)."""
        from gpudoctor.tui.app import AppState

        return getattr(self.gapp, "state", None) or AppState()

    def _title_parts(self, extra: str) -> "list[tuple[Text, float]]":
        state = self._state()
        parts: list[tuple[Text, float]] = [(Text(" gpudoctor ", style="bold reverse"), KEEP),
                                           (Text(f" {self.TITLE} ", style="bold"), KEEP)]
        if state.stalled_s is not None:
            parts.append((Text(f"· driver not answering for {state.stalled_s:.0f} s ", style="bold red"), TROUBLE))
        elif state.sample_error:
            parts.append((Text(f"· {plain_text(state.sample_error, limit=120)} ", style="bold red"), TROUBLE))
        parts += self._verdict_parts()
        # Screen facts (`· 3 of 5 · sorted by pid (s)`): each `·` part apart, the later ones dropped first.
        for n, piece in enumerate(p for p in extra.split("· ") if p.strip()):
            parts.append((Text(f"· {piece}"), SCREEN_INFO + n / 100))
        parts += self._source_parts()
        parts.append((Text(f"· every {self.every_s():g} s ", style="dim"), INTERVAL))
        return parts

    def _verdict_parts(self) -> "list[tuple[Text, float]]":
        """``· Doctor: FAIL`` (kept), ``: <the reason>`` and `` · d`` (dropped whole when short of room)."""
        headline = getattr(self.gapp, "headline", None)
        if headline is None:  # the start-up quick doctor has not answered yet, or does not run
            waiting = "checking" if getattr(self.gapp, "startup_doctor", False) else "not run"
            return [(Text("· Doctor: ", style="bold") + Text(f"{waiting} ", style="dim"), KEEP)]
        status, reason, _level = headline
        word, style = status_style(status)
        parts: list[tuple[Text, float]] = [(Text("· Doctor: ", style="bold") + Text(word, style=style), KEEP)]
        if reason:  # the Doctor screen's own facts come first there: its page shows every finding
            parts.append((Text(f": {plain_text(reason, limit=60)}"), REASON if self.TITLE != "Doctor" else SCREEN_INFO + 1))
        parts.append((Text(" "), KEEP))
        parts.append((Text("· d ", style="dim"), DOCTOR_KEY))
        return parts

    def _source_parts(self) -> "list[tuple[Text, float]]":
        """``· live`` or ``· replay`` (kept), the recording's name and the driver version."""
        snap = self._state().snapshot
        replay = bool(getattr(self.gapp, "replay", None)) or (snap is not None and snap.source.startswith("replay"))
        parts: list[tuple[Text, float]] = [(Text("· replay " if replay else "· live ", style="bold magenta" if replay else "bold"), KEEP)]
        if snap is not None and replay:
            name = snap.source.partition(": ")[2] or "recording"
            parts.append((Text(f"{plain_text(name, limit=80)} ", style="dim"), SOURCE_FILE))
        if snap is not None and isinstance(snap.driver_version, str) and snap.driver_version:
            parts.append((Text(f"· driver {plain_text(snap.driver_version, limit=40)} ", style="dim"), DRIVER))
        return parts

    def refresh_view(self) -> None:  # pragma: no cover - overridden
        pass


class BaseScreen(Titled, Screen):
    def on_screen_resume(self) -> None:
        self.refresh_view()


# --------------------------------------------------------------------------- overview
class OverviewScreen(BaseScreen):
    """A detailed panel per GPU while they fit the screen, else the compact view: a line per GPU
    (columns on wide screens) and every GPU's processes below. ``v`` switches; Enter opens the
    selected GPU's detailed panel, Esc goes back."""

    TITLE = "Overview"
    BINDINGS = [
        Binding("v", "switch_view", "view"),
        Binding("enter", "open_gpu", "GPU details", show=False),
        Binding("escape", "close_gpu", "back", show=False),
        # Priority: the scrolling panels would take the arrows first.
        Binding("down,j", "move(1)", "next GPU", show=False, priority=True),
        Binding("up,k", "move(-1)", "previous GPU", show=False, priority=True),
        Binding("right,l", "move_column(1)", "next column", show=False, priority=True),
        Binding("left", "move_column(-1)", "previous column", show=False, priority=True),
    ]

    def __init__(self) -> None:
        super().__init__()
        #: "auto" (compact when the detailed panels do not fit), "compact" or "detailed" (``v``).
        self.view = "auto"
        #: The GPU whose detailed panel is open alone (Enter), by its place in the snapshot.
        self.detail: int | None = None
        self.selected = 0
        self._fits: tuple[tuple[int, int, int], bool] | None = None

    def compose(self) -> ComposeResult:
        yield TitleBar(id="title")
        # A reading there already (the TUI's forked first reading): its detailed panels are laid out
        # with the screen, not mounted after it (a second layout); refresh_view fills them.
        snap = self.gapp.state.snapshot
        yield VerticalScroll(*(self._new_panel(i) for i in self._wanted(snap, False)) if snap else (), id="panels")
        yield KeysFooter()

    def compact_shown(self) -> bool:
        """Whether the compact view is the one on screen (or about to be)."""
        snap = self.gapp.state.snapshot
        if snap is None or not snap.has_gpu or self.detail is not None:
            return False
        if self.view != "auto":
            return self.view == "compact"
        key = (self.size.width, self.size.height, len(snap.devices))
        if self._fits is None or self._fits[0] != key:
            state = self.gapp.state
            need = detailed_rows(snap, state.history, state.events, self.size.width)
            self._fits = (key, need <= max(0, self.size.height - 2))
        return not self._fits[1]

    def action_switch_view(self) -> None:
        self.view = "detailed" if self.compact_shown() else "compact"
        self.detail = None
        self.refresh_view()

    def action_open_gpu(self) -> None:
        if self.compact_shown():
            self.detail = self.selected
            self.refresh_view()

    def action_close_gpu(self) -> None:
        if self.detail is not None:
            self.detail = None
            self.refresh_view()

    def action_move(self, step: int) -> None:
        snap = self.gapp.state.snapshot
        if snap is None or not snap.devices or not self.compact_shown():
            panels = self.query_one("#panels", VerticalScroll)
            panels.scroll_relative(y=step, animate=False)  # the detailed panels scroll as before
            return
        self.selected = max(0, min(len(snap.devices) - 1, self.selected + step))
        self.refresh_view()

    def action_move_column(self, step: int) -> None:
        views = self.query(CompactView)
        self.action_move(step * (views.first().grid_lines if views else 1))

    def refresh_view(self) -> None:
        state = self.gapp.state
        self.show_title(self._view_info())
        snap = state.snapshot
        if snap is None:
            return
        panels = self.query_one("#panels", VerticalScroll)
        compact = self.compact_shown()
        wanted = self._wanted(snap, compact)
        have = [w.id for w in panels.children]
        if have != wanted:
            # Removing is not done when remove_children returns: panels mounted at once beside the
            # old ones clashed in their ids when a second redraw came first (a resize from 60x20 to
            # 120x30 ended the TUI with DuplicateIds). One swap at a time, awaited; it redraws after.
            if not self._swapping:
                self._swapping = True
                self.run_worker(self._swap_panels(panels, wanted), group="panels")
            return
        if compact:
            self._show_compact(panels, snap)
            return
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

    _swapping = False

    async def _swap_panels(self, panels: VerticalScroll, wanted: list[str]) -> None:
        try:
            await panels.remove_children()
            await panels.mount_all([self._new_panel(ident) for ident in wanted])
        finally:
            self._swapping = False
        self.refresh_view()

    def _view_info(self) -> str:
        if self.detail is not None:
            return "· Esc: all GPUs "
        return "· compact (v: detailed) " if self.compact_shown() else ""

    def _wanted(self, snap: Snapshot, compact: bool) -> list[str]:
        if compact:
            return ["compact"]
        devices = snap.devices
        if self.detail is not None and devices:
            devices = devices[min(self.detail, len(devices) - 1):][:1]
        no_gpu = ["no-gpu"] if snap.nvml_status is not None or not snap.devices else []
        return no_gpu + [f"gpu-{d.index}" for d in devices] + ["host"]

    @staticmethod
    def _new_panel(ident: str) -> Any:
        if ident == "compact":
            return CompactView()
        if ident == "no-gpu":
            return NoGpuPanel()
        if ident == "host":
            return HostPanel()
        return GpuPanel(int(ident.split("-")[1]))

    def _show_compact(self, panels: VerticalScroll, snap: Snapshot) -> None:
        view = panels.query_one(CompactView)
        state = self.gapp.state
        self.selected = min(self.selected, len(snap.devices) - 1)
        view.selected = snap.devices[self.selected].index
        view.show(snap.devices, own_first(state.processes), snap.time, "; ".join(state.process_notes), state.events)
        rows = max(1, len(compact_grid(snap.devices, max(20, panels.size.width), None)))
        self.call_after_refresh(panels.scroll_to_region, Region(0, self.selected % rows, 1, 1), animate=False)

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
                   ("sm util", "SM %"), ("cpu", "CPU %"), ("host memory", "host mem"), ("time", "time"),
                   ("diagnosis", "why"), ("command", "command"))
#: The keys that send a signal to the selected process after a confirmation (nvitop's).
SIGNAL_KEYS = {"SIGTERM": "T", "SIGKILL": "K", "SIGINT": "I"}
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


def _pid_of_key(key: object) -> int:
    """The PID a :func:`_row_key` names ("0:MIG 1g.10gb:4242#2" -> 4242)."""
    return int(str(key).rpartition(":")[2].partition("#")[0])

class ProcessesScreen(BaseScreen):
    TITLE = "Processes"
    BINDINGS = [
        Binding("s", "cycle_sort", "sort"),
        Binding("slash", "focus_filter", "filter"),
        Binding("escape", "clear_filter", "clear filter", show=False),
        Binding("y", "why_selected", "why"),
        Binding("T", "signal('SIGTERM')", "terminate"),
        Binding("K", "signal('SIGKILL')", "kill"),
        Binding("I", "signal('SIGINT')", "interrupt"),
        Binding("t", "toggle_tree", "tree"),
        Binding("u", "toggle_mine", "mine"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.sort_key = "gpu memory"
        self.filter_text = ""
        #: the tree view (t): each process under its parents; only this user's processes (u)
        self.tree_view = False
        self.mine_only = False
        #: what the last signal did, shown under the table
        self.last_action = ""
        self._ancestors: dict[int, list[tuple[int, str]]] = {}

    def compose(self) -> ComposeResult:
        yield TitleBar(id="title")
        yield Input(placeholder="filter: pid, user, command (press / to type, Esc to clear)", id="filter")
        from textual.widgets import DataTable  # loaded with this screen: not needed by the first frame

        table: DataTable[Any] = DataTable(id="procs", cursor_type="row", zebra_stripes=True)
        yield table
        yield Static(id="proc-notes")
        yield KeysFooter()

    def on_mount(self) -> None:
        table = self._table()
        for key, label in PROCESS_COLUMNS:
            if key != "time":  # added when a process's start time is known (refresh_view)
                table.add_column(label, key=key)
        table.focus()

    def action_cycle_sort(self) -> None:
        i = SORT_ORDER.index(self.sort_key)
        self.sort_key = SORT_ORDER[(i + 1) % len(SORT_ORDER)]
        self.refresh_view()

    def _table(self) -> DataTable[Any]:
        from textual.widgets import DataTable

        return self.query_one("#procs", DataTable)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        self.sort_key = str(event.column_key.value)
        self.refresh_view()

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        self._table().focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self.refresh_view()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._table().focus()

    def action_why_selected(self) -> None:
        """Sample the selected process with `gpudoctor why` (in a worker) and show the answer."""
        table = self._table()
        if not table.row_count or table.cursor_row is None:
            self.app.notify("No process selected.", severity="warning")
            return
        self.gapp.start_why(_pid_of_key(table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value))

    def _selected_row(self) -> ProcessRow | None:
        table = self._table()
        if not table.row_count or table.cursor_row is None:
            return None
        pid = _pid_of_key(table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value)
        return next((r for r in self._rows() if r.pid == pid), None)

    def action_signal(self, name: str) -> None:
        """Send ``name`` to the selected process once the user confirms; never to a recorded process,
        nor to another user's unless this user is root (gpudoctor.backends.host.why_not_signal)."""
        from gpudoctor.backends.host import send_signal, why_not_signal

        row = self._selected_row()
        if row is None:
            self.app.notify("No process selected.", severity="warning")
            return
        if self.gapp.replay:
            self._action_done(f"pid {row.pid} is a recorded process, not one of this machine's: nothing sent")
            return
        refused = why_not_signal(row.pid, row.started)
        if refused:
            self._action_done(f"{name} not sent: {refused}")
            return
        question = f"Send {name} to pid {row.pid} ({plain_text(row.user or '?', limit=32)}): " \
                   f"{plain_text(row.command, limit=120)}?"

        def answered(yes: bool | None) -> None:
            if yes:
                _sent, what = send_signal(row.pid, name, row.started)
                self._action_done(what)
                self.gapp.request_sample()
            else:
                self._action_done(f"{name} to pid {row.pid}: cancelled")

        self.app.push_screen(ConfirmScreen(question), answered)

    def _action_done(self, what: str) -> None:
        self.last_action = what
        self.app.notify(what)
        self.refresh_view()

    def action_toggle_tree(self) -> None:
        self.tree_view = not self.tree_view
        self.refresh_view()

    def action_toggle_mine(self) -> None:
        self.mine_only = not self.mine_only
        self.refresh_view()

    def _tree_rows(self, rows: list[ProcessRow]) -> list[tuple[ProcessRow, int]]:
        """(row, depth): every process under its parents (read from this machine, not for a replay),
        the parents without a GPU context listed by name."""
        from gpudoctor.backends.host import process_ancestors

        if self.gapp.replay:
            return [(r, 0) for r in rows]
        pids = {r.pid for r in rows}
        self._ancestors = {pid: chain for pid, chain in self._ancestors.items() if pid in pids}
        parent: dict[int, int | None] = {}
        nodes: dict[int, ProcessRow] = {}
        for r in rows:
            chain = self._ancestors.get(r.pid)
            if chain is None:
                chain = self._ancestors[r.pid] = process_ancestors(r.pid)
            nodes.setdefault(r.pid, r)
            parent[r.pid] = chain[0][0] if chain else None
            for (pid, name), up in zip(chain, [*chain[1:], None]):
                nodes.setdefault(pid, ProcessRow(pid=pid, gpu=-1, gpu_memory_bytes=None, sm_util_pct=None,
                                                 kind="parent", command=name))
                parent.setdefault(pid, up[0] if up else None)
        children: dict[int | None, list[int]] = {}
        for pid, parent_pid in parent.items():
            children.setdefault(parent_pid if parent_pid in nodes else None, []).append(pid)
        out: list[tuple[ProcessRow, int]] = []

        def walk(pid: int, depth: int) -> None:
            out.append((nodes[pid], depth))
            for child in sorted(children.get(pid, [])):
                walk(child, depth + 1)

        for root in sorted(children.get(None, [])):
            walk(root, 0)
        return out

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

    def _shown_rows(self, every: list[ProcessRow]) -> list[ProcessRow]:
        """The rows the filters keep, sorted, this user's processes first."""
        rows = [r for r in every if r.matches(self.filter_text)]
        if self.mine_only:
            rows = [r for r in rows if is_mine(r)]
        rows.sort(key=PROCESS_SORT_KEYS.get(self.sort_key, lambda r: self._diagnosis(r.pid) or "~"))
        rows.sort(key=lambda r: not is_mine(r))  # this user's processes first (a stable sort keeps the rest)
        return rows

    def _title_info(self, rows: list[ProcessRow], every: list[ProcessRow]) -> str:
        shown = f"· {len(rows)} of {len(every)} · sorted by {self.sort_key} (s) "
        if self.mine_only:
            shown += "· mine only (u) "
        if self.tree_view:
            shown += "· tree (t) "
        if self.filter_text:
            shown += f"· filter {plain_text(self.filter_text, limit=40)!r} "
        return shown

    def _cells(self, r: ProcessRow, depth: int, now: float, timed: bool) -> tuple[str, ...]:
        """A row's cells; a parent in the tree view (no GPU context) shows its pid, user and name."""
        parent = r.kind == "parent"
        cells = (
            str(r.pid), plain_text(r.user or "-", limit=32), r.gpu_text,
            "" if parent else fmt_bytes(r.gpu_memory_bytes) if r.gpu_memory_bytes is not None else "n/a",
            "" if parent else f"{r.sm_util_pct}" if r.sm_util_pct is not None else "n/a",
            "" if parent else f"{r.cpu_pct:.0f}" if isinstance(r.cpu_pct, (int, float)) else "n/a",
            "" if parent else fmt_bytes(r.host_memory_bytes) if r.host_memory_bytes is not None else "n/a",
            fmt_elapsed(now - r.started) if r.started is not None else ("" if parent else "n/a"),
            plain_text(self._diagnosis(r.pid), limit=40),
            ("  " * (depth - 1) + "└─ " if depth else "") + plain_text(r.command),
        )
        return cells if timed else cells[:7] + cells[8:]

    def refresh_view(self) -> None:
        state = self.gapp.state
        every = self._rows()
        rows = self._shown_rows(every)
        self.show_title(self._title_info(rows, every))
        table = self._table()
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
        # The time column only where a start time is known (not for a recording's processes): at 80
        # columns its room is the command's.
        timed = any(r.started is not None for r in rows)
        if timed != ("time" in table.columns):
            table.clear(columns=True)
            for key, label in PROCESS_COLUMNS:
                if key != "time" or timed:
                    table.add_column(label, key=key)
        table.clear()
        now = state.snapshot.time if state.snapshot is not None else 0.0
        keys: set[str] = set()
        for r, depth in self._tree_rows(rows) if self.tree_view else [(r, 0) for r in rows]:
            # Cells are Text, never str: DataTable parses a str as markup, and a command line
            # such as `train.py data=[/data/a,/data/b]` is data, not markup.
            style = "dim" if r.kind == "parent" else ""
            table.add_row(*(Text(c, style=style) for c in self._cells(r, depth, now, timed)), key=_row_key(r, keys))
        if selected is not None:
            try:
                table.move_cursor(row=table.get_row_index(selected), animate=False)
            except Exception:
                pass
        self._show_notes(bool(every))

    def _show_notes(self, any_rows: bool) -> None:
        state = self.gapp.state
        notes = list(state.process_notes)
        if self.last_action:
            notes.insert(0, self.last_action)
        if not any_rows and not notes:
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
        yield KeysFooter()

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
        self.show_title(extra)
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
        self.show_title(extra)
        width = self.page_width()
        parts: list[Any] = []
        if wl.unavailable:
            parts.append(Text("\n".join(wrap_hanging(plain_text(wl.unavailable, limit=1000), width)), style="bold yellow"))
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
    ("o  1", "Overview: a panel per GPU, or a line per GPU and processes"),
    ("p  2", "Processes: who uses the GPUs"),
    ("d  3", "Doctor: run the report's checks in the background"),
    ("w  4", "Workload: the MNIST reference sweep"),
    ("n  5", "Fleet: every node's GPUs (with --prometheus URL)"),
    ("?  h  F1", "this help"),
    ("q", "quit"),
    ("r", "Doctor: run the checks again"),
    ("s  f  x", "Workload: quick sweep, full sweep, cancel it"),
    ("Overview", ""),
    ("v  ↑↓←→", "compact or detailed view; arrows pick a GPU, Enter opens"),
    ("Processes", ""),
    ("s", "next sort column (or click a column header)"),
    ("/", "filter (pid, user, command); Enter keeps, Esc clears"),
    ("y", "why: sample the selected process, say what holds it back"),
    ("T  K  I", "send SIGTERM / SIGKILL / SIGINT to it (asks first)"),
    ("t  u", "tree view (parents) / only my processes (first anyway)"),
]


class PopUp(Titled):
    """A pop-up over a screen keeps the header (the verdict and the live/replay marker) in view:
    it yields its own :class:`TitleBar` first, which the app refreshes as it does a screen's."""

    def on_mount(self) -> None:
        self.refresh_view()

    def refresh_view(self) -> None:
        self.show_title()


class ConfirmScreen(PopUp, ModalScreen[bool]):
    """A question answered with y (or Enter) or n (or Esc): before a signal is sent."""

    TITLE = "Confirm"

    BINDINGS = [Binding("y,enter", "answer(True)", "yes"), Binding("n,escape", "answer(False)", "no")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        yield TitleBar(id="title")
        yield Static(Group(Text(self.question, style="bold"), Text(""), Text("y: yes   n or Esc: no", style="dim")),
                     id="confirm-body")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class WhyScreen(PopUp, ModalScreen[None]):
    """The answer of `gpudoctor why` for one process (or its one-line error)."""

    TITLE = "Why"

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
        yield TitleBar(id="title")
        yield Static(Group(Text(f"gpudoctor why {self.pid}", style="bold"), Text(""), body, Text(""),
                           Text("Esc closes this.", style="dim")), id="why-body")

    def action_close(self) -> None:
        self.dismiss(None)


class HelpScreen(PopUp, ModalScreen[None]):
    TITLE = "Help"
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
        yield TitleBar(id="title")
        with VerticalScroll(id="help-body"):  # scrolls (arrows) where the terminal is shorter than the keys
            yield Static(body)

    def action_dismiss_help(self) -> None:
        self.dismiss(None)

    def action_quit_from_help(self) -> None:
        self.app.action_quit_app()


__all__ = ["OverviewScreen", "ProcessesScreen", "DoctorScreen", "WorkloadScreen", "HelpScreen", "WhyScreen",
           "HELP_KEYS"]
