"""A command run as PID 1 of a PID namespace of its own (`unshare --pid --fork --mount-proc`), as a
container's entrypoint runs, and dltop run inside that namespace (its processes, its /proc) as
`docker exec` or a pod's sidecar runs it. The network is the host's, so ranks of one run in two
namespaces meet over 127.0.0.1: two "nodes" on one machine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

import psutil

from tests.support import ROOT, wait_for


class Namespace:
    """``command`` as PID 1 of a new PID namespace, in a session of its own. Killing that session
    kills its init, and the kernel then kills every process left in the namespace (torchrun's
    ranks too, whatever sessions they made)."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.started: list[subprocess.Popen] = []
        with open(log, "w") as stderr:
            self.proc = subprocess.Popen(
                ["unshare", "--pid", "--fork", "--mount-proc", *command],
                start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr, cwd=ROOT,
            )  # fmt: skip

    @property
    def init_pid(self) -> int:
        """The namespace's PID 1 as the host numbers it: unshare's child."""
        return wait_for(lambda: [c.pid for c in psutil.Process(self.proc.pid).children()], 10, "the namespace")[0]

    def host_pids(self, comm: str) -> list[int]:
        """Host pids of the namespace's processes with this name (worker processes: pt_data_worker)."""
        found = [self.init_pid, *(p.pid for p in psutil.Process(self.init_pid).children(recursive=True))]
        return [p for p in found if _comm(p) == comm]

    def _enter(self, *args: str) -> list[str]:
        return ["nsenter", "-t", str(self.init_pid), "-p", "-m", sys.executable, "-m", "dltop", *args]

    def inside(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
        """dltop run inside the namespace until it ends."""
        return subprocess.run(self._enter(*args), capture_output=True, text=True, timeout=timeout, cwd=ROOT)

    def start_inside(self, *args: str, log: Path) -> subprocess.Popen:
        """dltop started inside the namespace (the exporter), stopped with the namespace."""
        with open(log, "w") as stderr:
            proc = subprocess.Popen(self._enter(*args), cwd=ROOT, start_new_session=True,
                                    stdout=subprocess.DEVNULL, stderr=stderr)  # fmt: skip
        self.started.append(proc)
        return proc

    def stop(self) -> None:
        for proc in [*self.started, self.proc]:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)


def _comm(pid: int) -> Optional[str]:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
