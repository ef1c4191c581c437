"""Textual's Linux driver with an input thread that sleeps until there is something to do.

Textual's own input thread wakes ten times a second (``select`` with a 0.1 s timeout) to see
whether it should stop and whether a lone ESC has waited long enough to be a key: measured,
0.2 % of a core on an idle screen, as much as everything else an idle Textual app does. This one
blocks until a key arrives, until the moment the parser is waiting for (a lone ESC, then
``ESCDELAY`` later), or until ``disable_input`` writes to a wake-up pipe. A Textual whose parser
keeps no such deadline gets Textual's own loop. The private Textual names it reads (the parser, its
deadline, the driver's debug flag) come from textual_private.py.
"""

from __future__ import annotations

import os
import selectors
from codecs import getincrementaldecoder
from typing import Optional

from textual.drivers.linux_driver import LinuxDriver

from dltop.tui.textual_private import ParseError, XTermParser, driver_debug, get_time, keeps_deadline, parser_deadline


class QuietLinuxDriver(LinuxDriver):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)

    def disable_input(self) -> None:
        """Wake the input thread so it sees the exit event now. The byte stays in the pipe until
        the thread has been joined: a thread that wakes before the event is set finds the pipe
        still readable and looks again at once."""
        os.write(self._wake_write, b"!")
        try:
            super().disable_input()
        finally:
            self._drain_wake_pipe()

    def _drain_wake_pipe(self) -> None:
        try:
            while os.read(self._wake_read, 64):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        super().close()
        for fd in (self._wake_read, self._wake_write):
            try:
                os.close(fd)
            except OSError:
                pass

    def run_input_thread(self) -> None:
        parser = XTermParser(driver_debug(self))
        if not keeps_deadline(parser):  # another Textual: its own loop
            super().run_input_thread()
            return
        decode = getincrementaldecoder("utf-8")().decode
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(self._wake_read, selectors.EVENT_READ)
        try:
            while not self.exit_event.is_set():
                ready = {key.fd for key, _ in selector.select(_timeout(parser))}
                if self.fileno in ready:
                    data = decode(os.read(self.fileno, 4096))
                    if data:
                        for event in parser.feed(data):
                            self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
        finally:
            selector.close()
            try:
                for _ in parser.feed(""):
                    pass
            except (EOFError, ParseError):
                pass


def _timeout(parser: XTermParser) -> Optional[float]:
    """None (wait for input) unless the parser waits for a moment: then until that moment."""
    deadline = parser_deadline(parser)
    return None if deadline is None else max(0.0, deadline - get_time())
