"""Find a training job's processes and say what each one is.

Works from /proc alone: names (``pt_data_worker`` on torch >= 2.5), command lines
(spawn/forkserver/launchers) and ancestry, so it finds workers under every start method
and torch version. Stacks (collect/stacks/sampler.py) refine this later; nothing here pauses or
signals the job.

More: docs/how-it-works.md#what-a-dataloader-looks-like-from-outside.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Final, Iterable, Optional

from dltop.collect import procfs
from dltop.collect.processes.placement import ENV_KEYS, RANK_KEYS
from dltop.errors import DltopError
from dltop.model.vocabulary import Role
from dltop.redact import redact_command

WORKER_COMMS = ("pt_data_worker", "pt_multiprocess")
PIN_THREAD_COMMS = ("pt_data_pin",)
NAMED_SINCE = (2, 5)  # torch names worker processes and the pin thread from this version

LAUNCHER_PROGRAMS = ("torchrun", "deepspeed", "accelerate")
LAUNCHER_MODULES = (
    "torch.distributed.run",
    "torch.distributed.launch",
    "deepspeed.launcher.launch",
    "deepspeed.launcher.runner",
    "accelerate.commands.launch",
)
_HELPER_CMDLINES = (
    "multiprocessing.resource_tracker",
    "multiprocessing.semaphore_tracker",
    "torch._inductor.compile_worker",
    "torch/_inductor/compile_worker",
)
_SPAWN_CHILD = "multiprocessing.spawn import spawn_main"
_FORKSERVER = "multiprocessing.forkserver"
# A new DataLoader worker runs unnamed from fork/exec until _worker_loop names it (under spawn,
# through the whole torch import): a child this young is not promoted to trainer yet.
STARTUP_GRACE_S = 10.0
EVERY_THREAD_S = 5.0  # how often a refresh reads every thread's children, not only the main thread's


@dataclass(frozen=True)
class Member:
    """One process of a job and what it is."""

    pid: int
    ppid: int
    role: Role
    trainer_pid: Optional[int]
    start_method: Optional[str] = None  # workers only
    start_ticks: Optional[int] = None  # when it started: a pid reused by another process is not it


@dataclass(frozen=True)
class JobTree:
    root_pid: int
    requested_pid: int
    members: dict  # pid -> Member
    torch_version: Optional[str]

    @property
    def trainer_pids(self) -> list:
        return sorted(p for p, m in self.members.items() if m.role == "trainer")

    @property
    def launcher_pid(self) -> Optional[int]:
        root = self.members.get(self.root_pid)
        return self.root_pid if root is not None and root.role == "launcher" else None

    @property
    def names_expected(self) -> bool:
        """True when this torch names its worker processes (so an unnamed child is not one)."""
        return (version_tuple(self.torch_version) or (0, 0)) >= NAMED_SINCE

    def workers_of(self, trainer_pid: int) -> list:
        return sorted(p for p, m in self.members.items() if m.role == "worker" and m.trainer_pid == trainer_pid)


CHILDREN_FILES = os.path.exists(f"/proc/self/task/{os.getpid()}/children")  # CONFIG_PROC_CHILDREN


@dataclass
class ProcessTable:
    """Every process on the machine from one pass over /proc/*/stat: the tree to walk."""

    stats: dict = field(default_factory=dict)  # pid -> procfs.Stat
    children: dict = field(default_factory=dict)  # pid -> [pid]
    uptime_s: float = 0.0

    def age_s(self, pid: int) -> float:
        return self.uptime_s - self.stats[pid].start_ticks / procfs.CLOCK_TICKS

    @classmethod
    def scan(cls) -> ProcessTable:
        table = cls(uptime_s=procfs.read_uptime_s())
        for entry in os.scandir(procfs.PROC):
            if not entry.name.isdigit():
                continue
            try:
                stat = procfs.read_stat(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue  # exited between listdir and read
            table.stats[stat.pid] = stat
            table.children.setdefault(stat.ppid, []).append(stat.pid)
        return table

    @classmethod
    def scan_from(cls, roots: list, every_thread: bool = True) -> ProcessTable:
        """Only ``roots`` and their descendants, found through /proc/<pid>/task/<tid>/children:
        a job's refresh costs its own size, not the machine's (thousands of processes on a busy
        host). A child belongs to the thread that forked it; ``every_thread`` False reads only
        the main thread's (where DataLoaders and launchers start their processes: a file per
        process instead of one per thread). Falls back to a full scan where the kernel has no
        children files."""
        if not CHILDREN_FILES:
            return cls.scan()
        table = cls(uptime_s=procfs.read_uptime_s())
        todo, seen = list(roots), set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            try:
                table.stats[pid] = procfs.read_stat(pid)
                tids = os.listdir(f"{procfs.PROC}/{pid}/task") if every_thread else [str(pid)]
            except (OSError, ValueError, IndexError):
                continue
            for tid in tids:
                try:
                    todo.extend(procfs.read_children(pid, int(tid)))
                except (OSError, ValueError):
                    continue
        for pid, stat in table.stats.items():
            table.children.setdefault(stat.ppid, []).append(pid)
        return table

    def descendants(self, pid: int) -> list:
        found, todo = [], list(self.children.get(pid, ()))
        while todo:
            child = todo.pop()
            found.append(child)
            todo.extend(self.children.get(child, ()))
        return found


def version_tuple(version: Optional[str]) -> Optional[tuple]:
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def is_launcher_cmdline(argv: list) -> bool:
    """torchrun and friends, as a program (``torchrun``, ``python /usr/bin/torchrun``) or a module (``-m``)."""
    if not argv:
        return False
    program = os.path.basename(argv[0])
    if program in LAUNCHER_PROGRAMS:
        return True
    if not program.startswith("python"):
        return False
    args = [a for a in argv[1:] if a not in ("-u", "-B", "-O", "-OO", "-s", "-E", "-I")]
    if len(args) >= 2 and args[0] == "-m":
        return args[1] in LAUNCHER_MODULES
    return bool(args) and os.path.basename(args[0]) in LAUNCHER_PROGRAMS


def is_python(comm: str, cmdline: list) -> bool:
    argv0 = os.path.basename(cmdline[0]) if cmdline else ""
    return argv0.startswith("python") or comm.startswith(("python", "pt_"))


def _read_cmdline(pid: int) -> list:
    try:
        return procfs.read_cmdline(pid)
    except OSError:
        return []


def _read_rank_env(pid: int) -> dict:
    try:
        return procfs.read_environ(pid, ENV_KEYS)
    except OSError:
        return {}


# torch_version's answer where a process's maps cannot be read (another user's job): no version
UNREADABLE: Final = "unreadable"


def _read_torch_version(pid: int) -> Optional[str]:
    try:
        return procfs.read_torch_version(pid)
    except PermissionError:
        return UNREADABLE
    except OSError:
        return None


class Discovery:
    """Resolves a pid to its job and re-walks the job's tree every tick.

    Caches what cannot change for a process (command line, torch version), keyed by pid and
    start time so a reused pid is never confused with the process that had it before.
    """

    def __init__(self) -> None:
        # (pid, start ticks) -> (value, settled, the pass over /proc it was read in): _until_settled
        self._cmdlines: dict = {}
        self._torch: dict = {}
        self._ranks: dict = {}
        self._every_thread_at = float("-inf")
        self._passes = 0
        self._table = ProcessTable()
        # What the collector learnt from stacks, which outranks names and command lines:
        # (pid, start ticks) -> worker | starting | other (frames.process_kind) ...
        self.stack_kinds: dict = {}
        # ... and trainers seen running a DataLoader with worker processes (workers seen, or a stack)
        self.loader_trainers: set = set()

    @property
    def table(self) -> ProcessTable:
        return self._table

    @table.setter
    def table(self, table: ProcessTable) -> None:
        """A new pass over /proc: what has not settled is read again."""
        self._table = table
        self._passes += 1

    # -- facts about one process (cached) --------------------------------------------

    def forget_except(self, pids: set) -> None:
        """Drop what is cached about processes that are gone (a long-running watcher)."""
        for cache in (self._cmdlines, self._torch, self._ranks, self.stack_kinds):
            for key in [k for k in cache if k[0] not in pids]:
                del cache[key]

    def stack_kinds_of(self, kinds: dict[int, str]) -> dict[tuple, str]:
        """``stack_kinds`` entries for these pids' kinds (keyed as the sampler keys them)."""
        return {self._key(pid): kind for pid, kind in kinds.items()}

    def _key(self, pid: int) -> tuple:
        stat = self.table.stats.get(pid)
        return (pid, stat.start_ticks if stat else None)

    def _until_settled(
        self, cache: dict, pid: int, read: Callable[[int], Any], settled: Callable[[int, Any], bool]
    ) -> Any:
        """read(pid), cached once settled(pid, value) says it is for good and re-read each pass till then."""
        key = self._key(pid)
        cached = cache.get(key)
        if cached is not None and (cached[1] or cached[2] == self._passes):
            return cached[0]
        value = read(pid)
        cache[key] = (value, settled(pid, value), self._passes)
        return value

    def _young(self, pid: int) -> bool:
        return pid in self.table.stats and self.table.age_s(pid) < STARTUP_GRACE_S

    def cmdline(self, pid: int) -> list:
        return self._until_settled(self._cmdlines, pid, _read_cmdline, self._exec_settled)

    def _exec_settled(self, pid: int, argv: list) -> bool:
        """Whether this command line is for good. A spawn child reads as its parent's between fork
        and exec, and as empty while exec builds the new one (and once it exits); an exec keeps the
        pid and start time, so caching either would name a spawn worker a fork child or a helper.
        Past start-up it is for good, empty too (a kernel thread's)."""
        if not self._young(pid):
            return True
        parent = self._ppid(pid)
        return bool(argv) and (parent <= 0 or argv != self.cmdline(parent))

    def _past_exec(self, pid: int) -> bool:
        self.cmdline(pid)
        return self._cmdlines[self._key(pid)][1]

    def torch_version(self, pid: int) -> Optional[str]:
        """torch's version if loaded; None if not; UNREADABLE when its maps cannot be read."""
        return self._until_settled(self._torch, pid, _read_torch_version, self._torch_settled)

    def _torch_settled(self, pid: int, version: Optional[str]) -> bool:
        """A version is for good. Its absence is, once past start-up, except under a launcher:
        the ranks torchrun starts again after one failed import torch some seconds in."""
        return version is not None or not (self._young(pid) or self.is_launcher(self._ppid(pid)))

    def rank_env(self, pid: int) -> dict:
        """Its rank variables, read once past its exec (before, they are its parent's)."""
        return self._until_settled(self._ranks, pid, _read_rank_env, lambda p, _env: self._past_exec(p))

    def rank(self, pid: int) -> Optional[int]:
        value = self.rank_env(pid).get("RANK")
        return int(value) if value and value.isdigit() else None

    def _text(self, pid: int) -> str:
        return " ".join(self.cmdline(pid))

    def _comm(self, pid: int) -> str:
        stat = self.table.stats.get(pid)
        return stat.comm if stat else ""

    def _ppid(self, pid: int) -> int:
        stat = self.table.stats.get(pid)
        return stat.ppid if stat else 0

    # -- what a process is, from itself and its parent -------------------------------

    def is_launcher(self, pid: int) -> bool:
        return is_launcher_cmdline(self.cmdline(pid))

    def is_namespace_init(self, pid: int) -> bool:
        """The first process of a PID namespace (``ppid`` 0: the machine's init, or a container's
        PID 1 seen from inside) that is no part of a job: not a launcher, not Python with torch.
        In a container the entrypoint is PID 1 and may well be the trainer or torchrun; only
        what it is, never its number, keeps dltop from taking the whole machine for one job."""
        if pid not in self.table.stats or self._ppid(pid) != 0:
            return False
        if self.is_launcher(pid):
            return False
        return not (is_python(self._comm(pid), self.cmdline(pid)) and self.has_torch(pid) is not False)

    def _parent_in_job(self, pid: int) -> Optional[int]:
        """Its parent, where the walk up a job may go on to it: a process this table holds that is
        not a namespace's bare init (an orphan reparented to init belongs to no job of init's)."""
        parent = self._ppid(pid)
        if parent <= 0 or parent not in self.table.stats or self.is_namespace_init(parent):
            return None
        return parent

    def is_forkserver(self, pid: int) -> bool:
        return _FORKSERVER in self._text(pid) and _FORKSERVER not in self._text(self._ppid(pid))

    def _is_helper_process(self, pid: int) -> bool:
        text = self._text(pid)
        return (
            any(marker in text for marker in _HELPER_CMDLINES)
            or self._comm(pid).startswith("torch_shm_manag")
            or self.is_forkserver(pid)
        )

    def has_torch(self, pid: int) -> Optional[bool]:
        version = self.torch_version(pid)
        return None if version == UNREADABLE else version is not None

    def _child_method(self, pid: int) -> Optional[str]:
        """How multiprocessing started this Python child of a Python parent, if it did."""
        parent = self._ppid(pid)
        if _SPAWN_CHILD in self._text(pid):
            return "spawn"
        if _FORKSERVER in self._text(pid) and self.is_forkserver(parent):
            return "forkserver"
        if self.cmdline(pid) == self.cmdline(parent) and is_python(self._comm(parent), self.cmdline(parent)):
            return "fork"
        return None

    def _own_rank(self, pid: int) -> bool:
        """A rank of its own (Lightning's subprocess ranks): its rank variables differ from its parent's."""
        own = {k: v for k, v in self.rank_env(pid).items() if k in RANK_KEYS}
        return bool(own) and own != {k: v for k, v in self.rank_env(self._ppid(pid)).items() if k in RANK_KEYS}

    def worker_start_method(self, pid: int, names_expected: bool) -> Optional[str]:
        """How this process was started if it is a DataLoader worker, else None.

        A stack outranks everything: a main thread in ``_worker_loop`` is a worker whatever its
        name (a library may rename it), one running another target is not. Then names: torch
        >= 2.5 names its workers, so an unnamed child is a worker only while it is still starting
        (spawn imports torch for seconds before ``_worker_loop`` names it) under a trainer known
        to run a DataLoader with workers; on older torch command line and ancestry decide.
        """
        named = self._comm(pid).startswith(WORKER_COMMS)
        kind = self.stack_kinds.get(self._key(pid))
        method = self._child_method(pid)
        if kind == "worker":
            return method or "fork"
        if kind == "other" and not named:
            return None
        if method is None:
            return "fork" if named else None  # a named worker whose parent went away
        if named:
            return method
        if self._own_rank(pid):
            return None  # a rank of its own (Lightning, mp.spawn with RANK set)
        if names_expected:
            return method if self._starting_under_loader(pid) else None
        return method

    def _starting_under_loader(self, pid: int) -> bool:
        """A childless multiprocessing child of a trainer (or of its forkserver) that runs a
        DataLoader with workers, not (yet) named: a worker starting, or one a library renamed;
        taken for a worker until its stack says it runs something else."""
        parent = self._ppid(pid)
        if self.is_forkserver(parent):
            parent = self._ppid(parent)
        return parent in self.loader_trainers and not self.table.children.get(pid)

    def _still_starting(self, pid: int) -> bool:
        """A young unnamed multiprocessing child with no children: most likely a worker not yet named."""
        return (
            self._child_method(pid) is not None
            and not self._own_rank(pid)
            and not self.table.children.get(pid)
            and self.table.age_s(pid) < STARTUP_GRACE_S
        )

    # -- resolving a pid to a job ----------------------------------------------------

    def resolve(self, pid: int) -> JobTree:
        """The job that ``pid`` belongs to; DltopError when there is none."""
        self.table = ProcessTable.scan()
        if pid <= 0:
            raise DltopError(f"no process with pid {pid}")
        if pid not in self.table.stats:
            raise DltopError(f"no process with pid {pid}")
        if self.table.stats[pid].state == "Z":
            raise DltopError(self._zombie_reason(pid))
        if self.is_namespace_init(pid):
            raise DltopError(
                f"pid {pid} is the init of its PID namespace, not a training job: pick one from `dltop jobs`"
            )
        root = self.root_of(pid)
        tree = self.walk(root, pid)
        if not tree.trainer_pids:
            raise DltopError(self._not_a_job_reason(pid))
        return tree

    def refresh(self, tree: JobTree) -> JobTree:
        """Walk the job again: workers come and go, ranks may restart. Children forked by a thread
        other than the main one (a loader built on a background thread) are found by a walk of
        every thread's children, every EVERY_THREAD_S."""
        now = time.monotonic()
        every_thread = now - self._every_thread_at >= EVERY_THREAD_S
        if every_thread:
            self._every_thread_at = now
        self.table = ProcessTable.scan_from([tree.root_pid, *tree.members], every_thread)
        if tree.root_pid in self.table.stats:
            return self.walk(tree.root_pid, tree.requested_pid, known=tree)
        # The root is gone; follow the trainers it left behind (reparented to init or a subreaper).
        survivors = [p for p in tree.trainer_pids if p in self.table.stats]
        members: dict = {}
        for trainer in survivors:
            members.update(self.walk(trainer, tree.requested_pid, known=tree).members)
        return JobTree(tree.root_pid, tree.requested_pid, members, tree.torch_version)

    def root_of(self, pid: int) -> int:
        """From any process of a job up to its root: out of workers and helpers, up to a launcher."""
        current = pid
        while True:
            parent = self._parent_in_job(current)
            if parent is None:
                return current
            if self.worker_start_method(current, names_expected=False) or self._is_helper_process(current):
                current = self.is_forkserver(parent) and self._ppid(parent) or parent
            elif self.is_launcher(parent) or (
                _SPAWN_CHILD in self._text(current) and self.has_torch(parent) is not False
            ):
                current = parent  # a torchrun rank, or an mp.spawn rank
            else:
                return current

    def walk(self, root: int, requested: int, known: Optional[JobTree] = None) -> JobTree:
        pids = [root, *self.table.descendants(root)]
        # Known workers outlive their trainer when stuck in user code: keep watching them.
        if known is not None:
            pids += [p for p in self.still_running(known) if p not in pids]
        torch_version = known.torch_version if known else None
        if torch_version is None:
            pythons = [p for p in pids if is_python(self._comm(p), self.cmdline(p))]
            torch_version = next(
                (v for v in map(self.torch_version, [requested, *pythons]) if v not in (None, UNREADABLE)), None
            )
        named = JobTree(root, requested, {}, torch_version).names_expected
        return JobTree(root, requested, self._prune(self._classify(pids, root, named), root), torch_version)

    def still_running(self, known: JobTree) -> list[int]:
        """The known members running still: the same processes (a pid reused by another process,
        once pids wrap, started later) in the table now."""
        stats = self.table.stats
        return [p for p, m in known.members.items() if p in stats and m.start_ticks in (None, stats[p].start_ticks)]

    def _prune(self, members: dict, root: int) -> dict:
        """Under a launcher keep only the trainers' subtrees and the chain down to them.

        A shell or torchrun has other children too (an editor, a log tailer): not the job.
        """
        kept = {pid for pid, m in members.items() if m.trainer_pid is not None}
        for pid in list(kept):
            current = self._ppid(pid)
            while current in members and current not in kept:
                kept.add(current)
                current = self._ppid(current)
        kept.add(root)
        return {pid: m for pid, m in members.items() if pid in kept}

    def _classify(self, pids: Iterable[int], root: int, names_expected: bool) -> dict:
        """Each process's Member: its role, its trainer, how a worker was started."""
        pids = list(pids)
        methods = {p: self.worker_start_method(p, names_expected) for p in pids}
        inside_worker = {d for p in pids if methods[p] for d in self.table.descendants(p)}
        workers = {p for p in pids if methods[p] and p not in inside_worker}
        candidates = {
            p for p in pids if not methods[p] and p not in inside_worker and self._may_train(p, workers, names_expected)
        }
        launchers = self._launchers(pids, candidates, workers)
        trainers = candidates - launchers
        members = {}
        for pid in pids:
            role = self._role(pid, root, launchers, trainers, workers)
            trainer = pid if role == "trainer" else self._nearest(pid, trainers) if role != "launcher" else None
            if role == "worker" and trainer is None:
                role = "helper"  # not a DataLoader worker of anything we watch
            method = methods[pid] if role == "worker" else None
            started = self.table.stats[pid].start_ticks if pid in self.table.stats else None
            members[pid] = Member(pid, self._ppid(pid), role, trainer, method, started)
        return members

    def _may_train(self, pid: int, workers: set[int], names_expected: bool) -> bool:
        """A Python process with torch that is no helper, launcher or worker still starting. Where
        torch's presence cannot be read (another user's job), parenting workers is the proof."""
        if self._is_helper_process(pid) or self.is_launcher(pid) or not is_python(self._comm(pid), self.cmdline(pid)):
            return False
        if names_expected and self._still_starting(pid):
            return False
        torch = self.has_torch(pid)
        return bool(torch) or (torch is None and pid in self._worker_parents(workers))

    def _worker_parents(self, workers: set[int]) -> set[int]:
        """The processes that started ``workers``: their parents, and a forkserver's parent."""
        parents = {self._ppid(w) for w in workers}
        return parents | {self._ppid(p) for p in parents if self.is_forkserver(p)}

    def _launchers(self, pids: list[int], candidates: set[int], workers: set[int]) -> set[int]:
        """torchrun and friends, and a torch process that only parents other ranks (mp.spawn's main)."""
        has_workers = {self._nearest(w, candidates) for w in workers}
        parents_of_ranks = {self._nearest(c, candidates) for c in candidates} - {None}
        return {
            p
            for p in pids
            if self.is_launcher(p) or (p in parents_of_ranks and p not in has_workers and self.rank(p) is None)
        }

    @staticmethod
    def _role(pid: int, root: int, launchers: set[int], trainers: set[int], workers: set[int]) -> Role:
        """The job's root is its launcher when it is neither trainer nor worker (a shell, torchrun)."""
        if pid in launchers or (pid == root and pid not in trainers and pid not in workers):
            return "launcher"
        if pid in trainers:
            return "trainer"
        return "worker" if pid in workers else "helper"

    def _nearest(self, pid: int, among: set[int]) -> Optional[int]:
        """The closest ancestor of ``pid`` in ``among``."""
        current = self._ppid(pid)
        while current > 0:
            if current in among:
                return current
            current = self._ppid(current)
        return None

    def _zombie_reason(self, pid: int) -> str:
        parent = self._ppid(pid)
        reason = f"pid {pid} has exited; its parent {parent} has not reaped it (a zombie)"
        if self._parent_in_job(pid) is not None and self.table.stats[parent].state != "Z":
            tree = self.walk(self.root_of(parent), parent)
            if tree.trainer_pids:
                return f"{reason}; its job is alive: dltop --pid {tree.root_pid}"
        return reason

    def _not_a_job_reason(self, pid: int) -> str:
        cmd = redact_command(self.cmdline(pid)) or self._comm(pid)
        if self.torch_version(pid) == UNREADABLE:
            return (
                f"cannot inspect pid {pid} ({_short(cmd)}): permission denied; run dltop as the job's user or as root"
            )
        return (
            f"pid {pid} ({_short(cmd)}) is not a PyTorch training job: "
            "no process in its tree has torch loaded or DataLoader workers"
        )


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def find_jobs(gpu_pids: Iterable[int] = (), discovery: Optional[Discovery] = None, skip: Iterable[int] = ()) -> list:
    """Every training job on this machine: trees holding DataLoader workers, torch or a GPU.

    Used by ``dltop jobs``, the TUI's picker and the node watcher. ``gpu_pids`` are local pids
    NVML says hold a GPU; ``skip``: pids of jobs already followed (not walked again). A
    ``discovery`` kept between calls remembers each process's torch version (its maps are read
    once per process past start-up, not once per scan).
    """
    discovery = discovery or Discovery()
    table = discovery.table = ProcessTable.scan()
    me, gpu_pids, skip = os.getpid(), set(gpu_pids), set(skip)
    candidates = [
        pid
        for pid, stat in table.stats.items()
        if pid != me
        and pid not in skip
        and stat.state != "Z"
        and (
            stat.comm.startswith(WORKER_COMMS)
            or pid in gpu_pids
            or (is_python(stat.comm, discovery.cmdline(pid)) and discovery.has_torch(pid))
        )
    ]
    jobs, covered = [], set(skip)
    for pid in sorted(candidates):
        if pid in covered:
            continue
        root = discovery.root_of(pid)
        tree = discovery.walk(root, root)
        covered.update(tree.members)
        if tree.trainer_pids and not skip.intersection(tree.members):
            jobs.append(tree)
    discovery.forget_except(set(table.stats))
    return jobs
