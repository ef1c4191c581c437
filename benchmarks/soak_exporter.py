"""Soak of `dltop exporter` under load and churn, run by hand for as long as you like (the soak
itself, its checks and its table are tests/soak.py; tests/integration/test_exporter_soak.py runs a
36-second form in CI). Run as root, alone on the machine:

    python benchmarks/soak_exporter.py                 # 10 minutes
    python benchmarks/soak_exporter.py --minutes 2 --churn-s 3
    python benchmarks/soak_exporter.py --minutes 60 --rss-every-min 10 \
        --trace /tmp/heap --trace-frames 0 --trace-every-s 60     # RSS and heap figures, each minute
    python benchmarks/soak_exporter.py --minutes 12 --trace /tmp/trace   # tracemalloc diffs (slow)

Prints a table of the figures and the checks; exits 1 if a check failed (2 if the soak could not
run). Every loop is bounded; every process it started is killed in ``finally``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests import soak  # noqa: E402
from tests.soak import Options, SoakError, render, run_soak  # noqa: E402


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(
        description=f"{__doc__}\n{soak.__doc__}", formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = Options()
    parser.add_argument("--minutes", type=float, default=defaults.minutes, help="length of the churn")
    parser.add_argument("--churn-s", type=float, default=defaults.churn_s, help="a job starts every this many s")
    parser.add_argument("--scrapers", type=int, default=defaults.scrapers, help="concurrent fast scrapers")
    parser.add_argument("--max-alive", type=int, default=defaults.max_alive, help="soak jobs alive at once, at most")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--rss-margin-mb", type=float, default=defaults.rss_margin_mb)
    parser.add_argument("--silent-s", type=float, default=defaults.silent_s)
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the exporters' logs and job reports here")
    parser.add_argument(
        "--trace",
        type=Path,
        metavar="DIR",
        help="run the exporters under benchmarks/trace_exporter.py (tracemalloc), diffs in DIR/A, DIR/B",
    )
    parser.add_argument("--trace-every-s", type=float, default=defaults.trace_every_s, help="seconds between snapshots")
    parser.add_argument(
        "--trace-frames",
        type=int,
        default=defaults.trace_frames,
        help="tracemalloc's frames; 0: no tracemalloc, only RSS and heap figures (memory.txt)",
    )
    parser.add_argument(
        "--rss-every-min",
        type=float,
        default=0.0,
        help="say and tabulate each exporter's RSS at every such mark of the churn",
    )
    args = parser.parse_args(argv)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    options = Options(
        minutes=args.minutes, churn_s=args.churn_s, scrapers=args.scrapers, max_alive=args.max_alive,
        seed=args.seed, rss_margin_mb=args.rss_margin_mb, silent_s=args.silent_s, directory=args.keep,
        trace=args.trace, trace_every_s=args.trace_every_s, trace_frames=args.trace_frames,
        rss_every_s=args.rss_every_min * 60,
    )  # fmt: skip
    try:
        result = run_soak(options, say=lambda line: print(line, file=sys.stderr, flush=True))
    except SoakError as problem:
        print(f"soak could not run: {problem}", file=sys.stderr)
        return 2
    print(render(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
