"""Austin's output read: main-thread samples and other stacks, a sweep's newest stack per process,
where mode's stack of each thread."""

from __future__ import annotations

from dltop.collect.stacks.austin import newest_main_stacks, parse_samples, parse_where
from dltop.frames import trainer_phase

# as Austin 3.7 writes them (pipe mode), trimmed: a trainer (pid 356) with a feeder thread
LINES = [
    "# austin: 3.7.0",
    "# interval: 250000",
    "",
    "P356;T0:389;/usr/lib/python3.11/threading.py:Thread._bootstrap:1002;"
    "/usr/lib/python3.11/multiprocessing/queues.py:Queue._feed:231;"
    "/usr/lib/python3.11/threading.py:Condition.wait:320 250112",
    "P356;T0:356;/srv/c:d/train.py:<module>:90;/srv/c:d/train.py:train:71;"
    "/venv/site-packages/torch/utils/data/dataloader.py:_BaseDataLoaderIter.__next__:631;"
    "/venv/site-packages/torch/utils/data/dataloader.py:_MultiProcessingDataLoaderIter._next_data:1329;"
    "/venv/site-packages/torch/utils/data/dataloader.py:_MultiProcessingDataLoaderIter._get_data:1295 250020",
    "P356;T0:1356;/srv/train.py:helper:3 250020",
    "P356;T0:356;/srv/c:d/train.py:<module>:90;/srv/c:d/train.py:step:40 249990",
    "P356;T0:356 250001",
    "P356;T0:356;/srv/c:d/train.py:<module>:90;:INVALID: 250001",
    "# duration: 1000000",
]


def test_austin_lines_split_into_main_thread_samples_and_other_stacks():
    cache: dict = {}
    main, others, threads, tids = parse_samples(LINES, 356, cache)
    # in time order; a sample with no Python frames is empty, one Austin could not read is dropped
    assert [len(s) for s in main] == [5, 2, 0]
    assert [trainer_phase(list(s)) for s in main] == ["waiting-for-data", "running", "running"]
    waiting = main[0]
    assert (waiting[0].function, waiting[0].file, waiting[0].line) == ("<module>", "/srv/c:d/train.py", 90)
    assert waiting[-1].function.endswith("_get_data") and waiting[-1].kind == "torch"
    # thread 1356 is not the main thread 356 though its id ends the same
    assert {s[-1].function for s in others} == {"Condition.wait", "helper"}
    assert threads == {}  # counted by thread only where asked (a thread pipeline's trainer)
    assert tids == {389, 1356}  # every other thread that ran Python: its CPU is not intra-op work
    again = parse_samples(LINES, 356, cache).main
    assert again[0][0] is waiting[0]  # frames are made once


def test_a_sweep_gives_each_process_its_newest_main_thread_stack():
    lines = [*LINES, "P357;T0:357;/srv/w.py:work:5 1000", "P357;T0:358;/srv/w.py:feed:9 1000"]
    newest = newest_main_stacks(lines, {})
    assert set(newest) == {356, 357}  # 1356 is a thread of 356, not a process
    assert newest[356] == ()  # its newest readable sample had no Python frames (the unreadable one is skipped)
    assert [f.function for f in newest[357]] == ["work"]


def _where_thread(pid: int, tid: int, frames: list) -> str:
    """One thread as Austin 3.7's where mode (``austin -w``) writes it: colours, emoji, outermost first."""
    head = f"\n\n\U0001f4a4 Process \x1b[35;1m{pid}\x1b[0m \U0001f9f5 Thread \x1b[34;1m0:{tid}\x1b[0m\n\n"
    return head + "".join(
        f"    \x1b[33;1m{function}\x1b[0m (\x1b[36;1m{path}\x1b[0m:\x1b[32;1m{line}\x1b[0m)\n"
        for function, path, line in frames
    )


def test_austin_where_mode_gives_each_threads_stack():
    loop = "/venv/site-packages/torch/utils/data/_utils/worker.py"
    text = (
        _where_thread(40, 47, [("Thread._bootstrap", "/usr/lib/python3.11/threading.py", 1002)])
        + _where_thread(40, 40, [("<module>", "/srv/a (copy):b/train.py", 9), ("_worker_loop", loop, 309)])
        + _where_thread(40, 48, [("Thread.run", "/usr/lib/python3.11/threading.py", 982)]).replace(
            "\x1b[0m)\n", "\x1b[0m)\n;:INVALID:\n"
        )
    )
    cache: dict = {}
    threads = parse_where(text, cache)
    assert set(threads) == {47, 40}  # the thread with a frame Austin could not read is no evidence
    outer, inner = threads[40]
    assert (outer.function, outer.file, outer.line) == ("<module>", "/srv/a (copy):b/train.py", 9)
    assert inner.function == "_worker_loop" and inner.kind == "torch"
    assert parse_where(text, cache)[40][1] is inner  # frames are made once
    assert parse_where("", cache) == {}
