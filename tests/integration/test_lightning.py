"""dltop on a real PyTorch Lightning loop (tests/jobs/lightning_job.py: ``Trainer.fit`` on the CPU,
its fetcher one batch ahead, 2 DataLoader workers with a slow ``__getitem__``): the trainer's data
wait against the job's own clock around the DataLoader's ``next()``, over the same stretch."""

from __future__ import annotations

import json
import time

from tests.support import ROOT, Job, run_dltop, wait_for

JOB = ROOT / "tests" / "jobs" / "lightning_job.py"
WORKERS = 2
WARMUP_S = 2.0  # past the first batches and the workers' start
SNAPSHOT_S = "10"
WAIT_PP = 15.0  # generous: two busy CPUs, a few hundred samples


def _clock(job: Job) -> dict:
    try:
        return json.loads((job.report / f"timing-{job.pid}.json").read_text())
    except (OSError, ValueError):
        return {}


def test_data_wait_under_lightnings_loop_matches_the_jobs_clock(start_job):
    job = start_job("--workers", str(WORKERS), script=JOB)
    wait_for(lambda: _clock(job).get("batches", 0) >= 5 or job.proc.poll() is not None, 90, "the job's first batches")
    assert job.proc.poll() is None, (job.report / "stderr.txt").read_text()[-2000:]
    time.sleep(WARMUP_S)
    before = _clock(job)
    result = run_dltop("snapshot", "--pid", str(job.pid), "--duration", SNAPSHOT_S, "--json", timeout=90)
    after = _clock(job)
    assert result.returncode == 0, result.stderr
    clock_wait = 100 * (after["wait_s"] - before["wait_s"]) / (after["total_s"] - before["total_s"])

    loader = json.loads(result.stdout)["loaders"][0]
    assert loader["pipeline"] == "dataloader" and loader["num_workers"] == WORKERS
    said = loader["trainer_time"]["waiting_for_data_percent"]
    assert abs(said - clock_wait) <= WAIT_PP, f"dltop {said:.1f}% vs the job's clock {clock_wait:.1f}%"
    assert loader["trainer_time"]["starting_workers_percent"] <= 5.0  # no epoch ends in this loop
