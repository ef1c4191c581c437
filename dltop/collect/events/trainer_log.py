"""What the trainer itself said about its workers, when its output goes to a file: workers that
died, and the parts a streaming dataset has when its workers outnumber them.

When a worker dies torch raises in the trainer: "DataLoader worker (pid 123) is killed by
signal: Killed." or "... exited unexpectedly with exit code 1". If the trainer's stdout/stderr
is a regular file (nohup, Slurm, ``> train.log``) dltop keeps a read-only descriptor to it from
the first tick, so the message can be read even after the trainer exited, the file was deleted,
or from another mount namespace. Pipes and terminals are never read: that would steal output.
"""

from __future__ import annotations

import os
import re
import signal
import stat
from typing import Optional

TAIL_BYTES = 64 << 10
_KILLED = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: ([^.]+)\.")
_EXITED = re.compile(r"DataLoader worker \(pid (\d+)\) exited unexpectedly with exit code (-?\d+)")
_EXITED_PIDS = re.compile(r"DataLoader worker \(pid\(s\) ([\d, ]+)\) exited unexpectedly")
_SIGNALS = {signal.strsignal(s): int(s) for s in signal.Signals if signal.strsignal(s)}
# what streaming-dataset libraries say when workers outnumber the parts of the source:
# Hugging Face datasets (the count), webdataset's empty check (only that there are fewer)
_HF_SHARDS = re.compile(r"Too many dataloader workers: (\d+) \(max is dataset\.num_shards=(\d+)\)")
_WDS_FEWER = "perhaps you have fewer shards than workers"


def parse_shard_limit(text: str) -> tuple[Optional[int], Optional[str]]:
    """(the parts the source has, the library's words) from the newest such message; (None, words)
    when it only says there are fewer parts than workers; (None, None) when none."""
    counts = _HF_SHARDS.findall(text)
    if counts:
        workers, shards = counts[-1]
        return int(shards), f"the trainer's log: datasets' num_shards={shards} for {workers} workers"
    if _WDS_FEWER in text:
        return None, "the trainer's log: webdataset found no samples, 'fewer shards than workers'"
    return None, None


def parse_worker_errors(text: str) -> dict:
    """{worker pid: exit code (< 0: killed by that signal), None when torch did not say} from its messages."""
    codes: dict = {int(pid): None for pids in _EXITED_PIDS.findall(text) for pid in pids.split(",")}
    codes.update({int(pid): -_SIGNALS[name] for pid, name in _KILLED.findall(text) if name in _SIGNALS})
    codes.update({int(pid): int(code) for pid, code in _EXITED.findall(text)})
    return codes


class TrainerLogs:
    def __init__(self) -> None:
        self._fds: dict = {}  # trainer pid -> [fd]
        self._parsed: dict = {}  # fd -> (size when parsed, codes, shard limit)

    def attach(self, pid: int) -> None:
        if pid in self._fds:
            return
        fds, seen = [], set()
        for number in (1, 2):
            path = f"/proc/{pid}/fd/{number}"
            try:
                info = os.stat(path)
                if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) in seen:
                    continue
                fds.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
                seen.add((info.st_dev, info.st_ino))
            except OSError:
                continue
        self._fds[pid] = fds

    def worker_errors(self, pid: int) -> dict:
        codes: dict = {}
        for _, found, _ in self._read(pid):
            codes.update(found)
        return codes

    def shard_limit(self, pid: int) -> tuple[Optional[int], Optional[str]]:
        """What a streaming-dataset library told the trainer's log about its parts (parse_shard_limit)."""
        limits = [limit for _, _, limit in self._read(pid) if limit != (None, None)]
        return limits[-1] if limits else (None, None)

    def _read(self, pid: int) -> list:
        """Each log's parsed tail, re-read only when it grew: one fstat per tick otherwise."""
        parsed = []
        for fd in self._fds.get(pid, ()):
            try:
                size = os.fstat(fd).st_size
            except OSError:
                continue
            if self._parsed.get(fd, (None,))[0] != size:
                text = os.pread(fd, TAIL_BYTES, max(0, size - TAIL_BYTES)).decode(errors="replace")
                self._parsed[fd] = (size, parse_worker_errors(text), parse_shard_limit(text))
            parsed.append(self._parsed[fd])
        return parsed

    def tail(self, pid: int, max_bytes: int = TAIL_BYTES) -> str:
        """The last ``max_bytes`` of the trainer's log (stdout and stderr files), "" when its output
        is not a file dltop may read; for incident bundles."""
        parts = []
        for fd in self._fds.get(pid, ()):
            try:
                size = os.fstat(fd).st_size
                parts.append(os.pread(fd, max_bytes, max(0, size - max_bytes)).decode(errors="replace"))
            except OSError:
                continue
        return "\n".join(parts)

    def forget(self, pid: int) -> None:
        """Close a trainer's logs (a rank torchrun replaced)."""
        for fd in self._fds.pop(pid, ()):
            self._parsed.pop(fd, None)
            os.close(fd)

    def close(self) -> None:
        for fds in self._fds.values():
            for fd in fds:
                os.close(fd)
        self._fds.clear()
