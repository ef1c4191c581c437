"""The Collector on real jobs: respawns, rates that match what the job did, exits."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

from dltop.collect.collector import Collector
from tests.support import wait_for


def tick_for(collector: Collector, seconds: float, every: float = 0.5) -> list:
    ticks, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        ticks.append(collector.tick())
        time.sleep(every)
    return ticks


def worker_sets(ticks: list) -> list:
    return [frozenset(ld.worker_pids) for t in ticks for ld in t.loaders]


def test_respawning_workers_are_counted(start_job, attach):
    job = start_job("--workers", "2", "--batches", "4", "--sample-ms", "2", "--step-ms", "1")
    job.wait_workers(2)
    collector = attach(job.pid)
    ticks = tick_for(collector, 6)
    (loader,) = ticks[-1].loaders
    seen = {pid for s in worker_sets(ticks) for pid in s}
    assert loader.worker_respawns >= 4, (loader, len(seen))
    assert len(loader.workers_exited) >= 4 and loader.persistent_workers is False
    assert loader.worker_respawns <= len(seen)
    assert all(w.trainer_pid == job.pid for w in loader.workers_exited)


def test_persistent_workers_keep_their_pids(start_job, attach):
    job = start_job("--workers", "2", "--persistent", "--batches", "4", "--step-ms", "1")
    truth = job.wait_workers(2)
    ticks = tick_for(attach(job.pid), 3)
    assert set(worker_sets(ticks)) == {frozenset(truth)}
    assert ticks[-1].loaders[0].worker_respawns == 0


def test_read_rates_add_up_to_the_file_a_worker_read(start_job, attach, tmp_path):
    data, trigger = tmp_path / "data.bin", tmp_path / "go"
    with open(data, "wb") as out:
        out.write(b"\1" * (50 << 20))
        os.fsync(out.fileno())  # clean pages, so the job's fadvise(DONTNEED) can drop them
    job = start_job("--workers", "1", "--persistent", "--read-file", str(data), "--read-after", str(trigger))
    (worker,) = job.wait_workers(1)
    collector = attach(job.pid)
    ticks = [collector.tick()]
    trigger.touch()
    done = Path(f"{data}.read-by-{worker}")
    while not done.exists() or len(ticks) < 3:
        time.sleep(0.3)
        ticks.append(collector.tick())
        assert len(ticks) < 200, "the worker never read the file"
    ticks.append(collector.tick())

    def total(field: str) -> float:
        return sum(getattr(p, field) * t.window_s for t in ticks[1:] for p in t.processes if p.pid == worker)

    assert 0.9 * (50 << 20) < total("read_chars_per_s") < 1.2 * (50 << 20)
    assert 0.9 * (50 << 20) < total("read_bytes_per_s") < 1.2 * (50 << 20)  # fadvise made it come from disk


def test_cpu_memory_and_fd_figures(start_job, attach):
    busy = start_job("--workers", "1", "--persistent", "--sample-ms", "30", "--step-ms", "0")
    idle = start_job("--workers", "1", "--persistent", "--step-ms", "3000")
    (busy_worker,) = busy.wait_workers(1)
    (idle_worker,) = idle.wait_workers(1)
    busy_ticks = tick_for(attach(busy.pid), 3)
    idle_ticks = tick_for(attach(idle.pid), 3)

    def last(ticks, pid):
        return [p for p in ticks[-1].processes if p.pid == pid][0]

    assert last(busy_ticks, busy_worker).cpu_percent > 40
    assert last(idle_ticks, idle_worker).cpu_percent < 10
    trainer = last(busy_ticks, busy.pid)
    assert trainer.role == "trainer" and trainer.unavailable == {}
    assert 0 < trainer.uss_bytes <= trainer.pss_bytes <= trainer.rss_bytes
    assert trainer.num_fds > 3 and trainer.fd_limit == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert trainer.num_threads >= 1 and trainer.started_at


def test_a_job_that_exits_is_a_state_not_a_crash(start_job, attach):
    job = start_job("--workers", "2", "--persistent", "--epochs", "2", "--batches", "10", "--step-ms", "100")
    truth = job.wait_workers(2)
    collector = attach(job.pid)
    ticks = [collector.tick()]
    wait_for(lambda: ticks.append(collector.tick()) or ticks[-1].job.state == "exited", 60, "the job to exit", 0.5)
    last = ticks[-1]
    (loader,) = last.loaders  # kept once its trainer is gone: the exits are evidence
    assert loader.num_workers == 2 and loader.worker_pids == []  # num_workers: the DataLoader's setting
    assert {w.pid for w in loader.workers_exited} == set(truth)
    trainer = [p for p in last.processes if p.pid == job.pid]
    # Its parent (this test) has not reaped it yet: a zombie with exit status 0, or gone.
    assert trainer == [] or (trainer[0].state == "zombie" and trainer[0].exit_code == 0)
    assert {w.pid for w in collector.lifecycle.exited(job.pid)} == set(truth)
