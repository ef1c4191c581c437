"""Findings that do not flicker: a live view re-diagnoses every tick, and a condition near its
threshold would come and go. A finding is shown once it has held for ``raise_after_s`` and kept
until it has been absent for ``clear_after_s``; faults (severity error) show at once, since the
rules that raise them already waited for their own threshold (a hang, a death). Both hold times
are fields of ``Settings``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dltop.model import Finding
from dltop.settings import DEFAULTS


@dataclass
class _Seen:
    first: float
    last: float
    finding: Finding


class StableFindings:
    def __init__(
        self, raise_after_s: float = DEFAULTS.raise_after_s, clear_after_s: float = DEFAULTS.clear_after_s
    ) -> None:
        self.raise_after_s, self.clear_after_s = raise_after_s, clear_after_s
        self._seen: dict[tuple[str, tuple[int, ...]], _Seen] = {}  # by (id, pids)
        self._shown: set[tuple[str, tuple[int, ...]]] = set()

    def update(self, now: float, findings: list[Finding]) -> list[Finding]:
        """This tick's raw findings -> the ones to show, newest evidence first."""
        current = {(f.id, tuple(f.pids)): f for f in findings}
        for key, finding in current.items():
            seen: Optional[_Seen] = self._seen.get(key)
            if seen is None or now - seen.last > self.clear_after_s:
                seen = self._seen[key] = _Seen(now, now, finding)
            seen.last, seen.finding = now, finding
            if finding.severity == "error" or now - seen.first >= self.raise_after_s:
                self._shown.add(key)
        for key in list(self._seen):
            if now - self._seen[key].last > self.clear_after_s:
                del self._seen[key]
                self._shown.discard(key)
        return [self._seen[key].finding for key in self._seen if key in self._shown]

    def held(self, now: float) -> list[tuple[Finding, float]]:
        """Findings raised this tick and held back until they prove steady, with the seconds until
        they show: the verdict is open meanwhile."""
        return [
            (seen.finding, max(0.0, self.raise_after_s - (now - seen.first)))
            for key, seen in self._seen.items()
            if key not in self._shown and seen.last == now
        ]
