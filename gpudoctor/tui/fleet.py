"""The Fleet screen: every node's GPUs from Prometheus, worst first (``gpudoctor --prometheus URL``).

The screen asks Prometheus in a thread worker every ``interval`` seconds (the same query as
``gpudoctor fleet``) and shows the rows in a table; the worker never touches widgets, it posts
messages. Every label from Prometheus is shown as plain text (``rich.text.Text``), never markup.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static

from gpudoctor.tui.screens import KeysFooter, TitleBar, Titled

if TYPE_CHECKING:
    from gpudoctor.fleet import FleetView

STATUS_STYLES = {"fail": "bold red", "stale": "bold magenta", "warn": "yellow", "pass": "green"}


def columns() -> tuple[tuple[str, int], ...]:
    """The columns and the most each may take (the instance is cut with "…" beyond it): the
    readings' columns are the catalogue's (fleet's table shows the same); each is as wide as its
    header or its widest value, and REASON takes the rest of the screen, wrapped."""
    from gpudoctor.fleet import reading_columns

    return (("STATUS", 6), ("INSTANCE", 24), ("GPU", 3), *((r.column[0], r.column[2]) for r in reading_columns()),
            ("XID", 4), ("REPORT", 11), ("REASON", 0))


#: The held-but-idle GPUs listed above the table at most (then "... and N more").
IDLE_LINES = 5
#: REASON is never narrower than this: below it the table scrolls sideways instead.
REASON_MIN = 20
#: Columns are one space apart (the table's own padding is two, one each side).
GAP = 1


class FleetReady(Message):
    def __init__(self, view: FleetView, took_s: float) -> None:
        super().__init__()
        self.view = view
        self.took_s = took_s


class FleetFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class FleetScreen(Titled, Screen):
    """Rows of ``gpudoctor.fleet.collect`` in a DataTable, refreshed every ``interval`` seconds,
    under the header every screen has (the doctor's verdict, the live/replay marker)."""

    TITLE = "Fleet"
    BINDINGS = [Binding("r", "refresh_now", "Refresh")]
    DEFAULT_CSS = """
    FleetScreen #fleet-status { height: 1; }
    FleetScreen #fleet-idle { height: auto; max-height: 7; }
    FleetScreen DataTable { height: 1fr; }
    """

    def __init__(self, url: str, *, interval: float = 15.0, matchers: list[Any] | None = None,
                 collect: Callable[[], Any] | None = None) -> None:
        super().__init__()
        self.url = url
        self.interval = interval
        self.matchers = matchers or []
        self._collect = collect or self._query
        self.view: Any = None
        self.error = ""
        self.updated_at: float | None = None
        self._busy = False
        self._answered = ""

    def compose(self) -> ComposeResult:
        yield TitleBar(id="title")
        yield Static(id="fleet-status")
        yield Static(id="fleet-idle")
        yield DataTable(id="fleet-table", zebra_stripes=True, cursor_type="row", cell_padding=0)
        yield KeysFooter()

    def on_mount(self) -> None:
        self._fill(None)
        self._show_title()
        self.action_refresh_now()
        self.set_interval(self.interval, self.action_refresh_now)

    def on_resize(self) -> None:
        self._fill(self.view)

    def every_s(self) -> float:
        return self.interval

    def on_screen_resume(self) -> None:
        self.refresh_view()

    def refresh_view(self) -> None:
        """The header again (the app asks when the verdict or the source changed)."""
        self._show_title(self._answered)

    def _query(self) -> Any:
        from gpudoctor import fleet

        return fleet.collect(fleet.Prometheus(self.url), self.matchers)

    def action_refresh_now(self) -> None:
        if not self._busy:
            self._busy = True
            self._fetch()

    @work(thread=True, exclusive=True, exit_on_error=False, group="fleet")
    def _fetch(self) -> None:
        from gpudoctor.fleet import FleetError

        start = time.monotonic()
        try:
            view = self._collect()
        except FleetError as exc:
            self.post_message(FleetFailed(str(exc)))
        except Exception as exc:  # noqa: BLE001 (a bug here must not end the TUI)
            self.post_message(FleetFailed(f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(FleetReady(view, time.monotonic() - start))

    def on_fleet_ready(self, message: FleetReady) -> None:
        self._busy = False
        self.view, self.error, self.updated_at = message.view, "", time.time()
        self._fill(message.view)
        self._show_held_idle(message.view)
        self._show_title(f"answered in {message.took_s:.1f} s")

    def _show_held_idle(self, view: FleetView) -> None:
        """The GPUs held by a job or pod that did no work for the idle window, longest idle first,
        each with its holder and cost (fleet's own lines, as plain text); nothing when none."""
        from gpudoctor.fleet.text import held_idle_lines

        lines = held_idle_lines(view)[1:]  # no blank line on the screen
        shown = lines[:IDLE_LINES] + ([f"  ... and {len(lines) - IDLE_LINES} more (gpudoctor fleet lists them all)"]
                                      if len(lines) > IDLE_LINES else [])
        widget = self.query_one("#fleet-idle", Static)
        widget.display = bool(shown)
        widget.update(Text("\n".join(shown), style="yellow"))

    def on_fleet_failed(self, message: FleetFailed) -> None:
        self._busy = False
        self.error = message.error
        self._show_title()

    def _show_title(self, extra: str = "") -> None:
        self._answered = extra
        self.show_title(f"{self.url} ")
        status = Text()
        if self.error:
            status.append(self.error[:300], style="bold red")
            if self.view is not None:
                status.append("  (rows below are from the last answer)", style="dim")
        elif self.view is not None:
            counts = self.view.counts()
            for name in ("fail", "stale", "warn", "pass"):
                status.append(f"{counts[name]} {name}  ", style=STATUS_STYLES[name] if counts[name] else "dim")
            nodes = len({row.instance for row in self.view.rows})
            status.append(f"· {len(self.view.rows)} GPU(s) on {nodes} node(s) ", style="dim")
            if extra:
                status.append(f"· {extra}", style="dim")
        else:
            status.append("asking Prometheus ...", style="dim")
        self.query_one("#fleet-status", Static).update(status)

    def _fill(self, view: FleetView | None) -> None:
        """The rows, in columns as wide as their header or widest value, and REASON in the rest
        of the width, wrapped over as many lines as the row needs: every header and value whole
        at 80 columns as at 200."""
        import textwrap

        from gpudoctor.fleet import reading_cell, reading_columns

        rows = []
        for row in (view.rows if view is not None else []):
            instance = row.instance if len(row.instance) <= 24 else row.instance[:23] + "…"
            rows.append((row, [
                row.status.upper(), instance, row.gpu or "-", *(reading_cell(row, r) for r in reading_columns()),
                "-" if row.xid_last is None else str(row.xid_last),
                "-" if row.report_status is None else row.report_status,
            ]))
        shown = columns()
        widths = [max([len(label)] + [len(cells[k]) for _, cells in rows]) + GAP
                  for k, (label, _) in enumerate(shown[:-1])]
        table = self.query_one(DataTable)
        # the vertical scrollbar's two columns, and the row cursor's own
        room = (table.size.width or self.size.width) - sum(widths) - 2
        reason_w = max(REASON_MIN, room)
        table.clear(columns=True)
        for (label, _), width in zip(shown, widths + [reason_w]):
            table.add_column(label, width=width)
        for row, cells in rows:
            reason = textwrap.wrap(row.reason, reason_w) or [""]
            texts = [Text(cells[0], style=STATUS_STYLES[row.status])] + [Text(c) for c in cells[1:]]
            table.add_row(*texts, Text("\n".join(reason)), height=len(reason))
