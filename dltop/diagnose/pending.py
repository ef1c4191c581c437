"""What the window is still too short to judge, what each judgement waits for, and how long yet.

A report that stays silent because it could not tell yet reads as "healthy". Each rule that
needs evidence to build up says here what it is missing, in words, and estimates how much
longer to watch from the rate that evidence has been arriving at.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Union

from dltop.diagnose.capacity import capacities, starved_wait
from dltop.diagnose.figures import wait_error
from dltop.diagnose.knobs import is_dataloader
from dltop.diagnose.memory import Points, memory_points
from dltop.diagnose.threads import thread_named
from dltop.diagnose.window import MemoryReadings, Window
from dltop.model import (
    LoaderSample,
    Pending,
    ProcessSample,
    Snapshot,
    WorkerThread,
    gpus_read,
    sampling_works,
    still_for,
)
from dltop.model.findings import GPU_UNDERUTILIZED, INPUT_BOUND, WORKER_HUNG, WORKER_MEMORY_GROWTH, WORKERS_RESPAWNING
from dltop.settings import Settings

FIRST_WINDOW_S = 1.5  # the first trainer record window reports within this (an estimate, not a threshold)


def pending(ticks: Sequence[Snapshot], settings: Settings, memory: Optional[MemoryReadings] = None) -> list[Pending]:
    """[Pending] for the newest of ``ticks`` (oldest first); ``memory`` as ``diagnose`` takes it."""
    if not ticks:
        return []
    window = Window(ticks, memory=memory)
    latest = window.latest
    if latest.job.state == "exited":
        return []
    found = _data_wait(window, settings) + _hangs(latest, settings)
    found += _memory(window, settings) + _gpu(window, settings) + _respawns(latest)
    return found


def _data_wait(window: Window, settings: Settings) -> list[Pending]:
    latest = window.latest
    if not sampling_works(latest.stacks_status):
        return []  # stacks-unavailable says why and how to fix it
    found = []
    for loader in latest.loaders:
        spent = loader.trainer_time
        have = spent.samples if spent else 0
        if have >= settings.min_stack_samples:
            found += [p for p in _uncertain_wait(loader, settings) if not _starved(window, loader, settings)]
            continue
        rate = spent.samples / spent.window_s if spent and spent.window_s else None
        ready = (settings.min_stack_samples - have) / rate if rate else FIRST_WINDOW_S
        found.append(
            Pending(
                INPUT_BOUND,
                f"{settings.min_stack_samples} stack samples of trainer {loader.trainer_pid} (has {have})",
                round(ready, 1),
            )  # fmt: skip
        )
    return found


def _starved(window: Window, loader: LoaderSample, settings: Settings) -> bool:
    """input-bound already holds for this loader (``starved_wait``: more workers surely help, near
    its line too): nothing about it is pending."""
    return any(starved_wait(cap) is not None for cap in capacities(window, settings) if cap.loader is loader)


def _uncertain_wait(loader: LoaderSample, settings: Settings) -> list[Pending]:
    """A wait near the input-bound threshold that its samples do not yet put clearly above it."""
    wait, error, spent = (loader.data_wait_percent or 0) / 100, wait_error(loader), loader.trainer_time
    if (
        spent is None
        or error is None
        or not settings.input_bound_percent <= wait * 100 < settings.input_bound_percent + error * 100
    ):
        return []
    margin = wait - settings.input_bound_percent / 100
    needed = wait * (1 - wait) / max(margin, 0.005) ** 2  # samples for one standard error below the margin
    rate = spent.samples / spent.window_s if spent.window_s else None
    ready = round((needed - spent.samples) / rate, 1) if rate else None
    return [
        Pending(
            INPUT_BOUND,
            f"more stack samples of trainer {loader.trainer_pid}: its data wait"
            f" {wait * 100:.0f} ± {error * 100:.0f}% is not yet clear of {settings.input_bound_percent:g}%",
            ready,
        )  # fmt: skip
    ]


def _hangs(latest: Snapshot, settings: Settings) -> list[Pending]:
    """Workers (processes, or a pipeline's threads) that have kept one stack a while, not yet for
    --hang-after."""
    still: list[tuple[str, Union[ProcessSample, WorkerThread]]] = [
        (f"worker {p.pid}", p) for p in latest.processes if p.role == "worker"
    ]
    still += [(f"{thread_named(t)} of trainer {ld.trainer_pid}", t) for ld in latest.loaders for t in ld.worker_threads]
    found = []
    for who, row in still:
        stuck = still_for(row)
        if stuck is None or not settings.still_notice_s <= stuck < settings.hang_after_s:
            continue
        found.append(
            Pending(
                WORKER_HUNG,
                f"{who} has kept one stack without CPU for {stuck:.0f}s; a hang"
                f" once it reaches {settings.hang_after_s:g}s",
                round(settings.hang_after_s - stuck, 1),
            )  # fmt: skip
        )
    return found


def _memory(window: Window, settings: Settings) -> list[Pending]:
    """Workers with too few distinct memory readings to fit a line through yet (once the window is
    long, readings that do not change are the answer: no growth)."""
    span = window.times[-1]
    if span >= settings.memory_quiet_s:
        return []
    pids = {pid for loader in window.latest.loaders for pid in loader.worker_pids}
    series = memory_points(window, pids, settings.memory_growth_points)
    short = {pid: points for pid, points in series.items() if len(points) < settings.memory_growth_points}
    if not short:
        return []
    have = min(len(p) for p in short.values())
    ready = _memory_eta(short, span, settings.memory_growth_points)
    return [
        Pending(
            WORKER_MEMORY_GROWTH,
            f"{settings.memory_growth_points} memory readings of each worker to judge its"
            f" growth (has {have} for {len(short)} worker(s); re-read within dltop's CPU budget)",
            ready,
        )  # fmt: skip
    ]


def _memory_eta(short: dict[int, Points], span_s: float, needed: int) -> Optional[float]:
    got = sum(len(p) for p in short.values())
    if not got or span_s <= 0:
        return None
    per_s = got / span_s
    return round(sum(needed - len(p) for p in short.values()) / per_s, 1)


def _gpu(window: Window, settings: Settings) -> list[Pending]:
    latest = window.latest
    if not gpus_read(latest.gpu_status) or not any(g.processes for g in latest.gpus):
        return []
    readings = sum(1 for s in window.ticks if any(g.util_percent is not None for g in s.gpus))
    if readings >= settings.gpu_min_readings:
        return []
    tick = latest.window_s or 1.0
    return [
        Pending(
            GPU_UNDERUTILIZED,
            f"{settings.gpu_min_readings} GPU readings to judge its busy share (has {readings})",
            round((settings.gpu_min_readings - readings) * tick, 1),
        )  # fmt: skip
    ]


def _respawns(latest: Snapshot) -> list[Pending]:
    return [
        Pending(WORKERS_RESPAWNING, f"an epoch end of trainer {ld.trainer_pid} to tell whether its workers persist")
        for ld in latest.loaders
        if ld.num_workers and ld.persistent_workers is None and is_dataloader(ld)
    ]
