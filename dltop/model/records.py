"""The records that flow from the collectors to every front end (docs/how-it-works.md).

Frozen dataclasses, no I/O. A figure that could not be read is ``None`` and the process's
``unavailable`` map says why, so one missing reading never hides the others (nvitop's NA
idea, expressed in JSON as ``null`` plus a reason).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from dltop.model.vocabulary import (
    PHASES,
    Activity,
    DatasetKind,
    ExitCause,
    FrameKind,
    GpuStatus,
    JobState,
    Phase,
    Pipeline,
    ProcessState,
    Role,
    Severity,
    StacksStatus,
    ThreadKind,
)

SCHEMA = "dltop.snapshot/1"


@dataclass(frozen=True)
class Frame:
    """One Python frame of a py-spy sample. ``kind`` says whose code it is."""

    function: str
    file: str
    line: Optional[int]
    kind: FrameKind
    code: Optional[str] = None  # the source line, when dltop could read the file

    def where(self) -> str:
        return f"{self.function} ({self.file}:{self.line})" if self.line else f"{self.function} ({self.file})"


@dataclass(frozen=True)
class Placement:
    """Where a trainer runs in a fleet, read from outside the job: torchrun's environment
    (RANK, LOCAL_RANK, WORLD_SIZE, TORCHELASTIC_RUN_ID, MASTER_ADDR:PORT; Slurm's SLURM_PROCID)
    and, in a Kubernetes pod, its cgroup."""

    rank: Optional[int] = None
    local_rank: Optional[int] = None
    world_size: Optional[int] = None
    run_id: Optional[str] = None
    master: Optional[str] = None  # MASTER_ADDR:MASTER_PORT, which every rank of one run shares

    @property
    def run(self) -> Optional[str]:
        """What every rank of one training run shares, on any node: torchrun's run id, else its
        rendezvous address with the world size; None for a trainer that is no rank."""
        if self.run_id:
            return self.run_id
        if self.master and self.world_size:
            return f"{self.master}/{self.world_size}"
        return None

    namespace: Optional[str] = None
    pod: Optional[str] = None
    container: Optional[str] = None
    # torchrun's TORCHELASTIC_RESTART_COUNT and TORCHELASTIC_MAX_RESTARTS: which start of the
    # ranks this is (0: the first) and how many restarts --max-restarts allows
    restart: Optional[int] = None
    max_restarts: Optional[int] = None


@dataclass(frozen=True)
class ProcessSample:
    """One process of the job at one tick."""

    pid: int
    ppid: int
    role: Role
    trainer_pid: Optional[int]
    name: str
    cmdline: str
    state: ProcessState
    cpu_percent: Optional[float] = None  # 100 = one core
    cpu_wait_percent: Optional[float] = None  # main thread runnable but waiting for a CPU; 100 = the whole time
    main_thread_cpu_percent: Optional[float] = None  # trainers: the main thread alone
    # trainers: their Python threads beside the main one (a queue's feeder, pin memory, a logger); the
    # rest of their CPU beyond the main thread's is native threads, mostly torch's intra-op pool
    python_threads_cpu_percent: Optional[float] = None
    # CPU of its children that exited since the last tick beyond what their own readings showed
    # (workers too short-lived for a tick: the job's CPU would miss it)
    unseen_children_cpu_percent: Optional[float] = None
    rss_bytes: Optional[int] = None
    uss_bytes: Optional[int] = None
    pss_bytes: Optional[int] = None
    num_fds: Optional[int] = None
    fd_limit: Optional[int] = None
    fd_kinds: Optional[dict[str, int]] = None  # {shm|file|socket|pipe|other: count}, read once past half the limit
    num_threads: Optional[int] = None
    read_bytes_per_s: Optional[float] = None  # from storage (/proc/<pid>/io read_bytes)
    write_bytes_per_s: Optional[float] = None
    read_chars_per_s: Optional[float] = None  # every read() incl. page cache and pipes (rchar)
    write_chars_per_s: Optional[float] = None
    started_at: Optional[str] = None
    exit_code: Optional[int] = None  # zombies only: >= 0 exit status, < 0 killed by that signal
    rank: Optional[int] = None
    user: Optional[str] = None
    placement: Optional[Placement] = None  # trainers: rank, world size, run id, pod
    worker_id: Optional[int] = None  # workers: torch's worker_id, from _worker_loop's arguments
    activity: Activity = "unknown"
    stack: Optional[list[Frame]] = None  # the main thread's, innermost last
    stack_at: Optional[str] = None  # when that stack was sampled
    stuck_s: Optional[float] = None  # seconds the main thread has kept that stack without using CPU
    unavailable: dict[str, str] = field(default_factory=dict)  # figure -> why it could not be read


@dataclass(frozen=True)
class ExitedWorker:
    """A worker that was seen and then went away: the raw material of worker-died/respawn findings."""

    pid: int
    trainer_pid: int
    seen_for_s: float
    gone_at: str
    exit_code: Optional[int] = None
    cause: ExitCause = "unknown"
    trainer_running: bool = True  # its trainer was still running when the worker was seen gone
    last_activity: Activity = "unknown"
    last_stack: Optional[list[Frame]] = None  # innermost last: what it was doing when last sampled
    in_trainer_log: bool = False  # torch's "DataLoader worker (pid N) ..." error names it in the trainer's log


@dataclass(frozen=True)
class TrainerTime:
    """Where one trainer's main thread spent its time, from py-spy samples over ``window_s``."""

    samples: int
    window_s: float
    waiting_for_data_percent: float  # inside the DataLoader's __next__, waiting for workers or fetching
    collating_percent: float  # inside __next__ collating or pinning in the main thread
    starting_workers_percent: float  # epoch boundaries: iter(loader), worker start-up and shutdown
    running_percent: float  # everything else: the training step
    # the samples' worth of independent ones: neighbouring samples are alike (a wait comes in runs), so
    # n (1 - rho) / (1 + rho) for the lag-1 autocorrelation rho of its waiting / not-waiting series
    effective_samples: Optional[float] = None
    # of the data wait, the share of samples rebuilding the tensors workers sent (torch's handshake
    # per storage): a cost of each batch in the trainer, which more workers shorten only by its wait
    # for the sending worker's GIL
    receiving_percent: Optional[float] = None
    # of the data wait, the share of samples handling a batch from worker processes, not blocked until
    # one comes (receiving_percent among them; unpickling it, asking for the next): all of it stays
    handling_percent: Optional[float] = None

    def percent(self, phase: Phase) -> float:
        return float(getattr(self, PHASES[phase]))


@dataclass(frozen=True)
class WorkerThread:
    """A thread of a trainer that its input pipeline runs on (torchdata.nodes' thread mappers,
    SPDL's executor and event loop, a thread pool of the user's): its row under the trainer."""

    tid: int
    name: Optional[str]  # Python's name for it (py-spy's), else the OS's (/proc/<pid>/task/<tid>/comm)
    kind: ThreadKind
    activity: Activity = "unknown"  # idle | fetching | sending | stuck | unknown, from its newest stack
    cpu_percent: Optional[float] = None  # 100 = one core, from /proc/<pid>/task/<tid>/stat
    busy_percent: Optional[float] = None  # share of its samples not idle, over the trainer's time window
    stack: Optional[list[Frame]] = None  # innermost last
    stuck_s: Optional[float] = None  # seconds it has kept that stack without running
    gone_at: Optional[str] = None  # threads_exited only: when it was first seen gone


@dataclass(frozen=True)
class LoaderSample:
    """The DataLoader workers of one trainer (one entry per trainer until stacks can split loaders)."""

    trainer_pid: int
    num_workers: int
    worker_pids: list[int]
    persistent_workers: Optional[bool]
    pin_memory: Optional[bool]
    start_method: str
    data_wait_percent: Optional[float]  # waiting_for_data + collating of trainer_time
    worker_respawns: int
    workers_exited: list[ExitedWorker] = field(default_factory=list)
    trainer_time: Optional[TrainerTime] = None  # the trainer's: shared by all its loaders
    dataset: Optional[str] = None  # the Dataset's class, from a worker's _worker_loop arguments
    built_at: Optional[str] = None  # "file:line" of the DataLoader(...) call, where dltop found it
    batch_size: Optional[int] = None  # from a worker's _worker_loop arguments (a batch's indices)
    dataset_kind: Optional[DatasetKind] = None  # map | iterable, from _worker_loop's arguments or fetcher
    # an iterable dataset splits its source into parts (shards, files) among workers: how many
    # there are where dltop could learn it, and from what (parts_source, in words)
    parts: Optional[int] = None
    parts_source: Optional[str] = None
    parts_seen: Optional[int] = None  # of parts counted from shard files, those seen read (advice goes no further)
    # "file:line" of the call the user owns that sets its worker count, and how: the call
    # (DataLoader, create_loader, TrainingArguments), its keyword, the command-line flag it reads
    built_by: Optional[str] = None
    workers_keyword: Optional[str] = None
    workers_flag: Optional[str] = None
    # which pipeline the trainer waits on (where its stacks said), and the threads it runs on
    pipeline: Optional[Pipeline] = None
    worker_threads: list[WorkerThread] = field(default_factory=list)
    threads_exited: list[WorkerThread] = field(default_factory=list)  # its threads seen before and gone since

    @property
    def parts_read(self) -> Optional[int]:
        """The shard files seen read, where fewer than the folder holds: the parts the advice
        goes by (None where the count stands as it is)."""
        seen, parts = self.parts_seen, self.parts
        return seen if seen is not None and parts is not None and seen < parts else None


@dataclass(frozen=True)
class JobInfo:
    pid: int  # the job's root: the launcher, or the trainer when there is none
    requested_pid: int
    cmdline: str
    state: JobState
    start_method: str
    trainer_pids: list[int]
    launcher_pid: Optional[int] = None
    torch_version: Optional[str] = None
    started_at: Optional[str] = None
    exit_code: Optional[int] = None  # once exited, when seen: < 0 killed by that signal


@dataclass(frozen=True)
class SystemSample:
    cpus_logical: int
    cpus_physical: Optional[int]
    cpus_allowed: float  # affinity, capped by the cgroup CPU quota
    cpu_affinity: list[int]
    cpu_quota: Optional[float]
    load_1m: float
    mem_total_bytes: int
    mem_available_bytes: int
    mem_limit_bytes: Optional[int]  # cgroup memory.max, when set
    swap_used_bytes: int
    shm_total_bytes: Optional[int]
    shm_used_bytes: Optional[int]
    cpu_busy_percent: Optional[float] = None  # host-wide, 100 = all logical CPUs
    monitor_cpu_percent: Optional[float] = None  # dltop's own and its samplers', 100 = one core


@dataclass(frozen=True)
class GpuProcess:
    pid: int  # the pid as this machine's /proc sees it
    used_memory_bytes: Optional[int]
    sm_util_percent: Optional[float]
    nvml_pid: Optional[int] = None  # as NVML reported it (the host's pid namespace)


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    util_percent: Optional[float]
    mem_used_bytes: Optional[int]
    mem_total_bytes: Optional[int]
    pcie_rx_bytes_per_s: Optional[float]
    pcie_tx_bytes_per_s: Optional[float]
    power_w: Optional[float]
    temperature_c: Optional[float]
    processes: list[GpuProcess] = field(default_factory=list)  # this job's only
    uuid: Optional[str] = None  # NVML's "GPU-..." id (dcgm-exporter's UUID label)
    minor_number: Optional[int] = None  # /dev/nvidia<N> (dcgm-exporter's device label)
    pci_bus_id: Optional[str] = None  # '00000000:5B:00.0' (dcgm-exporter's pci_bus_id label)


@dataclass(frozen=True)
class DiskSample:
    device: str
    reads_per_s: float
    writes_per_s: float
    read_bytes_per_s: float
    write_bytes_per_s: float
    r_await_ms: Optional[float]
    w_await_ms: Optional[float]
    aqu_sz: float
    util_percent: float
    used_by_job: bool
    name: Optional[str] = None  # dm devices: their mapper name


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    title: str
    detail: str
    pids: list[int]
    evidence: dict[str, Any]
    suggestion: str
    bench_args: Optional[list[str]] = None
    # the id of the finding that explains this one (a hung worker explains the trainer's wait): a
    # consequence is shown under its cause, and its own suggestion is not the fix
    explained_by: Optional[str] = None
    impact: float = 0.0  # share (0..1) of the trainer's time it costs, where known: orders findings


@dataclass(frozen=True)
class Pending:
    """A judgement the window is still too short for: what the rule needs, and how long yet."""

    id: str  # the finding id it could raise
    needs: str  # what it is waiting for, in words
    ready_in_s: Optional[float] = None  # seconds of watching still needed, when it can tell
    # the finding is raised already and held back until it proves steady (a live view's findings
    # show once they held a few seconds): the verdict is open, whatever else is known
    held: bool = False


@dataclass(frozen=True)
class Snapshot:
    taken_at: str
    window_s: float
    job: JobInfo
    system: Optional[SystemSample]
    processes: list[ProcessSample]
    loaders: list[LoaderSample]
    gpus: list[GpuSample]
    gpu_status: GpuStatus  # a GpuWord, or "error: <reason>"
    disks: list[DiskSample]
    findings: list[Finding] = field(default_factory=list)
    stacks_status: StacksStatus = "off"  # a StacksWord, or "error: <reason>" (status_error)
    stacks_fix: Optional[str] = None  # how to make stacks available, when they are not
    pending: list[Pending] = field(default_factory=list)  # what the window cannot judge yet
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (docs/json.md): schema first, floats rounded for people."""
        data = _clean(dataclasses.asdict(self))
        return {"schema": data.pop("schema"), **data}


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 2)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


# (class, field) -> the dataclass its dict (or each dict of its list) holds
_NESTED: dict[tuple[str, str], type] = {
    ("Snapshot", "job"): JobInfo,
    ("Snapshot", "system"): SystemSample,
    ("Snapshot", "processes"): ProcessSample,
    ("Snapshot", "loaders"): LoaderSample,
    ("Snapshot", "gpus"): GpuSample,
    ("Snapshot", "disks"): DiskSample,
    ("Snapshot", "findings"): Finding,
    ("Snapshot", "pending"): Pending,
    ("ProcessSample", "placement"): Placement,
    ("ProcessSample", "stack"): Frame,
    ("LoaderSample", "workers_exited"): ExitedWorker,
    ("LoaderSample", "trainer_time"): TrainerTime,
    ("LoaderSample", "worker_threads"): WorkerThread,
    ("LoaderSample", "threads_exited"): WorkerThread,
    ("WorkerThread", "stack"): Frame,
    ("ExitedWorker", "last_stack"): Frame,
    ("GpuSample", "processes"): GpuProcess,
}


def snapshot_from_dict(data: dict[str, Any]) -> Snapshot:
    """A Snapshot back from its JSON form (recorded snapshots for tests and screenshots); keys
    this version does not know are ignored, missing ones take their defaults."""
    return _build(Snapshot, data)


def _build(cls: type, data: dict[str, Any]) -> Any:
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value, nested = data[f.name], _NESTED.get((cls.__name__, f.name))
        if nested is not None and isinstance(value, list):
            value = [_build(nested, v) for v in value]
        elif nested is not None and isinstance(value, dict):
            value = _build(nested, value)
        values[f.name] = value
    return cls(**values)
