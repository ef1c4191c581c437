"""GPUs: one the job holds is idle much of the time (gpu-underutilized). It names the cause it can
see in the window's figures (a trainer on it that waits for data, workers starting every epoch,
or the training step itself); which other finding explains it is for ``relations`` to say."""

from __future__ import annotations

from typing import Optional

from dltop.diagnose.figures import input_bound_wait, loader_change
from dltop.diagnose.knobs import is_dataloader
from dltop.diagnose.window import Window
from dltop.model import Finding, Snapshot, gpus_read, sampling_works
from dltop.model.findings import GPU_UNDERUTILIZED, INPUT_BOUND
from dltop.settings import Settings


def gpu_underutilized(window: Window, settings: Settings) -> list[Finding]:
    """A GPU the job holds is idle much of the time: "starved by input" when a trainer on it waits
    for data as input-bound judges it (the same figure, ``input_bound_wait``), else the bottleneck
    is in the training step itself."""
    latest = window.latest
    if not gpus_read(latest.gpu_status):
        return []
    starved = {ld.trainer_pid: wait for ld in latest.loaders if (wait := input_bound_wait(ld, settings)) is not None}
    findings = []
    for gpu in latest.gpus:
        holders = [p.pid for p in gpu.processes]
        readings = [u for u in (_gpu_util(s, gpu.index) for s in window.ticks) if u is not None]
        if not holders or not readings or len(readings) < settings.gpu_min_readings:
            continue
        util = sum(readings) / len(readings)
        if util >= settings.gpu_busy_percent:
            continue
        starving = [pid for pid in holders if pid in starved]
        named = _cause(latest, holders, starving, starved, settings)
        if named is None:
            continue  # a trainer's data wait is not judged yet (pending says so): no cause to name
        cause, suggestion = named
        findings.append(
            Finding(
                id=GPU_UNDERUTILIZED,
                severity="warning" if starving else "info",
                title=f"GPU {gpu.index} is busy {util:.0f}% of the time: {cause.split(':')[0]}",
                detail=f"GPU {gpu.index} ({gpu.name}) held by pid(s) {', '.join(map(str, holders))}; {cause}.",
                pids=holders,
                evidence={
                    "gpu": gpu.index,
                    "util_percent": round(util, 1),
                    "input_bound": bool(starving),
                    "trainer_pids": holders,
                    "readings": len(readings),
                },  # fmt: skip
                suggestion=suggestion,
                impact=1 - util / 100,
            )
        )
    return findings


def _cause(
    latest: Snapshot, holders: list[int], starving: list[int], starved: dict[int, float], settings: Settings
) -> Optional[tuple[str, str]]:
    """(cause, suggestion) of an idle GPU, the likeliest first: a trainer on it starved by input,
    workers starting every epoch, else the training step; None while that cannot be told yet."""
    starting = [(ld, ld.trainer_time.starting_workers_percent) for ld in latest.loaders
                if ld.trainer_pid in holders and ld.trainer_time and is_dataloader(ld)
                and ld.trainer_time.starting_workers_percent >= settings.input_bound_percent]  # fmt: skip
    if starving:
        trainer = starving[0]
        cause = f"starved by input: trainer {trainer} waits for data {starved[trainer] * 100:.0f}% of the time"
        return cause, f"Feed it faster: see {INPUT_BOUND} for trainer {trainer}."
    if starting:
        loader, spent = starting[0]
        cause = f"idle while workers start: trainer {loader.trainer_pid} spends {spent:.0f}% of its time there"
        return cause, loader_change(loader, persistent_workers=True)
    return _step_cause(latest, holders, settings)


def _step_cause(latest: Snapshot, holders: list[int], settings: Settings) -> Optional[tuple[str, str]]:
    """The training step as the cause, said only once every trainer's wait is measured below
    input-bound's line (or stacks are off, and it is said to be unknown)."""
    waits = _settled_waits(latest, holders, settings)
    if waits is None and sampling_works(latest.stacks_status):
        return None
    if waits is None:
        cause = "cause unknown: without stacks dltop cannot tell a wait for data from a slow step"
    elif waits:
        cause = f"the training step itself leaves it idle: its trainer waits for data only {max(waits):.0f}%"
    else:
        cause = "the training step itself leaves it idle"
    return cause, (
        "Profile a few steps with torch.profiler: look for host-side work between kernels (.item(), "
        ".cpu(), logging every step), small batches, or CPU-side augmentation in the step."
    )


def _settled_waits(latest: Snapshot, holders: list[int], settings: Settings) -> Optional[list[float]]:
    """Data-wait shares of the trainers on a GPU, each measured and below input-bound's line; None
    while any is unknown or above that line but not yet surely (a GPU starved by input must not be
    blamed on the training step before the wait is judged)."""
    waits = []
    for loader in (ld for ld in latest.loaders if ld.trainer_pid in holders):
        spent, wait = loader.trainer_time, loader.data_wait_percent
        if spent is None or wait is None or spent.samples < settings.min_stack_samples:
            return None
        if wait >= settings.input_bound_percent:  # input-bound's, or pending until it is sure
            return None
        waits.append(wait)
    return waits


def _gpu_util(snap: Snapshot, index: int) -> Optional[float]:
    return next((g.util_percent for g in snap.gpus if g.index == index), None)
