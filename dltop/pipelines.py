"""Which input pipeline a stack belongs to: what a trainer's main thread waits on for its next
batch, and which of its other threads (or child processes) run that pipeline and what they do.

Pure functions over frames (innermost last), as in ``dltop.frames``. The evidence is how the wait
looks, whatever the library: the main thread inside a pipeline's ``__next__``, or blocked on a
hand-over (a queue's ``get``, a future's ``result``) that other threads fill. Library frames only
name it. More: docs/how-it-works.md#pipelines-of-threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dltop.model import Activity, Frame, Pipeline, ThreadKind

DATALOADER = "torch/utils/data/dataloader.py"
# the libraries whose own frames name the pipeline (a path part of their package)
LIBRARIES: dict[str, Pipeline] = {"/torchdata/nodes/": "torchdata.nodes", "/spdl/pipeline/": "spdl"}
# a library's calls that build, start or stop its pipeline (an epoch's boundary), not take a batch
BOUNDARY = (
    "__iter__", "__init__", "reset", "build", "start", "stop", "shutdown", "auto_stop",
    "__enter__", "__exit__", "__del__",
)  # fmt: skip
# calls that block until another thread (or process) hands an item over
HAND_OVER: dict[str, tuple[str, ...]] = {
    "/queue.py": ("get",),
    "multiprocessing/queues.py": ("get",),
    "concurrent/futures/_base.py": ("result", "as_completed", "wait"),
}
PUT: dict[str, tuple[str, ...]] = {"/queue.py": ("put",), "multiprocessing/queues.py": ("put",)}
# calls by which a thread of the user's own feeds a pipeline: putting items on a queue, or handing
# work to a pool and collecting it
FEEDS: dict[str, tuple[str, ...]] = {
    **PUT,
    "concurrent/futures/thread.py": ("submit",),
    "concurrent/futures/process.py": ("submit",),
    "concurrent/futures/_base.py": ("result", "as_completed", "wait", "map"),
}
# where a thread (or a process) of a pipeline runs the per-sample function, in a loop
WORKER_LOOPS: dict[str, tuple[str, ...]] = {
    "torchdata/nodes/_apply_udf.py": ("_apply_udf",),  # ParallelMapper's threads and processes
    "concurrent/futures/thread.py": ("_worker",),  # a ThreadPoolExecutor's (SPDL's executor, a user's)
    "concurrent/futures/process.py": ("_process_worker",),  # a ProcessPoolExecutor's (SPDL's process stage)
}
THREAD_START: dict[str, tuple[str, ...]] = {"threading.py": ("run", "_bootstrap_inner", "_bootstrap")}


@dataclass(frozen=True)
class InputCall:
    """A trainer's main thread inside its input pipeline."""

    pipeline: Pipeline
    boundary: bool  # building, starting or stopping it, not taking a batch


def short_name(function: str) -> str:
    """A frame's function without its class (``Queue.get`` -> ``get``): Python <= 3.10 and older
    py-spy give bare names, newer ones qualified names, and both must match."""
    return function.rsplit(".", 1)[-1]


def _calls(frame: Frame, places: dict[str, tuple[str, ...]]) -> bool:
    return any(frame.file.endswith(suffix) and short_name(frame.function) in names for suffix, names in places.items())


def library(frame: Frame) -> Optional[Pipeline]:
    """The pipeline library a frame's file belongs to, if any."""
    path = "/" + frame.file.lstrip("/")
    return next((pipeline for part, pipeline in LIBRARIES.items() if part in path), None)


def input_call(frames: list[Frame]) -> Optional[InputCall]:
    """What a trainer's main thread is doing in its input pipeline, if it is in one: inside
    DataLoader's ``__next__`` (``dltop.frames`` splits that finer), inside a pipeline library
    (its outermost frame says whether it takes a batch or builds, starts or stops the
    pipeline), or blocked on a hand-over its own code waits on (a queue or futures that other
    threads fill: a prefetcher of the user's)."""
    for index, frame in enumerate(frames):
        if frame.file.endswith(DATALOADER) and short_name(frame.function) == "__next__":
            return InputCall("dataloader", boundary=False)
        named = library(frame)
        if named is not None:
            return InputCall(named, boundary=short_name(frame.function) in BOUNDARY)
        if _calls(frame, HAND_OVER) and all(f.kind == "stdlib" for f in frames[index + 1 :]):
            return InputCall("threads", boundary=False)
    return None


def pipeline_of_threads(stacks: list[list[Frame]]) -> Optional[Pipeline]:
    """The pipeline a trainer's pipeline threads (``thread_kind``'s, each its newest stack) run:
    their library's, else the user's own threads; for a trainer whose main thread was never
    caught waiting for its input."""
    named = next((pipeline for stack in stacks for frame in stack if (pipeline := library(frame))), None)
    return named or ("threads" if stacks else None)


def _loop_start(frames: list[Frame]) -> Optional[int]:
    """Index of the frame a pipeline thread's work starts under: its worker loop, else the
    innermost frame of the thread's start-up (``Thread.run``)."""
    loop = next((i for i, f in enumerate(frames) if _calls(f, WORKER_LOOPS)), None)
    if loop is not None:
        return loop
    return max((i for i, f in enumerate(frames) if _calls(f, THREAD_START)), default=None)


def thread_kind(frames: list[Frame]) -> Optional[ThreadKind]:
    """worker | feeder | None for a thread other than the main one (or a child process): a
    worker runs the per-sample function in a loop (torchdata's ``_apply_udf``, a
    ThreadPoolExecutor's ``_worker``); a feeder runs a pipeline library's own code, or the user's
    code as a thread's target caught feeding (putting on a queue, handing work to a pool or
    collecting it); None is no part of a pipeline (torch's pin-memory thread, a logger's, a
    metrics thread, a library's other threads). One stack is one glimpse: a caller that keeps a
    thread once it was seen feeding sees a feeder busy reading between its puts."""
    if any(_calls(f, WORKER_LOOPS) for f in frames):
        return "worker"
    if any(library(f) for f in frames):
        return "feeder"
    start = _loop_start(frames)
    if start is None or not any(f.kind == "user" for f in frames[start + 1 :]):
        return None
    return "feeder" if any(_calls(f, FEEDS) for f in frames[start + 1 :]) else None


def thread_activity(frames: list[Frame]) -> Activity:
    """fetching | sending | idle for a pipeline's thread or worker process: fetching while code
    other than the pipeline's machinery runs under its loop (the user's function, a decoder),
    sending while the machinery puts an item on a full queue, else idle (waiting for work, or
    moving items along). A feeder of the user's own (a thread filling a queue) is idle while
    it waits on a hand-over (its workers' futures, a queue) and sending while it puts: a
    worker's wait inside the user's function is its fetch (a slow store, or a hang)."""
    start = _loop_start(frames)
    inner = frames[start + 1 :] if start is not None else frames
    in_worker_loop = any(_calls(f, WORKER_LOOPS) for f in frames)
    if not in_worker_loop:
        own = max((i for i, f in enumerate(inner) if f.kind != "stdlib"), default=-1)
        handing = inner[own + 1 :]
        if any(_calls(f, PUT) for f in handing):
            return "sending"
        if any(_calls(f, HAND_OVER) for f in handing):
            return "idle"
    if any(f.kind != "stdlib" and library(f) is None for f in inner):
        return "fetching"
    return "sending" if any(_calls(f, PUT) for f in inner) else "idle"
