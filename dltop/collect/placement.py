"""Where a trainer runs in a fleet, read from outside: torchrun's environment variables.

Read once per process (a process's initial environment never changes) and cached by pid and
start time, like the rest of discovery's static facts.
"""

from __future__ import annotations

from typing import Optional

from dltop.model import Placement

ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID")


def _int(value: Optional[str]) -> Optional[int]:
    return int(value) if value is not None and value.isdigit() else None


def from_environment(env: dict) -> Placement:
    """torchrun's variables (an unset one is None)."""
    return Placement(
        rank=_int(env.get("RANK")),
        local_rank=_int(env.get("LOCAL_RANK")),
        world_size=_int(env.get("WORLD_SIZE")),
        run_id=env.get("TORCHELASTIC_RUN_ID") or None,
    )


class PlacementReader:
    def __init__(self) -> None:
        self._cache: dict = {}  # (pid, start_ticks) -> Placement

    def read(self, pid: int, start_ticks: int, env: dict) -> Placement:
        key = (pid, start_ticks)
        if key not in self._cache:
            self._cache[key] = from_environment(env)
        return self._cache[key]

    def forget_except(self, alive: set) -> None:
        for key in [k for k in self._cache if k not in alive]:
            del self._cache[key]
