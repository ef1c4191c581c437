"""The ranks of one run judged together: a real torchrun DDP job over gloo, one rank's loader too
slow for its trainer, is named the straggler with the other rank waiting for it in backward(); a
balanced run has none; ranks torchrun restarts are followed."""

from __future__ import annotations

import json
import sys

from dltop.live.loop import open_loop
from dltop.model import ENDED
from tests.support import alive, run_dltop, wait_for

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
DDP_JOB = ("--ddp", "--workers", "1", "--persistent", "--batch-size", "4", "--sample-ms", "1", "--step-ms", "20")


def _report(job, seconds: str = "10") -> dict:
    job.wait_workers(2, timeout=120)
    result = run_dltop("snapshot", "--pid", str(job.pid), "--duration", seconds, "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_slow_rank_of_a_real_ddp_run_is_named_and_the_other_waits_for_it(start_job):
    # rank 1's samples cost 12 ms of CPU: 48 ms a batch from one worker for a 20 ms step
    job = start_job(*DDP_JOB, "--rank-sample-ms", "1:12", launcher=TORCHRUN)
    report = _report(job)
    ranks = {p["rank"]: p["pid"] for p in report["processes"] if p["role"] == "trainer"}
    assert sorted(ranks) == [0, 1]
    (straggler,) = [f for f in report["findings"] if f["id"] == "rank-straggler"]
    evidence = straggler["evidence"]
    assert evidence["straggler_rank"] == 1 and straggler["pids"] == [ranks[1]]
    assert evidence["waiting_trainer_pids"] == [ranks[0]]
    assert evidence["data_wait_percent"] > evidence["others_data_wait_percent"] + 10
    assert evidence["run_speedup"] > 1.1
    assert "backward()" in (evidence["waiting_in"] or ""), evidence  # gloo blocks the main thread there
    assert evidence.get("cause") == "input-bound" and "input-bound" in straggler["detail"]
    # the waiting rank gets no DataLoader advice of its own; the straggler does
    own = [f for f in report["findings"] if ranks[0] in f["pids"] and f["id"] in ("input-bound", "too-many-workers")]
    assert all(f["explained_by"] == "rank-straggler" and not f["suggestion"] for f in own), own
    fixes = [f for f in report["findings"] if f["id"] == "input-bound" and f["pids"] == [ranks[1]]]
    assert fixes and fixes[0]["explained_by"] is None and "per rank x 2 ranks" in fixes[0]["suggestion"]
    order = [f["id"] for f in report["findings"]]
    assert order.index("rank-straggler") < order.index("input-bound")


def test_a_balanced_ddp_run_has_no_straggler(start_job):
    job = start_job(*DDP_JOB, launcher=TORCHRUN)
    report = _report(job, "8")
    trainers = [p for p in report["processes"] if p["role"] == "trainer"]
    assert len(trainers) == 2 and all(p["placement"]["run_id"] for p in trainers)
    # both ranks' waits are trusted (the rule judged them), and alike
    assert all(loader["trainer_time"]["samples"] >= 30 for loader in report["loaders"]), report["loaders"]
    assert [f for f in report["findings"] if f["id"] == "rank-straggler"] == []


def test_ranks_torchrun_restarts_are_followed_and_told(start_job):
    """torchrun --max-restarts 1: rank 0 exits 1, torchrun takes rank 1 down (SIGTERM to its group,
    workers included) and starts both again. The job runs on: the new ranks are its trainers once
    they import torch (held 1 s, so dltop sees them first without), the old ones ended, told as a
    restart, rank 1's workers went with it (no worker deaths), and once the window no longer
    holds the old ranks (at once here) their loaders are gone from the newest tick."""
    job = start_job("--workers", "2", "--persistent", "--step-ms", "20", "--fail-after", "300",
                    launcher=[*TORCHRUN, "--max-restarts", "1"], env={"TRAIN_IMPORT_DELAY_S": "1"})  # fmt: skip
    job.wait_workers(4, timeout=120)
    first = job.trainers()
    loop = open_loop(job.pid, window_ticks=None, judge_every_tick=False)
    loop.collector.keep_ended_s = 0.0
    states: set = set()

    def restarted() -> bool:
        snap = loop.step()
        states.add(snap.job.state)
        again = [p for p in job.trainers() if p not in first and alive(p)]
        new_workers = {w for w, t in job.live_workers().items() if t in again}
        return (
            len(again) == 2
            and snap.job.trainer_pids == again
            and {ld.trainer_pid for ld in snap.loaders} == set(again)
            and {w for ld in snap.loaders for w in ld.worker_pids} == new_workers != set()
        )

    try:
        wait_for(restarted, 120, "the restarted ranks and their workers", 0.5)
    finally:
        loop.close()
    assert states == {"running"} and len(first) == 2
    report = loop.report()
    again = sorted(p for p in job.trainers() if p not in first)
    running = {p.pid: p for p in report.processes if p.role == "trainer" and p.state not in ENDED}
    assert sorted(running) == again and {p.placement.restart for p in running.values()} == {1}
    (told,) = [f for f in report.findings if f.id == "ranks-restarted"]
    assert sorted(told.pids) == first and told.evidence["running"] == again, told
    assert told.evidence["restart"] == 1 and told.evidence["max_restarts"] == 1
    assert "restart 1 of 1" in told.title
    assert [f for f in report.findings if f.id == "worker-died"] == []
