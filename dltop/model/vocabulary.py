"""The words every part of dltop uses, defined once with their order: what a process is (its
role), what its main thread is doing (its activity), where a trainer's time goes (its phases),
how bad a finding is (its severity), the states a job, a process, stack sampling and the GPU
reader can be in, and when an unchanged stack counts as stuck.

The collector, the rules, the screen, the text report, the metrics and the recorder all import
these, so they cannot disagree about the same process.
"""

from __future__ import annotations

from typing import Literal, Optional, Protocol

Role = Literal["launcher", "trainer", "worker", "helper"]
# the order a job's tree is listed in: a launcher, its trainers, their workers, the rest
ROLES: tuple[Role, ...] = ("launcher", "trainer", "worker", "helper")
JOB_ROLES: tuple[Role, ...] = ("trainer", "worker")  # the processes whose CPU is the job's work

Activity = Literal[
    "idle",  # a worker waiting for its next index
    "fetching",  # a worker in the dataset's __getitem__ / __iter__
    "collating",  # collating a batch (worker) or collating/pinning in __next__ (trainer)
    "sending",  # a worker handing a batch to its result queue
    "starting",  # a worker not yet in _worker_loop's loop
    "waiting-for-data",  # a trainer inside the DataLoader's __next__, waiting for its workers
    "starting-workers",  # a trainer at an epoch boundary: starting or shutting down its workers
    "running",  # a trainer's training step (anything outside the DataLoader)
    "stuck",  # the same stack, without CPU, for longer than the hang threshold
    "unknown",  # no stack read yet (or none that says)
]
# an unchanged stack without CPU in these is waiting (between batches, for its workers) or not
# read at all: never "stuck", whatever its age
WAITING: frozenset[Activity] = frozenset({"idle", "waiting-for-data", "unknown"})

JobState = Literal["running", "exited"]  # running: a trainer runs, or its launcher lives between ranks

ProcessState = Literal[
    # /proc/<pid>/stat's letter, named as psutil (and the JSON contract) name it
    "running", "sleeping", "disk-sleep", "stopped", "tracing-stop", "zombie", "dead", "wake-kill", "waking",
    "idle", "parked", "unknown",
    # a report's last word on a process no longer there, or gone with its job
    "gone", "exited",
]  # fmt: skip
# a process's states once it has ended: exited but not reaped yet, no longer there, or gone with
# its job (a report's last word on it)
ENDED: frozenset[ProcessState] = frozenset({"zombie", "gone", "exited"})

# whose code a stack frame is: the job's own files, an installed package, torch, the standard library
FrameKind = Literal["user", "library", "torch", "stdlib"]

# why a worker went away: a non-zero exit or a signal, exit 0 (an epoch or loader end), or not seen
ExitCause = Literal["died", "ended", "unknown"]

# stack sampling: working, turned off (--no-stacks), py-spy missing, ptrace refused; or
# "error: <reason>" (``status_error``), which is why the field is a ``StacksStatus`` (str)
StacksWord = Literal["ok", "off", "no-py-spy", "denied"]
StacksStatus = str
STATUS_ERROR = "error: "


def status_error(reason: object) -> str:
    """The status of a source that keeps failing (stack sampling, NVML), with why: "error: <reason>"."""
    return f"{STATUS_ERROR}{reason}"


def sampling_broken(status: StacksStatus) -> bool:
    """Stack sampling was asked for and does not work (py-spy missing, refused or failing): the
    one case a front end says so and tells the fix. Off (--no-stacks) is a choice, not a fault."""
    return status not in ("ok", "off")


def sampling_works(status: StacksStatus) -> bool:
    """Stacks are read: data wait, activity and hang checks have their evidence."""
    return status == "ok"


# the GPU reader: working, no NVML library, NVML with no device; or "error: <reason>"
GpuWord = Literal["ok", "no-nvml", "no-devices"]
GpuStatus = str


def gpus_read(status: GpuStatus) -> bool:
    """NVML works: the GPU figures (and a GPU finding's evidence) are there."""
    return status == "ok"


Phase = Literal["waiting-for-data", "collating", "starting-workers", "running"]
# a trainer's phases, in the order they are shown, each with its TrainerTime field
PHASES: dict[Phase, str] = {
    "waiting-for-data": "waiting_for_data_percent",
    "collating": "collating_percent",
    "starting-workers": "starting_workers_percent",
    "running": "running_percent",
}

# the input pipeline a trainer waits on for its batches: DataLoader (its worker processes, or its
# own fetch with num_workers=0), torchdata.nodes (threads or processes), SPDL (threads over an
# event loop), or threads of the user's own (a queue or futures fed by a thread pool)
Pipeline = Literal["dataloader", "torchdata.nodes", "spdl", "threads"]
PIPELINES: tuple[Pipeline, ...] = ("dataloader", "torchdata.nodes", "spdl", "threads")

# a thread pipeline's threads: workers run the per-sample function (the knob the user sets counts
# them: ParallelMapper's num_workers, SPDL's num_threads, an executor's max_workers); feeders move
# items between stages (torchdata's _populate_queue, SPDL's event loop, a user's filling thread)
ThreadKind = Literal["worker", "feeder"]

# how a DataLoader's workers get their data: indices into a map-style Dataset (any worker can
# fetch any sample), or their own part of an IterableDataset's source (shards, files, ranges)
DatasetKind = Literal["map", "iterable"]

# the live view's badge: the job's state in one word (its root cause, or why there is no verdict)
BadgeState = Literal[
    "healthy", "input-bound", "attention", "hung", "dead", "stopped", "exited", "measuring", "no-stacks"
]  # fmt: skip

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")  # most severe first


def severity_rank(severity: str) -> int:
    """0 for the most severe; an unknown severity after every known one."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def most_severe(severities: list[str]) -> Optional[str]:
    return min(severities, key=severity_rank, default=None)


class _Still(Protocol):
    @property
    def activity(self) -> str: ...
    @property
    def stuck_s(self) -> Optional[float]: ...


def still_for(process: _Still) -> Optional[float]:
    """Seconds the process has kept one stack without CPU where that means something (None while
    it is waiting, as idle workers and trainers waiting for data do, or while unread)."""
    return None if process.activity in WAITING else process.stuck_s


def is_stuck(process: _Still, hang_after_s: float) -> bool:
    """The one test of "stuck": the same stack, no CPU, past the hang threshold, and not waiting."""
    still = still_for(process)
    return still is not None and still >= hang_after_s


def judged_stuck(process: _Still) -> bool:
    """Whether a sample was judged stuck: the collector set its activity by ``is_stuck`` at the
    run's own hang threshold (--hang-after), so every view (the screen, JSON, the text report)
    reads that one verdict rather than a threshold of its own."""
    return process.activity == "stuck"
