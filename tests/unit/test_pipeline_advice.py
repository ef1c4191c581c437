"""Findings on input pipelines other than DataLoader's worker processes (torchdata.nodes, SPDL, a
thread pool of the user's), on hand-built windows: each in its own pipeline's words, threads judged
as threads (one GIL), their hangs and deaths as a worker's."""

from __future__ import annotations

import dataclasses

import pytest

from dltop.diagnose import diagnose, pending
from dltop.frames import make_frame
from dltop.model import WorkerThread
from dltop.settings import Settings
from tests.windows import bound_window, ids

THREADING = "/usr/lib/python3.11/threading.py"
POOL = "/usr/lib/python3.11/concurrent/futures/thread.py"
# a ThreadPoolExecutor's thread running the user's decode
POOL_STACK = [
    make_frame("Thread._bootstrap", THREADING, 995),
    make_frame("Thread.run", THREADING, 975),
    make_frame("_worker", POOL, 83),
    make_frame("_WorkItem.run", POOL, 58),
    make_frame("decode", "/home/me/train.py", 12),
]
NOW = "2026-01-01T00:00:10+00:00"


def thread(tid, cpu=3.0, busy=100.0, activity="fetching", kind="worker", stuck_s=None, gone_at=None, stack=None):
    return WorkerThread(tid, f"ThreadPoolExecutor-0_{tid - 100}", kind, activity, cpu, busy,  # type: ignore[arg-type]
                        stack or POOL_STACK, stuck_s, gone_at)  # fmt: skip


def threads_window(pipeline, threads=2, cpu=3.0, busy=100.0, wait=80.0, main_cpu=5.0, ticks=3, rows=None, samples=2000,
                   **loader):  # fmt: skip
    """A trainer (pid 1) fed by ``threads`` worker threads of ``pipeline``, each using ``cpu`` % of a
    core and busy ``busy`` % of their samples; its main thread uses ``main_cpu``; ``samples`` of the
    trainer (enough for one worker count)."""
    rows = rows if rows is not None else [thread(100 + i, cpu, busy) for i in range(threads)]
    total = main_cpu + sum(t.cpu_percent or 0.0 for t in rows)
    (base, *_) = bound_window(wait, workers=0, ticks=1, trainer_cpu=total, trainer_main_cpu=main_cpu, samples=samples)
    workers = sum(t.kind == "worker" for t in rows)
    fed = dataclasses.replace(base.loaders[0], pipeline=pipeline, start_method="thread", dataset=None,
                              num_workers=workers, worker_threads=rows, **loader)  # fmt: skip
    return [dataclasses.replace(base, loaders=[fed])] * ticks


def by_id(findings):
    return {f.id: f for f in findings}


@pytest.mark.parametrize(
    "pipeline, site, knob",
    [
        ("torchdata.nodes", {"built_by": "ParallelMapper", "built_at": "/home/me/train.py:30"},
         "num_workers={n}  # in ParallelMapper(...) (/home/me/train.py:30); now num_workers=2"),
        ("spdl", {}, "concurrency={n}  # in the stage's .pipe(...); now 2 worker thread(s); build(num_threads=...) must"
                     " be at least the concurrency of every stage summed"),
        ("threads", {"built_by": "ThreadPoolExecutor", "built_at": "/home/me/prefetch.py:7"},
         "max_workers={n}  # in ThreadPoolExecutor(...) (/home/me/prefetch.py:7); now 2 worker thread(s)"),
    ],
)  # fmt: skip
def test_io_bound_threads_get_more_of_them_in_their_pipelines_words(pipeline, site, knob):
    # 2 threads busy all the time on 3% of a core each (waiting on storage), the trainer waiting 80%:
    # its pace allows 5x, the CPUs far more: the fewest within the pace's error (2000 samples: 4.8x)
    # are 2 x 4.8 = 9.6 -> 10 threads, for 4.8x, its pace bound by the trainer's own
    found = by_id(diagnose(threads_window(pipeline, **site)))
    assert "gil-bound" not in found  # waiting threads leave the GIL free
    bound = found["input-bound"]
    more = bound.evidence["suggested_workers"]
    keyword = knob.split("=", 1)[0]  # the pipeline's own: num_workers, concurrency, max_workers
    assert more > 2 and bound.evidence["change"] == {keyword: more}
    assert bound.suggestion.startswith(knob.format(n=more))
    assert "DataLoader" not in bound.suggestion + bound.detail and bound.bench_args is None
    assert more == 10 and bound.evidence["binding"] == "pace" and bound.evidence["predicted_speedup"] == 5.0
    assert f"about {more} thread(s)" in bound.detail and "share one GIL" in bound.detail
    assert "its pace now, bound by the trainer's own pace" in bound.detail
    assert (
        bound.evidence["pipeline"] == pipeline
        and bound.evidence["hottest_user_frame"] == "decode (/home/me/train.py:12)"
    )


def test_the_count_comes_from_the_flag_the_script_reads():
    site = {"built_by": "ParallelMapper", "built_at": "/home/me/train.py:30", "workers_keyword": "num_workers",
            "workers_flag": "--workers"}  # fmt: skip
    bound = by_id(diagnose(threads_window("torchdata.nodes", **site)))["input-bound"]
    assert (
        bound.suggestion.startswith("--workers ") and "passes it to ParallelMapper as num_workers" in bound.suggestion
    )


def test_a_dataloader_site_is_not_another_pipelines():
    """A DataLoader found in the script (a validation loader) is not where a pool's threads are set."""
    bound = by_id(diagnose(threads_window("threads", built_by="DataLoader", built_at="/home/me/train.py:9")))
    assert "max_workers=" in bound["input-bound"].suggestion and "train.py:9" not in bound["input-bound"].suggestion


@pytest.mark.parametrize("pipeline, fix", [
    ("torchdata.nodes", 'method="process"  # in ParallelMapper(...)'),
    ("spdl", ".pipe(fn, concurrency=2, executor=ProcessPoolExecutor(max_workers=2))"),
    ("threads", "ProcessPoolExecutor(max_workers=2) instead of ThreadPoolExecutor"),
])  # fmt: skip
def test_cpu_bound_python_threads_are_gil_bound_and_more_threads_are_not_the_fix(pipeline, fix):
    # 2 threads at 46% of a core each, busy all the time, and the main thread at 5%: 0.97 cores of Python
    found = diagnose(threads_window(pipeline, cpu=46.0))
    gil = by_id(found)["gil-bound"]
    assert gil.severity == "warning" and gil.pids == [1] and gil.evidence["python_cores"] == 0.97
    assert gil.evidence["threads_cores"] == 0.92 and gil.evidence["main_thread_cores"] == 0.05
    assert [t["cpu_percent"] for t in gil.evidence["threads"]] == [46.0, 46.0]
    assert gil.suggestion.startswith(fix) and "releases the GIL" in gil.suggestion
    assert gil.evidence["hottest_user_frame"] == "decode (/home/me/train.py:12)"
    assert "More threads will not help" in gil.detail
    bound = by_id(found)["input-bound"]
    assert bound.explained_by == "gil-bound" and bound.suggestion == "" and bound.evidence["binding"] == "gil"
    assert bound.evidence["suggested_workers"] == 2  # no more threads
    assert ids(found)[0] == "gil-bound"  # the cause first


def test_the_gil_is_judged_on_threads_alone():
    # threads at the GIL's one core, whether ahead of the trainer (busy 70%) or not: the trainer
    # waits little in next() and for the GIL in its step
    for busy in (70.0, 95.0):
        step = by_id(diagnose(threads_window("threads", cpu=46.0, wait=5.0, busy=busy)))["gil-bound"]
        assert step.title.endswith("5% of the time and for the GIL in its step")
    assert "for the GIL in its step" not in by_id(diagnose(threads_window("threads", cpu=46.0)))["gil-bound"].title
    # the same core, most of it the trainer's own step (CPU training, outside the GIL): not judged
    assert "gil-bound" not in ids(diagnose(threads_window("threads", cpu=20.0, main_cpu=55.0, wait=5.0)))
    assert "gil-bound" in ids(diagnose(threads_window("threads", cpu=25.0, main_cpu=45.0, wait=5.0)))
    assert "gil-bound" not in ids(diagnose(threads_window("threads", cpu=46.0, busy=20.0)))  # threads mostly idle
    assert "gil-bound" not in ids(diagnose(threads_window("threads", cpu=90.0)))  # 1.85 cores: outside the GIL
    assert "gil-bound" not in ids(diagnose(bound_window(80.0, workers=2, cpu=46.0, trainer_cpu=5.0)))  # processes
    free = [dataclasses.replace(s, processes=[dataclasses.replace(s.processes[0], name="python3.13t")])
            for s in threads_window("threads", cpu=46.0)]  # fmt: skip
    assert "gil-bound" not in ids(diagnose(free))  # free-threaded Python has no GIL
    assert "gil-bound" in ids(diagnose(threads_window("threads", cpu=46.0), Settings(gil_cores=0.9)))
    assert "gil-bound" not in ids(diagnose(threads_window("threads", cpu=46.0), Settings(gil_cores=0.99)))


def test_process_workers_of_torchdata_are_sized_as_processes_with_their_method():
    window = [dataclasses.replace(s, loaders=[dataclasses.replace(s.loaders[0], pipeline="torchdata.nodes",
                                                                  start_method="spawn", dataset=None)])
              for s in bound_window(80.0, cpu=5.0, samples=2000, ticks=10)]  # fmt: skip
    found = by_id(diagnose(window))
    bound = found["input-bound"]
    more = bound.evidence["suggested_workers"]
    assert bound.suggestion.startswith(
        f'num_workers={more}, method="process"  # in ParallelMapper(...); now num_workers=2'
    )
    assert "gil-bound" not in found and bound.bench_args is None and "worker(s)" in bound.detail


def test_a_hung_thread_is_a_hung_worker_and_explains_the_wait():
    stuck = thread(101, cpu=0.0, activity="stuck", stuck_s=30.0,
                   stack=[*POOL_STACK[:-1], make_frame("read_shard", "/home/me/io.py", 7)])  # fmt: skip
    found = diagnose(threads_window("threads", rows=[thread(100, busy=50.0), stuck], ticks=6))
    hung = found[0]
    assert hung.id == "worker-hung" and hung.pids == [1] and hung.severity == "error"
    assert hung.evidence["tid"] == 101 and hung.evidence["thread"] == "ThreadPoolExecutor-0_1"
    assert hung.evidence["trainer_pid"] == 1 and hung.evidence["stuck_frame"] == "read_shard (/home/me/io.py:7)"
    assert hung.title.startswith("Worker thread ThreadPoolExecutor-0_1 (tid 101) of trainer 1 hung for 30s")
    assert "DataLoader" not in hung.suggestion and "timeout" in hung.suggestion
    bound = by_id(found)["input-bound"]
    assert bound.explained_by == "worker-hung" and "thread ThreadPoolExecutor-0_1 (tid 101) of 1" in bound.detail


def test_a_thread_still_for_a_while_is_pending_a_hang():
    still = thread(101, cpu=0.0, stuck_s=8.0)
    (waiting,) = [p for p in pending(threads_window("threads", rows=[still]), Settings()) if p.id == "worker-hung"]
    assert "tid 101" in waiting.needs and waiting.ready_in_s == 12.0


def gone(seconds_ago, kind="worker"):
    at = f"2026-01-01T00:00:{10 - seconds_ago:02d}+00:00"
    return thread(99, kind=kind, gone_at=at)


def test_a_pipeline_thread_gone_with_none_in_its_place_is_a_death():
    feeder = [thread(100), thread(101)]
    found = diagnose(threads_window("threads", rows=feeder, threads_exited=[gone(8, kind="feeder")]))
    died = by_id(found)["worker-died"]
    assert died.pids == [1] and died.evidence["tid"] == 99 and died.evidence["kind"] == "feeder"
    assert "waits on" in died.title and "Exception in thread" in died.suggestion
    assert by_id(found)["input-bound"].explained_by == "worker-died"


@pytest.mark.parametrize("case", ["replaced at a reset", "just gone", "trainer starting", "job ended"])
def test_threads_that_go_at_an_epoch_or_the_end_are_no_deaths(case):
    window = threads_window("torchdata.nodes", threads_exited=[gone(2 if case == "just gone" else 8)])
    if case == "trainer starting":  # torchdata's reset: the main thread starts the new threads
        window = [dataclasses.replace(s, processes=[dataclasses.replace(s.processes[0], activity="starting-workers")])
                  for s in window]  # fmt: skip
    if case == "job ended":
        window = [dataclasses.replace(s, job=dataclasses.replace(s.job, state="exited")) for s in window]
    assert "worker-died" not in ids(diagnose(window))


def test_dataloader_only_advice_stays_off_other_pipelines():
    """pin-memory, workers-respawning and too-many-workers speak DataLoader; a thread pipeline gets none of them."""
    window = threads_window("threads", wait=1.0, busy=10.0, pin_memory=False, persistent_workers=False,
                            worker_respawns=9)  # fmt: skip
    with_gpu = bound_window(1.0, gpu_util=90.0, ticks=1)[0]
    window = [dataclasses.replace(s, gpus=with_gpu.gpus, gpu_status="ok") for s in window]
    assert not {"pin-memory", "workers-respawning", "too-many-workers"} & set(ids(diagnose(window)))
    assert "workers-respawning" not in [p.id for p in pending(window, Settings())]
