"""A stopped run judged from its ranks' stacks together (dltop.rank_frames, diagnose/stopped.py):
the rank not where the others are is named with its line, ranks in different collectives are a
desync, ranks that all wait with none missing here point at the other nodes' ranks, and a rank
that is slow but moving (the others wait briefly) stops nothing. Hand-built stacks as py-spy
reads them (innermost last); the same on real torchrun runs is in tests/integration."""

from __future__ import annotations

import dataclasses
from typing import Optional

from dltop.diagnose.stopped import run_stopped
from dltop.diagnose.window import Window
from dltop.frames import make_frame
from dltop.model import Frame, Placement, ProcessSample
from dltop.rank_frames import rank_position
from dltop.settings import Settings
from tests.windows import bound_window

TORCH = "/venv/lib/python3.11/site-packages/torch"
TRAIN = "/job/train.py"
SETTINGS = Settings(hang_after_s=5.0)


def _frame(function: str, path: str, line: int, code: Optional[str] = None) -> Frame:
    return dataclasses.replace(make_frame(function, path, line), code=code)


MAIN = [_frame("<module>", TRAIN, 200, "main()")]
BACKWARD = [
    *MAIN,
    _frame("main", TRAIN, 58, "loss.backward()"),
    _frame("Tensor.backward", f"{TORCH}/_tensor.py", 623),
    _frame("backward", f"{TORCH}/autograd/__init__.py", 395),
    _frame("_engine_run_backward", f"{TORCH}/autograd/graph.py", 979),
]
BARRIER = [
    *MAIN,
    _frame("main", TRAIN, 70, "dist.barrier(group=other)"),
    _frame("barrier", f"{TORCH}/distributed/distributed_c10d.py", 4800),
    _frame("wrapper", f"{TORCH}/distributed/c10d_logger.py", 81),
]
LOCK = [*MAIN, _frame("main", TRAIN, 60, "flush_metrics()"), _frame("flush_metrics", TRAIN, 29, "with _log_lock:")]
DATA = [
    *MAIN,
    _frame("main", TRAIN, 50, "for batch in loader:"),
    _frame("_BaseDataLoaderIter.__next__", f"{TORCH}/utils/data/dataloader.py", 733),
    _frame("_MultiProcessingDataLoaderIter._next_data", f"{TORCH}/utils/data/dataloader.py", 1480),
]
BUSY = [*MAIN, _frame("main", TRAIN, 61, "evaluate()"), _frame("evaluate", TRAIN, 90, "total += sum(range(1000))")]
ITEM = [*MAIN, _frame("main", TRAIN, 66, "losses.append(loss.item())")]


def _rank(rank: int, stack: list[Frame], still_s: float, world: int = 3) -> ProcessSample:
    placement = Placement(rank=rank, local_rank=rank, world_size=world, run_id="run-1")
    return ProcessSample(100 + rank, 1, "trainer", 100 + rank, "python", "", "sleeping", cpu_percent=0.0,
                         rank=rank, placement=placement, activity="running", stack=stack,
                         stuck_s=still_s)  # fmt: skip


def _stopped(*ranks: ProcessSample) -> list:
    snap = dataclasses.replace(bound_window(10.0, ticks=1)[0], processes=list(ranks), loaders=[])
    return run_stopped(Window([snap]), SETTINGS)


def test_each_rank_is_placed_by_its_stack():
    assert rank_position(BACKWARD, True).call == "all_reduce in backward()"
    assert rank_position(BACKWARD, True).site.line == 58
    barrier = rank_position(BARRIER, True)
    assert (barrier.where, barrier.call, barrier.site.line) == ("collective", "barrier", 70)
    assert (rank_position(LOCK, True).where, rank_position(LOCK, True).blocked_on) == ("blocked", "a lock")
    assert rank_position(DATA, True).where == "data"
    assert rank_position(BUSY, False).where == "running"
    assert (rank_position(ITEM, True).where, rank_position(ITEM, True).call) == ("sync", ".item()")


def test_the_rank_blocked_on_a_lock_stopped_the_run_and_the_others_wait_for_it():
    (finding,) = _stopped(_rank(0, BACKWARD, 9), _rank(1, BACKWARD, 9), _rank(2, LOCK, 9))
    assert finding.id == "run-stopped" and finding.severity == "error" and finding.pids == [102]
    assert finding.title == "Run stopped: rank 2 is blocked on a lock at train.py:29 in flush_metrics"
    assert "ranks 0, 1 wait in all_reduce in backward() at train.py:58" in finding.detail
    assert finding.evidence["cause_ranks"] == [2] and not finding.evidence["desync"]
    assert "with _log_lock:" in finding.suggestion


def test_a_rank_that_waits_for_its_input_or_runs_without_arriving_is_the_cause():
    (data,) = _stopped(_rank(0, BACKWARD, 9), _rank(1, DATA, 9), _rank(2, BACKWARD, 9))
    assert data.pids == [101] and "waits for its own input" in data.title and "worker finding" in data.suggestion
    (busy,) = _stopped(_rank(0, BACKWARD, 9), _rank(1, BUSY, 0), _rank(2, BACKWARD, 9))
    assert busy.pids == [101] and "rank 1 is running at train.py:90 without reaching" in busy.title


def test_ranks_in_different_collectives_have_desynced():
    (finding,) = _stopped(_rank(0, BACKWARD, 9), _rank(1, BARRIER, 9), _rank(2, BACKWARD, 9))
    assert finding.evidence["desync"] and finding.pids == [101]
    assert "ranks 0, 2 wait in all_reduce in backward()" in finding.detail
    assert "rank 1 waits in barrier at train.py:70" in finding.detail


def test_every_rank_here_waiting_in_one_collective_names_the_ranks_of_the_other_nodes():
    (finding,) = _stopped(_rank(0, BACKWARD, 9, world=4), _rank(1, BACKWARD, 9, world=4))
    assert finding.evidence["missing_ranks"] == [2, 3] and "ranks 2, 3 (not on this node)" in finding.title
    assert "ranks 2, 3 on the other nodes" in finding.suggestion


def test_a_slow_but_moving_rank_stops_nothing():
    """The others wait for the straggler at each step, never ``hang_after`` at once."""
    assert _stopped(_rank(0, BACKWARD, 1.5), _rank(1, BUSY, 0), _rank(2, BACKWARD, 1.5)) == []
    assert _stopped(_rank(0, BACKWARD, 0), _rank(1, BACKWARD, 0), _rank(2, BACKWARD, 0)) == []


def test_the_exporter_says_where_each_rank_is_with_bounded_labels_and_drops_them_with_the_run():
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from dltop.export.metrics import NodeCollector
    from dltop.export.server import registry_for
    from dltop.export.state import ExporterState
    from dltop.live.node import NodeTick
    from tests.prometheus import series

    def scrape(state: ExporterState) -> dict:
        text = generate_latest(registry_for(NodeCollector(state, "node-a"))).decode()
        return {family.name: family for family in text_string_to_metric_families(text)}

    ranks = [_rank(0, BACKWARD, 9, world=4), _rank(1, LOCK, 9, world=4)]
    snap = dataclasses.replace(bound_window(10.0, ticks=1)[0], processes=ranks, loaders=[])
    state = ExporterState()
    state.update(NodeTick(snapshots=[snap]))
    families = scrape(state)
    still = {s.labels["rank"]: s for s in series(families, "dltop_rank_still_seconds")}
    assert still["0"].labels == {
        "run_id": "run-1",
        "rank": "0",
        "where": "collective",
        "call": "all_reduce in backward()",
    }
    assert still["1"].labels["where"] == "blocked" and still["1"].value == 9
    assert series(families, "dltop_run_world_size", run_id="run-1")[0].value == 4
    state.update(NodeTick(ended=[snap.job.pid]))
    assert not series(scrape(state), "dltop_rank_still_seconds")  # gone with its run


def test_the_text_report_says_where_each_stopped_rank_is_beside_its_time():
    """A rank blocked in a collective reads 'running' in its trainer time: the report says what it is."""
    from dltop.diagnose import diagnose
    from dltop.text_report import render

    base = bound_window(10.0, ticks=1)[0]
    ranks = [_rank(0, BACKWARD, 9), _rank(1, BACKWARD, 9), _rank(2, LOCK, 9)]
    loaders = [dataclasses.replace(base.loaders[0], trainer_pid=r.pid) for r in ranks]
    snap = dataclasses.replace(base, processes=ranks, loaders=loaders)
    text = render(dataclasses.replace(snap, findings=diagnose([snap], SETTINGS)))
    assert "stopped (run-stopped): collective all_reduce in backward(), still 9s at main (/job/train.py:58)" in text
    assert "stopped (run-stopped): blocked on a lock, still 9s at flush_metrics (/job/train.py:29)" in text


def test_the_live_view_says_stopped_and_marks_the_rank_that_stopped_the_run():
    from dltop.diagnose import diagnose
    from dltop.tui import view

    ranks = [_rank(0, BACKWARD, 9), _rank(1, BACKWARD, 9), _rank(2, LOCK, 9)]
    snap = dataclasses.replace(bound_window(10.0, ticks=1)[0], processes=ranks, loaders=[])
    snap = dataclasses.replace(snap, findings=diagnose([snap], SETTINGS))
    assert view.badge(snap) == view.Badge("stopped", "STOPPED")
    assert view.headline(snap) == "Run stopped: rank 2 is blocked on a lock at train.py:29 in flush_metrics"
    marked = {row.pid: (row.cells["role"], row.alert) for row in view.rows(snap)}
    assert marked[102] == ("stopper r2", "stopper") and marked[100] == ("trainer r0", None)


def test_a_rank_whose_worker_hung_chains_worker_hung_to_the_rank_to_the_run():
    """The waiting ranks' stalls name the root (the hung worker) and say what they wait in: the run."""
    from dltop.diagnose import relate
    from dltop.model import Finding

    (stopped,) = _stopped(_rank(0, BACKWARD, 9), _rank(1, DATA, 9), _rank(2, BACKWARD, 9))
    hung = Finding("worker-hung", "error", "Worker 201 hung", "d", [201], {"trainer_pid": 101}, "fix it")
    stalls = [Finding("trainer-stalled", "warning", "t", "d", [p], {"pid": p}, "s") for p in (100, 102)]
    related = {(f.id, tuple(f.pids)): f for f in relate([hung, stopped, *stalls])}
    assert related[("run-stopped", (101,))].explained_by == "worker-hung"
    for pid in (100, 102):
        stall = related[("trainer-stalled", (pid,))]
        assert stall.explained_by == "worker-hung" and not stall.suggestion
        assert stall.detail.startswith("A consequence of worker-hung (through run-stopped): the run has stopped")
