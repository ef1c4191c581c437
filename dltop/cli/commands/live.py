"""``dltop [--pid P]``: the live view of one job, or without --pid a picker of the jobs on this machine.

It is no subcommand: its options sit on the top-level parser, and main runs it when no command is named.
"""

from __future__ import annotations

import argparse

from dltop.cli.options import (
    add_interval_option,
    add_secrets_option,
    add_stack_options,
    need_terminal,
    settings_from,
    show_secrets,
)
from dltop.errors import DltopError
from dltop.live.schedule import REFRESH_S, ticks_in_window


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=int, help="watch this job live (the trainer, a worker or its launcher)")
    add_interval_option(parser, REFRESH_S, "refreshes")
    add_stack_options(parser)
    add_secrets_option(parser)


def run(args: argparse.Namespace) -> int:
    from dltop.live.loop import open_loop
    from dltop.tui.app import DltopApp

    settings = settings_from(args)
    window = ticks_in_window(args.interval)
    if args.pid is None:
        need_terminal()
        app = DltopApp(
            lambda pid: open_loop(pid, settings, not args.no_stacks, show_secrets(args, pid), window_ticks=window),
            args.interval,
            pick=True,
        )
    else:  # a bad pid fails here, in one line
        source = open_loop(args.pid, settings, not args.no_stacks, show_secrets(args, args.pid), window_ticks=window)
        try:
            need_terminal()
        except DltopError:
            source.close()
            raise
        app = DltopApp(lambda: source, interval=args.interval)
    app.run()
    if app.error:
        raise DltopError(app.error)
    return 0
