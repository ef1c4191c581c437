"""``dltop record`` and ``dltop replay``: arguments and entry points (heavy imports inside them)."""

from __future__ import annotations

import argparse

from dltop.errors import DltopError


def add_record_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run_record(args: argparse.Namespace) -> int:
    raise DltopError("dltop record is being built")


def run_replay(args: argparse.Namespace) -> int:
    raise DltopError("dltop replay is being built")
