"""Is input-bound's suggestion right? For each job shape: run it with its current num_workers,
let `dltop snapshot` suggest a count, run it again with that count, and compare the job's own
batches/s side by side (and what dltop says then). Run by hand: python benchmarks/bench_advice.py
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

from common import dltop, start_job, timing

from tests.support import wait_for

SHAPES = {
    # 20 ms of I/O wait per sample (no CPU), 4 samples a batch, 10 ms step
    "io-bound": ("--sample-ms", "0", "--slow-every", "1", "--slow-ms", "20", "--step-ms", "10"),
    # 5 ms of CPU per sample, 10 ms step (sleep): one worker supplies half of what the trainer takes
    "cpu-bound": ("--sample-ms", "5", "--step-ms", "10"),
}


def run(shape: tuple, workers: int, seconds: float) -> tuple:
    """(batches/s measured by the job, dltop's snapshot findings) with ``workers`` workers."""
    with tempfile.TemporaryDirectory() as report:
        job = start_job(Path(report), "--workers", str(workers), "--persistent", "--batches", "100000", *shape)
        try:
            job.wait_workers(workers)
            wait_for(lambda: list(Path(report).glob("timing-*.json")), 30, "timing")
            time.sleep(2)
            before = timing(job)
            out = dltop("snapshot", "--pid", str(job.pid), "--duration", str(seconds), "--json",
                        capture_output=True, text=True, check=True)  # fmt: skip
            after = timing(job)
        finally:
            os.killpg(job.pid, signal.SIGKILL)
    rate = (after["batches"] - before["batches"]) / (after["at"] - before["at"])
    snapshot = json.loads(out.stdout)
    return rate, snapshot["findings"], snapshot["loaders"][0]["data_wait_percent"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=1, help="the current num_workers")
    args = parser.parse_args()
    for name, shape in SHAPES.items():
        ratios = []
        for i in range(args.runs):
            rate, findings, wait = run(shape, args.workers, args.seconds)
            bound = [f for f in findings if f["id"] == "input-bound"]
            if not bound:
                print(f"{name} run {i}: no input-bound finding (wait {wait}%)")
                continue
            suggested = bound[0]["evidence"]["suggested_workers"]
            after, later, wait_after = run(shape, suggested, args.seconds)
            ratios.append(after / rate)
            print(f"{name} run {i}: {args.workers} worker(s) {rate:.1f} b/s, wait {wait:.0f}% -> dltop suggests"
                  f" {suggested}: {after:.1f} b/s ({after / rate:.2f}x), wait {wait_after:.0f}%,"
                  f" findings then: {[f['id'] for f in later] or 'none'}")  # fmt: skip
        if ratios:
            print(f"{name}: median speed-up {statistics.median(ratios):.2f}x over {len(ratios)} runs")


if __name__ == "__main__":
    main()
