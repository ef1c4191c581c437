"""Which input pipeline a stack belongs to, on real py-spy dumps of torchdata.nodes (threads and
processes), SPDL and a thread-pool prefetcher of the user's own."""

from __future__ import annotations

import pytest

from dltop import frames, pipelines
from dltop.collect.stacks.pyspy import parse_dump
from dltop.frames import make_frame
from tests.support import FIXTURES

PYSPY = FIXTURES / "pyspy"


def threads(name: str) -> dict:
    """{thread name: frames, innermost last} of a recorded dump."""
    return {t.name: list(t.frames) for t in parse_dump((PYSPY / name).read_text())}


@pytest.mark.parametrize(
    ("dump", "pipeline"),
    [
        ("pipeline_torchdata_threads.json", "torchdata.nodes"),
        ("pipeline_torchdata_processes.json", "torchdata.nodes"),
        ("pipeline_spdl.json", "spdl"),
        ("pipeline_threads.json", "threads"),
    ],
)
def test_the_main_threads_wait_names_its_pipeline_and_counts_as_data_wait(dump, pipeline):
    main = threads(dump)["MainThread"]
    assert pipelines.input_call(main) == pipelines.InputCall(pipeline, boundary=False)
    assert frames.trainer_phase(main) == "waiting-for-data"
    assert frames.process_kind(main) == "other"  # a trainer, not a worker


def test_a_dataloader_wait_is_dataloaders_whatever_queue_it_blocks_on():
    loader = "/x/site-packages/torch/utils/data/dataloader.py"
    stack = [
        make_frame("train", "/job/train.py", 10),
        make_frame("_BaseDataLoaderIter.__next__", loader, 630),
        make_frame("_MultiProcessingDataLoaderIter._get_data", loader, 1300),
        make_frame("Queue.get", "/usr/lib/python3.11/queue.py", 180),
        make_frame("Condition.wait", "/usr/lib/python3.11/threading.py", 331),
    ]
    assert pipelines.input_call(stack) == pipelines.InputCall("dataloader", boundary=False)


def test_a_step_that_waits_on_its_own_queue_in_its_own_code_is_no_input_wait():
    """Only a hand-over the wait sits in counts: a queue's get the user's code runs past is not."""
    stack = [
        make_frame("train", "/job/train.py", 10),
        make_frame("Queue.get", "/usr/lib/python3.11/queue.py", 180),
        make_frame("log_metrics", "/job/train.py", 40),
    ]
    assert pipelines.input_call(stack) is None
    assert frames.trainer_phase(stack) == "running"


def test_building_or_starting_a_library_pipeline_is_its_boundary():
    main = threads("pipeline_torchdata_process_worker.json")["MainThread"]
    # a forked worker keeps its parent's frames under multiprocessing's run: they show Loader.__iter__
    trainer_part = [f for f in main if "multiprocessing" not in f.file and "_apply_udf" not in f.function]
    trainer_part = trainer_part[: next(i for i, f in enumerate(trainer_part) if f.function == "decode")]
    assert pipelines.input_call(trainer_part) == pipelines.InputCall("torchdata.nodes", boundary=True)
    assert frames.trainer_phase(trainer_part) == "starting-workers"


@pytest.mark.parametrize(
    ("dump", "workers", "feeders"),
    [
        ("pipeline_torchdata_threads.json", {"Thread-2 (_apply_udf)", "Thread-3 (_apply_udf)"}, 3),
        ("pipeline_spdl.json", {"spdl_worker_thread__0", "spdl_worker_thread__1", "spdl_worker_thread__2"}, 2),
        ("pipeline_threads.json", {"ThreadPoolExecutor-0_0", "ThreadPoolExecutor-0_1"}, 1),
    ],
)
def test_a_thread_pipelines_workers_and_feeders(dump, workers, feeders):
    kinds = {name: pipelines.thread_kind(stack) for name, stack in threads(dump).items() if name != "MainThread"}
    assert {name for name, kind in kinds.items() if kind == "worker"} == workers
    assert sum(kind == "feeder" for kind in kinds.values()) == feeders


def test_what_a_pipeline_thread_is_doing():
    spdl = threads("pipeline_spdl.json")
    assert pipelines.thread_activity(spdl["spdl_worker_thread__0"]) == "fetching"  # in the user's decode
    assert pipelines.thread_activity(spdl["spdl_worker_thread__1"]) == "idle"  # waiting for work, in C
    assert pipelines.thread_activity(spdl["spdl_event_loop_thread"]) == "idle"
    torchdata = threads("pipeline_torchdata_threads.json")
    assert pipelines.thread_activity(torchdata["Thread-2 (_apply_udf)"]) == "fetching"
    assert pipelines.thread_activity(torchdata["Thread-1 (_populate_queue)"]) == "idle"
    # a user's thread filling the queue waits on its workers' futures: idle, not fetching
    assert pipelines.thread_activity(threads("pipeline_threads.json")["Thread-1 (_fill)"]) == "idle"


def test_a_thread_of_the_users_own_is_a_feeder_only_when_seen_feeding():
    start = [
        make_frame("Thread._bootstrap", "/usr/lib/python3.11/threading.py", 1002),
        make_frame("Thread.run", "/usr/lib/python3.11/threading.py", 982),
    ]
    metrics = [*start, make_frame("publish", "/job/metrics.py", 20)]  # a clock or metrics thread, sleeping
    filler = threads("pipeline_threads.json")["Thread-1 (_fill)"]  # waiting on its pool's futures
    putting = [
        *start,
        make_frame("produce", "/job/train.py", 30),
        make_frame("Queue.put", "/usr/lib/python3.11/queue.py", 140),
    ]
    assert pipelines.thread_kind(metrics) is None
    assert pipelines.thread_kind(filler) == "feeder"
    assert pipelines.thread_kind(putting) == "feeder"


def test_torch_and_other_threads_are_no_part_of_a_pipeline():
    pin = [
        make_frame("Thread._bootstrap", "/usr/lib/python3.11/threading.py", 1002),
        make_frame("Thread.run", "/usr/lib/python3.11/threading.py", 982),
        make_frame("_pin_memory_loop", "/x/site-packages/torch/utils/data/_utils/pin_memory.py", 50),
    ]
    feeder = threads("pipeline_torchdata_process_worker.json")["QueueFeederThread"]
    assert pipelines.thread_kind(pin) is None
    assert pipelines.thread_kind(feeder) is None


def test_a_torchdata_worker_process_is_a_worker_with_an_activity():
    main = threads("pipeline_torchdata_process_worker.json")["MainThread"]
    assert frames.process_kind(main) == "worker"
    assert frames.worker_activity(main) == "fetching"
    idle = [*main[: next(i for i, f in enumerate(main) if f.function == "_apply_udf") + 1]]
    idle.append(make_frame("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 113))
    assert frames.worker_activity(idle) == "idle"


def test_a_pipeline_workers_costly_frame_is_the_users_function_not_the_trainers_loop():
    worker = threads("pipeline_torchdata_process_worker.json")["MainThread"]
    assert frames.costly_frame(worker).function == "decode"
    assert frames.costly_frame(threads("pipeline_threads.json")["ThreadPoolExecutor-0_0"]).function == "load"
