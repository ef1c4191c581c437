"""Reading a file from storage rather than the page cache (the demo job and bench workloads)."""

from __future__ import annotations

import os


def read_uncached(path: str) -> None:
    """Drop the file's cached pages first (POSIX_FADV_DONTNEED needs no privilege for one's own
    readable files), then read it all: the read reaches the disk and /proc/<pid>/io counts it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while os.read(fd, 1 << 20):
            pass
    finally:
        os.close(fd)
