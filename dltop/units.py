"""Human-readable figures and durations, shared by every front end and the findings' words."""

from __future__ import annotations

import signal
from typing import Optional

NA = "n/a"


def human_bytes(value: Optional[float], suffix: str = "") -> str:
    if value is None:
        return NA
    for unit in ("B", "K", "M", "G", "T"):
        if abs(value) < 1024 or unit == "T":
            text = f"{value:.0f}" if unit == "B" or abs(value) >= 100 else f"{value:.1f}"
            return f"{text}{unit}{suffix}"
        value /= 1024
    raise AssertionError("unreachable")


def bytes_held(value: Optional[float]) -> str:
    """Memory a job holds on a device, '-' where it holds none (a job without a GPU)."""
    return human_bytes(value) if value else "-"


def percent(value: Optional[float]) -> str:
    return NA if value is None else f"{value:.0f}%"


def number(value: Optional[float], digits: int = 1) -> str:
    return NA if value is None else f"{value:.{digits}f}"


def cpu_list(cpus: list) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (the form taskset and cgroups use)."""
    ranges, start = [], None
    for i, cpu in enumerate(cpus):
        if start is None:
            start = cpu
        if i + 1 == len(cpus) or cpus[i + 1] != cpu + 1:
            ranges.append(str(start) if start == cpu else f"{start}-{cpu}")
            start = None
    return ",".join(ranges)


def clock(seconds: float) -> str:
    """A table cell's duration, as htop's TIME+: 4:05, 1h02m."""
    seconds = max(0, int(seconds))
    if seconds < 3600:
        return f"{seconds // 60}:{seconds % 60:02d}"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def span(seconds: float) -> str:
    """An exact span in words' place: 1h02m03s, 2m05s, 45s."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def rough_span(seconds: float) -> str:
    """A forecast's span, no more precise than it is: 45 min, 7 h."""
    return f"{seconds / 60:.0f} min" if seconds < 3 * 3600 else f"{seconds / 3600:.0f} h"


def signal_name(number: int) -> str:
    """15 -> 'SIGTERM' (an unknown number stays a number)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
