"""``dltop snapshot``: watch a job for a while and print one report (text or the dltop.snapshot/1 JSON)."""

from __future__ import annotations

import argparse
import json
import time

from dltop.cli.options import (
    _positive,
    add_interval_option,
    add_secrets_option,
    add_stack_options,
    settings_from,
    show_secrets,
)
from dltop.live.schedule import FRAME_S

NAME = "snapshot"
HELP = "watch a job for a while and print one report"
EXITED_SETTLE_S = 0.3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=int, required=True, help="the trainer, one of its workers, or its launcher")
    parser.add_argument("--duration", type=_positive, default=3.0, help="seconds to watch (default 3)")
    add_interval_option(parser, FRAME_S, "samples")
    parser.add_argument("--json", action="store_true", help="print the dltop.snapshot/1 JSON document")
    add_stack_options(parser)
    add_secrets_option(parser)


def run(args: argparse.Namespace) -> int:
    from dltop.collect.stacks.budget import SNAPSHOT
    from dltop.live.loop import open_loop
    from dltop.live.schedule import ticks
    from dltop.text_report import render

    loop = open_loop(args.pid, settings_from(args), not args.no_stacks, show_secrets(args, args.pid),
                     watcher=SNAPSHOT, window_ticks=None, judge_every_tick=False)  # fmt: skip
    try:
        for final in ticks(args.interval, duration_s=args.duration):
            # the final tick waits for py-spy runs under way and re-reads every USS/PSS
            snap = loop.step(final=final)
            if snap.job.state != "running":
                break
        if snap.job.state == "exited" and len(loop.window) > 1:
            time.sleep(EXITED_SETTLE_S)  # the trainer's last words (a worker's death) reach its log as it exits
            loop.step()
    except KeyboardInterrupt:
        pass  # report what was seen so far
    finally:
        loop.close()
    report = loop.report()
    print(json.dumps(report.to_dict(), indent=2) if args.json else render(report))
    return 0
