"""Open files: a process of the job near its open-file limit (fd-near-limit). At the limit torch
fails with 'Too many open files': shared-memory batch tensors passed by fd pile up, or a dataset
leaves its files open; which of the two decides the fix."""

from __future__ import annotations

from dltop.diagnose.window import Window
from dltop.model import Finding
from dltop.model.findings import FD_NEAR_LIMIT
from dltop.settings import Settings


def fd_near_limit(window: Window, settings: Settings) -> list[Finding]:
    latest = window.latest
    findings = []
    for proc in latest.processes:
        if not proc.num_fds or not proc.fd_limit or proc.num_fds < settings.fd_limit_share * proc.fd_limit:
            continue
        kinds = proc.fd_kinds or {}
        shm, files = kinds.get("shm", 0), kinds.get("file", 0)
        share = 100 * proc.num_fds / proc.fd_limit
        if shm >= files:
            what = f"{shm} of them shared-memory batch tensors (/dev/shm/torch_*, deleted)"
            fix = (
                "torch.multiprocessing.set_sharing_strategy('file_system') at the top of the training script "
                f"(tensors then travel by name, not by fd), or raise the limit: `ulimit -n {proc.fd_limit * 4}`"
            )
        else:
            what = f"{files} of them regular files"
            fix = (
                "Close files after reading each sample (`with open(...)`), or open each file once per worker "
                "in worker_init_fn and reuse it; raise the limit only if the dataset truly needs that many"
            )
        findings.append(
            Finding(
                id=FD_NEAR_LIMIT,
                severity="error" if share >= settings.fd_error_share * 100 else "warning",
                title=f"{proc.role.capitalize()} {proc.pid} uses {share:.0f}% of its open-file limit",
                detail=f"{proc.num_fds} open fds of a soft limit of {proc.fd_limit}: {what}. At the limit torch "
                "fails with 'Too many open files' (received 0 items of ancdata).",
                pids=[proc.pid],
                evidence={"pid": proc.pid, "num_fds": proc.num_fds, "fd_limit": proc.fd_limit, "fd_kinds": kinds},
                suggestion=fix,
                impact=share / 100,
            )
        )
    return findings
