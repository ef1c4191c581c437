"""The ranks of one run judged together, on hand-built windows: the noise, the waiting ranks'
advice as a consequence, the run told by its rendezvous, a restart told from ranks that ended."""

from __future__ import annotations

import dataclasses
from typing import Optional

from dltop.diagnose import diagnose
from dltop.diagnose.ranks import runs
from dltop.model import ExitedWorker, Placement
from tests.windows import bound_window


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


def _restart_window(new_ranks: bool, state: str = "running", launcher: Optional[int] = 100, again: int = 1) -> list:
    """Ranks 0 and 1 (pids 1, 2) of torchrun's first start, then pids 3, 4 with restart count
    ``again`` (1: torchrun's first restart), or no rank."""
    before = _two_ranks(10.0, 10.0)[-1]
    first = [dataclasses.replace(p, placement=dataclasses.replace(p.placement, restart=0, max_restarts=3))
             if p.placement else p for p in before.processes]  # fmt: skip
    moved = {1: 3, 2: 4, 10: 30, 20: 40}
    later = [dataclasses.replace(p, pid=moved[p.pid], trainer_pid=moved[p.trainer_pid],
                                 placement=p.placement and dataclasses.replace(p.placement, restart=again))
             for p in first] if new_ranks else []  # fmt: skip
    job = dataclasses.replace(before.job, launcher_pid=launcher, pid=launcher or 1)
    return [
        dataclasses.replace(before, job=job, processes=first),
        dataclasses.replace(before, job=dataclasses.replace(job, state=state, trainer_pids=[3, 4] if new_ranks else []),
                            processes=later, loaders=[]),
    ]  # fmt: skip


def test_ranks_started_again_with_a_higher_restart_count_are_a_restart():
    (told,) = [f for f in diagnose(_restart_window(True)) if f.id == "ranks-restarted"]
    assert told.pids == [1, 2] and told.evidence["running"] == [3, 4] and told.evidence["restart"] == 1
    assert told.title == "The launcher restarted the ranks (restart 1 of 3)" and "rank 0 (pid 1)" in told.detail
    # no restart: no rank while torchrun waits (other nodes, its end), ranks that ended beside ranks
    # of the same start (rank 0 alone saving a checkpoint), the job's end, no launcher
    for quiet in (_restart_window(False), _restart_window(True, again=0), _restart_window(True, state="exited"),
                  _restart_window(True, launcher=None), _two_ranks(10.0, 10.0)):  # fmt: skip
        assert "ranks-restarted" not in [f.id for f in diagnose(quiet)]


def test_workers_taken_down_with_their_rank_are_no_deaths_of_their_own():
    """torchrun's SIGTERM to a rank's group ends its workers with it, whether the job then runs on
    or ends; a lone worker killed by SIGKILL (the OOM killer) before its trainer is a death."""
    window = _two_ranks(10.0, 10.0)

    def deaths(*exits: ExitedWorker) -> list:
        loader = dataclasses.replace(window[-1].loaders[0], workers_exited=list(exits))
        last = dataclasses.replace(window[-1], loaders=[loader, *window[-1].loaders[1:]])
        return [f.pids for f in diagnose([window[0], last]) if f.id == "worker-died"]

    at = "2026-01-01T00:00:09+00:00"
    group = [ExitedWorker(p, 1, 5.0, at, -15, "died", trainer_running=False) for p in (10, 11)]
    assert deaths(*group) == [] and deaths(group[0]) == []
    ended = [dataclasses.replace(window[0], job=dataclasses.replace(window[0].job, state="exited", exit_code=1))] * 2
    window[:] = ended
    assert deaths(*group) == []  # the job then exited (with the code of the rank that failed)
    assert deaths(*[dataclasses.replace(w, trainer_running=True) for w in group]) == [[10], [11]]
    assert deaths(ExitedWorker(10, 1, 5.0, at, -9, "died", trainer_running=False)) == [[10]]
    assert deaths(*[dataclasses.replace(w, in_trainer_log=True) for w in group]) == [[10], [11]]
