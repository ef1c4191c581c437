"""The panels of the main screen. Each takes a Snapshot in ``show`` and redraws only itself."""

from __future__ import annotations

import functools
import math
import time
from collections import deque
from typing import Optional, Sequence, Union, cast

from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.css.styles import RulesMap
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.timer import Timer
from textual.visual import RenderOptions, RichVisual, Visual
from textual.widget import Widget
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from dltop.diagnose.relations import Entry, grouped
from dltop.model import Snapshot
from dltop.tui import view
from dltop.tui.textual_private import option_visual
from dltop.units import percent

FIGURES_EVERY_S = 3.0  # a live view redraws a finding whose figures alone changed at most this often
HISTORY = 60  # samples kept per GPU and per trainer for their history
CHART_ROWS = 3  # rows of a trainer's data-wait history on a tall screen
CHART_MIN_HEIGHT = 40
PHASE_BAR_CELLS = 20
BADGE_STYLE = {
    "healthy": "bold black on green",
    "input-bound": "bold black on yellow",
    "attention": "bold black on yellow",
    "hung": "bold white on red",
    "dead": "bold white on red",
    "stopped": "bold white on red",
    "exited": "bold white on blue",
}
RIGHT_ALIGNED = ("pid", "cpu", "rss", "uss", "fds", "read", "age")
ALERT_RICH = {"hung": Style(color="red", bold=True), "dead": Style(color="red", bold=True), "exited": Style(dim=True),
              "straggler": Style(color="yellow", bold=True), "stopper": Style(color="red", bold=True),
              "feeder": Style(dim=True)}  # fmt: skip
HEADER_RICH = Style(bold=True, underline=True)
CURSOR_RICH = Style(reverse=True)
CURSOR_BLUR_RICH = Style(underline=True)
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


class TextPanel(Widget):
    """Text whose changed lines alone are repainted, re-laid-out only when its height changes
    (Static.update lays the whole screen out again on every call). Its lines are drawn through
    the line API, each rendered once per change and width: Textual's content pipeline (parse,
    wrap, a Strip per line with link styles) cost a fifth of each refresh for a few meters."""

    def __init__(self, text: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self._text: Union[str, Text, None] = text  # what set_text was given last (None: set_lines)
        self._lines = _split(text)
        self._strips: dict = {}  # line -> its Strip at _strips_width
        self._strips_width = 0

    def render(self) -> Text:
        """What the panel shows (its lines are drawn by ``render_line``)."""
        return Text("\n").join(self._lines)

    def set_text(self, text: Union[str, Text]) -> None:
        if text != self._text:
            self.set_lines(_split(text))
            self._text = text

    def set_lines(self, lines: list[Text]) -> None:
        """The panel's lines as they are: a panel that builds its lines one by one hands them over
        (joining them into one Text to split it again cost as much as building them)."""
        before, self._lines, self._text = self._lines, lines, None
        if len(lines) != len(before):
            self._strips.clear()
            self.refresh(layout=True)
            return
        changed = [y for y, (old, new) in enumerate(zip(before, lines)) if old != new]
        for y in changed:
            self._strips.pop(y, None)
        if changed:  # a meter's line changes every tick, the rest seldom
            self.refresh(*(Region(0, y, self.size.width, 1) for y in changed))

    @property
    def line_count(self) -> int:
        return len(self._lines)

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return max((line.cell_len for line in self._lines), default=0)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if width != self._strips_width:
            self._strips, self._strips_width = {}, width
        if y >= len(self._lines):
            return Strip.blank(width, self.rich_style)
        if y not in self._strips:  # the CSS colours under the text's own styles
            self._strips[y] = _strip(self._lines[y], width, self.rich_style, self.app.console)
        return self._strips[y]


def _split(text: Union[str, Text]) -> list:
    return list((text if isinstance(text, Text) else Text(text)).split("\n", allow_blank=True))


def _strip(line: Text, width: int, base: Style, console) -> Strip:
    """One line of text as exactly ``width`` cells: cut with an ellipsis, or padded."""
    if line.cell_len > width:
        line = line.copy()
        line.truncate(width, overflow="ellipsis")
    segments = list(Segment.apply_style(line.render(console), base))
    if line.cell_len < width:
        segments.append(Segment(" " * (width - line.cell_len), base))
    return Strip(segments, width)


class JobHeader(TextPanel):
    """Two lines: the state badge with the root cause (or what is still being measured), then
    the headline figures and the job, each cut to the width at a word."""

    def on_mount(self) -> None:
        self._shown: tuple = ()

    def show(self, snap: Snapshot, paused: bool) -> None:
        self._shown = (snap, paused)
        self._draw()

    def on_resize(self) -> None:
        if self._shown:
            self._draw()

    def _draw(self) -> None:
        snap, paused = self._shown
        width = max(20, self.content_region.width)
        badge = view.badge(snap)
        pause = "  [PAUSED]" if paused else ""
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(f" {badge.text} ", style=BADGE_STYLE.get(badge.state, "bold"))
        line.append("  " + view.fit_words(view.headline(snap), width - len(badge.text) - 4 - len(pause)), style="bold")
        line.append(pause, style="bold reverse")
        figures = view.figures_line(snap)
        job = view.fit_words(f"{figures} · {view.header_line(snap)}", width)[len(figures) :]
        line.append("\n")
        line.append(figures, style="bold")
        line.append(job, style="dim")
        self.set_text(line)


class GpuPanel(TextPanel):
    """Per GPU its busy share with a history, and memory (the job's share). Hidden when there is
    no GPU: the system panel then says so in one line."""

    def on_mount(self) -> None:
        self.border_title = "GPU"
        self._history: dict = {}

    def show(self, snap: Snapshot) -> None:
        if self.display != view.has_gpus(snap):  # setting it at all repaints
            self.display = not self.display
        if not self.display:
            return
        lines = []
        for gpu in snap.gpus:
            history = self._history.setdefault(gpu.index, deque(maxlen=HISTORY))
            history.append(gpu.util_percent)
            width = max(8, self.size.width - 14)
            lines.append(view.gpu_line(gpu, list(history)[-width:]))
        self.set_text("\n".join(lines))


class TrainerTimePanel(TextPanel):
    """Each trainer's data wait over time (is it getting better since the last change?), where
    its time goes now, and how busy each of its workers is: one line a trainer, as nvitop's
    history and htop's meters. Hidden on a short terminal, which needs its rows for the table."""

    def on_mount(self) -> None:
        self.border_title = "Trainer time: data wait over time · where the time goes now · workers' CPU"
        self._history: dict[tuple[int, str], deque] = {}  # (trainer, dataset): a trainer may run two loaders
        self._shown: Optional[Snapshot] = None

    def show(self, snap: Snapshot) -> None:
        for loader in snap.loaders:
            key = (loader.trainer_pid, loader.dataset or "")
            self._history.setdefault(key, deque(maxlen=HISTORY)).append(loader.data_wait_percent)
        self._shown = snap
        self._draw()

    def on_resize(self) -> None:
        if self._shown is not None:
            self._draw()

    def _draw(self) -> None:
        snap = self._shown
        if snap is None:
            return
        width = max(40, self.content_region.width)
        span = max(8, min(HISTORY, width // 3))
        # a few rows of history a trainer where the screen has them to spare, else a sparkline
        rows = CHART_ROWS if self.app.size.height >= CHART_MIN_HEIGHT and len(snap.loaders) <= 2 else 1
        lines: list[Text] = []
        meters = view.cpu_meters(snap)
        for loader in snap.loaders:
            history = list(self._history.get((loader.trainer_pid, loader.dataset or ""), ()))[-span:]
            history = [None] * (span - len(history)) + history  # the newest on the right, as htop
            chart = view.chart(history, rows)
            spent = loader.trainer_time
            right = [Text.assemble("now ", (f"{percent(loader.data_wait_percent):>4}", "bold yellow"), " waiting  ")]
            if spent is not None:
                right[0].append_text(Text.assemble(*view.phase_bar(spent, PHASE_BAR_CELLS)))
                right.append(Text(view.phase_words(spent), style="dim"))
            right.append(Text.assemble("workers' CPU ", (meters.get(loader.trainer_pid, ""), "cyan")))
            # the parts of each row; one line: the words, the longest, last (a narrow screen cuts them first)
            parts = [[right[0], right[-1], *right[1:-1]]] if rows == 1 else [[part] for part in right]
            label = view.trainer_label(snap, loader.trainer_pid)
            if sum(other.trainer_pid == loader.trainer_pid for other in snap.loaders) > 1:
                label = f"{label} {loader.dataset or '?'}"  # which of its loaders
            for row, bars in enumerate(chart):
                line = Text(no_wrap=True, overflow="ellipsis")
                line.append(f"{label if row == 0 else '':<13}", style="bold")
                line.append(("wait " if row == len(chart) - 1 else "     ") + "│", style="dim")
                line.append(bars, style="yellow")
                line.append("│ ", style="dim")
                for index, part in enumerate(parts[row] if row < len(parts) else ()):
                    if index:
                        line.append(" ")
                    line.append_text(part)
                lines.append(line)
        self.set_lines(lines or [Text("no DataLoader with workers seen yet", style="dim")])


class SystemPanel(TextPanel):
    """CPU, memory, /dev/shm, the job's disks (and "no GPU"), in as many columns as fit, as
    htop's meters: a wide terminal spends no rows on them."""

    def on_mount(self) -> None:
        self.border_title = "CPU · memory · disks"
        self._meters: list = []

    def show(self, snap: Snapshot) -> None:
        self._meters = view.system_lines(snap)
        title = "CPU · memory · disks" + ("" if view.has_gpus(snap) else " · GPU")
        if title != self.border_title:  # setting it at all repaints
            self.border_title = title
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        self.set_text("\n".join(view.columns(self._meters, max(20, self.content_region.width))))


class WorkersTable(ScrollView, can_focus=True):
    """Job processes grouped by trainer, as htop draws them: each row one line, formatted when it is
    first drawn and kept until its figures change, so a refresh costs a few string joins for the
    rows on screen however many workers there are (a DataTable re-renders every cell: ~75 ms per
    refresh at 64 workers, this ~1 ms)."""

    BINDINGS = [
        Binding("up", "cursor_up", show=False),
        Binding("down", "cursor_down", show=False),
        Binding("pageup", "page_up", show=False),
        Binding("pagedown", "page_down", show=False),
        Binding("home", "first", show=False),
        Binding("end", "last", show=False),
    ]

    def on_mount(self) -> None:
        self.sort_by = "group"
        self.cursor = 0
        self._keys: list = []
        self._rows: list = []
        self._lines: list = []  # each row's (alert, cell texts), formatted when it is drawn
        self._cache: dict = {}  # (alert, cell texts) -> Strip, for rows drawn: an unchanged row is not formatted again
        self._columns: tuple = view.NARROW

    def show(self, snap: Snapshot) -> None:
        selected = self.selected_key()
        self._rows = view.rows(snap, self.sort_by)
        columns, self._columns = self._columns, self._fitting()
        self._keys = [r.key for r in self._rows]
        cursor = self.cursor
        if selected in self._keys:
            self.cursor = self._keys.index(selected)
        self.cursor = min(self.cursor, max(0, len(self._rows) - 1))
        if cursor != self.cursor:
            columns = ()  # the highlight moved with its row: repaint all
        before = self._lay_out()
        self._refresh_changed(before, columns)

    def on_resize(self) -> None:
        """The columns follow the width: a view shown before its first layout (a replay, a recording)
        was drawn narrow, and a terminal resized wider or narrower changes which columns fit."""
        columns = self._fitting()
        if columns != self._columns:
            self._columns = columns
            self._lay_out()
            self.refresh()

    def _fitting(self) -> tuple:
        """The columns for this width and these rows (NAME where threads show)."""
        return view.table_columns(self.size.width, any(row.thread_of is not None for row in self._rows))

    def _lay_out(self) -> list:
        """Each row's cells for the columns shown; the lines before, to repaint only what changed."""
        before = self._lines
        self._lines = [(row.alert, tuple(row.cells.get(c, "") for c in self._columns)) for row in self._rows]
        kept = set(self._lines)  # rows off screen are formatted only if they scroll in (64 workers: most)
        self._cache = {key: strip for key, strip in self._cache.items() if key in kept}
        self.virtual_size = Size(self._line_width(), len(self._rows) + 1)
        return before

    def _refresh_changed(self, before: list, columns: tuple) -> None:
        """Repaint only the rows whose text changed (htop redraws what moved, not the screen)."""
        if columns != self._columns or len(before) != len(self._lines):
            self.refresh()
            return
        top, width = self.scroll_offset.y, self.size.width
        changed = [
            Region(0, index - top + 1, width, 1)
            for index, (old, new) in enumerate(zip(before, self._lines))
            if old != new and top <= index < top + self.size.height - 1
        ]
        if changed:  # one call: each refresh() clears caches and wakes the message loop
            self.refresh(*changed)

    def _line_width(self) -> int:
        return sum(view.COLUMNS[c][1] + 1 for c in self._columns) + 1

    def _format(self, cells: tuple, style: Optional[Style]) -> Strip:
        """One row's line: each cell cut or padded to its column (numbers to the right)."""
        text = " " + " ".join(_fit(value, *layout) for value, layout in zip(cells, _layout(self._columns)))
        return Strip([Segment(text, style)], len(text))

    def _strip(self, line: tuple) -> Strip:
        """A row's line, formatted the first time it is drawn with these texts."""
        strip = self._cache.get(line)
        if strip is None:
            strip = self._cache[line] = self._format(line[1], ALERT_RICH.get(line[0] or ""))
        return strip

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x, scroll_y = self.scroll_offset
        if y == 0:  # the header stays put while rows scroll
            strip = self._format(tuple(view.COLUMNS[c][0] for c in self._columns), HEADER_RICH)
        else:
            index = scroll_y + y - 1
            if index >= len(self._rows):
                return Strip.blank(width)
            strip = self._strip(self._lines[index])
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

    def selected_row(self) -> Optional[view.Row]:
        return self._rows[self.cursor] if self.cursor < len(self._rows) else None


class FindingsPanel(OptionList):
    """Findings, cause first: each entry is a root cause with its evidence and the change to
    paste, and under it the findings it explains (consequences, with no fix of their own).
    Lines wrap under their first word (a hanging indent); a long entry scrolls in the panel.

    A finding's text carries live figures ("waits for data 53% (±7)") that change nearly every
    tick on a busy node, and each entry is a Rich table (a full render to measure or draw it): a
    live view redraws an entry whose figures alone changed at most every ``figures_every_s`` (a
    finding that comes, goes or changes its severity or fix shows at once), only the entries whose
    text changed are drawn again, and the screen is laid out again only when a height changed."""

    figures_every_s = 0.0  # a live view sets FIGURES_EVERY_S; a replay shows each frame as it was

    def on_mount(self) -> None:
        self.findings: list = []  # every finding of the snapshot
        self.entries: list[Entry] = []  # one option each
        self._shown: Optional[list[tuple]] = None
        self._empty = Text("")  # what the panel says while there is no finding
        self._visuals: dict[tuple, KeptVisual] = {}  # what an entry draws -> its visual, for the entries drawn
        self._drawn: Optional[list[tuple]] = None  # the outline of each entry drawn ([]: the panel says none)
        self._drawn_at = -math.inf
        self._held: Optional[Timer] = None  # draws the newest figures when their time comes
        self._title()

    def show(self, snap: Snapshot) -> None:
        shown: list[tuple] = [
            (f.id, f.title, f.detail, f.suggestion, f.explained_by, tuple(f.bench_args or ())) for f in snap.findings
        ]
        judged = view.badge(snap).state not in ("measuring", "no-stacks")
        if not shown:  # what the empty panel says moves with the measurement: it is part of what is shown
            shown = [
                ("", "No findings: nothing to fix right now." if judged else "No findings yet: " + view.headline(snap))
            ]
        if shown == self._shown:
            return
        self._shown = shown
        self.findings = list(snap.findings)
        self.entries = grouped(snap.findings)
        self._empty = Text(shown[0][1], style="green" if judged else "dim")
        self._title()
        wait = self._drawn_at + self.figures_every_s - time.monotonic()
        if wait > 0 and self.entries and [_outline(entry) for entry in self.entries] == self._drawn:
            if self._held is None:  # their figures alone changed
                self._held = self.set_timer(wait, self._draw)
            return
        self._draw()

    def _draw(self) -> None:
        if self._held is not None:
            self._held.stop()
            self._held = None
        kept, self._visuals = self._visuals, {}
        visuals = []
        for entry in self.entries:  # an entry drawn as before keeps its visual: its height and lines
            key = _drawing(entry)
            visual = self._visuals.get(key) or kept.get(key) or KeptVisual(self, entry_renderable(entry))
            visuals.append(self._visuals.setdefault(key, visual))
        outlines = [_outline(entry) for entry in self.entries]
        if self._drawn is not None and len(self._drawn) == len(outlines):
            self._replace(visuals or [self._empty])
        else:
            self._rebuild(visuals)
        self._drawn, self._drawn_at = outlines, time.monotonic()

    def _rebuild(self, visuals: list[KeptVisual]) -> None:
        highlighted = self.highlighted
        self.clear_options()
        self.add_options([Option(visual) for visual in visuals] or [Option(self._empty, disabled=True)])
        if visuals:  # the most severe cause is the one `b` acts on until another is picked
            self.highlighted = highlighted if highlighted is not None and highlighted < len(visuals) else 0

    def _replace(self, prompts: Sequence[Union[KeptVisual, Text]]) -> None:
        """As many options as before: the changed ones swap their prompt in place (the highlight and
        the scroll stay), the screen's layout only redone if one of them changed height."""
        region = self.scrollable_content_region
        width = region.width - self.get_component_styles("option-list--option").padding.width
        rules, taller = cast(RulesMap, self.styles), not region  # not laid out yet: the layout measures them
        for index, (option, prompt) in enumerate(zip(self.options, prompts)):
            if option.prompt is not prompt:
                height = None if taller else option_visual(self, option).get_height(rules, width)
                self.replace_option_prompt_at_index(index, prompt)
                taller = taller or option_visual(self, option).get_height(rules, width) != height
        if taller:
            self.refresh(layout=True)

    @property
    def content(self) -> Optional[list]:
        """What the entries were built from (the same list until the findings change)."""
        return self._shown

    def _title(self) -> None:
        keys = " · tab: select"
        if any(e.cause.bench_args for e in self.entries):
            keys += " · b: bench the fix"
        title = f"Findings ({len(self.entries)}){keys if self.entries else ''}"
        if title != self.border_title:  # setting it at all repaints
            self.border_title = title

    def selected(self):
        """The highlighted entry's cause (a consequence is never acted on by itself)."""
        if self.highlighted is None or self.highlighted >= len(self.entries):
            return None
        return self.entries[self.highlighted].cause

    def heights(self, width: int) -> list:
        """Rows each option takes at ``width`` columns (the layout gives the panel what it needs);
        each entry's is worked out once per width (KeptVisual)."""
        rules = cast(RulesMap, self.styles)
        return [option_visual(self, option).get_height(rules, width) for option in self.options]


class KeptVisual(Visual):
    """A Rich renderable drawn once: its height per width and its lines per width and style are
    kept. Textual measures an option when it is added, in every layout pass and (here) in
    ``DltopApp._fit``, and draws it whenever its list's caches are cleared: each a full Rich render
    of the entry's table. The renderable never changes (a new text is a new KeptVisual)."""

    def __init__(self, widget: Widget, renderable: Table) -> None:
        self._rich = RichVisual(widget, renderable)
        self._heights: dict[int, int] = {}
        self._strips: dict[tuple, list[Strip]] = {}

    def get_optimal_width(self, rules: RulesMap, container_width: int) -> int:
        return self._rich.get_optimal_width(rules, container_width)

    def get_height(self, rules: RulesMap, width: int) -> int:
        if width not in self._heights:
            self._heights[width] = self._rich.get_height(rules, width)
        return self._heights[width]

    def render_strips(
        self, width: int, height: Optional[int], style: VisualStyle, options: RenderOptions
    ) -> list[Strip]:
        """A Rich renderable ignores ``options`` (selection: RichVisual draws none)."""
        key = (width, height, style)
        if key not in self._strips:
            self._strips[key] = self._rich.render_strips(width, height, style, options)
        return self._strips[key]


def _outline(entry: Entry) -> tuple:
    """An entry less its figures (its findings' titles and details): a change here shows at once."""
    cause = entry.cause
    return cause.id, cause.severity, cause.suggestion, bool(cause.bench_args), tuple(c.id for c in entry.consequences)


def _drawing(entry: Entry) -> tuple:
    """What ``entry_renderable`` draws of an entry: equal tuples, equal tables."""
    cause = entry.cause
    consequences = tuple((c.title, c.id, c.detail) for c in entry.consequences)
    return cause.severity, cause.title, cause.id, cause.detail, cause.suggestion, bool(cause.bench_args), consequences


MARKS = {"error": "✖", "warning": "▲", "info": "·"}


def entry_renderable(entry: Entry) -> Table:
    """A grid with a marker column: every line after the first starts under the title."""
    cause = entry.cause
    grid = Table.grid(expand=True)
    grid.add_column(width=2, no_wrap=True)
    grid.add_column(ratio=1)
    title = Text.assemble((cause.title, "bold"), ("  " + cause.id, "dim"))
    grid.add_row(Text(MARKS.get(cause.severity, "·"), style=SEVERITY_STYLE.get(cause.severity, "")), title)
    if cause.detail:
        grid.add_row("", Text(cause.detail))
    if cause.suggestion:
        grid.add_row("", _labelled("fix: ", Text(cause.suggestion, style="green"), "bold green"))
    if cause.bench_args:
        grid.add_row("", Text("b: bench this fix on a twin of the job", style="dim"))
    for consequence in entry.consequences:
        body = Text.assemble((consequence.title, "bold"), ("  " + consequence.id, "dim"))
        if consequence.detail:
            body.append("\n" + consequence.detail, style="dim")
        grid.add_row("", _labelled("↳ ", body, "dim"))
    return grid


def _labelled(label: str, body: Text, style: str) -> Table:
    """``label`` then ``body``, the body's wrapped lines under its own first word."""
    grid = Table.grid(expand=True)
    grid.add_column(width=len(label), no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_row(Text(label, style=style), body)
    return grid


@functools.cache
def _layout(columns: tuple) -> tuple:
    """(width, right-aligned) of each column of the workers table."""
    return tuple((view.COLUMNS[c][1], c in RIGHT_ALIGNED) for c in columns)


def _fit(value: str, width: int, right: bool) -> str:
    value = value if len(value) <= width else value[: width - 1] + "…"
    return value.rjust(width) if right else value.ljust(width)
