"""What a Python stack says a DataLoader process is doing (and, through ``dltop.pipelines``, a
trainer waiting on another input pipeline).

Pure functions over frames (innermost last). Frames are matched by short function name and
file suffix, so Python <= 3.10 (bare names) and newer (``Class.method``) both match.

More: docs/how-it-works.md#what-a-dataloader-looks-like-from-outside.
"""

from __future__ import annotations

import re
from typing import Optional

from dltop.model import Activity, DatasetKind, Frame, FrameKind, Phase
from dltop.pipelines import DATALOADER, WORKER_LOOPS, input_call, short_name, thread_activity

WORKER = "torch/utils/data/_utils/worker.py"
FETCH = "torch/utils/data/_utils/fetch.py"
COLLATE = "torch/utils/data/_utils/collate.py"
PIN = "torch/utils/data/_utils/pin_memory.py"
QUEUES = ("multiprocessing/queues.py", "/queue.py")
BOOTSTRAP = ("multiprocessing/spawn.py", "multiprocessing/forkserver.py", "multiprocessing/popen_fork.py")

# Entering and leaving an epoch: iter(loader), worker start-up, persistent workers' reset, shutdown.
EPOCH_BOUNDARY = ("__iter__", "_get_iterator", "__init__", "_reset", "_shutdown_workers", "__del__")
# ... of them, those that start or stop worker processes (persistent workers are only _reset)
WORKER_START_STOP = ("_get_iterator", "__init__", "_shutdown_workers", "__del__")
# Leaves that block on a lock, condition, event, join or semaphore.
WAIT_LEAVES = {
    "threading.py": ("wait", "acquire", "_wait_for_tstate_lock", "join"),
    "multiprocessing/synchronize.py": ("__enter__", "acquire", "wait"),
    "multiprocessing/connection.py": ("wait",),
}
# Leaves of a trainer blocked until a batch comes: the data queue's poll (multiprocessing's
# connection.wait selecting on its pipe) or, with pin_memory, a Condition's wait on the pinning
# thread's queue
BATCH_WAIT_LEAVES = {
    "selectors.py": ("select",),
    "multiprocessing/connection.py": ("wait", "_poll", "poll"),
    "threading.py": ("wait",),
}
LOCK_SOURCE = re.compile(r"\.acquire\(|\.wait\(|^\s*(async\s+)?with\b.*(lock|mutex|sem|cond)", re.IGNORECASE)
_TORCH = re.compile(r"/(site|dist)-packages/torch/|^torch/")
_STDLIB = re.compile(r"/lib/python\d\.\d+/(?!site-packages|dist-packages)|^<frozen ")


def frame_kind(path: str) -> FrameKind:
    """user | library | torch | stdlib, from the file's full path."""
    if _TORCH.search(path):
        return "torch"
    if "/site-packages/" in path or "/dist-packages/" in path:
        return "library"
    if _STDLIB.search(path) or path.startswith("<"):
        return "stdlib"
    return "user"


def make_frame(function: str, path: str, line: Optional[int]) -> Frame:
    return Frame(function, path, line, frame_kind(path))


def _find(frames: list, file_suffix: str, functions: tuple = ()) -> Optional[int]:
    """Index of the outermost frame in ``file_suffix`` (with one of ``functions``), else None."""
    for index, frame in enumerate(frames):
        if frame.file.endswith(file_suffix) and (not functions or short_name(frame.function) in functions):
            return index
    return None


def trainer_phase(frames: list[Frame]) -> Phase:
    """waiting-for-data | collating | starting-workers | running, for a trainer's main thread.

    Epoch boundaries come first: ``__next__`` itself shuts the workers down at an epoch's end
    (non-persistent workers: joining them) and resets them at its start. With num_workers=0
    ``__next__`` runs the dataset itself: that fetch is the wait. Another pipeline's call
    (``dltop.pipelines.input_call``) is a wait too, or its start-up at a boundary.
    """
    if _find(frames, DATALOADER, EPOCH_BOUNDARY) is not None:
        return "starting-workers"
    inside_next = _find(frames, DATALOADER, ("__next__",))
    if inside_next is not None:
        inner = frames[inside_next:]
        return "collating" if any(f.file.endswith((COLLATE, PIN)) for f in inner) else "waiting-for-data"
    call = input_call(frames)
    if call is not None:
        return "starting-workers" if call.boundary else "waiting-for-data"
    return "running"


def waits_on_workers(frames: list) -> bool:
    """Inside ``__next__`` waiting for a batch from worker processes (not fetching it itself)."""
    return _find(frames, DATALOADER, ("_get_data", "_try_get_data")) is not None


def trainer_phases(
    samples: list, in_epoch_start: bool = False, workers_starting: Optional[list[bool]] = None
) -> tuple[list[Phase], bool]:
    """([phase of each sample], still in an epoch's start-up after the last) for a trainer's main
    thread sampled in time order (each sample its frames, innermost last), carrying
    ``in_epoch_start`` over from the previous samples.

    The wait for an epoch's first batch, from iter(loader) starting workers or the previous
    iterator's shutdown until the first step runs, is start-up cost: it is what
    ``persistent_workers=True`` saves, and more workers would not shorten it.
    ``workers_starting`` (one bool per sample, where known) says a worker of this trainer was
    still starting then: a wait for workers at such a moment is start-up whatever the sampling
    caught of the boundary.
    """
    phases: list[Phase] = []
    judged: dict[tuple[Frame, ...], Phase] = {}
    for index, frames in enumerate(samples):
        key = tuple(frames)
        phase = judged.get(key) or judged.setdefault(key, trainer_phase(frames))
        if phase == "waiting-for-data" and workers_starting and workers_starting[index] and waits_on_workers(frames):
            phase = "starting-workers"
        elif phase == "starting-workers":
            # new workers are on their way (persistent ones are only reset: their first batch
            # of an epoch is fetched like any other)
            in_epoch_start = _find(frames, DATALOADER, WORKER_START_STOP) is not None
        elif phase == "waiting-for-data" and in_epoch_start:
            if waits_on_workers(frames):
                phase = "starting-workers"
            else:
                in_epoch_start = False  # num_workers=0: the trainer fetches; no start-up to wait for
        elif phase == "running":
            in_epoch_start = False
        phases.append(phase)
    return phases, in_epoch_start


def worker_activity(frames: list[Frame]) -> Activity:
    """idle | fetching | collating | sending | starting | unknown, for a worker's main thread (a
    DataLoader's, or another pipeline's worker process: ``dltop.pipelines.thread_activity``)."""
    loop = _find(frames, WORKER, ("_worker_loop",))
    if loop is None and pipeline_worker_process(frames):
        return thread_activity(frames)
    if loop is None:
        return "starting" if any(f.file.endswith(BOOTSTRAP) for f in frames) else "unknown"
    inner = frames[loop + 1 :]
    if any(f.file.endswith(FETCH) for f in inner):
        return "collating" if any(f.file.endswith(COLLATE) for f in inner) else "fetching"
    if inner and inner[0].file.endswith(QUEUES):
        return "idle" if short_name(inner[0].function) == "get" else "sending"
    return "starting"  # seeding, worker_init_fn, creating the fetcher


PROCESS_RUN = "multiprocessing/process.py"
WORKER_ITER_METHODS = ("_get_data", "_try_get_data", "_shutdown_workers", "_try_put_index")


def process_kind(frames: list, known: Optional[str] = None) -> str:
    """worker | starting | other: what a child process's main-thread stack says it is, whatever
    its name, given what its earlier stacks said (``known``). ``_worker_loop`` is a DataLoader
    worker, and a worker stays one for its life; multiprocessing's bootstrap before the target
    runs (spawn importing the main module and torch) is a process still starting; a target other
    than ``_worker_loop`` or another pipeline's worker loop (a Pool worker, a helper) is other.
    A stack without the bootstrap is
    other only at first sight: a spawn child that has been seen is past its bootstrap only while
    it exits (``sys.exit`` in ``spawn_main``, then ``threading._shutdown`` joining its threads)."""
    if known == "worker" or _find(frames, WORKER, ("_worker_loop",)) is not None or pipeline_worker_process(frames):
        return "worker"
    if _find(frames, PROCESS_RUN, ("run",)) is not None:
        return "other"
    if any(f.file.endswith(BOOTSTRAP) for f in frames):
        return "starting"
    return known or "other"


def pipeline_worker_process(frames: list) -> bool:
    """A child process running another pipeline's worker loop (torchdata.nodes' ``_apply_udf``
    under multiprocessing's ``run``): a worker, as ``_worker_loop`` is DataLoader's."""
    return _find(frames, PROCESS_RUN, ("run",)) is not None and any(
        _find(frames, suffix, names) is not None for suffix, names in WORKER_LOOPS.items()
    )


def uses_worker_processes(frames: list) -> bool:
    """A trainer stack inside a DataLoader iterator that has worker processes, or inside
    another input pipeline (torchdata.nodes, SPDL, a queue of its own), which may have some."""
    call = input_call(frames)
    if call is not None and call.pipeline != "dataloader":
        return True
    return _in_worker_iterator(frames)


def _in_worker_iterator(frames: list) -> bool:
    """Inside the iterator of a DataLoader with worker processes."""
    return any(
        f.file.endswith(DATALOADER)
        and (short_name(f.function) in WORKER_ITER_METHODS or "_MultiProcessingDataLoaderIter" in f.function)
        for f in frames
    )


def is_dataloader_machinery(frames: list) -> bool:
    return any(f.file.endswith((DATALOADER, WORKER)) for f in frames)


def has_pin_memory_loop(frames: list) -> bool:
    return _find(frames, PIN, ("_pin_memory_loop",)) is not None


def user_frame(frames: list) -> Optional[Frame]:
    """The innermost frame of the user's own code, else of a library (torchvision, PIL...)."""
    for kind in ("user", "library"):
        found = next((f for f in reversed(frames) if f.kind == kind), None)
        if found is not None:
            return found
    return None


def costly_frame(frames: list) -> Optional[Frame]:
    """Where a fetch spends its time: the innermost user frame above ``_worker_loop`` (a worker),
    another pipeline's worker loop (a thread or process of torchdata.nodes, a thread pool) or
    ``__next__`` (num_workers=0: the trainer fetches), else the innermost library frame there
    (PIL decoding inside torchvision's ImageFolder). Never the trainer's own ``for batch in
    loader`` line that a forked worker inherits below ``_worker_loop``."""
    start = _find(frames, WORKER, ("_worker_loop",))
    for suffix, names in WORKER_LOOPS.items():
        start = start if start is not None else _find(frames, suffix, names)
    if start is None:
        start = _find(frames, DATALOADER, ("__next__",))
    return None if start is None else user_frame(list(frames[start + 1 :]))


def waits_on_lock(frames: list, leaf_source: Optional[str]) -> bool:
    """True when the leaf blocks on a lock/condition/event: a hang there is a deadlock.

    py-spy shows Python frames only, so a C-level ``lock.acquire()`` or ``with lock:`` shows as
    the user's line: its source text tells.
    """
    if not frames:
        return False
    if _leaf_in(frames[-1], WAIT_LEAVES):
        return True
    return bool(leaf_source and LOCK_SOURCE.search(leaf_source.split("#", 1)[0]))  # the code, not its comment


def handles_batch(frames: list) -> bool:
    """Inside a DataLoader iterator that has worker processes, not blocked until a batch comes: the
    trainer receiving a batch, unpickling it, rebuilding its tensors, asking for the next. Every
    batch costs it this, whatever the number of workers."""
    return bool(frames) and _in_worker_iterator(frames) and not _leaf_in(frames[-1], BATCH_WAIT_LEAVES)


def _leaf_in(leaf: Frame, leaves: dict[str, tuple[str, ...]]) -> bool:
    return any(leaf.file.endswith(suffix) and short_name(leaf.function) in names for suffix, names in leaves.items())


def start_method(frames: list) -> Optional[str]:
    """fork | spawn | forkserver from the bottom of a worker's stack."""
    bottom = {f.file.rsplit("multiprocessing/", 1)[-1] for f in frames if "multiprocessing/" in f.file}
    if "forkserver.py" in bottom:
        return "forkserver"
    if "spawn.py" in bottom:
        return "spawn"
    return "fork" if "popen_fork.py" in bottom else None


# torch's _DatasetKind values (torch/utils/data/_utils/fetch.py) and its fetchers' classes
_KIND_VALUES: dict[str, DatasetKind] = {"0": "map", "1": "iterable"}
_FETCHERS: dict[str, DatasetKind] = {"_MapDatasetFetcher": "map", "_IterableDatasetFetcher": "iterable"}


def dataset_kind(frames: list) -> Optional[DatasetKind]:
    """map | iterable from the fetcher on a worker's (or a num_workers=0 trainer's) stack: py-spy
    names a method by its qualified name (``_IterableDatasetFetcher.fetch``)."""
    for frame in frames:
        kind = _FETCHERS.get(frame.function.rsplit(".", 1)[0])
        if kind is not None and frame.file.endswith("fetch.py"):
            return kind
    return None


# locals in which a streaming library keeps a worker's own shards (Hugging Face datasets'
# IterableDataset._iter_pytorch: shards_indices, dealt round-robin among the workers)
_SHARD_LOCALS = ("shards_indices", "shard_indices")
_INT_LIST = re.compile(r"\[\s*\d+(?:\s*,\s*\d+)*\s*\]|\[\s*\]")


def shard_indices(local_vars: dict) -> Optional[list[int]]:
    """The shard indices a worker was dealt, where its library keeps them in a local that py-spy
    shows whole (an empty list: a worker with no shard); None where none shows."""
    for values in local_vars.values():
        for name in _SHARD_LOCALS:
            value = values.get(name) if isinstance(values, dict) else None
            if isinstance(value, str) and _INT_LIST.fullmatch(value.strip()):
                return [int(i) for i in re.findall(r"\d+", value)]
    return None


# a local that may be a dataset's own list of shards, as py-spy shows it: a list of file names, or
# a brace pattern (webdataset's "shard-{000..009}.tar"); a forked worker's frames include the
# trainer's that built its loader, and webdataset's own hold the URL it reads now (``url``)
_FILE_LIST = re.compile(r'\[\s*"[^"]*\.\w+"\s*[,\]]')
_BRACE_NAME = re.compile(r'"[^"]*\{[^"]*\}[^"]*\.\w+"')
_URL_FRAMES = ("tar_file_expander", "url_opener")


def shard_list_locals(local_vars: dict) -> dict[str, str]:
    """``"<function>'s <name>"`` -> repr, for the locals that may list a dataset's shards (what
    they count and which list is the dataset's is ``collect.processes.shard_lists``'s to judge)."""
    found = {}
    for function, values in local_vars.items():
        for name, value in (values if isinstance(values, dict) else {}).items():
            if isinstance(value, str) and (_FILE_LIST.match(value) or _BRACE_NAME.fullmatch(value)):
                found[f"{short_name(function)}'s {name}"] = value
    return found


def shard_url(local_vars: dict) -> Optional[str]:
    """The URL a webdataset worker reads now (a remote one is no open file to see)."""
    for function, values in local_vars.items():
        url = values.get("url") if short_name(function) in _URL_FRAMES and isinstance(values, dict) else None
        if isinstance(url, str) and url.startswith('"') and url.endswith('"'):
            return url[1:-1]
    return None


def worker_loop_config(local_vars: dict) -> dict:
    """num_workers, persistent_workers, worker_id, batch_size, dataset_kind from ``_worker_loop``'s
    locals (a full dump: ``py-spy dump --locals``); keys whose value py-spy did not show are left out."""
    loop = next((v for k, v in local_vars.items() if short_name(k) == "_worker_loop"), None) or {}
    config: dict = {}
    if str(loop.get("dataset_kind")) in _KIND_VALUES:
        config["dataset_kind"] = _KIND_VALUES[str(loop["dataset_kind"])]
    shards = shard_indices(local_vars)
    if shards is not None:
        config["shard_indices"] = shards
    lists, url = shard_list_locals(local_vars), shard_url(local_vars)
    if lists:
        config["shard_lists"] = lists
    if url:
        config["shard_url"] = url
    for name in ("num_workers", "worker_id"):
        if str(loop.get(name, "")).isdigit():
            config[name] = int(loop[name])
    if loop.get("persistent_workers") in ("True", "False"):
        config["persistent_workers"] = loop["persistent_workers"] == "True"
    if str(loop.get("dataset", "")).startswith("<"):  # '<SyntheticDataset at 0x7f...>': the loader it serves
        config["dataset"] = loop["dataset"]
    indices = loop.get("index")  # the batch's sample indices, while the worker fetches
    if isinstance(indices, str) and indices.startswith("[") and indices.endswith("]") and "..." not in indices:
        config["batch_size"] = len([i for i in indices[1:-1].split(",") if i.strip()])
    return config
