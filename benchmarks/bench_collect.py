"""Collection cost on a 16-worker job (run by hand: python benchmarks/bench_collect.py).

Reports, as medians of several runs on a noisy shared machine:
* dltop's CPU time per collection tick (target <= 20 ms);
* dltop's own CPU over 60 s at 1 Hz, as `dltop snapshot --duration 60` (target <= 2% of a core);
* `dltop snapshot --duration 1 --json` wall time, start to exit (target <= 1.5 s).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, children_cpu, start_job

from dltop.collect.collector import Collector


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--long-s", type=float, default=60)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as report:
        job = start_job(
            Path(report), "--workers", str(args.workers), "--persistent", "--sample-ms", "1", "--step-ms", "50"
        )
        try:
            job.wait_workers(args.workers, timeout=180)
            collector = Collector(job.pid)
            collector.tick()
            per_tick = []
            for _ in range(args.ticks):
                time.sleep(1.0)
                before = time.process_time()
                snapshot = collector.tick()
                per_tick.append((time.process_time() - before) * 1000)
            collector.close()
            assert len(snapshot.loaders[0].worker_pids) == args.workers
            print(f"processes per tick: {len(snapshot.processes)}")
            print(
                f"CPU per tick: median {statistics.median(per_tick):.1f} ms, "
                f"p90 {sorted(per_tick)[int(0.9 * len(per_tick))]:.1f} ms over {args.ticks} ticks"
            )

            walls = []
            for _ in range(args.runs):
                start = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "dltop", "snapshot", "--pid", str(job.pid), "--duration", "1", "--json"],
                    check=True,
                    stdout=subprocess.DEVNULL,
                    cwd=ROOT,
                )
                walls.append(time.perf_counter() - start)
            print(
                f"snapshot --duration 1 --json wall: median {statistics.median(walls):.2f} s "
                f"(runs: {', '.join(f'{w:.2f}' for w in walls)})"
            )

            cpu_before, start = children_cpu(), time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "dltop",
                    "snapshot",
                    "--pid",
                    str(job.pid),
                    "--duration",
                    str(args.long_s),
                    "--interval",
                    "1",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
                cwd=ROOT,
            )
            elapsed, cpu = time.perf_counter() - start, children_cpu() - cpu_before
            print(
                f"{args.long_s:.0f} s at 1 Hz: {cpu:.2f} s CPU in {elapsed:.1f} s"
                f" = {cpu / elapsed * 100:.2f}% of a core (start-up included)"
            )
        finally:
            os.killpg(job.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
