"""py-spy output parsers, frame classification and ptrace advice, on recorded py-spy output and
hand-built snapshots."""

from __future__ import annotations

from collections import Counter

import pytest

from dltop import frames
from dltop.collect.stacks.ptrace import PtraceFacts, stacks_fix
from dltop.collect.stacks.pyspy import failure, parse_dump, parse_speedscope
from dltop.frames import make_frame
from tests.support import FIXTURES

PYSPY = FIXTURES / "pyspy"
D = "/x/site-packages/torch/utils/data/dataloader.py"


def main_thread(name: str):
    return next(t for t in parse_dump((PYSPY / name).read_text()) if t.name == "MainThread")


def test_dump_frames_are_innermost_last_and_classified():
    fetching = main_thread("worker_fetching.json").frames
    assert fetching[0].function == "<module>"  # outermost first
    assert fetching[-1].kind in ("user", "torch")
    assert frames.worker_activity(list(fetching)) == "fetching"
    assert frames.user_frame(list(fetching)).function == "SyntheticDataset.__getitem__"
    assert frames.worker_activity(list(main_thread("worker_idle.json").frames)) == "idle"
    assert frames.start_method(list(fetching)) == "fork"


def recorded_phases(name: str) -> tuple:
    """(main thread name, Counter of phases, {thread names}) of a recorded ``py-spy record``."""
    threads = parse_speedscope((PYSPY / f"{name}.json").read_text())
    trainer = min(threads)  # the main thread's id is the pid, lower than its threads'
    thread_name, samples = threads[trainer]
    phases, _ = frames.trainer_phases([list(s) for s in samples])
    return thread_name, Counter(phases), {n for n, _ in threads.values()}


def test_record_gives_the_trainer_phases_in_order():
    name, phases, names = recorded_phases("trainer_record")
    assert name == "MainThread" and sum(phases.values()) == 79
    assert phases == {"running": 61, "waiting-for-data": 18}
    assert names == {"MainThread", "QueueFeederThread"}


def test_without_workers_the_fetch_counts_as_waiting():
    _, phases, _ = recorded_phases("trainer_no_workers_record")
    assert phases["waiting-for-data"] / sum(phases.values()) > 0.5 and not phases["starting-workers"]


def test_an_epochs_first_batch_after_respawning_workers_is_start_up():
    """spawn, non-persistent, 12 batches an epoch: the job itself measured 79% of its time in iter()
    and first batches, 16% in later waits; joining the old workers inside __next__ is start-up too."""
    _, phases, _ = recorded_phases("trainer_spawn_respawning")
    total = sum(phases.values())
    assert 0.6 < phases["starting-workers"] / total < 0.9
    assert phases["waiting-for-data"] / total < 0.3


def test_first_batch_wait_is_start_up_only_after_a_boundary_and_only_on_workers():
    q = [make_frame("main", "/me/train.py", 3), make_frame("_BaseDataLoaderIter.__next__", D, 1),
         make_frame("_MultiProcessingDataLoaderIter._get_data", D, 2)]  # fmt: skip
    init = [make_frame("main", "/me/train.py", 2), make_frame("_MultiProcessingDataLoaderIter.__init__", D, 9)]
    step = [make_frame("main", "/me/train.py", 4)]
    fetch = [make_frame("main", "/me/train.py", 3), make_frame("_BaseDataLoaderIter.__next__", D, 1),
             make_frame("_MapDatasetFetcher.fetch", "/x/torch/utils/data/_utils/fetch.py", 5)]  # fmt: skip
    phases, starting = frames.trainer_phases([q, init, q, q, step, q])
    assert phases == ["waiting-for-data", "starting-workers", "starting-workers", "starting-workers", "running",
                      "waiting-for-data"] and not starting  # fmt: skip
    assert frames.trainer_phases([q], in_epoch_start=True) == (["starting-workers"], True)  # carried over windows
    assert frames.trainer_phases([init, fetch])[0] == ["starting-workers", "waiting-for-data"]  # num_workers=0


def test_a_stack_says_what_a_process_is_and_a_worker_stays_one():
    """An exiting spawn worker is past its bootstrap (``sys.exit`` in ``spawn_main``, then
    ``threading._shutdown``): that stack must not turn it into something else (on torch 2.4 it
    became a second trainer)."""
    mp = "/usr/lib/python3.11/multiprocessing"
    spawn = [make_frame("<module>", "<string>", 1), make_frame("spawn_main", f"{mp}/spawn.py", 122)]
    importing = [*spawn, make_frame("_main", f"{mp}/spawn.py", 131), make_frame("<module>", "/home/me/train.py", 1)]
    run = [*spawn, make_frame("BaseProcess._bootstrap", f"{mp}/process.py", 314),
           make_frame("BaseProcess.run", f"{mp}/process.py", 108)]  # fmt: skip
    working = [*run, make_frame("_worker_loop", f"/x/site-packages/{frames.WORKER}", 300)]
    exiting = [make_frame("_shutdown", "/usr/lib/python3.11/threading.py", 1583)]
    assert frames.process_kind(importing) == "starting"
    assert frames.process_kind(working, "starting") == "worker"
    assert frames.process_kind(exiting, "worker") == "worker"
    assert frames.process_kind(exiting, "starting") == "starting"
    assert frames.process_kind([], "starting") == "starting"
    assert frames.process_kind(run) == "other"  # a Pool worker, a helper: another target
    assert frames.process_kind(exiting) == "other"  # first sight, no bootstrap: not a multiprocessing child


def test_locals_give_the_loader_config():
    threads = parse_dump((PYSPY / "worker_locals.json").read_text())
    config = {}
    for thread in threads:
        config.update(frames.worker_loop_config(thread.locals or {}))
    assert config["num_workers"] == 2 and config["persistent_workers"] is True and config["worker_id"] in (0, 1)


@pytest.mark.parametrize(
    "path, kind",
    [
        ("/usr/lib/python3.11/threading.py", "stdlib"),
        ("/opt/venv/lib/python3.10/site-packages/torch/utils/data/dataloader.py", "torch"),
        ("/usr/local/lib/python3.9/dist-packages/PIL/Image.py", "library"),
        ("/home/me/project/data.py", "user"),
        ("<frozen importlib._bootstrap>", "stdlib"),
    ],
)
def test_frame_kinds(path, kind):
    assert frames.frame_kind(path) == kind


def test_lock_waits_are_deadlocks_other_blocks_are_not():
    user = frames.make_frame("load", "/home/me/data.py", 10)
    wait = frames.make_frame("Condition.wait", "/usr/lib/python3.11/threading.py", 320)
    assert frames.waits_on_lock([user, wait], None)
    assert frames.waits_on_lock([user], "with self._lock:")
    assert frames.waits_on_lock([user], "lock.acquire()")
    assert not frames.waits_on_lock([user], "time.sleep(3600)")
    assert not frames.waits_on_lock([user], "data = sock.recv(4096)")


@pytest.mark.parametrize(
    "facts, expected",
    [
        (PtraceFacts(1000, 0, "root", False, 1, False), "the job runs as root: run dltop as that user, or run `sudo"),
        (PtraceFacts(1000, 1000, "me", False, 1, False), "sysctl kernel.yama.ptrace_scope=0"),
        (PtraceFacts(1000, 1000, "me", False, 2, False), "ptrace_scope is 2"),
        (PtraceFacts(0, 0, "root", False, 1, True), "--cap-add SYS_PTRACE"),
        (PtraceFacts(0, 0, "root", True, 3, False), "forbids ptrace until reboot"),
        (PtraceFacts(0, 0, "root", True, 0, False), "sudo dltop --pid 42"),
    ],
)
def test_ptrace_advice_names_the_fix_for_each_situation(facts, expected):
    assert expected in stacks_fix(facts, 42)


def test_py_spy_failures_are_classified():
    assert failure("Permission Denied: Try running again with elevated permissions")[1] is True
    reason, denied, gone = failure(
        "Error: Failed to get process executable name. Check that the process is running.\n\nCaused by:\n x"
    )
    assert gone and not denied and reason.startswith("Failed to get process executable name")


def test_split_loaders_by_dataset_object_under_fork_and_by_settings_otherwise():
    from dltop.collect.processes.loaders import split_loaders

    def config(dataset, workers=2, worker_id=0):
        return {"dataset": dataset, "num_workers": workers, "persistent_workers": True, "worker_id": worker_id}

    def pids(groups):
        return [g.worker_pids for _, g in groups]

    fork = {p: "fork" for p in range(1, 8)}
    configs = {1: config("<Images at 0xa>"), 2: config("<Images at 0xa>", worker_id=1), 3: config("<Images at 0xb>"),
               4: config("<Images at 0xb>", worker_id=1), 5: None}  # fmt: skip
    known: dict = {}
    assert pids(split_loaders([1, 2, 3, 4, 5], configs, fork, known)) == [[1, 2], [3, 4], [5]]  # 5: not dumped yet
    assert pids(split_loaders([1, 2], configs, fork, known)) == [[1, 2], []]  # the val loader between passes
    one: dict = {}
    split_loaders([1, 2], configs, fork, one)
    assert pids(split_loaders([6, 7], {}, fork, one)) == [[6, 7]]  # new epoch's workers join the only loader
    spawn = {p: "spawn" for p in range(1, 6)}  # addresses differ per worker under spawn: not a key
    configs = {1: config("<Images at 0x1>"), 2: config("<Images at 0x2>"), 3: config("<Images at 0x3>", workers=1)}
    assert pids(split_loaders([1, 2, 3], configs, spawn, {})) == [[1, 2], [3]]
    assert pids(split_loaders([], {}, {}, {})) == [[]]  # num_workers=0: one loader without workers


def test_torch_messages_about_dead_workers():
    from dltop.collect.events.trainer_log import parse_worker_errors

    log = (
        "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. \n"
        "RuntimeError: DataLoader worker (pid 77) is killed by signal: Bus error. It is possible that dataloader's "
        "workers are out of shared memory.\n"
        "RuntimeError: DataLoader worker (pid 78) exited unexpectedly with exit code 3. Details are lost\n"
        "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly\n"
    )
    assert parse_worker_errors(log) == {4242: -9, 77: -7, 78: 3}
    assert parse_worker_errors("DataLoader worker (pid(s) 5, 6) exited unexpectedly") == {5: None, 6: None}
