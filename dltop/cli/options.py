"""Argument types and options that several commands share, so each flag is defined, and reads, the same everywhere."""

from __future__ import annotations

import argparse
import math
import os

from dltop.errors import DltopError
from dltop.settings import DEFAULTS, Settings


def _positive(text: str) -> float:
    # argparse names the type in its error ("invalid _positive value: 'x'"), so the name is part of the output
    value = float(text)
    if not math.isfinite(value) or value <= 0:  # nan would pass "<= 0" and watch for no time at all
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def add_stack_options(parser: argparse.ArgumentParser) -> None:
    """--hang-after and --no-stacks, for every command that watches a job."""
    parser.add_argument(
        "--hang-after",
        type=_positive,
        default=DEFAULTS.hang_after_s,
        metavar="S",
        help=f"a worker with the same stack and no CPU this long is hung (default {DEFAULTS.hang_after_s:g})",
    )
    parser.add_argument("--no-stacks", action="store_true", help="do not run py-spy (no activity, data wait, hangs)")


def settings_from(args: argparse.Namespace) -> Settings:
    """The thresholds a command's options set (those added by add_stack_options)."""
    return Settings(hang_after_s=args.hang_after)


def need_terminal() -> None:
    """Fail in one line before Textual starts without a terminal (it would hang or draw nowhere)."""
    if not (os.isatty(0) and os.isatty(2)):  # Textual reads stdin and draws on stderr
        raise DltopError("the live view needs a terminal; without one use `dltop snapshot --pid P` or `dltop jobs`")
