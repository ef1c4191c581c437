"""``dltop replay FILE``: the live screen on a recording. A cursor over the frames drives
``DltopApp.show`` (every panel, the process table and the stack view show that moment); a bar on
top shows the recorded time and a timeline strip of where findings and incidents were."""

from __future__ import annotations

import textwrap
from typing import Optional

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Footer, Input, Static

from dltop.errors import DltopError
from dltop.model import SEVERITIES, severity_rank
from dltop.record.reader import Recording
from dltop.record.summary import finding_spans
from dltop.record.times import FORMS, local, parse_when
from dltop.tui.app import DltopApp
from dltop.tui.screens import HELP, StackScreen
from dltop.units import span

CELL = {0: ("─", "dim"), 1: ("▂", "cyan"), 2: ("▅", "yellow"), 3: ("█", "red")}
INCIDENT_CELL = ("▼", "bold red")
MINUTE_S = 60.0
REPLAY_ACTIONS = {"step", "jump", "goto", "incident", "play", "replay_help", "no_dump"}


def strip_cells(times, spans: list, incident_frames: list, width: int) -> list:
    """(character, style) per column of a ``width``-column timeline: the most severe finding shown
    in that stretch of time, an incident's mark over it."""
    first, last = times[0], times[-1]
    scale = (width - 1) / max(last - first, 1e-9)

    def column(frame: int) -> int:
        return int((times[frame] - first) * scale)

    levels = [0] * width
    for shown in spans:
        level = max(1, len(SEVERITIES) - severity_rank(shown.severity))  # info 1 .. error 3
        for col in range(column(shown.first), column(shown.last) + 1):
            levels[col] = max(levels[col], level)
    cells = [CELL[level] for level in levels]
    for frame in incident_frames:
        cells[column(frame)] = INCIDENT_CELL
    return cells


class TimelineBar(Widget):
    """Line 1: REPLAY, the recorded time and where the cursor is; line 2: the timeline strip."""

    DEFAULT_CSS = "TimelineBar { height: 2; padding: 0 1; }"

    def __init__(self, recording: Recording, spans: list) -> None:
        super().__init__()
        self.recording, self.spans = recording, spans
        self.incident_frames = [i["frame"] for i in recording.incidents]
        self.cursor = 0
        self.playing = False
        self._cells: tuple = (0, [])  # (width, cells): recomputed only when the width changes

    def show(self, cursor: int, playing: bool) -> None:
        self.cursor, self.playing = cursor, playing
        self.refresh()

    def render(self) -> Text:
        times, count = self.recording.times, len(self.recording)
        at = times[self.cursor]
        line = Text()
        line.append(" REPLAY ", style="bold black on yellow")
        line.append(f" {local(at)}", style="bold")
        line.append(f" · frame {self.cursor + 1:,}/{count:,} · +{span(at - times[0])} of {span(times[-1] - times[0])}")
        if self.playing:
            line.append(" · playing", style="bold green")
        if self.incident_frames:
            line.append(f" · {len(self.incident_frames)} incident{'s' * (len(self.incident_frames) > 1)}", style="red")
        if self.recording.stopped:
            line.append(" · file cut short: replays to its last good frame", style="yellow")
        line.append("\n")
        width = max(1, self.size.width)
        if self._cells[0] != width:
            self._cells = (width, strip_cells(times, self.spans, self.incident_frames, width))
        cells = self._cells[1]
        here = self._column(at, width)
        for col, (char, style) in enumerate(cells):
            line.append(char, style=f"{style} reverse" if col == here else style)
        return line

    def _column(self, at: float, width: int) -> int:
        times = self.recording.times
        return int((at - times[0]) * (width - 1) / max(times[-1] - times[0], 1e-9))

    def on_click(self, event: events.Click) -> None:
        """A click on the strip goes to that moment."""
        if event.y == 1 and self.size.width > 1:
            times = self.recording.times
            at = times[0] + event.x / (self.size.width - 1) * (times[-1] - times[0])
            app = self.app
            if isinstance(app, ReplayApp):
                app.goto(self.recording.index_at(at))


class GotoScreen(ModalScreen):
    """Asks for a time; dismisses with the text typed (None on escape)."""

    DEFAULT_CSS = """
    GotoScreen { align: center middle; }
    #goto { width: 76; height: auto; border: round $accent; padding: 0 1; background: $surface; }
    """
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(id="goto"):
            yield Static(f"Go to: {FORMS}")
            yield Input(placeholder="03:12:05")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


REPLAY_HELP = f"""\
dltop replay shows a recording on the live screen: every panel, the process
table and the stack view (enter/s) show the moment under the cursor; the bar
on top says when that was, and its strip where findings (▂ info, ▅ warning,
█ error) and incidents (▼) were. Click the strip to go there.

Replay keys
  left/right   a tick back / forward       n / N    next / previous incident
  [ ] or shift+left/right  a minute        p space  play at the recorded pace
{textwrap.fill("g            go to " + FORMS, 76, initial_indent="  ", subsequent_indent=" " * 15)}

"""


class ReplayHelpScreen(Screen):
    BINDINGS = [Binding("escape,question_mark,q", "app.pop_screen", "back")]

    def compose(self) -> ComposeResult:
        yield Static(REPLAY_HELP + HELP)
        yield Footer()


class ReplayApp(DltopApp):
    """DltopApp on a Recording: keys move a cursor over its frames and show the frame under it."""

    TITLE = "dltop replay"
    BINDINGS = [
        Binding("left", "step(-1)", "◀", priority=True),
        Binding("right", "step(1)", "▶", priority=True),
        Binding("left_square_bracket,shift+left", "jump(-1)", "-1m", priority=True),
        Binding("right_square_bracket,shift+right", "jump(1)", "+1m", priority=True),
        Binding("g", "goto", "go to"),
        Binding("n", "incident(1)", "incident"),
        Binding("N", "incident(-1)", show=False),
        Binding("p,space", "play", "play"),
        Binding("question_mark", "replay_help", "help"),
        Binding("d", "no_dump", show=False, priority=True),
    ]

    def __init__(self, recording: Recording) -> None:
        interval = recording.header.get("settings", {}).get("interval_s") or 1.0
        super().__init__(interval=interval)  # collects nothing: the cursor feeds ``show``
        self.recording = recording
        self.cursor = 0  # the frame shown
        self._player: Optional[Timer] = None
        self.spans: list = finding_spans(list(recording.metas()), len(recording))

    def compose(self) -> ComposeResult:
        yield TimelineBar(self.recording, self.spans)
        yield from super().compose()

    def on_mount(self) -> None:
        self.call_after_refresh(self.goto, 0)
        if self.recording.stopped:
            self.notify(self.recording.stopped, severity="warning", timeout=15)

    def goto(self, index: int) -> None:
        index = max(0, min(index, len(self.recording) - 1))
        try:
            snap = self.recording.snapshot(index)
        except DltopError as err:
            self.notify(str(err), severity="error", timeout=10)
            return
        self.cursor = index
        self.show(snap)
        self.query_one(TimelineBar).show(index, self._player is not None)

    def check_action(self, action: str, parameters: tuple) -> Optional[bool]:
        """Replay keys give way to the go-to prompt; ``d`` is caught only on the stack view."""
        if action in REPLAY_ACTIONS and isinstance(self.screen, GotoScreen):
            return False
        if action == "no_dump":
            return isinstance(self.screen, StackScreen)
        return super().check_action(action, parameters)

    # -- actions ---------------------------------------------------------------------------

    def action_step(self, ticks: int) -> None:
        self.goto(self.cursor + ticks)

    def action_jump(self, minutes: int) -> None:
        self.goto(self.recording.index_at(self.recording.times[self.cursor] + minutes * MINUTE_S))

    def action_incident(self, direction: int) -> None:
        frames = [i["frame"] for i in self.recording.incidents]
        ahead = [f for f in frames if f > self.cursor] if direction > 0 else [f for f in frames if f < self.cursor]
        if not ahead:
            self.notify(f"No {'later' if direction > 0 else 'earlier'} incident.", timeout=3)
            return
        self.goto(min(ahead) if direction > 0 else max(ahead))

    def action_goto(self) -> None:
        self.push_screen(GotoScreen(), self._go_to_text)

    def _go_to_text(self, text: Optional[str]) -> None:
        if not text:
            return
        times = self.recording.times
        try:
            self.goto(self.recording.index_at(parse_when(text, times[0], times[-1])))
        except DltopError as err:
            self.notify(str(err), severity="error", timeout=8)

    def action_play(self) -> None:
        """Plays at the recorded pace; again to stop."""
        if self._player is not None:
            self._player.stop()
            self._player = None
        else:
            self._player = self.set_interval(self.interval, self._advance)
        self.query_one(TimelineBar).show(self.cursor, self._player is not None)

    def _advance(self) -> None:
        if self.cursor >= len(self.recording) - 1:
            self.action_play()
            return
        self.goto(self.cursor + 1)

    def action_replay_help(self) -> None:
        self.push_screen(ReplayHelpScreen())

    def action_no_dump(self) -> None:
        self.notify("A replay has no live process to dump: this is the stack recorded at that moment.", timeout=5)
