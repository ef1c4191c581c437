"""``dltop bench``: its arguments and run live with the search in dltop.bench.main; this is the entry in the list."""

from __future__ import annotations

import argparse

from dltop.bench import main as bench

NAME = "bench"
HELP = "measure DataLoader configurations, or your own pipeline's worker counts (needs torch)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    bench.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    return bench.run_bench(args)
