"""Which workers came, which went, and how many were replacements (respawns).

Non-persistent workers are replaced every epoch; persistent ones live as long as the
iterator. Keeping the history of pids per trainer is what lets the diagnosis tell an epoch
boundary (all workers replaced together) from a worker that died.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional

from dltop.model import ExitCause, ExitedWorker

KEEP_EXITED = 64  # per trainer: enough for any window a report covers


@dataclass
class TrainerWorkers:
    alive: dict = field(default_factory=dict)  # pid -> first seen (monotonic s)
    exited: deque = field(default_factory=lambda: deque(maxlen=KEEP_EXITED))
    exited_pids: set = field(default_factory=set)
    exited_total: int = 0
    started_total: int = 0
    respawns: int = 0


class WorkerLifecycle:
    def __init__(self) -> None:
        self.trainers: dict[int, TrainerWorkers] = {}

    def forget(self, trainer_pid: int) -> None:
        self.trainers.pop(trainer_pid, None)

    def update(
        self,
        now: float,
        now_iso: str,
        workers: dict,
        exit_codes: dict,
        running_trainers: set,
        last_known: Callable[[int], tuple] = lambda pid: ("unknown", None),
    ) -> None:
        """``workers``: {pid: trainer pid} of live workers; ``exit_codes``: {pid: code or None} of
        zombies and of exits caught as they happened; ``last_known(pid)``: (activity, stack).

        A zombie counts as gone already: it will never fetch another sample.
        """
        for trainer_pid in set(workers.values()) | set(self.trainers):
            history = self.trainers.setdefault(trainer_pid, TrainerWorkers())
            current = {p for p, t in workers.items() if t == trainer_pid and p not in exit_codes}
            zombies = {p for p, t in workers.items() if t == trainer_pid and p in exit_codes}
            for pid in sorted((set(history.alive) - current) | (zombies - history.exited_pids)):
                seen_for = now - history.alive.pop(pid, now)
                activity, stack = last_known(pid)
                history.exited.append(
                    ExitedWorker(
                        pid, trainer_pid, round(seen_for, 2), now_iso, exit_codes.get(pid),
                        _cause(exit_codes.get(pid)), trainer_pid in running_trainers, activity, stack,
                    )
                )  # fmt: skip
                history.exited_pids.add(pid)
                history.exited_total += 1
            for pid in sorted(current - set(history.alive)):
                history.alive[pid] = now
                history.started_total += 1
                if history.exited_total > history.respawns:
                    history.respawns += 1  # replaces a worker that went away
            self.late_codes(trainer_pid, exit_codes)

    def late_codes(self, trainer_pid: int, exit_codes: dict, from_log: bool = False) -> None:
        """Exit statuses learnt after the worker vanished (a tick later, or from the trainer's log)."""
        history = self.trainers.get(trainer_pid)
        if history is None:
            return
        for index, worker in enumerate(history.exited):
            if worker.pid not in exit_codes or worker.in_trainer_log:
                continue
            code = exit_codes[worker.pid] if exit_codes[worker.pid] is not None else worker.exit_code
            if from_log:  # torch said it exited unexpectedly: a death, whatever the status
                history.exited[index] = dataclasses.replace(worker, exit_code=code, cause="died", in_trainer_log=True)
            elif worker.exit_code is None and code is not None:
                history.exited[index] = dataclasses.replace(worker, exit_code=code, cause=_cause(code))

    def respawns(self, trainer_pid: int) -> int:
        history = self.trainers.get(trainer_pid)
        return history.respawns if history else 0

    def exited(self, trainer_pid: int) -> list:
        history = self.trainers.get(trainer_pid)
        return list(history.exited) if history else []

    def persistent(self, trainer_pid: int) -> Optional[bool]:
        """False once workers were seen replaced; unknown until then (stacks can tell sooner)."""
        return False if self.respawns(trainer_pid) else None


def _cause(code: Optional[int]) -> ExitCause:
    """Workers leave with 0 at an epoch or loader end (or when their trainer is gone)."""
    return "unknown" if code is None else "ended" if code == 0 else "died"
