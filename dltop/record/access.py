"""Who may read what the recorder writes. A recording and its index hold a job's stacks with source
lines and its (redacted) command line; an incident bundle adds its trainers' log tails and, with
``--incident-dump``, local variables. They are the recording user's alone (files 0600, directories
0700), or also a group's the operator names (``--group``: 0640 and 0750, owned by that group):
never the world's, whatever the umask."""

from __future__ import annotations

import grp
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from dltop.errors import DltopError

NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


@dataclass(frozen=True)
class Access:
    gid: Optional[int] = None  # the group that may read too

    @property
    def file_mode(self) -> int:
        return 0o640 if self.gid is not None else 0o600

    @property
    def dir_mode(self) -> int:
        return 0o750 if self.gid is not None else 0o700

    def open(self, path: Path, flags: int) -> int:
        """``os.open`` creating with this access (an existing file is brought to it too)."""
        fd = os.open(path, flags, self.file_mode)
        try:
            self._apply(fd, self.file_mode)
        except OSError:
            os.close(fd)
            raise
        return fd

    def mkdir(self, path: Path) -> None:
        path.mkdir(mode=self.dir_mode)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self._apply(fd, self.dir_mode)  # mkdir's mode passes through the umask
        finally:
            os.close(fd)

    def write_text(self, path: Path, text: str) -> None:
        fd = self.open(path, NEW_FILE)
        with os.fdopen(fd, "w") as file:
            file.write(text)

    def _apply(self, fd: int, mode: int) -> None:
        if self.gid is not None:
            os.fchown(fd, -1, self.gid)
        os.fchmod(fd, mode)


PRIVATE = Access()


def access_for(group: Optional[str]) -> Access:
    """``--group NAME`` (or a numeric gid): one line when it names no group on this machine."""
    if group is None:
        return PRIVATE
    try:
        gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise DltopError(f"--group {group}: no such group on this machine") from None
    if os.geteuid() != 0 and gid != os.getegid() and gid not in os.getgroups():
        raise DltopError(f"--group {group}: you are not in it, so its files cannot be given to it")
    return Access(gid)


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
