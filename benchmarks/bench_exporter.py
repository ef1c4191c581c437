"""What `dltop exporter` costs beside one live view (run by hand; needs tmux):

* CPU of the exporter (itself and its py-spy runs) at its default interval, watching one and
  then two 8-worker jobs, against `dltop --pid` (the live view, 1 s) on one such job, in tmux;
  measured the way benchmarks/bench_live_cost.py measures the live view (after its warm-up,
  over --seconds, children counted), --rounds times in alternating order, medians; the exporter
  again over the next --seconds (steady: each new worker's first dump is behind it);
* series per watched 8-worker job (cardinality), from the exposition;
* /metrics response time: median and p90 of --scrapes scrapes, two jobs watched.

The exporter is scraped every 15 s while it is measured, as Prometheus would (its rendering is
part of its cost). ``--ranks R --workers W``: each job is an R x W job under a real torchrun
(benchmarks/scale_job.py) instead of one 8-worker job; for a sweep of shapes with the live view
and htop side by side, see benchmarks/scale_node.py.

The exporter follows every job on the machine: the script says how many it saw, so a stray job
of someone else's shows. Run it alone: flock -x /tmp/dltop-cpu.lock python benchmarks/bench_exporter.py
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from bench_live_cost import in_tmux, measure
from common import ROOT, start_job
from scale_job import ScaleJob

JOB_ARGS = ("--workers", "8", "--persistent", "--sample-ms", "2", "--step-ms", "20")
SCRAPE_EVERY_S = 15.0  # Prometheus' usual scrape interval


class Exporter:
    """``dltop exporter`` of a checkout (this one by default), on a free port."""

    def __init__(self, log: Path, root: Path = ROOT) -> None:
        command = [sys.executable, "-m", "dltop", "exporter", "--listen", "127.0.0.1", "--port", "0"]
        env = {**os.environ, "PYTHONPATH": str(root)}
        with open(log, "w") as stderr:
            self.proc = subprocess.Popen(command, cwd=root, stderr=stderr, env=env, start_new_session=True)
        deadline = time.monotonic() + 60
        while not (found := re.search(r":(\d+)/metrics", log.read_text())):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"the exporter did not start: {log.read_text()}")
            time.sleep(0.1)
        self.url = f"http://127.0.0.1:{found.group(1)}/metrics"

    def scrape(self) -> str:
        with urllib.request.urlopen(self.url, timeout=10) as response:
            return response.read().decode()

    def jobs(self) -> int:
        return int(float(re.search(r"^dltop_jobs (\S+)$", self.scrape(), re.M).group(1)))

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


class Scraper(threading.Thread):
    """Scrapes the exporter every ``SCRAPE_EVERY_S`` from its start, as Prometheus does."""

    def __init__(self, exporter: Exporter) -> None:
        super().__init__(daemon=True)
        self.exporter, self.stopping, self.times_ms = exporter, threading.Event(), []

    def run(self) -> None:
        while not self.stopping.is_set():
            began = time.perf_counter()
            try:
                self.exporter.scrape()
                self.times_ms.append(1000 * (time.perf_counter() - began))
            except OSError:
                pass
            self.stopping.wait(SCRAPE_EVERY_S)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=15)


def exporter_cpu(directory: Path, seconds: float) -> tuple:
    """(share of a core from its start, the same over the next --seconds, jobs it followed) of a
    fresh exporter at its default interval: the first includes the start-up (each new worker's
    first dump reads its loader settings), as the live view's figure does."""
    exporter = Exporter(directory / f"exporter-{time.monotonic_ns()}.txt")
    scraper = Scraper(exporter)
    scraper.start()
    try:
        return measure(exporter.proc.pid, seconds), measure(exporter.proc.pid, seconds), exporter.jobs()
    finally:
        scraper.stop()
        exporter.close()


def series_per_job(text: str, job_pid: int) -> int:
    return sum(1 for line in text.splitlines() if f'job_pid="{job_pid}"' in line and not line.startswith("#"))


def response_ms(exporter: Exporter, scrapes: int) -> list:
    times = []
    for _ in range(scrapes):
        began = time.perf_counter()
        exporter.scrape()
        times.append(1000 * (time.perf_counter() - began))
        time.sleep(0.02)
    return sorted(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--ranks", type=int, default=0, help="each job R x W under torchrun (0: one plain job)")
    parser.add_argument("--workers", type=int, default=8, help="workers per rank")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # killed: still stop the jobs (finally)
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; {time.ctime()}")
    jobs = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        try:
            shares: dict = {}
            for count in (1, 2):
                report = directory / f"job-{count}"
                report.mkdir()
                if args.ranks:
                    jobs.append(ScaleJob(report, args.ranks, args.workers))
                    jobs[-1].start()
                else:
                    jobs.append(start_job(report, "--workers", str(args.workers), *JOB_ARGS[2:]))
                    jobs[-1].wait_workers(args.workers, timeout=180)
                time.sleep(3)
                tools = {
                    f"live view, {count} job(s) running": lambda: (
                        sum(in_tmux(f"{sys.executable} -m dltop --pid {jobs[0].pid}", args.seconds)[0]),
                    ),
                    f"exporter, {count} job(s)": lambda: exporter_cpu(directory, args.seconds),
                }
                for round_no in range(args.rounds):
                    for name in list(tools) if round_no % 2 == 0 else list(tools)[::-1]:
                        share, *steady = tools[name]()
                        shares.setdefault(name, []).append(share)
                        note = ""
                        if steady:
                            shares.setdefault(f"{name}, steady", []).append(steady[0])
                            note = f", then {steady[0]:.2f}% (it followed {steady[1]} job(s))"
                        print(f"  round {round_no + 1} {name}: {share:.2f}%{note}", flush=True)
            shape = f"{args.ranks} x {args.workers}-worker" if args.ranks else f"{args.workers}-worker"
            print(f"\n{shape} jobs, {args.seconds:.0f} s x {args.rounds}, py-spy children counted, scraped every "
                  f"{SCRAPE_EVERY_S:.0f} s")  # fmt: skip
            print(f"{'what':<34} {'median % of a core':>18}  runs")
            for name, runs in shares.items():
                print(f"{name:<34} {statistics.median(runs):>18.2f}  {', '.join(f'{s:.2f}' for s in runs)}")
            live = statistics.median(shares["live view, 1 job(s) running"])
            for what in ("exporter, 2 job(s)", "exporter, 2 job(s), steady"):
                print(f"{what} / live view of one job: {statistics.median(shares[what]) / live:.2f} (target <= 1)")

            exporter = Exporter(directory / "exporter-scrapes.txt")
            try:
                time.sleep(12)  # both jobs found and ticked
                text = exporter.scrape()
                counts = [series_per_job(text, job.pid) for job in jobs]
                print(f"\nseries per {shape} job: {counts} ({exporter.jobs()} job(s) followed)")
                times = response_ms(exporter, args.scrapes)
                p90 = times[int(0.9 * len(times))]
                print(f"/metrics response: median {statistics.median(times):.2f} ms, p90 {p90:.2f} ms "
                      f"({len(times)} scrapes, {len(text)} bytes)")  # fmt: skip
            finally:
                exporter.close()
        finally:
            for job in jobs:
                job.stop()  # every process group of the job (torchrun's ranks have their own)


if __name__ == "__main__":
    main()
