"""/dev/shm: nearly full at its peak (shm-low), warned of before a batch that does not fit kills a
worker with SIGBUS (worker-died then; relations tie the two)."""

from __future__ import annotations

import math
from typing import Optional

from dltop.diagnose.knobs import on_threads
from dltop.diagnose.window import Window
from dltop.model import Finding, Snapshot
from dltop.model.findings import SHM_LOW
from dltop.settings import Settings
from dltop.units import human_bytes


def shm_low(window: Window, settings: Settings) -> list[Finding]:
    """/dev/shm is nearly full at its peak: each batch a worker sends lives there until the trainer
    has used it, and the next one that does not fit kills the worker with SIGBUS."""
    latest = window.latest
    workers = sum(ld.num_workers for ld in latest.loaders if not on_threads(ld))  # threads hand batches over in memory
    rows = [row for row in map(_shm, window.ticks) if row is not None]
    if not rows or not workers:
        return []
    peak = max(used for used, _ in rows)
    total = rows[-1][1]
    if peak < settings.shm_full_share * total:
        return []
    size_gb = max(1, math.ceil(2 * peak / (1 << 30)))
    return [
        Finding(
            id=SHM_LOW,
            severity="error" if peak >= settings.shm_error_share * total else "warning",
            title=f"/dev/shm was {100 * peak / total:.0f}% full ({human_bytes(peak)} of {human_bytes(total)})",
            detail=f"{workers} worker(s) put every batch in /dev/shm until the trainer takes it (num_workers x"
            " prefetch_factor batches in flight); a batch that does not fit ends the worker with a bus error.",
            pids=[ld.trainer_pid for ld in latest.loaders],
            evidence={"shm_total_bytes": total, "shm_peak_used_bytes": peak, "workers": workers},
            suggestion=f"Give the container more: `docker run --shm-size={size_gb}g` (or `--ipc=host`); or keep fewer "
            "batches in flight: prefetch_factor=1 in the DataLoader, or fewer workers.",
            impact=peak / total,
        )
    ]


def _shm(tick: Snapshot) -> Optional[tuple[int, int]]:
    """(bytes used, bytes in all) of /dev/shm at one tick, where both were read."""
    system = tick.system
    if system is None or not system.shm_total_bytes or system.shm_used_bytes is None:
        return None
    return system.shm_used_bytes, system.shm_total_bytes
