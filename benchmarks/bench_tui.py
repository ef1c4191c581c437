"""The TUI's figures (run by hand; needs tmux):
* time from `dltop --pid P` to the first full screen (the job's workers in the table), in a real
  terminal, median of --runs;
* UI time per refresh with 64 workers: process CPU per refresh, a recorded report grown to 64
  workers with figures changing every refresh;
* dltop's own CPU (with its py-spy runs) at 1 Hz on a 16-worker job over --seconds.

  python benchmarks/bench_tui.py [--runs 5] [--seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, start_job

TICK = os.sysconf("SC_CLK_TCK")


def tmux(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["tmux", *args], capture_output=True, text=True)


def first_screen(job_pid: int, worker: int) -> float:
    session = f"dltop-perf-{time.monotonic_ns()}"
    began = time.monotonic()
    tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40",
         f"cd {ROOT} && exec {sys.executable} -m dltop --pid {job_pid}")  # fmt: skip
    try:
        while str(worker) not in tmux("capture-pane", "-p", "-t", session).stdout:
            time.sleep(0.01)
        return time.monotonic() - began
    finally:
        tmux("kill-session", "-t", session)


def own_cpu(job_pid: int, seconds: float) -> float:
    """Share of one core dltop used (itself and the py-spy runs it reaped), steady state."""
    session = f"dltop-perf-{time.monotonic_ns()}"
    tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40",
         f"cd {ROOT} && exec {sys.executable} -m dltop --pid {job_pid}")  # fmt: skip
    try:
        time.sleep(5)  # start-up done
        pid = int(tmux("list-panes", "-t", session, "-F", "#{pane_pid}").stdout.split()[0])

        def cpu() -> float:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return sum(int(v) for v in fields[11:15]) / TICK  # utime stime cutime cstime

        before, t0 = cpu(), time.monotonic()
        time.sleep(seconds)
        return (cpu() - before) / (time.monotonic() - t0)
    finally:
        tmux("kill-session", "-t", session)


def refresh_cost(workers: int = 64, refreshes: int = 60) -> float:
    """CPU milliseconds per refresh of the main screen (update and render), median of 3 passes."""
    from dltop.model import snapshot_from_dict
    from dltop.tui.app import DltopApp

    base = snapshot_from_dict(json.loads((ROOT / "tests/fixtures/snapshots/healthy.json").read_text()))
    template = next(p for p in base.processes if p.role == "worker")
    trainer = next(p for p in base.processes if p.role == "trainer")

    def snap(i: int):
        procs = [trainer] + [
            dataclasses.replace(
                template, pid=100000 + w, cpu_percent=(w * 7 + i * 13) % 100, uss_bytes=template.uss_bytes + i * 4096
            )  # fmt: skip
            for w in range(workers)
        ]
        return dataclasses.replace(base, processes=procs)

    snaps = [snap(i) for i in range(refreshes)]

    async def run() -> list:
        app = DltopApp(first=snaps[0])
        costs = []
        async with app.run_test(size=(160, 50)) as pilot:
            while app.snapshot is None:
                await pilot.pause(0.05)
            for _ in range(3):
                began = time.process_time()
                for s in snaps:
                    app.show(s)
                    await pilot.pause()
                costs.append((time.process_time() - began) / len(snaps) * 1000)
        return costs

    return statistics.median(asyncio.run(run()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    print(f"UI CPU per refresh, 64 workers: {refresh_cost():.1f} ms (target <= 30)")
    with tempfile.TemporaryDirectory() as report:
        job = start_job(Path(report), "--workers", "16", "--persistent", "--sample-ms", "2", "--step-ms", "20")
        try:
            workers = job.wait_workers(16)
            time.sleep(2)
            times = [first_screen(job.pid, max(workers)) for _ in range(args.runs)]
            print(f"dltop --pid to the first full screen: median {statistics.median(times):.2f} s"
                  f" ({', '.join(f'{t:.2f}' for t in times)}; target <= 1.5)")  # fmt: skip
            share = 100 * own_cpu(job.pid, args.seconds)
            print(f"dltop's own CPU at 1 Hz, 16 workers, {args.seconds:.0f} s: {share:.2f}% of a core (target <= 3)")
        finally:
            os.killpg(job.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
