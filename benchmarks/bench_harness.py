"""dltop bench's own figures (run by hand): the adaptive search's best vs an exhaustive grid's
best and the wall time each took, on synthetic-cpu and synthetic-io; and the harness's overhead
per batch against a bare loop over the same DataLoader.

    python benchmarks/bench_harness.py [--runs 3] [--max-workers 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from common import dltop

TRIAL = ("--warmup-s", "1", "--chunk-s", "1", "--chunks", "3", "--batch-size", "16", "--step-ms", "10")


def run_bench(*args: str) -> tuple:
    """(wall seconds, the dltop.bench/1 document)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        began = time.monotonic()
        dltop("bench", *TRIAL, "--json", str(out), *args, check=True, capture_output=True)
        return time.monotonic() - began, json.loads(out.read_text())


def best_rate(doc: dict) -> float:
    return max(t["samples_per_s"] for t in doc["trials"])


def search_vs_grid(workload: str, max_workers: int, runs: int) -> None:
    # the grid covers the space the search covers: every count x prefetch_factor 2/4 x persistent or not
    grid_configs = [f"num_workers={n},prefetch_factor={p},persistent_workers={keep}" for n in range(1, max_workers + 1)
                    for p in (2, 4) for keep in (True, False)] + ["num_workers=0"]  # fmt: skip
    rate_ratios, picked_ratios, time_ratios = [], [], []
    for run in range(runs):
        grid_s, grid = run_bench("--workload", workload, "--compare", *grid_configs, "--rounds", "1")
        search_s, search = run_bench("--workload", workload, "--max-workers", str(max_workers), "--budget-s", "600")
        # the search's best and its recommendation, each judged by the grid's measurement of that count
        best = int(search["best"].split(",")[0].split("=")[1])
        picked = int(search["recommended"].split(",")[0].split("=")[1])
        grid_rates: dict = {}  # the grid's best rate at each worker count
        for t in grid["trials"]:
            n = t["config"]["num_workers"]
            grid_rates[n] = max(grid_rates.get(n, 0.0), t["samples_per_s"])
        rate_ratios.append(grid_rates[best] / best_rate(grid))
        picked_ratios.append(grid_rates[picked] / best_rate(grid))
        time_ratios.append(search_s / grid_s)
        print(f"  {workload} run {run}: grid {grid_s:.0f} s, best {best_rate(grid):.0f}/s at "
              f"{max(grid_rates, key=grid_rates.get)} workers; search {search_s:.0f} s ({len(search['trials'])} trials)"
              f" best {best} -> {grid_rates[best]:.0f}/s on the grid ({rate_ratios[-1]:.2f}), recommends {picked}"
              f" -> {grid_rates[picked]:.0f}/s ({picked_ratios[-1]:.2f})")  # fmt: skip
    print(f"{workload}: search's best/grid's best {statistics.median(rate_ratios):.3f}, recommended/grid's best"
          f" {statistics.median(picked_ratios):.3f}, search/grid time"
          f" {statistics.median(time_ratios):.2f} (medians of {runs})")  # fmt: skip


def harness_overhead(runs: int, batches: int = 3000) -> None:
    """Seconds per batch: the bench's measured loop vs a bare ``for batch in loader: step(batch)``."""
    from torch.utils.data import DataLoader

    from dltop.bench.step import Step
    from dltop.bench.trial import _Epochs, _run_for
    from dltop.bench.workloads import synthetic

    with synthetic("synthetic-cpu:cpu_ms=0,sample_kb=4") as workload:
        step = Step(0.0)
        loader = DataLoader(workload.base["dataset"], batch_size=16, num_workers=0)
        bare, harness = [], []

        def bare_loop() -> float:
            began = time.perf_counter()
            for i, batch in enumerate(loader):
                step(batch)
                if i + 1 == batches:
                    break
            return (time.perf_counter() - began) / batches

        def harness_loop(seconds: float) -> float:
            chunk = _run_for(_Epochs(loader), step, seconds)
            return chunk.elapsed_s / chunk.batches

        for run in range(runs):  # alternate which goes first: warm caches favour the second
            if run % 2:
                harness.append(harness_loop(bare[-1] * batches if bare else 0.4))
                bare.append(bare_loop())
            else:
                bare.append(bare_loop())
                harness.append(harness_loop(bare[-1] * batches))
    ratio = statistics.median(h / b for h, b in zip(harness, bare))
    print(f"harness overhead: {statistics.median(harness) * 1e6:.1f} vs bare {statistics.median(bare) * 1e6:.1f}"
          f" us per batch: ratio {ratio:.3f} (median of {runs})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-workers", type=int, default=12)
    parser.add_argument("--only", choices=["search", "overhead"])
    args = parser.parse_args()
    if args.only != "search":
        harness_overhead(max(args.runs, 5))
    if args.only != "overhead":
        for workload in ("synthetic-cpu", "synthetic-io"):
            search_vs_grid(workload, args.max_workers, args.runs)


if __name__ == "__main__":
    main()
