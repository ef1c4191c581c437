"""Stack sampling figures (run by hand: python benchmarks/bench_stacks.py).

* time from a worker's hang to the worker-hung finding with default settings (target <= 20 + 3 s);
* the trainer's throughput with dltop attached vs not, alternating periods on one job, median of
  >= 5 pairs (target >= 0.98); dltop's one-time start-up is outside the attached periods;
* the data-wait share dltop measures vs the job's own timing of its next() calls (target <= 5 pp);
* with --snapshot-runs N: a 15 s ``dltop snapshot``'s CPU (start-up included), its trainer samples
  and the data wait's error, beside ``py-spy record`` at its default 100 Hz over the same job and
  seconds, alternating, medians (py-spy is the anchor: dltop's figure includes its discovery and
  /proc readings at every tick);
* with --soak-s 300: fault findings on a healthy job (persistent workers idle through a 24 s
  validation pass, slow samples, epoch boundaries) watched with the default 20 s threshold
  (target: none).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import children_cpu, dltop, start_job, timing

from dltop.collect.collector import Collector
from dltop.collect.stacks.pyspy import find_py_spy
from dltop.diagnose import diagnose
from tests.support import wait_for


def hang_latency(how: str) -> float:
    with tempfile.TemporaryDirectory() as report:
        job = start_job(Path(report), "--workers", "2", "--persistent", "--hang", how, "--hang-at", "40")
        try:
            job.wait_workers(2)
            collector = Collector(job.pid)
            try:
                while True:
                    ticks = [collector.tick()]
                    if any(f.id == "worker-hung" for f in diagnose(ticks)):
                        found = time.time()
                        break
                    time.sleep(1.0)
            finally:
                collector.close()
            hung_at = json.loads(next(Path(report).glob("hang-*.json")).read_text())["at"]
            return found - hung_at
        finally:
            os.killpg(job.pid, signal.SIGKILL)


def throughput_pairs(pairs: int, period_s: float) -> list:
    """Batches/s with dltop attached / without, alternating which period comes first."""
    ratios = []
    with tempfile.TemporaryDirectory() as report:
        job = start_job(Path(report), "--workers", "2", "--persistent", "--sample-ms", "5", "--step-ms", "5")
        try:
            job.wait_workers(2)
            wait_for(lambda: list(Path(report).glob("timing-*.json")), 30, "timing")
            time.sleep(3)

            def rate(attached: bool) -> float:
                """Steady state: dltop is started (and has paid its start-up) before the period begins."""
                watcher = None
                if attached:
                    command = ["snapshot", "--pid", str(job.pid), "--duration", str(period_s + STARTUP_S + 1)]
                    watcher = subprocess.Popen([sys.executable, "-m", "dltop", *command], stdout=subprocess.DEVNULL)
                time.sleep(STARTUP_S)
                before = timing(job)
                time.sleep(period_s)
                after = timing(job)
                if watcher is not None:
                    watcher.wait()
                return (after["batches"] - before["batches"]) / (after["at"] - before["at"])

            for pair in range(pairs):
                order = (True, False) if pair % 2 else (False, True)
                rates = {attached: rate(attached) for attached in order}
                ratios.append(rates[True] / rates[False])
                print(f"  pair {pair}: without {rates[False]:.1f} b/s, with {rates[True]:.1f} b/s")
        finally:
            os.killpg(job.pid, signal.SIGKILL)
    return ratios


def wait_share(shape: tuple, seconds: float) -> tuple:
    with tempfile.TemporaryDirectory() as report:
        job = start_job(Path(report), *shape)
        try:
            wait_for(lambda: list(Path(report).glob("timing-*.json")), 60, "timing")
            time.sleep(2)
            collector = Collector(job.pid)
            try:
                before = timing(job)
                collector.tick()
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    time.sleep(1)
                    collector.tick()
                collector.settle()
                snapshot = collector.tick()
                after = timing(job)
            finally:
                collector.close()
            truth = 100 * (after["wait_s"] - before["wait_s"]) / (after["total_s"] - before["total_s"])
            return snapshot.loaders[0].data_wait_percent, truth
        finally:
            os.killpg(job.pid, signal.SIGKILL)


STARTUP_S = 3.0  # dltop's start-up is paid once per session, not per period: leave it out
HEALTHY = ("--workers", "3", "--persistent", "--batches", "60", "--sample-ms", "3", "--step-ms", "8",
           "--slow-every", "40", "--slow-ms", "2500", "--val-workers", "2", "--val-step-ms", "400")  # fmt: skip
FAULTS = {"worker-hung", "worker-died", "trainer-stalled", "stacks-unavailable"}


def soak(seconds: float) -> list:
    with tempfile.TemporaryDirectory() as report:
        job = start_job(Path(report), *HEALTHY)
        try:
            job.wait_workers(3)
            result = dltop("snapshot", "--pid", str(job.pid), "--duration", str(seconds), "--json",
                           capture_output=True, text=True, check=True)  # fmt: skip
            done = list(Path(report).glob("epoch-*.json"))
            epochs = json.loads(done[0].read_text())["epoch"] + 1 if done else 0
            findings = [f["id"] for f in json.loads(result.stdout)["findings"]]
            print(f"soak {seconds:.0f} s, {epochs} epoch(s) with validation passes: findings {findings}")
            return [f for f in findings if f in FAULTS]
        finally:
            os.killpg(job.pid, signal.SIGKILL)


# an I/O-bound job at a 75% wait, where ±3.5 points of it move the count it needs by ~8%
SNAPSHOT_JOB = ("--workers", "2", "--persistent", "--batch-size", "8", "--sample-ms", "0", "--slow-every", "1",
                "--slow-ms", "5", "--step-ms", "5")  # fmt: skip


def snapshot_cost(runs: int, seconds: float) -> None:
    with tempfile.TemporaryDirectory() as report:
        job = start_job(Path(report), *SNAPSHOT_JOB)
        try:
            job.wait_workers(2)
            wait_for(lambda: list(Path(report).glob("timing-*.json")), 30, "timing")
            time.sleep(3)
            figures: dict[str, list[float]] = {"dltop": [], "py-spy": [], "samples": [], "error": []}
            for _ in range(runs):
                before = children_cpu()
                result = dltop("snapshot", "--pid", str(job.pid), "--duration", f"{seconds:g}", "--json",
                               capture_output=True, text=True, check=True)  # fmt: skip
                figures["dltop"].append(children_cpu() - before)
                (bound,) = [f for f in json.loads(result.stdout)["findings"] if f["id"] == "input-bound"]
                figures["samples"].append(bound["evidence"]["samples"])
                figures["error"].append(bound["evidence"]["data_wait_error_percent"])
                before = children_cpu()
                subprocess.run([find_py_spy(), "record", "--pid", str(job.pid), "--rate", "100", "--duration",
                                f"{seconds:.0f}", "--nonblocking", "--idle", "--format", "raw", "--output",
                                str(Path(report) / "py-spy.txt")], capture_output=True, check=True)  # fmt: skip
                figures["py-spy"].append(children_cpu() - before)
            medians = {name: statistics.median(values) for name, values in figures.items()}
            print(f"snapshot {seconds:g} s, {runs} runs: dltop {medians['dltop']:.2f} s of CPU "
                  f"({', '.join(f'{x:.2f}' for x in figures['dltop'])}), {medians['samples']:.0f} trainer samples, "
                  f"data wait ±{medians['error']:.1f} points; py-spy record at 100 Hz "
                  f"{medians['py-spy']:.2f} s ({', '.join(f'{x:.2f}' for x in figures['py-spy'])})")  # fmt: skip
        finally:
            os.killpg(job.pid, signal.SIGKILL)


SHAPES = {
    "input-bound (1 worker, 15 ms/sample)": ("--workers", "1", "--persistent", "--sample-ms", "15", "--step-ms", "5"),
    "balanced (2 workers)": ("--workers", "2", "--persistent", "--sample-ms", "4", "--step-ms", "12"),
    "compute-bound (2 workers, 40 ms step)": ("--workers", "2", "--persistent", "--sample-ms", "1", "--step-ms", "40"),
    "num_workers=0": ("--workers", "0", "--sample-ms", "3", "--step-ms", "10"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hang-runs", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--period-s", type=float, default=10)
    parser.add_argument("--share-s", type=float, default=20)
    parser.add_argument("--soak-s", type=float, default=0, help="also watch a healthy job this long")
    parser.add_argument("--snapshot-runs", type=int, default=0, help="also time this many 15 s snapshots")
    args = parser.parse_args()
    if args.snapshot_runs:
        snapshot_cost(args.snapshot_runs, 15.0)
    if args.soak_s:
        print(f"fault findings on the healthy job: {soak(args.soak_s) or 'none'}")

    if args.hang_runs:
        latencies = [hang_latency("sleep" if run % 2 else "lock") for run in range(args.hang_runs)]
        print(
            f"hang -> worker-hung (threshold 20 s): median {statistics.median(latencies):.1f} s "
            f"(runs: {', '.join(f'{x:.1f}' for x in latencies)})"
        )
    ratios = throughput_pairs(args.pairs, args.period_s)
    print(
        f"throughput attached/not: median {statistics.median(ratios):.3f} "
        f"(pairs: {', '.join(f'{r:.3f}' for r in ratios)})"
    )
    for name, shape in SHAPES.items() if args.share_s else ():
        measured, truth = wait_share(shape, args.share_s)
        print(f"data wait, {name}: dltop {measured:.1f}% vs job {truth:.1f}% (diff {measured - truth:+.1f} pp)")


if __name__ == "__main__":
    main()
