"""Why py-spy may not attach, and the exact fix for this machine (docs/how-it-works.md#permissions).

py-spy needs ptrace rights over the job: the same user (and Yama's ptrace_scope allowing it),
or CAP_SYS_PTRACE. ``stacks_fix`` is pure so every situation is unit-tested; ``facts`` reads
this machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from dltop.collect import procfs

CAP_SYS_PTRACE = 19
_CONTAINER_MARKERS = ("docker", "kubepods", "containerd", "libpod", "lxc")


@dataclass(frozen=True)
class PtraceFacts:
    my_uid: int
    target_uid: Optional[int]
    target_user: Optional[str]
    has_cap_sys_ptrace: bool
    ptrace_scope: Optional[int]  # None: no Yama
    in_container: bool


def facts(target_pid: int) -> PtraceFacts:
    target_uid = procfs.owner_uid(target_pid)
    user = procfs.user_name(target_uid) if target_uid is not None else None
    return PtraceFacts(os.geteuid(), target_uid, user, _has_cap_sys_ptrace(), _ptrace_scope(), _in_container())


def stacks_fix(f: PtraceFacts, pid: int) -> str:
    """One sentence: what to change so py-spy may read this job's stacks."""
    sudo = f"run `sudo dltop --pid {pid}`"
    if f.ptrace_scope == 3:
        return "kernel.yama.ptrace_scope is 3, which forbids ptrace until reboot: stacks cannot be read here"
    if f.my_uid != 0 and not f.has_cap_sys_ptrace:
        if f.target_uid is not None and f.target_uid != f.my_uid:
            return f"the job runs as {f.target_user}: run dltop as that user, or {sudo}"
        if f.ptrace_scope == 1:
            return (
                f"kernel.yama.ptrace_scope is 1 (only a parent may trace): {sudo}, or allow it with"
                " `sudo sysctl kernel.yama.ptrace_scope=0` (until reboot)"
            )
        if f.ptrace_scope == 2:
            return f"kernel.yama.ptrace_scope is 2 (only CAP_SYS_PTRACE may trace): {sudo}"
    if not f.has_cap_sys_ptrace and f.in_container:
        return (
            "this container lacks CAP_SYS_PTRACE: restart it with `docker run --cap-add SYS_PTRACE` "
            "(Kubernetes: securityContext.capabilities.add: [SYS_PTRACE])"
        )
    return f"py-spy was refused ptrace access: {sudo}"


def _has_cap_sys_ptrace() -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
    except (OSError, ValueError):
        pass
    return False


def _ptrace_scope() -> Optional[int]:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return None


def _in_container() -> bool:
    if Path("/.dockerenv").exists() or Path("/run/.containerenv").exists() or "KUBERNETES_SERVICE_HOST" in os.environ:
        return True
    try:
        return any(marker in Path("/proc/1/cgroup").read_text() for marker in _CONTAINER_MARKERS)
    except OSError:
        return False
