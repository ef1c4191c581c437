"""The source line of a frame, read through the job's own root (/proc/<pid>/root), so a job in
a container shows its code as it sees it. Cached per file; big or unreadable files are skipped."""

from __future__ import annotations

import re
from typing import Optional

LOADER_CALL = re.compile(r"\bDataLoader\s*\(")
ARGUMENT_LINES = 4  # a DataLoader(...) call's arguments are looked for on its line and the next ones

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

    def loader_call(self, pid: int, paths: list, dataset: Optional[str]) -> Optional[str]:
        """ "file:line" of the ``DataLoader(`` call in these files that builds the loader over
        ``dataset`` (its class named in the call), or the only such call; None when unsure."""
        found = []
        for path in paths:
            self.line(pid, path, 1)  # reads and caches the file
            lines = self._files.get(path) or []
            for number, text in enumerate(lines, 1):
                if LOADER_CALL.search(text) and not text.lstrip().startswith(("#", "from ", "import ")):
                    found.append((path, number, " ".join(lines[number - 1 : number - 1 + ARGUMENT_LINES])))
        names = [dataset] if dataset else []
        if dataset:  # the variables the dataset was assigned to: `train_set = ImageFolder(...)`
            assigned = re.compile(rf"(\w+)\s*=\s*(?:[\w.]+\.)?{re.escape(dataset)}\s*\(")
            names += [
                m.group(1) for path in paths for text in self._files.get(path) or [] for m in assigned.finditer(text)
            ]
        named = [f for f in found if any(re.search(rf"\b{re.escape(n)}\b", f[2]) for n in names)]
        pick = named if len(named) == 1 else found if len(found) == 1 else []
        return f"{pick[0][0]}:{pick[0][1]}" if pick else None


def _read_lines(path: str) -> Optional[list]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SOURCE_BYTES + 1)
    except OSError:
        return None
    return None if len(data) > MAX_SOURCE_BYTES else data.decode(errors="replace").splitlines()
