"""The bench screen (``b`` in the TUI): the whole ``dltop bench`` command line and the bench's
output can be read, long lines wrapped at the screen's width, with no horizontal scrollbar; how
far a twin's ratio can be trusted is said above them."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import subprocess
import sys

from dltop.bench import TWIN_TRUST
from dltop.model import Finding
from tests.unit.test_tui import recorded_app
from tests.windows import bound_window

LONG_ARGS = [
    "--workload", "twin:cpu_ms=1.224,io_ms=45.2,sample_kb=4,collate_ms=0.731,transform_ms=12.5,decode_ms=3.25",
    "--batch-size", "4", "--step-ms", "20",
    "--compare", "num_workers=1,persistent_workers=True,pin_memory=False,prefetch_factor=2,"
                 "multiprocessing_context=fork",
    "--label", "a-label-with-no-space-to-break-at-" + "x" * 120,
]  # fmt: skip
OUTPUT = [
    "dltop bench: " + "y" * 150,
    "[bold]brackets are not markup[/bold]",
    *(f"line {n}" for n in range(40)),
    "the last line",
]
POPEN = subprocess.Popen
PRINT_ARGS = "import sys; print(*sys.argv[1:], sep='\\n')"


def _screen_text(app) -> str:
    """The whole screen as plain text."""
    from rich.console import Console

    console = Console(width=app.size.width, record=True, file=io.StringIO(), color_system=None)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text()


def _log_text(app, log) -> str:
    """What the screen shows inside the log's scrollable region (its scrollbars left out), plain."""
    rows = _screen_text(app).splitlines()
    region = log.scrollable_content_region
    return "\n".join(row[region.x : region.right] for row in rows[region.y : region.bottom])


def test_the_bench_screen_wraps_the_whole_command_line_and_long_output(monkeypatch):
    from dltop.tui.screens import BenchScreen

    wait = Finding("input-bound", "warning", "Trainer waits 80%", "d", [1], {}, "num_workers=4", bench_args=LONG_ARGS)
    snap = dataclasses.replace(bound_window(80.0)[0], findings=[wait])
    commands = []

    def popen(command, **kwargs):  # no real bench: a child that prints OUTPUT
        commands.append(command)
        return POPEN([sys.executable, "-c", PRINT_ARGS, *OUTPUT], **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr("dltop.tui.app.missing_torch", lambda: None)
    command_line = "$ dltop bench " + " ".join(LONG_ARGS)
    assert len(command_line) > 3 * 100

    async def run():
        app = recorded_app("healthy", lambda _: snap)
        async with app.run_test(size=(100, 30)) as pilot:
            while app.snapshot is None:
                await pilot.pause(0.05)
            await pilot.press("b")
            screen = app.screen
            assert isinstance(screen, BenchScreen)
            log = screen.query_one("#log")
            for _ in range(200):
                if log.lines and log.lines[-1] == "the last line":
                    break
                await pilot.pause(0.05)
            await pilot.pause(0.2)
            assert commands == [[sys.executable, "-m", "dltop", "bench", *LONG_ARGS]]
            # how far a twin's ratio can be trusted, said above the bench's output
            assert "".join(TWIN_TRUST.split()) in "".join(_screen_text(app).split())
            assert log.lines == [command_line, *OUTPUT]

            assert log.max_scroll_y > 0  # taller than the screen: it followed the output to its end
            assert "the last line" in _log_text(app, log)
            assert not log.show_horizontal_scrollbar and log.max_scroll_x == 0

            log.scroll_home(animate=False)
            await pilot.pause(0.1)
            shown = _log_text(app, log)
            assert not log.show_horizontal_scrollbar and log.max_scroll_x == 0
            assert "▊" not in shown
            rows = [row.rstrip() for row in shown.splitlines()]
            assert max(len(row) for row in rows) <= log.scrollable_content_region.width
            # every part of the command line and the long output line is on screen, wrapped
            assert "".join(command_line.split()) in "".join(shown.split())
            assert "".join(OUTPUT[0].split()) in "".join(shown.split())
            assert OUTPUT[1] in shown

            await pilot.resize_terminal(60, 30)  # narrower: wrapped again, still nothing to scroll sideways
            await pilot.pause(0.2)
            log.scroll_home(animate=False)
            await pilot.pause(0.1)
            shown = _log_text(app, log)
            assert log.scrollable_content_region.width < 60
            assert not log.show_horizontal_scrollbar and log.max_scroll_x == 0
            assert "".join(command_line.split()) in "".join(shown.split())

    asyncio.run(run())
