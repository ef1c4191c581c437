"""Every private Textual name dltop uses, and only here.

Checked on Textual 8.2.8 (pyproject.toml pins ``textual>=8.2,<9``). A Textual release may rename
or drop any of these without notice: tests/unit/test_textual_private.py fails when the installed
Textual no longer has them as used here, so a new Textual is checked against this module, not
against the whole TUI.

- ``textual._xterm_parser.XTermParser(debug)``, its ``feed(data)`` and ``tick()``, and
  ``textual._parser.ParseError``: the parser of terminal input (driver.py reads keys with it).
- ``Parser._timeout_time``: the moment (``textual._time.get_time``'s clock) a parser waiting after
  a lone ESC stops waiting, or None. A Textual without it gets Textual's own input loop.
- ``Driver._debug``: the driver's debug flag, handed to the parser as Textual does.
- ``OptionList._get_visual(option)``: the Visual an option is drawn from (widgets.py measures the
  findings' heights with it, as OptionList itself does).
"""

from __future__ import annotations

from typing import Optional

from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.driver import Driver
from textual.visual import Visual
from textual.widgets import OptionList
from textual.widgets.option_list import Option

CHECKED_ON = ("8.2.8",)

__all__ = [
    "CHECKED_ON",
    "ParseError",
    "XTermParser",
    "driver_debug",
    "get_time",
    "keeps_deadline",
    "option_visual",
    "parser_deadline",
]


def driver_debug(driver: Driver) -> bool:
    return driver._debug


def keeps_deadline(parser: XTermParser) -> bool:
    """Whether this Textual's parser keeps the moment a lone ESC becomes a key."""
    return hasattr(parser, "_timeout_time")


def parser_deadline(parser: XTermParser) -> Optional[float]:
    """When the parser stops waiting (on ``get_time``'s clock), or None if it waits for nothing."""
    return parser._timeout_time


def option_visual(option_list: OptionList, option: Option) -> Visual:
    return option_list._get_visual(option)
