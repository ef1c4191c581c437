"""The training jobs on this machine, summarised for ``dltop jobs`` and the TUI's picker."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from dltop.collect import procfs
from dltop.collect.host.gpu import GpuSampler
from dltop.collect.processes.discovery import find_jobs
from dltop.redact import redact_command


@dataclass(frozen=True)
class JobCandidate:
    pid: int
    user: Optional[str]
    cmdline: str
    trainer_pids: list
    workers: int
    gpu_mem_bytes: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def list_jobs(gpu: GpuSampler) -> list:
    holders = gpu.holders()
    found = []
    for tree in find_jobs(holders):
        found.append(
            JobCandidate(
                pid=tree.root_pid,
                user=procfs.owner_name(tree.root_pid),
                cmdline=redact_command(procfs.read_cmdline(tree.root_pid)) if tree.root_pid else "",
                trainer_pids=tree.trainer_pids,
                workers=sum(1 for m in tree.members.values() if m.role == "worker"),
                gpu_mem_bytes=sum(holders.get(pid, 0) for pid in tree.members),
            )
        )
    return found
