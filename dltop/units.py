"""Human-readable figures, shared by the text report and the TUI."""

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


def signal_name(number: int) -> str:
    """15 -> 'SIGTERM' (an unknown number stays a number)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
