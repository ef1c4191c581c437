"""A run that has stopped: its ranks judged together, and the rank that stopped it named.

Ranks of one run meet at every collective. When one never arrives, the others block there until
the process group's timeout (NCCL's 10 minutes, gloo's 30) kills the run, and each of them alone
looks merely stalled. Joined, their stacks say which rank is not where the others are: that rank
is the cause, with the frame it is in; ranks that wait in different collectives have desynced
(they disagree on which collective comes next); ranks that all wait in one collective with none
missing here wait for ranks on other nodes. A rank that is slow but moving never waits long
enough to be judged here: it is a straggler (ranks.py).
"""

from __future__ import annotations

import socket
from collections import defaultdict
from dataclasses import dataclass
from typing import Optional

from dltop.diagnose.ranks import runs
from dltop.diagnose.window import Window
from dltop.model import Finding, ProcessSample, Snapshot
from dltop.model.findings import RUN_STOPPED
from dltop.rank_frames import RankPosition, rank_position
from dltop.settings import DEFAULTS, Settings


@dataclass(frozen=True)
class RankAt:
    """One rank of a run and where its main thread is; ``still_s``: how long it has kept that
    stack without CPU (0 while it runs)."""

    trainer: ProcessSample
    position: RankPosition
    still_s: float

    @property
    def name(self) -> str:
        return f"rank {self.trainer.rank}" if self.trainer.rank is not None else f"trainer {self.trainer.pid}"

    def waits(self, after_s: float) -> bool:
        """In a collective or at a sync point, still for ``after_s``: waiting for other ranks."""
        return self.position.waits_for_ranks and self.still_s >= after_s

    def evidence(self) -> dict:
        frame, site = self.position.frame, self.position.site
        shown = site or frame
        return {
            "rank": self.trainer.rank,
            "pid": self.trainer.pid,
            "where": self.position.where,
            "call": self.position.call,
            "blocked_on": self.position.blocked_on,
            "frame": frame.where() if frame else None,
            "site": site.where() if site else None,
            "code": shown.code if shown else None,
            "still_s": round(self.still_s, 1),
        }


def rank_at(trainer: ProcessSample, still_after_s: float) -> Optional[RankAt]:
    """Where this rank is, once its stack has been read: blocked rather than running where it has
    kept its stack without CPU for ``still_after_s``."""
    still = trainer.stuck_s or 0.0
    position = rank_position(trainer.stack or [], still >= still_after_s)
    return RankAt(trainer, position, still) if position is not None else None


def run_ranks(snap: Snapshot, settings: Settings = DEFAULTS) -> dict[str, list[RankAt]]:
    """{run: where each of its ranks on this node is} for the distributed runs here (two ranks here
    or more, or one of a larger world), rank order; a rank whose stack is not read yet is left out."""
    placed: dict[str, list[RankAt]] = {}
    for run, trainers in runs(snap, at_least=1).items():
        if len(trainers) < 2 and max((t.placement.world_size or 1) if t.placement else 1 for t in trainers) < 2:
            continue  # one process alone: no collective to wait in
        still_after_s = max(t.stuck_s or 0.0 for t in trainers) * settings.stopped_still_share
        found = (rank_at(t, still_after_s) for t in sorted(trainers, key=_rank_order))
        placed[run] = [r for r in found if r is not None]
    return placed


def run_stopped(window: Window, settings: Settings) -> list[Finding]:
    """One error per run whose ranks wait for one another past ``hang_after_s``."""
    findings, here = [], runs(window.latest, at_least=1)
    for run, ranks in run_ranks(window.latest, settings).items():
        waiting = [r for r in ranks if r.waits(settings.hang_after_s)]
        if waiting and len(ranks) == len(here[run]):  # every rank here judged
            findings.append(_verdict(run, ranks, waiting))
    return findings


def _rank_order(trainer: ProcessSample) -> tuple[int, int]:
    return (trainer.rank if trainer.rank is not None else 1 << 30, trainer.pid)


def _names(ranks: list[RankAt]) -> str:
    numbers = [r.trainer.rank for r in ranks]
    if None in numbers:
        return ", ".join(r.name for r in ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(n) for n in numbers)


def _by_call(ranks: list[RankAt]) -> dict[str, list[RankAt]]:
    """Ranks grouped by the collective they wait in and the line that called it, largest group
    first, each in words: "ranks 0, 1 wait in all_reduce in backward() at train.py:58"."""
    groups: dict[tuple, list[RankAt]] = defaultdict(list)
    for rank in ranks:
        site = rank.position.site or rank.position.frame
        groups[(rank.position.where, rank.position.call, site.where() if site else None)].append(rank)
    ordered = sorted(groups.values(), key=lambda group: -len(group))
    return {f"{_names(group)} {group[0].position.describe(len(group))}": group for group in ordered}


def _missing_ranks(ranks: list[RankAt]) -> list[int]:
    """The run's ranks not on this node, by number, where its world size is known."""
    worlds = {r.trainer.placement.world_size for r in ranks if r.trainer.placement is not None}
    world = max((w for w in worlds if w), default=None)
    here = {r.trainer.rank for r in ranks}
    return [n for n in range(world) if n not in here] if world else []


def _verdict(run: str, ranks: list[RankAt], waiting: list[RankAt]) -> Finding:
    """The cause (ranks not where the others are), a desync, or ranks elsewhere not arrived."""
    calls = _by_call([r for r in ranks if r.position.waits_for_ranks])
    causes = [r for r in ranks if not r.position.waits_for_ranks]
    missing = _missing_ranks(ranks) if not causes and len(calls) == 1 else []
    if causes:
        blamed, title, detail = causes, *_stopped_by(causes, calls)
    elif len(calls) > 1:
        blamed, title, detail = _desynced(calls)
    else:
        blamed, title, detail = [], *_waiting_elsewhere(calls, missing)
    longest = max(r.still_s for r in waiting)
    host = socket.gethostname()
    return Finding(
        id=RUN_STOPPED,
        severity="error",
        title=title,
        detail=f"On {host}, the run has made no progress for {longest:.0f}s: {detail}.",
        pids=[r.trainer.pid for r in blamed] or [r.trainer.pid for r in ranks],
        evidence={
            "run": run,
            "host": host,
            "desync": not causes and len(calls) > 1,
            "cause_ranks": [r.trainer.rank for r in blamed],
            "cause_pids": [r.trainer.pid for r in blamed],
            "waiting_pids": [r.trainer.pid for r in waiting],
            "missing_ranks": missing,
            "stopped_s": round(longest, 1),
            "ranks": [r.evidence() for r in ranks],
        },
        suggestion=_suggestion(causes, not causes and len(calls) > 1, missing),
        impact=1.0,
    )


def _stopped_by(causes: list[RankAt], calls: dict[str, list[RankAt]]) -> tuple[str, str]:
    """Ranks not in any collective: they stopped the run; what they do and what the others wait in."""
    title = "Run stopped: " + "; ".join(f"{r.name} {r.position.describe()}" for r in causes)
    return title, "; ".join([*calls, *(f"{r.name} (pid {r.trainer.pid}) {r.position.describe()}" for r in causes)])


def _desynced(calls: dict[str, list[RankAt]]) -> tuple[list[RankAt], str, str]:
    """Every rank waits, in different calls: those outside the largest group are named."""
    blamed = [r for group in list(calls.values())[1:] for r in group]
    title = f"Run desynced: its ranks wait in different collectives ({', '.join(map(_call_of, calls.values()))})"
    return blamed, title, "; ".join(calls) + ". Each waits for the others to join its own call, which they never will"


def _waiting_elsewhere(calls: dict[str, list[RankAt]], missing: list[int]) -> tuple[str, str]:
    """Every rank here waits in one call: the ranks it waits for are on other nodes (or none is missing)."""
    elsewhere = f"ranks {', '.join(map(str, missing))} (not on this node)" if missing else "no rank"
    (group,) = calls.values()
    title = f"Run stopped: every rank here waits in {_call_of(group)}; {elsewhere} arrived"
    return title, "; ".join(calls) + ". None of this node's ranks is missing from the call"


def _call_of(ranks: list[RankAt]) -> str:
    return ranks[0].position.call or ranks[0].position.where


def _suggestion(causes: list[RankAt], desync: bool, missing: list[int]) -> str:
    if causes:
        first = causes[0]
        frame = first.position.site or first.position.frame
        code = f" (`{frame.code}`)" if frame and frame.code else ""
        if first.position.where == "data":
            return (
                f"{first.name}'s DataLoader does not deliver: its worker finding is the cause. The other ranks "
                "only wait for it."
            )
        return (
            f"Look at {first.name}'s line{code}: every other rank waits for it. `dltop dump --pid "
            f"{first.trainer.pid}` shows all its threads (who holds a lock)."
        )
    if desync:
        return (
            "Every rank must call the same collectives in the same order: a branch on the rank or on the data "
            "made these ranks call different ones."
        )
    if missing:
        return (
            f"Look at ranks {', '.join(map(str, missing))} on the other nodes (dltop there, or the "
            "TrainingRunStopped alert, which joins every node's ranks)."
        )
    return "The collective itself does not complete: look at the network or the collective library's logs."
