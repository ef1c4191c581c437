"""``dltop jobs``: list the training jobs on this machine (a table, or the dltop.jobs/1 JSON)."""

from __future__ import annotations

import argparse
import json

NAME = "jobs"
HELP = "list the training jobs on this machine"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from dltop.collect.host.gpu import GpuSampler
    from dltop.collect.jobs import list_jobs
    from dltop.units import bytes_held

    jobs = list_jobs(GpuSampler())
    if args.json:
        print(json.dumps({"schema": "dltop.jobs/1", "jobs": [j.to_dict() for j in jobs]}, indent=2))
        return 0
    if not jobs:
        print("no PyTorch training jobs found (processes with DataLoader workers, torch loaded or a GPU)")
        return 0
    print(f"{'PID':>7} {'USER':<10} {'RANKS':>5} {'WORKERS':>7} {'GPU MEM':>8}  COMMAND")
    for job in jobs:
        gpu = bytes_held(job.gpu_mem_bytes)
        print(f"{job.pid:>7} {job.user or '?':<10} {len(job.trainer_pids):>5} {job.workers:>7} {gpu:>8}  {job.cmdline}")
    return 0
