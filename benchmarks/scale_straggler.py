"""What a live view's sampling of many ranks buys the straggler verdict, run by hand:
a real torchrun DDP job (gloo) of R ranks x W workers, one rank's samples slower, watched by
``dltop snapshot --json`` of this checkout and of others side by side (``--from LABEL=DIR``: the
code before a change), each round on the same job. Per watcher: whether ``rank-straggler`` named
the slow rank, each rank's data wait with its standard error, and the samples behind it.

  flock -x /tmp/dltop-cpu.lock python benchmarks/scale_straggler.py --from before=/tmp/before \\
      [--ranks 8] [--workers 2] [--slow 3:150] [--step-ms 50] [--rounds 3] [--seconds 45]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT
from scale_job import ScaleJob


def snapshot(checkout: str, pid: int, seconds: float) -> subprocess.Popen:
    command = [sys.executable, "-m", "dltop", "snapshot", "--pid", str(pid), "--duration", str(seconds), "--json"]
    return subprocess.Popen(command, cwd=checkout, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def verdict(document: dict, slow_rank: int) -> dict:
    """The straggler named (its rank or None), and each rank's (wait %, standard error, samples)."""
    ranks = {p["pid"]: p.get("rank") for p in document["processes"] if p["role"] == "trainer"}
    waits = {}
    for loader in document["loaders"]:
        spent = loader.get("trainer_time") or {}
        n = spent.get("samples") or 0
        if n:
            share = spent["waiting_for_data_percent"] / 100
            error = math.sqrt(max(share * (1 - share), 1 / n) / n) * 100  # as dltop.diagnose.figures.wait_error
            waits[ranks.get(loader["trainer_pid"])] = (share * 100, error, n)
    named = [f["evidence"].get("straggler_rank") for f in document["findings"] if f["id"] == "rank-straggler"]
    return {"named": named[0] if named else None, "right": named == [slow_rank], "waits": waits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slow", default="3:150", metavar="RANK:MS", help="that rank's per-sample cost")
    parser.add_argument("--step-ms", default="50", help="each rank's training step")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=45.0, help="each snapshot's duration")
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument("--from", dest="others", nargs="*", default=[], metavar="LABEL=DIR")
    args = parser.parse_args()
    slow_rank = int(args.slow.partition(":")[0])
    watchers = {"now": str(ROOT), **dict(spec.split("=", 1) for spec in args.others)}
    job_args = ("--persistent", "--ddp", "--sample-ms", "2", "--batch-size", "2", "--step-ms", args.step_ms,
                "--rank-sample-ms", args.slow)  # fmt: skip
    print(f"{args.ranks} ranks x {args.workers} workers, rank {args.slow} ms a sample (the rest 2 ms); "
          f"{args.rounds} rounds of {args.seconds:g} s snapshots side by side: {', '.join(watchers)}",
          flush=True)  # fmt: skip
    found: dict = {name: [] for name in watchers}
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report"
        report.mkdir()
        job = ScaleJob(report, args.ranks, args.workers, job_args, Path(tmp) / "job.log").start()
        try:
            time.sleep(args.warmup)
            for round_no in range(args.rounds):
                runs = {name: snapshot(checkout, job.pid, args.seconds) for name, checkout in watchers.items()}
                for name, run in runs.items():
                    out, _ = run.communicate(timeout=args.seconds + 120)
                    result = verdict(json.loads(out), slow_rank)
                    found[name].append(result)
                    by_rank = sorted(result["waits"].items(), key=lambda kv: kv[0] or 0)
                    waits = "  ".join(f"r{r} {w:.0f}±{e:.0f} ({n})" for r, (w, e, n) in by_rank)
                    print(f"  round {round_no + 1} {name:>8}: straggler {result['named']}; {waits}", flush=True)
        finally:
            job.stop()
    for name, results in found.items():
        errors = [e for r in results for (_w, e, _n) in r["waits"].values()]
        samples = [n for r in results for (_w, _e, n) in r["waits"].values()]
        print(f"{name}: slow rank named in {sum(r['right'] for r in results)} of {len(results)} rounds; "
              f"median error {statistics.median(errors) if errors else math.nan:.1f} points, "
              f"median samples a rank {statistics.median(samples) if samples else 0:.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
