"""The subcommands, one module each, in the order ``dltop --help`` lists them.

Each module has NAME, HELP, ``add_arguments(parser)`` and ``run(args) -> int``, and imports what is heavy
(textual, torch, prometheus-client, the collectors) inside ``run``, so building the parser stays fast.
The live view (``dltop [--pid P]``, commands/live.py) is no subcommand: its options are the top level's.
"""

from __future__ import annotations

import argparse
from typing import Protocol

from dltop.cli.commands import bench, demo, dump, exporter, jobs, record, replay, snapshot


class Command(Protocol):
    """What a command module provides (modules match it by shape, so it is typed without registration)."""

    NAME: str
    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


COMMANDS: tuple[Command, ...] = (snapshot, dump, jobs, bench, record, replay, exporter, demo)
