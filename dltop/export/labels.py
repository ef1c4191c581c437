"""Who is who in one Snapshot, as Prometheus labels: trainers by pid and rank, loaders by the
Dataset they serve, workers by ``worker_id`` (never by pid, so a respawned worker continues
its series), GPUs spelt as dcgm-exporter spells them.

Never ``job`` or ``instance``: Prometheus adds those. Every value is a string; an unknown one
is "" (Prometheus treats an empty label as absent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dltop.model import GpuSample, ProcessSample, Snapshot

TRAINER = ("job_pid", "trainer_pid", "rank", "local_rank", "world_size", "run_id", "namespace", "pod", "container")
LOADER = (*TRAINER, "loader")
PROCESS = (*LOADER, "role", "worker_id")  # a trainer's loader and worker_id are ""
GPU = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")  # as dcgm-exporter
# a rank of a distributed run, by where its main thread is: bounded (no pid, no frame), so one rule
# can join every node's ranks of a run (the scrape adds the node)
RANK = ("run_id", "rank", "where", "call")


def text(value: object) -> str:
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Roster:
    """Label values of one Snapshot's trainers, loaders and processes (trainers and workers)."""

    trainers: dict  # trainer pid -> TRAINER values
    loaders: list  # (LoaderSample, LOADER values)
    processes: list  # (ProcessSample, PROCESS values)
    exited_workers: dict  # pid of a worker that went away -> its trainer pid

    def first_loaders(self) -> dict:
        """TRAINER values -> the trainer's first loader: its loaders share one trainer's time
        (data wait, phases), so any of them tells it."""
        firsts: dict = {}
        for loader, values in self.loaders:
            firsts.setdefault(values[: len(TRAINER)], loader)
        return firsts

    def trainer_of(self, pid: int) -> Optional[int]:
        """The trainer a pid belongs to (itself, a live worker's or a departed worker's), if any."""
        if pid in self.trainers:
            return pid
        owner = next((p.trainer_pid for p, _ in self.processes if p.pid == pid), None)
        return owner if owner is not None else self.exited_workers.get(pid)


def roster(snap: Snapshot) -> Roster:
    by_pid = {p.pid: p for p in snap.processes}
    trainers = {pid: _trainer_values(snap.job.pid, pid, by_pid.get(pid)) for pid in _trainer_pids(snap)}
    loaders, processes = [], []
    for trainer_pid, trainer in trainers.items():
        if trainer_pid in by_pid and by_pid[trainer_pid].state != "zombie":
            processes.append((by_pid[trainer_pid], (*trainer, "", "trainer", "")))
        mine = [loader for loader in snap.loaders if loader.trainer_pid == trainer_pid]
        for loader, name in zip(mine, loader_names(mine)):
            values = (*trainer, name)
            loaders.append((loader, values))
            workers = [by_pid.get(pid) for pid in sorted(loader.worker_pids)]
            for worker, wid in zip(workers, worker_ids(workers)):
                if worker is not None and worker.state != "zombie":
                    processes.append((worker, (*values, "worker", text(wid))))
    exited = {w.pid: w.trainer_pid for loader in snap.loaders for w in loader.workers_exited}
    return Roster(trainers, loaders, processes, exited)


def _trainer_pids(snap: Snapshot) -> list:
    """Running trainers, and trainers that exited but keep their loader entry (a rank restarting)."""
    return sorted(set(snap.job.trainer_pids) | {loader.trainer_pid for loader in snap.loaders})


def _trainer_values(job_pid: int, pid: int, sample: Optional[ProcessSample]) -> tuple:
    place = sample.placement if sample is not None else None
    if place is None:
        return (text(job_pid), text(pid), text(sample.rank if sample else None), *[""] * 6)
    return (
        text(job_pid),
        text(pid),
        text(place.rank),
        text(place.local_rank),
        text(place.world_size),
        text(place.run),  # torchrun's run id, else the rendezvous: what every rank of the run shares
        text(place.namespace),
        text(place.pod),
        text(place.container),
    )


def loader_names(loaders: list) -> list:
    """One trainer's loaders by the Dataset class they serve ('' before a worker was read);
    a second loader of the same class is 'Name#2'."""
    names: list[str] = []
    seen: dict[str, int] = {}
    for loader in loaders:
        base = loader.dataset or ""
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return names


def worker_ids(workers: list) -> list:
    """One loader's workers (sorted by pid, None where not sampled) -> their worker_id: torch's,
    read from _worker_loop by the collector; until then the worker's place by pid (workers start
    in worker_id order, so the two agree), or the lowest id free where that place is taken."""
    taken = {w.worker_id for w in workers if w is not None and w.worker_id is not None}
    ids = []
    for index, worker in enumerate(workers):
        if worker is not None and worker.worker_id is not None:
            ids.append(worker.worker_id)
            continue
        guess = index if index not in taken else min(set(range(len(workers) + len(taken))) - taken)
        taken.add(guess)
        ids.append(guess)
    return ids


def gpu_values(gpu: GpuSample, hostname: str) -> tuple:
    device = f"nvidia{gpu.minor_number}" if gpu.minor_number is not None else ""
    return (text(gpu.index), text(gpu.uuid), text(gpu.pci_bus_id), device, gpu.name, hostname)
