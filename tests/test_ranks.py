"""The ranks of one run judged together (issue 29 §1): a real torchrun DDP job over gloo, one rank's
loader too slow for its trainer, is named the straggler with the other rank waiting for it in
backward(); a balanced run has none. The rules themselves on hand-built windows: the noise, the
waiting ranks' advice as a consequence, the run told by its rendezvous."""

from __future__ import annotations

import dataclasses
import json
import sys

from dltop.diagnose import diagnose
from dltop.diagnose.ranks import runs
from dltop.model import Placement
from tests.support import run_dltop
from tests.windows import bound_window

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


def _two_ranks(wait0: float, wait1: float, samples: int = 200, placement=None) -> list:
    """Two trainers (pids 1 and 2, ranks 0 and 1) of one run, each with one worker and its own wait."""
    first, second = bound_window(wait0, workers=1, samples=samples)[-1], bound_window(wait1, workers=1,
                                                                                      samples=samples)[-1]  # fmt: skip
    place = placement or Placement(rank=0, world_size=2, run_id="run-a")
    moved = {1: 2, 10: 20}
    trainer2 = [dataclasses.replace(p, pid=moved[p.pid], trainer_pid=2, ppid=moved.get(p.ppid, p.ppid))
                for p in second.processes]  # fmt: skip
    processes = [
        *[dataclasses.replace(p, rank=0, placement=place) if p.role == "trainer" else p for p in first.processes],
        *[dataclasses.replace(p, rank=1, placement=dataclasses.replace(place, rank=1)) if p.role == "trainer" else p
          for p in trainer2],
    ]  # fmt: skip
    loader2 = dataclasses.replace(second.loaders[0], trainer_pid=2, worker_pids=[20])
    job = dataclasses.replace(first.job, trainer_pids=[1, 2])
    snap = dataclasses.replace(first, job=job, processes=processes, loaders=[first.loaders[0], loader2])
    return [snap, snap]


def test_the_rank_that_waits_most_is_the_straggler_and_the_others_advice_is_its_consequence():
    findings = diagnose(_two_ranks(40.0, 85.0))
    (straggler,) = [f for f in findings if f.id == "rank-straggler"]
    assert straggler.pids == [2] and straggler.evidence["straggler_rank"] == 1
    assert straggler.evidence["run_speedup"] == round(1 / (1 - 0.85 + 0.40), 2)
    waiting = [f for f in findings if f.id == "input-bound" and f.pids == [1]]
    assert waiting and waiting[0].explained_by == "rank-straggler" and waiting[0].suggestion == ""
    (own,) = [f for f in findings if f.id == "input-bound" and f.pids == [2]]
    assert own.explained_by is None and own.suggestion


def test_ranks_within_their_noise_or_a_small_gap_have_no_straggler():
    assert "rank-straggler" not in [f.id for f in diagnose(_two_ranks(40.0, 46.0))]  # a gap under 10 points
    # 30 samples each: a 15-point gap is within two standard errors of the difference
    assert "rank-straggler" not in [f.id for f in diagnose(_two_ranks(40.0, 55.0, samples=30))]
    assert "rank-straggler" in [f.id for f in diagnose(_two_ranks(40.0, 55.0, samples=2000))]


def test_a_run_is_told_by_its_run_id_or_its_rendezvous_and_world_size():
    rendezvous = Placement(rank=0, world_size=2, master="10.0.0.1:29500")
    assert list(runs(_two_ranks(10.0, 80.0, placement=rendezvous)[-1])) == ["10.0.0.1:29500/2"]
    assert list(runs(_two_ranks(10.0, 80.0)[-1])) == ["run-a"]


def test_what_fixing_the_straggler_is_worth_stops_where_the_cpus_do():
    window = _two_ranks(10.0, 80.0)
    tight = [dataclasses.replace(s, system=dataclasses.replace(s.system, cpus_allowed=6.0)) for s in window]
    (straggler,) = [f for f in diagnose(tight) if f.id == "rank-straggler"]
    evidence = straggler.evidence
    assert evidence["run_speedup"] == round(1 / (1 - 0.80 + 0.10), 2)
    assert 1 < evidence["run_speedup_by_cpus"] < evidence["run_speedup"]
    assert f"More workers alone stop at {evidence['run_speedup_by_cpus']:.2f}x" in straggler.detail
