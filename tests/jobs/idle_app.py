"""An idle Textual app on dltop's input driver (or Textual's, with ``textual``), for the driver test.

It shows ``ready``; a lone ESC (a key only once the parser's ESC delay has passed) changes it to
``escape``; ``q`` quits.
"""

from __future__ import annotations

import sys

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.drivers.linux_driver import LinuxDriver
from textual.widgets import Static

from dltop.tui.driver import QuietLinuxDriver


class IdleApp(App):
    BINDINGS = [Binding("q", "quit"), Binding("escape", "escaped")]

    def __init__(self, driver: type) -> None:
        super().__init__(driver_class=driver)

    def compose(self) -> ComposeResult:
        yield Static("ready")

    def action_escaped(self) -> None:
        self.query_one(Static).update("escape")


if __name__ == "__main__":
    IdleApp(LinuxDriver if sys.argv[1:] == ["textual"] else QuietLinuxDriver).run()
