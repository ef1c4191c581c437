"""Command line: ``dltop [--pid P]`` (the TUI) and the commands in dltop/cli/commands/.

Bad input ends with one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from dltop import DISTRIBUTION, __version__
from dltop.cli.commands import COMMANDS, live
from dltop.cli.options import join_dashed_values
from dltop.errors import DltopError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    """Every command's arguments in one parser (tests parse a finding's bench_args with it)."""
    parser = argparse.ArgumentParser(prog="dltop", description="htop for PyTorch DataLoaders.")
    parser.add_argument("--version", action="version", version=f"dltop {__version__} ({DISTRIBUTION})")
    live.add_arguments(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_arguments(subparsers.add_parser(command.NAME, help=command.HELP))
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    """Run one command; what a user can cause (DltopError) is one line and exit 2, not a traceback."""
    args = build_parser().parse_args(join_dashed_values(sys.argv[1:] if argv is None else argv))
    run = next(c.run for c in COMMANDS if c.NAME == args.command) if args.command else live.run
    try:
        return run(args)
    except DltopError as error:
        print(f"dltop: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `dltop snapshot ... | head`
        sys.stderr.close()
        return 0
