"""A PyTorch Lightning loop's main thread as dltop reads it, on py-spy output recorded from
tests/jobs/lightning_job.py (Lightning 2.6, 2 fork workers): Lightning's own frames
(``_PrefetchDataFetcher``, ``CombinedLoader``, its hooks) around the DataLoader's must not count
as data wait, and its epoch boundary (the old iterator dropped inside the fetcher's ``__iter__``)
is start-up."""

from __future__ import annotations

from collections import Counter

from dltop import frames, pipelines
from dltop.collect.stacks.pyspy import parse_dump, parse_speedscope
from tests.support import FIXTURES

PYSPY = FIXTURES / "pyspy"
# the job's own clock over each recording: percent of wall time inside next() and in start-up
PREFETCH_CLOCK = {"waiting-for-data": 42.4, "starting-workers": 0.0}
EPOCHS_CLOCK = {"waiting-for-data": 35.2, "starting-workers": 14.4}
MARGIN = 8.0  # points: 200 samples at 50 Hz give about ±3.5 at one binomial sigma


def main_thread(dump: str) -> list:
    return next(list(t.frames) for t in parse_dump((PYSPY / dump).read_text()) if t.name == "MainThread")


def main_samples(record: str) -> list:
    threads = parse_speedscope((PYSPY / record).read_text())
    return [list(s) for name, samples in threads.values() if name == "MainThread" for s in samples]


def shares(phases: list) -> dict:
    return {phase: 100 * count / len(phases) for phase, count in Counter(phases).items()}


def in_clock_next(stack: list) -> bool:
    """Inside the job's timed call into the DataLoader (its clock, not dltop, draws the line)."""
    return any(f.file.endswith("clock.py") and f.function.endswith("Clock._next") for f in stack)


def test_the_prefetching_fetchers_wait_is_the_dataloaders():
    waiting = main_thread("lightning_prefetch_waiting.json")
    assert any(f.function == "_PrefetchDataFetcher.__next__" for f in waiting)
    assert pipelines.input_call(waiting) == pipelines.InputCall("dataloader", boundary=False)
    assert frames.trainer_phase(waiting) == "waiting-for-data"
    assert frames.waits_on_workers(waiting) and frames.uses_worker_processes(waiting)


def test_the_step_under_lightnings_loop_is_running():
    step = main_thread("lightning_step.json")
    assert any(f.function == "_TrainingEpochLoop.advance" for f in step)
    assert pipelines.input_call(step) is None
    assert frames.trainer_phase(step) == "running"


def test_every_sample_counts_as_waiting_exactly_when_inside_the_dataloaders_next():
    """Lightning's fetcher, CombinedLoader and hooks around the wait: the classification draws the
    line where the job's own clock does, sample by sample."""
    samples = main_samples("lightning_prefetch_record.json")
    phases, _ = frames.trainer_phases(samples)
    assert len(samples) >= 150
    assert [p == "waiting-for-data" for p in phases] == [in_clock_next(s) for s in samples]


def test_the_prefetching_loops_phases_match_its_clock():
    phases, _ = frames.trainer_phases(main_samples("lightning_prefetch_record.json"))
    found = shares(phases)
    for phase, truth in PREFETCH_CLOCK.items():
        assert abs(found.get(phase, 0.0) - truth) <= MARGIN, (phase, found, truth)


def test_lightnings_epoch_boundary_is_start_up():
    """A map-style loader of 20 batches an epoch, workers not persistent: Lightning never calls
    next() past the last batch, so the old workers are shut down when its fetcher's ``__iter__``
    drops the old iterator (``on_run_start`` -> ``__del__`` -> ``_shutdown_workers``)."""
    samples = main_samples("lightning_epochs_record.json")
    dropped = [s for s in samples if any(f.function.endswith("_shutdown_workers") for f in s)]
    assert dropped and all(any(f.function.endswith("on_run_start") for f in s) for s in dropped)
    assert {frames.trainer_phase(s) for s in dropped} == {"starting-workers"}
    found = shares(frames.trainer_phases(samples)[0])
    for phase, truth in EPOCHS_CLOCK.items():
        assert abs(found.get(phase, 0.0) - truth) <= MARGIN, (phase, found, truth)
