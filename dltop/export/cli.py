"""``dltop exporter``: arguments and entry point (heavy imports inside it)."""

from __future__ import annotations

import argparse

from dltop.errors import DltopError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run_exporter(args: argparse.Namespace) -> int:
    raise DltopError("dltop exporter is being built")
