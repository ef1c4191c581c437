"""The source line of a frame, read through the job's own root (/proc/<pid>/root), so a job in
a container shows its code as it sees it. Cached per file; big or unreadable files are skipped."""

from __future__ import annotations

from typing import Optional

MAX_SOURCE_BYTES = 2 << 20


class SourceLines:
    def __init__(self) -> None:
        self._files: dict = {}  # path -> [lines] or None

    def line(self, pid: int, path: str, number: Optional[int]) -> Optional[str]:
        if not number or not path.startswith("/"):
            return None
        if path not in self._files:
            self._files[path] = _read_lines(f"/proc/{pid}/root{path}")
        lines = self._files[path]
        if lines is None or number > len(lines):
            return None
        return lines[number - 1].strip() or None


def _read_lines(path: str) -> Optional[list]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SOURCE_BYTES + 1)
    except OSError:
        return None
    return None if len(data) > MAX_SOURCE_BYTES else data.decode(errors="replace").splitlines()
