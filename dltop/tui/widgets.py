"""The panels of the main screen. Each takes a Snapshot in ``show`` and redraws only itself."""

from __future__ import annotations

from collections import deque
from typing import Union

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from dltop.model import Snapshot
from dltop.tui import view
from dltop.units import percent

HISTORY = 60  # sparkline samples kept per GPU
BADGE_STYLE = {
    "healthy": "bold black on green",
    "input-bound": "bold black on yellow",
    "attention": "bold black on yellow",
    "hung": "bold white on red",
    "dead": "bold white on red",
    "exited": "bold white on blue",
}
ALERT_RICH = {"hung": Style(color="red", bold=True), "dead": Style(color="red", bold=True), "exited": Style(dim=True)}
HEADER_RICH = Style(bold=True, underline=True)
CURSOR_RICH = Style(reverse=True)
CURSOR_BLUR_RICH = Style(underline=True)
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


class TextPanel(Widget):
    """Text that is repainted only when it changes, and re-laid-out only when its height does
    (Static.update lays the whole screen out again on every call)."""

    def __init__(self, text: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self._text: Union[str, Text] = text

    def render(self) -> Union[str, Text]:
        return self._text

    def set_text(self, text: Union[str, Text]) -> None:
        if text == self._text:
            return
        grew = str(text).count("\n") != str(self._text).count("\n")
        self._text = text
        self.refresh(layout=grew)


class JobHeader(TextPanel):
    """Job, uptime, start method, ranks; data-wait share, GPU busy share, and the state badge."""

    def show(self, snap: Snapshot, paused: bool) -> None:
        badge = view.badge(snap)
        line = Text()
        line.append(f" {badge.text} ", style=BADGE_STYLE.get(badge.state, "bold"))
        line.append(f"  data wait {percent(view.data_wait(snap))}", style="bold")
        line.append(f" · GPU {percent(view.gpu_util(snap))}" if snap.gpus else " · no GPU")
        if snap.stacks_status != "ok":
            line.append(f" · stacks {snap.stacks_status}", style="yellow")
        if paused:
            line.append("  [PAUSED]", style="bold reverse")
        line.append("\n")
        line.append(view.header_line(snap), style="dim")
        self.set_text(line)


class GpuPanel(TextPanel):
    def on_mount(self) -> None:
        self.border_title = "GPU"
        self._history: dict = {}

    def show(self, snap: Snapshot) -> None:
        if snap.gpu_status != "ok" or not snap.gpus:
            reason = {"no-nvml": "no NVML library", "no-devices": "NVML sees none"}
            self.set_text(f"no NVIDIA GPU\n({reason.get(snap.gpu_status, snap.gpu_status)})")
            return
        lines = []
        for gpu in snap.gpus:
            history = self._history.setdefault(gpu.index, deque(maxlen=HISTORY))
            history.append(gpu.util_percent)
            width = max(8, self.size.width - 14)
            lines.append(view.gpu_line(gpu, list(history)[-width:]))
        self.set_text("\n".join(lines))


class SystemPanel(TextPanel):
    def on_mount(self) -> None:
        self.border_title = "CPU · memory · disks"

    def show(self, snap: Snapshot) -> None:
        self.set_text("\n".join(view.system_lines(snap)))


class WorkersTable(ScrollView, can_focus=True):
    """Job processes grouped by trainer, as htop draws them: each row one pre-formatted line, kept
    until its figures change, so a refresh costs a few string joins however many workers there are
    (a DataTable re-renders every cell: ~75 ms per refresh at 64 workers, this ~1 ms)."""

    BINDINGS = [
        Binding("up", "cursor_up", show=False),
        Binding("down", "cursor_down", show=False),
        Binding("pageup", "page_up", show=False),
        Binding("pagedown", "page_down", show=False),
        Binding("home", "first", show=False),
        Binding("end", "last", show=False),
    ]
    RIGHT = ("pid", "cpu", "rss", "uss", "fds", "read", "age")

    def on_mount(self) -> None:
        self.sort_by = "group"
        self.cursor = 0
        self._keys: list = []
        self._rows: list = []
        self._lines: list = []  # a Strip per row
        self._cache: dict = {}  # (alert, cell texts) -> Strip: unchanged rows are not formatted again
        self._columns: tuple = view.NARROW

    def show(self, snap: Snapshot) -> None:
        selected = self.selected_key()
        self._columns = view.WIDE if self.size.width >= 110 else view.NARROW
        self._rows = view.rows(snap, self.sort_by)
        self._keys = [r.key for r in self._rows]
        if selected in self._keys:
            self.cursor = self._keys.index(selected)
        self.cursor = min(self.cursor, max(0, len(self._rows) - 1))
        cache, self._cache = self._cache, {}
        self._lines = []
        for row in self._rows:
            key = (row.alert, tuple(row.cells.get(c, "") for c in self._columns))
            self._cache[key] = cache.get(key) or self._format(row)
            self._lines.append(self._cache[key])
        self.virtual_size = Size(self._line_width(), len(self._rows) + 1)
        self.refresh()

    def _line_width(self) -> int:
        return sum(view.COLUMNS[c][1] + 1 for c in self._columns) + 1

    def _format(self, row: view.Row) -> Strip:
        text = " " + " ".join(self._fit(c, row.cells.get(c, "")) for c in self._columns)
        return Strip([Segment(text, ALERT_RICH.get(row.alert or ""))], len(text))

    def _fit(self, column: str, value: str) -> str:
        width = view.COLUMNS[column][1]
        value = value if len(value) <= width else value[: width - 1] + "…"
        return value.rjust(width) if column in self.RIGHT else value.ljust(width)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x, scroll_y = self.scroll_offset
        if y == 0:  # the header stays put while rows scroll
            text = " " + " ".join(self._fit(c, view.COLUMNS[c][0]) for c in self._columns)
            strip = Strip([Segment(text, HEADER_RICH)], len(text))
        else:
            index = scroll_y + y - 1
            if index >= len(self._rows):
                return Strip.blank(width)
            strip = self._lines[index]
            if index == self.cursor:
                strip = strip.apply_style(CURSOR_RICH if self.has_focus else CURSOR_BLUR_RICH)
        return strip.crop_extend(scroll_x, scroll_x + width, None)

    # -- the cursor ------------------------------------------------------------------------

    def move_cursor(self, row: int) -> None:
        self.cursor = max(0, min(row, len(self._rows) - 1))
        visible = max(1, self.size.height - 1)
        if self.cursor < self.scroll_offset.y:
            self.scroll_to(y=self.cursor, animate=False)
        elif self.cursor >= self.scroll_offset.y + visible:
            self.scroll_to(y=self.cursor - visible + 1, animate=False)
        self.refresh()

    def action_cursor_up(self) -> None:
        self.move_cursor(self.cursor - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(self.cursor + 1)

    def action_page_up(self) -> None:
        self.move_cursor(self.cursor - max(1, self.size.height - 2))

    def action_page_down(self) -> None:
        self.move_cursor(self.cursor + max(1, self.size.height - 2))

    def action_first(self) -> None:
        self.move_cursor(0)

    def action_last(self) -> None:
        self.move_cursor(len(self._rows) - 1)

    def on_click(self, event: events.Click) -> None:
        if event.y >= 1:
            self.move_cursor(self.scroll_offset.y + event.y - 1)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    @property
    def keys(self) -> list:
        """Row keys in display order: a pid, or "<pid>x" for a worker that died."""
        return list(self._keys)

    def selected_key(self):
        return self._keys[self.cursor] if self.cursor < len(self._keys) else None

    def selected_pid(self):
        return self._rows[self.cursor].pid if self.cursor < len(self._rows) else None


class FindingsPanel(OptionList):
    """Findings, most severe first: title, evidence, the change to paste."""

    def on_mount(self) -> None:
        self.border_title = "Findings"
        self.findings: list = []
        self._shown = None

    def show(self, snap: Snapshot) -> None:
        shown = [(f.id, f.title, f.detail, f.suggestion) for f in snap.findings]
        if shown == self._shown:
            return
        self._shown = shown
        highlighted = self.highlighted
        self.findings = list(snap.findings)
        self.clear_options()
        if not self.findings:
            self.add_option(Option(Text("No findings: nothing to fix right now.", style="green"), disabled=True))
            return
        for finding in self.findings:
            self.add_option(Option(_finding_text(finding)))
        if highlighted is not None and highlighted < len(self.findings):
            self.highlighted = highlighted

    def selected(self):
        if self.highlighted is None or self.highlighted >= len(self.findings):
            return None
        return self.findings[self.highlighted]


def _finding_text(finding) -> Text:
    text = Text()
    text.append(f"[{finding.severity}] ", style=SEVERITY_STYLE.get(finding.severity, ""))
    text.append(f"{finding.title}", style="bold")
    text.append(f"  ({finding.id})\n", style="dim")
    text.append(f"  {finding.detail}\n")
    if finding.suggestion:
        text.append("  fix: ", style="bold green")
        text.append(finding.suggestion, style="green")
    if finding.bench_args:
        text.append("  [b: bench it]", style="dim")
    return text
