"""The one way dltop ticks on a schedule: the live view, ``dltop snapshot``, the recorder and the
exporter all pace their ticks through ``ticks``."""

from __future__ import annotations

import math
import threading
import time
from typing import Callable, Iterator, Optional

EPSILON_S = 1e-3  # a tick this close to the end of a fixed duration is its last
# the live view's refresh (and the demo's): htop's default delay, so the two compare a refresh
# with a refresh; most of what dltop knows comes from its samplers, whose budgets are per second
REFRESH_S = 1.5
FRAME_S = 1.0  # ``dltop snapshot``'s samples and the recorder's frames
WINDOW_S = 120.0  # the span a live diagnosis looks back over, whatever the interval


def ticks_in_window(interval_s: float) -> int:
    """Ticks of ``interval_s`` that span WINDOW_S (2 at least: rates need a tick before them)."""
    return max(2, math.ceil(WINDOW_S / interval_s))


def ticks(
    interval_s: float,
    stop: Optional[threading.Event] = None,
    clock: Callable[[], float] = time.monotonic,
    duration_s: Optional[float] = None,
) -> Iterator[bool]:
    """Yields once a tick, every ``interval_s`` on a fixed grid (a slow tick does not drift the
    next; one that overran the grid is followed at once), until ``stop`` is set. With
    ``duration_s`` the last tick falls exactly at its end and is the one that yields True."""
    stop = stop or threading.Event()
    next_at = clock()
    end = None if duration_s is None else next_at + duration_s
    while not stop.is_set():
        final = end is not None and next_at >= end - EPSILON_S
        yield final
        if final:
            return
        next_at = max(next_at + interval_s, clock())
        if end is not None:
            next_at = min(next_at, end)
        stop.wait(max(0.0, next_at - clock()))
