"""An R ranks x W workers job for the node-scale benchmarks, run by hand.

The suite's training job (tests/jobs/train.py) under a real torchrun (`python -m torch.distributed.run
--standalone --nproc_per_node R`), each rank with W persistent workers: what a node of 8 GPUs
with 8 workers each looks like to a watcher, 8 trainers and 64 workers under one launcher.
The job is kept light (each rank steps every --step-ms, each sample costs --sample-ms) so that
on a 2-core box the tools under test, not the job, are what is measured; ``job_cpu`` says what
the job itself used.

torchrun starts each rank in a session of its own: ``ScaleJob.stop`` kills every process group
of the tree (tests/support.py's Job.stop), so nothing outlives the benchmark.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import psutil
from common import ROOT

from tests.support import TRAIN, Job

# light: 8 x 8 uses ~0.3-0.4 of a core on the 2-core VM (see job_cpu)
DEFAULT_JOB_ARGS = ("--persistent", "--sample-ms", "1", "--batch-size", "2", "--step-ms", "100")


def parse_shape(text: str) -> tuple:
    """'8x8' -> (8, 8): ranks x workers per rank."""
    ranks, _, workers = text.lower().partition("x")
    return int(ranks), int(workers)


class ScaleJob(Job):
    """The job under a torchrun launcher (``pid``: the launcher); ``processes``: launcher, trainers
    and workers, as a watcher of the job sees them."""

    def __init__(self, report: Path, ranks: int, workers: int, job_args: tuple = DEFAULT_JOB_ARGS,
                 log: Optional[Path] = None) -> None:  # fmt: skip
        """``log``: the job's output (torchrun's and the ranks'), to say why it ended early."""
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
                   str(TRAIN), "--workers", str(workers), *job_args, "--report", str(report)]  # fmt: skip
        self.log = log
        with open(log or os.devnull, "w") as out:
            proc = subprocess.Popen(command, cwd=ROOT, start_new_session=True, stdout=out, stderr=subprocess.STDOUT)
        super().__init__(proc, report)
        self.ranks, self.workers = ranks, workers

    def alive(self) -> bool:
        """The launcher runs and every worker with it (a rank that fails ends the job)."""
        return self.proc.poll() is None and len(self.live_workers()) >= self.ranks * self.workers

    def why_ended(self) -> str:
        code = self.proc.poll()
        tail = self.log.read_text(errors="replace")[-2000:] if self.log and self.log.exists() else "(no log)"
        return f"launcher exit code {code}, {len(self.live_workers())} workers alive; its output ends:\n{tail}"

    @property
    def shape(self) -> str:
        return f"{self.ranks}x{self.workers}"

    def start(self, timeout: float = 300) -> ScaleJob:
        deadline = time.monotonic() + timeout
        try:
            self.wait_workers(self.ranks * self.workers, timeout=timeout)
            while len(self.trainers()) < self.ranks:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.shape}: {len(self.trainers())} trainers of {self.ranks}")
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise
        return self

    def tree(self) -> list:
        try:
            launcher = psutil.Process(self.pid)
            return [launcher, *launcher.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    @property
    def processes(self) -> int:
        return len(self.tree())

    def cpu_s(self) -> float:
        total = 0.0
        for proc in self.tree():
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                continue
        return total

    def __enter__(self) -> ScaleJob:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def job_cpu(job: ScaleJob, seconds: float = 5.0) -> float:
    """Share of a core the job's live processes use now (workers that stay: persistent)."""
    before, t0 = job.cpu_s(), time.monotonic()
    time.sleep(seconds)
    return 100 * (job.cpu_s() - before) / (time.monotonic() - t0)
