"""Worker lifecycle across ticks (dltop/collect/events/lifecycle.py): replacements counted, first
arrivals not, exits recorded once."""

from __future__ import annotations

from dltop.collect.events.lifecycle import WorkerLifecycle


def test_lifecycle_counts_replacements_not_first_arrivals():
    life = WorkerLifecycle()
    life.update(0.0, "t0", {}, {}, {1})
    life.update(1.0, "t1", {10: 1, 11: 1}, {}, {1})  # first workers: not respawns
    assert life.respawns(1) == 0 and life.persistent(1) is None
    life.update(2.0, "t2", {12: 1, 13: 1}, {}, {1})  # an epoch boundary: both replaced
    assert life.respawns(1) == 2 and life.persistent(1) is False
    assert [(w.pid, w.seen_for_s) for w in life.exited(1)] == [(10, 1.0), (11, 1.0)]
    life.update(3.0, "t3", {12: 1, 13: 1}, {13: -9}, {1})  # 13 died: a zombie, killed by SIGKILL
    life.update(4.0, "t4", {12: 1, 13: 1}, {13: -9}, {1})  # still a zombie: recorded once
    assert [(w.pid, w.exit_code) for w in life.exited(1)][-1] == (13, -9) and len(life.exited(1)) == 3
