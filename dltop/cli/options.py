"""Argument types and options that several commands share, so each flag is defined, and reads, the same everywhere."""

from __future__ import annotations

import argparse
import math
import os

from dltop.errors import DltopError
from dltop.settings import DEFAULTS, Settings

# options whose value may start with "-": a time counted from a recording's end (--at -5m), which
# argparse would take for an option of its own unless joined to its flag (--at=-5m)
DASHED_VALUES = ("--at",)


def join_dashed_values(argv: list[str]) -> list[str]:
    """``--at -5m`` as ``--at=-5m``, so the "from the end" form the docs offer reads as written."""
    joined: list[str] = []
    for word in argv:
        if joined and joined[-1] in DASHED_VALUES and word.startswith("-") and not word.startswith("--"):
            joined[-1] = f"{joined[-1]}={word}"
        else:
            joined.append(word)
    return joined


def _positive(text: str) -> float:
    """A finite number > 0 (an ArgumentTypeError says so: argparse's own error would name this function)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:  # nan would pass "<= 0" and watch for no time at all
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def add_interval_option(parser: argparse.ArgumentParser, default_s: float, between: str) -> None:
    """--interval, for every command that ticks (its default from ``dltop.live.schedule``)."""
    parser.add_argument(
        "--interval",
        type=_positive,
        default=default_s,
        metavar="S",
        help=f"seconds between {between} (default {default_s:g})",
    )


def add_stack_options(parser: argparse.ArgumentParser) -> None:
    """--hang-after and --no-stacks, for every command that watches a job."""
    parser.add_argument(
        "--hang-after",
        type=_positive,
        default=DEFAULTS.hang_after_s,
        metavar="S",
        help=f"a worker with the same stack and no CPU this long is hung (default {DEFAULTS.hang_after_s:g})",
    )
    parser.add_argument(
        "--no-stacks",
        action="store_true",
        help="sample no stacks (no Austin, no py-spy): no activity, data wait, hangs",
    )


def add_secrets_option(parser: argparse.ArgumentParser) -> None:
    """--show-secrets, for the views a person reads on their own screen (never the exporter or recorder)."""
    parser.add_argument(
        "--show-secrets",
        action="store_true",
        help="show the job's command line whole, tokens and passwords included (only to the user who owns the job;"
        " by default values that may be secrets read ***)",
    )


def show_secrets(args: argparse.Namespace, pid: int) -> bool:
    """Whether to show job ``pid``'s command line whole: asked for, and this user runs the job."""
    if not args.show_secrets:
        return False
    from dltop.collect import procfs

    owner = procfs.owner_uid(pid)
    if owner is not None and owner != os.geteuid():
        raise DltopError(
            f"--show-secrets shows a command line whole to the user who runs the job only: pid {pid} is"
            f" {procfs.user_name(owner)}'s"
        )
    return True


def settings_from(args: argparse.Namespace) -> Settings:
    """The thresholds a command's options set (those added by add_stack_options)."""
    return Settings(hang_after_s=args.hang_after)


def need_terminal() -> None:
    """Fail in one line before Textual starts without a terminal (it would hang or draw nowhere)."""
    if not (os.isatty(0) and os.isatty(2)):  # Textual reads stdin and draws on stderr
        raise DltopError("the live view needs a terminal; without one use `dltop snapshot --pid P` or `dltop jobs`")
