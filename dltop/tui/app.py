"""DltopApp: the main screen (header, GPU and system panels, workers table, findings) fed by a
Source from a worker thread, so the UI never waits on /proc or py-spy."""

from __future__ import annotations

import threading
from functools import partial
from typing import Callable, Iterable, Optional, Union

from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver
from textual.message import Message
from textual.widgets import Footer

from dltop.bench import missing_torch
from dltop.live.loop import LiveLoop
from dltop.live.schedule import REFRESH_S, ticks
from dltop.model import Snapshot
from dltop.tui import view
from dltop.tui.screens import BenchScreen, HelpScreen, PickerScreen, StackScreen
from dltop.tui.widgets import (
    FIGURES_EVERY_S,
    FindingsPanel,
    GpuPanel,
    JobHeader,
    SystemPanel,
    TextPanel,
    TrainerTimePanel,
    WorkersTable,
)

CSS = """
JobHeader { height: 2; padding: 0 1; }
#panels { height: auto; }
GpuPanel, SystemPanel { width: 1fr; height: auto; border: round $primary-darken-2; padding: 0 1; }
TrainerTimePanel { height: auto; border: round $primary-darken-2; padding: 0 1; }
WorkersTable { height: 1fr; min-height: 2; }
FindingsPanel { height: auto; border: round $primary-darken-2; }
.compact GpuPanel, .compact SystemPanel { border: none; }
.compact TrainerTimePanel { display: none; }
.compact FindingsPanel { border: none; border-top: round $primary-darken-2; }
"""
COMPACT_BELOW = 30  # terminal rows under which the panels drop their borders (80x24 needs every row)
Layout = tuple[Union[int, str], str, Optional[int]]  # table height, findings height and max height
MAIN_SCREEN_ACTIONS = frozenset({"pause", "stack", "sort", "bench", "help", "cursor_down", "cursor_up"})
TABLE_MIN_ROWS = 6  # the process table keeps this many rows (header included) before findings grow


def _findings_width(panel: FindingsPanel) -> int:
    """The columns the findings' text wraps at."""
    return max(10, panel.size.width - panel.styles.gutter.width - 1)


class Collected(Message):
    """A Snapshot from the collecting thread. Posted, not called: the thread does not wait for
    the screen (``call_from_thread`` parks it on a future every tick)."""

    def __init__(self, snap: Snapshot) -> None:
        super().__init__()
        self.snap = snap


class DltopApp(App):
    """``source_factory`` opens the live loop it collects from (it may block: it runs on a thread);
    with ``pick`` the app starts on the job picker and calls ``source_factory(pid)`` with the chosen
    pid. Without one the app collects nothing and shows what it is fed through ``show``: ``first``
    at mount, a replay's frames as its cursor moves."""

    CSS = CSS
    TITLE = "dltop"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("p", "pause", "pause"),
        Binding("s,enter", "stack", "stack"),
        Binding("o", "sort", "sort"),
        Binding("b", "bench", "bench fix"),
        Binding("question_mark", "help", "help"),
        Binding("j", "cursor_down", show=False),
        Binding("k", "cursor_up", show=False),
    ]

    def __init__(self, source_factory: Optional[Callable[..., LiveLoop]] = None, interval: float = REFRESH_S,
                 pick: bool = False, on_exit: Optional[Callable[[], None]] = None,
                 first: Optional[Snapshot] = None) -> None:  # fmt: skip
        super().__init__()
        self.source_factory, self.interval, self.pick, self.on_exit = source_factory, interval, pick, on_exit
        self.first = first
        self.source: Optional[LiveLoop] = None
        self.snapshot: Optional[Snapshot] = None
        self.paused = False
        self.error: Optional[str] = None
        self._stop = threading.Event()
        self._layout: Optional[Layout] = None  # applied
        self._fitted_for: tuple = ()  # what the last fit worked from, besides the screen's size
        self._fit_pending = False

    def get_driver_class(self) -> type[Driver]:
        """Textual's choice, but on Linux a driver whose input thread sleeps until a key comes."""
        from dltop.tui.driver import QuietLinuxDriver

        chosen = super().get_driver_class()
        return QuietLinuxDriver if chosen is LinuxDriver else chosen

    def compose(self) -> ComposeResult:
        yield JobHeader("attaching…")
        with Horizontal(id="panels"):
            yield GpuPanel()
            yield SystemPanel()
        yield TrainerTimePanel()
        yield WorkersTable()
        yield FindingsPanel()
        yield Footer()

    def on_mount(self) -> None:
        if self.source_factory is not None:  # live: a finding's figures redraw every few seconds
            self.query_one(FindingsPanel).figures_every_s = FIGURES_EVERY_S
        if self.pick:
            self.push_screen(PickerScreen(), self._picked)
        elif self.source_factory is not None:
            self._collect(None)
        elif self.first is not None:
            self.show(self.first)

    def _picked(self, pid: Optional[int]) -> None:
        if pid is not None:
            self._collect(pid)

    @work(thread=True, exclusive=True, group="collect")
    def _collect(self, pid: Optional[int]) -> None:
        from dltop.errors import DltopError

        assert self.source_factory is not None  # on_mount collects only with one
        try:
            self.source = source = self.source_factory(pid) if self.pick else self.source_factory()
        except DltopError as err:
            self.call_from_thread(self._fail, str(err))
            return
        for _ in ticks(self.interval, self._stop):
            try:
                snap = source.step()
            except Exception as err:  # noqa: BLE001 - keep the last view and say why it stopped
                if not self._stop.is_set():
                    self.call_from_thread(self.notify, f"collection stopped: {err}", severity="error", timeout=60)
                return
            if self._stop.is_set():
                return  # the app is closing: nothing left to draw on
            self.post_message(Collected(snap))
            if snap.job.state == "exited":
                return

    def _fail(self, message: str) -> None:
        self.error = message
        self.exit(return_code=2, message=message)

    def on_collected(self, message: Collected) -> None:
        if self.query(JobHeader):  # a tick posted as the app closed finds its widgets gone: nothing to draw
            self.show(message.snap)

    def show(self, snap: Snapshot) -> None:
        before = self.snapshot
        first = before is None
        exited_now = snap.job.state == "exited" and (before is None or before.job.state != "exited")
        self.snapshot = snap
        if self.paused:
            return
        self.query_one(JobHeader).show(snap, self.paused)
        self.query_one(GpuPanel).show(snap)
        self.query_one(SystemPanel).show(snap)
        self.query_one(TrainerTimePanel).show(snap)
        self.query_one(WorkersTable).show(snap)
        self.query_one(FindingsPanel).show(snap)
        if isinstance(self.screen, StackScreen):
            self.screen.show(snap)
        self._fit_if_changed()
        if first:
            self.query_one(WorkersTable).focus()
        if exited_now:
            self.notify("The job exited; this is its last view. q quits.", severity="warning", timeout=30)

    # -- layout -----------------------------------------------------------------------------

    def on_resize(self) -> None:
        self.screen.set_class(self.size.height < COMPACT_BELOW, "compact")
        self.call_after_refresh(self._fit)

    def _fit_if_changed(self) -> None:
        """A fit waits for the layout (every widget passes a message on the way there): only when
        what it works from changed, not every refresh."""
        if not self._fit_pending and self._layout_inputs() != self._fitted_for:
            self._fit_pending = True
            self.call_after_refresh(self._fit)

    def _layout_inputs(self) -> tuple:
        """The rows each part needs: the findings' heights, not their text (their figures change
        nearly every tick, their heights seldom)."""
        findings = self.query_one(FindingsPanel)
        inputs = (len(self.query_one(WorkersTable).keys), tuple(findings.heights(_findings_width(findings))))
        return inputs + tuple((panel.display, panel.line_count) for panel in self.query(TextPanel))

    def _fit(self) -> None:
        """No band between the table and the findings: a short table takes the rows it has and
        the findings the rest; a long one takes what the findings leave it, keeping a few rows,
        and the findings never lose their first entry while the screen has room for it."""
        self._fit_pending = False
        if not self.is_running or self.screen is not self.screen_stack[0]:
            return
        self._fitted_for = self._layout_inputs()
        panel, table = self.query_one(FindingsPanel), self.query_one(WorkersTable)
        border = panel.styles.gutter.height
        # everything else in the screen's own layer (header, meters, footer, a replay bar) keeps its rows
        others = [w for w in self.screen.children if not isinstance(w, (WorkersTable, FindingsPanel))]
        used = sum(w.outer_size.height for w in others if w.display and not w.styles.layer)
        room = self.size.height - used  # the table and the findings share this
        heights = panel.heights(_findings_width(panel))
        need, first = sum(heights) + border, (heights[0] if heights else 1) + border
        rows = len(table.keys) + 1
        if rows + need <= room:
            layout: Layout = (rows, "1fr", None)
        else:
            floor = min(rows, TABLE_MIN_ROWS)
            layout = ("1fr", "auto", max(3, min(max(first, room - floor), room - 2)))
        if layout != self._layout:
            self._layout = layout
            table.styles.height, panel.styles.height, panel.styles.max_height = layout

    # -- actions ------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple) -> Optional[bool]:
        """The main screen's keys are neither shown nor live on the job picker, where they do nothing."""
        return not (action in MAIN_SCREEN_ACTIONS and isinstance(self.screen, PickerScreen))

    def action_pause(self) -> None:
        self.paused = not self.paused
        if self.snapshot is not None:
            self.query_one(JobHeader).show(self.snapshot, self.paused)
            if not self.paused:
                self.show(self.snapshot)

    def action_stack(self) -> None:
        row = self.query_one(WorkersTable).selected_row()
        if row is None or self.snapshot is None:
            return
        if self.source is not None:  # a thread's stack comes with its trainer's
            self.source.watch(row.thread_of or row.pid)
        screen = StackScreen(row.pid, row.thread_of)
        self.push_screen(screen, lambda _: self.source.watch(None) if self.source is not None else None)
        self.call_after_refresh(screen.show, self.snapshot)

    def action_sort(self) -> None:
        table = self.query_one(WorkersTable)
        self._sort(view.SORTS[(view.SORTS.index(table.sort_by) + 1) % len(view.SORTS)])
        self.notify(f"sorted by {table.sort_by}", timeout=2)

    def action_bench(self) -> None:
        panel = self.query_one(FindingsPanel)
        finding = panel.selected()
        if finding is None or not finding.bench_args:  # a consequence's advice is never the fix
            finding = next((e.cause for e in panel.entries if e.cause.bench_args), None)
        if finding is None:
            self.notify("No finding with a suggestion to bench right now.", timeout=4)
            return
        why = missing_torch()
        if why is not None:
            self.notify(why, title="b: bench the fix", severity="warning", timeout=15)
            return
        self.push_screen(BenchScreen(finding))

    def get_system_commands(self, screen) -> Iterable[SystemCommand]:
        """The command palette (ctrl+p): Textual's commands and dltop's."""
        yield from super().get_system_commands(screen)
        yield SystemCommand("Stack", "the selected process's newest stack", self.action_stack)
        yield SystemCommand("Bench the fix", "dltop bench on the selected finding's suggestion", self.action_bench)
        yield SystemCommand("Pause / resume", "freeze the display (collection goes on)", self.action_pause)
        for order in view.SORTS:
            yield SystemCommand(f"Sort by {order}", f"order the process table by {order}", partial(self._sort, order))

    def _sort(self, order: str) -> None:
        table = self.query_one(WorkersTable)
        table.sort_by = order
        if self.snapshot is not None:
            table.show(self.snapshot)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_cursor_down(self) -> None:
        self.query_one(WorkersTable).action_cursor_down()

    def action_cursor_up(self) -> None:
        self.query_one(WorkersTable).action_cursor_up()

    def on_unmount(self) -> None:
        self._stop.set()
        for screen in self.screen_stack:
            if isinstance(screen, BenchScreen):
                screen.stop()
        if self.source is not None:
            self.source.close()
        if self.on_exit is not None:
            self.on_exit()
