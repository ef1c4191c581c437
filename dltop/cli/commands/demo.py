"""``dltop demo``: start a bundled training job with a chosen problem and watch it live, then stop it."""

from __future__ import annotations

import argparse
import sys

from dltop.cli.options import add_interval_option, add_stack_options, need_terminal, settings_from
from dltop.demo.scenarios import DEFAULT_SCENARIO, SCENARIOS
from dltop.live.schedule import REFRESH_S, ticks_in_window

NAME = "demo"
HELP = "start a bundled demo training job and watch it live"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default=DEFAULT_SCENARIO,
                        help="the problem the demo job has (default input-bound)")  # fmt: skip
    add_interval_option(parser, REFRESH_S, "refreshes")
    add_stack_options(parser)


def run(args: argparse.Namespace) -> int:
    from dltop.demo.run import attach_when_ready, need_torch, start_demo_job, stop_demo_job
    from dltop.live.loop import LiveLoop
    from dltop.tui.app import DltopApp

    need_torch()  # before anything is said to start
    need_terminal()
    print(f"dltop demo: starting the bundled training job ({args.scenario})…", file=sys.stderr, flush=True)
    job = start_demo_job(args.scenario)
    try:
        source = LiveLoop(attach_when_ready(job, settings_from(args)), window_ticks=ticks_in_window(args.interval))
        DltopApp(lambda: source, interval=args.interval).run()
    finally:
        stop_demo_job(job)
    return 0
