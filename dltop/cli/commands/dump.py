"""``dltop dump``: every job process's full stack with locals, and the loader config (py-spy pauses each briefly)."""

from __future__ import annotations

import argparse
import json

NAME = "dump"
HELP = "full stack dump of every job process, with the loader config (pauses each briefly)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=int, required=True, help="the trainer, one of its workers, or its launcher")
    parser.add_argument("--json", action="store_true", help="print the dltop.dump/1 JSON document")


def run(args: argparse.Namespace) -> int:
    from dltop.collect.stacks.full_dump import dump_job, render_dump

    dump = dump_job(args.pid)
    print(json.dumps(dump, indent=2) if args.json else render_dump(dump))
    return 0
