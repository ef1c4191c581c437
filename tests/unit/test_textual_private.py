"""The private Textual names dltop uses (dltop/tui/textual_private.py) are still there, as used.

A failure here means the installed Textual renamed or changed one of them: fix
dltop/tui/textual_private.py for that Textual (and the versions it names as checked), not the TUI.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import time
from importlib import import_module
from pathlib import Path

import pytest
from textual.content import Content
from textual.driver import Driver
from textual.visual import Visual
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from dltop.tui import textual_private

DLTOP = Path(__file__).resolve().parents[2] / "dltop"
PRIVATE_ATTRIBUTES = {"_timeout_time", "_get_visual", "_debug"}  # Textual's, read only in textual_private.py


def _parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize(
    "module, name",
    [("textual._parser", "ParseError"), ("textual._time", "get_time"), ("textual._xterm_parser", "XTermParser")],
)
def test_the_private_modules_have_the_names(module, name):
    assert hasattr(import_module(module), name), f"{module}.{name} is gone from this Textual"


def test_the_xterm_parser_keeps_the_moment_a_lone_escape_becomes_a_key():
    XTermParser = textual_private.XTermParser
    assert _parameters(XTermParser) == ["debug"]
    assert _parameters(XTermParser.feed) == ["self", "data"]
    assert _parameters(XTermParser.tick) == ["self"]
    assert issubclass(textual_private.ParseError, Exception)

    parser = XTermParser(False)
    assert textual_private.keeps_deadline(parser), "the parser no longer has _timeout_time: the driver falls back"
    assert textual_private.parser_deadline(parser) is None  # waits for nothing yet
    assert list(parser.feed("\x1b")) == []  # a lone ESC: maybe the start of a sequence
    deadline = textual_private.parser_deadline(parser)
    assert isinstance(deadline, float)
    assert 0 < deadline - textual_private.get_time() <= 1.0  # on get_time's clock, a moment away
    time.sleep(max(0.0, deadline - textual_private.get_time()) + 0.01)
    assert [key.key for key in parser.tick()] == ["escape"]
    assert textual_private.parser_deadline(parser) is None


def test_get_time_is_a_clock_called_with_no_arguments():
    try:
        assert _parameters(textual_private.get_time) == []
    except ValueError:  # a builtin without a signature (time.monotonic on Linux)
        pass
    before = textual_private.get_time()
    assert isinstance(before, float) and textual_private.get_time() >= before


def test_a_driver_keeps_its_debug_flag():
    class Bare(Driver):
        def write(self, data: str) -> None: ...
        def start_application_mode(self) -> None: ...
        def stop_application_mode(self) -> None: ...
        def disable_input(self) -> None: ...

    async def made(debug: bool) -> bool:  # a driver is made in a running loop
        return textual_private.driver_debug(Bare(None, debug=debug))  # type: ignore[arg-type]

    assert "debug" in _parameters(Driver.__init__)
    assert asyncio.run(made(True)) is True
    assert asyncio.run(made(False)) is False


def test_an_option_list_draws_an_option_from_its_visual():
    assert _parameters(OptionList._get_visual) == ["self", "option"]
    prompt = Content("a finding")
    options = OptionList(Option(prompt))
    visual = textual_private.option_visual(options, options.options[0])
    assert visual is prompt  # a Visual prompt is drawn as it is (widgets.KeptVisual relies on it)
    assert isinstance(visual, Visual)


def test_no_other_module_of_dltop_uses_a_private_textual_name():
    found = []
    for path in sorted(DLTOP.rglob("*.py")):
        if path.name == "textual_private.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            found += [f"{path}:{node.lineno} imports {m}" for m in modules if re.match(r"textual(\.\w+)*\._", m)]
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE_ATTRIBUTES:
                found.append(f"{path}:{node.lineno} reads .{node.attr}")
    assert not found, "private Textual names belong in dltop/tui/textual_private.py:\n" + "\n".join(found)


def test_it_names_the_textual_versions_it_was_checked_on():
    assert textual_private.CHECKED_ON
    assert all(version in (textual_private.__doc__ or "") for version in textual_private.CHECKED_ON)
