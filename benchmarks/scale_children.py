"""What a watcher's children (Austin, py-spy) cost, by kind, on an R x W job (run by hand; root,
for the PID namespace of its own that benchmarks/scale_node.py --isolate also uses):

    flock -x /tmp/dltop-cpu.lock python benchmarks/scale_children.py --shape 8x8

Starts the live view and the exporter side by side (as scale_node.py does), waits --warmup
seconds (the workers' first stacks behind them), then polls every child of each every 0.2 s
for --seconds: each child's CPU is its last reading (a child that lives less than a poll is
missed; reaped children's total, from the watcher's cutime, is printed beside the sum).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil
from bench_live_cost import tree_cpu_s
from scale_job import ScaleJob, parse_shape
from scale_node import close_all, watchers


def kind(argv: list) -> str:
    name = Path(argv[0]).name if argv else "?"
    if name == "austin":
        if "-C" in argv:
            return "austin -C (worker sweep, stays attached)"
        if "-w" in argv:
            return "austin -w (where: one dump)"
        return "austin (trainer stream)"
    if name == "py-spy":
        return f"py-spy {argv[1] if len(argv) > 1 else '?'}"
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="8x8")
    parser.add_argument("--warmup", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--no-isolate", action="store_true")
    args = parser.parse_args()
    if not args.no_isolate:
        with tempfile.TemporaryDirectory() as sockets:
            command = ["unshare", "--pid", "--fork", "--mount-proc", "env", f"TMUX_TMPDIR={sockets}", "bash", "-c",
                       f"{sys.executable} {sys.argv[0]} {' '.join(sys.argv[1:])} --no-isolate & wait $!"]  # fmt: skip
            sys.exit(subprocess.run(command).returncode)
    ranks, workers = parse_shape(args.shape)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "report").mkdir()
        with ScaleJob(directory / "report", ranks, workers) as job:
            started = None
            try:
                started = watchers(job, directory, ("live", "exporter"))
                pids = {name: started[name][0] for name in ("live", "exporter")}
                time.sleep(args.warmup)
                before = {name: tree_cpu_s(pid) for name, pid in pids.items()}
                first: dict = {}
                last: dict = {}
                kinds: dict = {}
                t0 = time.monotonic()
                while time.monotonic() - t0 < args.seconds:
                    for name, pid in pids.items():
                        for child in psutil.Process(pid).children(recursive=True):
                            try:
                                times = child.cpu_times()
                                key = (name, child.pid, child.create_time())
                                kinds.setdefault(key, kind(child.cmdline()))
                            except psutil.Error:
                                continue
                            cpu = times.user + times.system
                            first.setdefault(key, cpu if key[2] < time.time() - (time.monotonic() - t0) else 0.0)
                            last[key] = cpu
                    time.sleep(0.2)
                elapsed = time.monotonic() - t0
                after = {name: tree_cpu_s(pid) for name, pid in pids.items()}
            finally:
                if started:
                    close_all(started)
    print(f"{args.shape}: {args.seconds:.0f} s after a {args.warmup:.0f} s warm-up; load {os.getloadavg()[0]:.2f}")
    for name in ("live", "exporter"):
        own, children = (100 * (a - b) / elapsed for a, b in zip(after[name], before[name]))
        by_kind: Counter = Counter()
        runs: Counter = Counter()
        for key, cpu in last.items():
            if key[0] == name:
                by_kind[kinds[key]] += 100 * (cpu - first[key]) / elapsed
                runs[kinds[key]] += 1
        print(f"\n{name}: itself {own:.2f}% of a core, children {children:.2f}% (seen by polling: "
              f"{sum(by_kind.values()):.2f}%)")  # fmt: skip
        for what, share in by_kind.most_common():
            print(f"  {share:5.2f}%  {what}  ({runs[what]} processes seen)")


if __name__ == "__main__":
    main()
