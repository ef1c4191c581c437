"""Two builds of `dltop exporter` side by side on one R x W job, over the same windows (run by
hand): what a change costs against the commit before it, on the same job at the same
moments (a job's cost drifts over minutes; two runs one after the other do not compare as well).

Each build is a checkout (``git clone`` of the repository, the change applied or not) run as
``python -m dltop exporter`` from its own directory, at its default interval, scraped every 15 s as
Prometheus would. Each window reports each exporter's share of a core, itself and its children
(Austin, py-spy: bench_live_cost.tree_cpu_s), and at the end its series and scrape times. The
first ~150 s of an 8 x 8 job are each new worker's first dump; the windows after are the steady
cost. Run it in a PID namespace of its own, so the exporters see only this job:

    git clone -q . /tmp/before && git -C /tmp/before checkout -q HEAD~1
    flock -x /tmp/dltop-cpu.lock unshare --pid --fork --mount-proc \\
        python benchmarks/exporter_side_by_side.py /tmp/before . --shape 8x8 --windows 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench_exporter import Exporter, Scraper
from bench_live_cost import tree_cpu_s
from scale_job import ScaleJob, parse_shape

WARMUP_S = 5.0


class Build:
    """One checkout's exporter, scraped every SCRAPE_EVERY_S (bench_exporter's)."""

    def __init__(self, name: str, root: Path, directory: Path) -> None:
        self.name = name
        self.exporter = Exporter(directory / f"exporter-{name}.txt", root)
        self.proc = self.exporter.proc
        self.scraper = Scraper(self.exporter)
        self.scraper.start()

    def scrape(self) -> str:
        return self.exporter.scrape()

    @property
    def scrape_ms(self) -> list[float]:
        return self.scraper.times_ms

    def close(self) -> None:
        self.scraper.stop()
        self.exporter.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path, help="checkout of the build to compare against")
    parser.add_argument("after", type=Path, help="checkout of the build with the change")
    parser.add_argument("--shape", default="8x8", help="RANKSxWORKERS (default 8x8)")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of one window")
    parser.add_argument("--windows", type=int, default=10)
    parser.add_argument("--settled-from", type=int, default=6, help="first window of the steady cost")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="dltop-side-by-side-"))
    job = ScaleJob(directory, *parse_shape(args.shape)).start()
    builds: list[Build] = []
    try:
        builds = [Build("before", args.before.resolve(), directory), Build("after", args.after.resolve(), directory)]
        time.sleep(WARMUP_S)
        shares: dict = {b.name: [] for b in builds}
        before, t0 = {b.name: tree_cpu_s(b.proc.pid) for b in builds}, time.monotonic()
        for window in range(1, args.windows + 1):
            time.sleep(args.seconds)
            after, t1 = {b.name: tree_cpu_s(b.proc.pid) for b in builds}, time.monotonic()
            for b in builds:
                own, children = (100 * (a - z) / (t1 - t0) for a, z in zip(after[b.name], before[b.name]))
                shares[b.name].append((own + children, own, children))
            print(f"window {window}: " + "  ".join(
                f"{name} {s[-1][0]:.2f} (itself {s[-1][1]:.2f}, children {s[-1][2]:.2f})" for name, s in shares.items()
            ), flush=True)  # fmt: skip
            before, t0 = after, t1
        for b in builds:
            text = b.scrape()
            series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
            settled = shares[b.name][args.settled_from - 1 :]
            medians = [statistics.median(s[i] for s in settled) for i in range(3)]
            print(
                f"{b.name}: settled median {medians[0]:.2f} % of a core (itself {medians[1]:.2f}, children "
                f"{medians[2]:.2f}); {series} series, scrape median {statistics.median(b.scrape_ms or [0.0]):.1f} ms"
            )
    finally:
        for b in builds:
            b.close()
        if os.getpid() != 1:  # in a PID namespace of its own, the kernel ends the job as this exits
            job.stop()


if __name__ == "__main__":
    main()
