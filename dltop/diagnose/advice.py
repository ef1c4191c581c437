"""Advice: DataLoader settings that waste time or resources, each with the change to paste.

Pure rules over a window of Snapshots (newest last); thresholds in ``Settings``.
"""

from __future__ import annotations

from dltop.diagnose.settings import Settings
from dltop.model import Finding, LoaderSample, Snapshot


def fd_near_limit(window: list, settings: Settings) -> list:
    latest: Snapshot = window[-1]
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
                id="fd-near-limit",
                severity="error" if share >= 95 else "warning",
                title=f"{proc.role.capitalize()} {proc.pid} uses {share:.0f}% of its open-file limit",
                detail=f"{proc.num_fds} open fds of a soft limit of {proc.fd_limit}: {what}. At the limit torch "
                "fails with 'Too many open files' (received 0 items of ancdata).",
                pids=[proc.pid],
                evidence={"pid": proc.pid, "num_fds": proc.num_fds, "fd_limit": proc.fd_limit, "fd_kinds": kinds},
                suggestion=fix,
            )
        )
    return findings


def workers_respawning(window: list, settings: Settings) -> list:
    latest: Snapshot = window[-1]
    findings = []
    for loader in latest.loaders:
        workers = max(loader.num_workers, 1)
        if loader.persistent_workers is not False or loader.worker_respawns < workers * settings.respawn_epochs:
            continue
        spent = loader.trainer_time
        startup = spent.starting_workers_percent if spent else None
        cost = f" Starting workers took {startup:.1f}% of the trainer's time." if startup is not None else ""
        findings.append(
            Finding(
                id="workers-respawning",
                severity="warning" if startup is not None and startup >= settings.respawn_cost_percent else "info",
                title=f"DataLoader workers of trainer {loader.trainer_pid} are restarted every epoch",
                detail=f"{loader.worker_respawns} worker processes replaced so far ({loader.start_method} start: each"
                f" epoch pays process start-up, dataset pickling and worker_init_fn again).{cost}",
                pids=[loader.trainer_pid],
                evidence={
                    "trainer_pid": loader.trainer_pid,
                    "respawns": loader.worker_respawns,
                    "num_workers": loader.num_workers,
                    "start_method": loader.start_method,
                    "starting_workers_percent": startup,
                },
                suggestion=f"{_loader_call(loader, persistent_workers=True)}  # workers live across epochs",
            )
        )
    return findings


def _loader_call(loader: LoaderSample, **changes: object) -> str:
    """A paste-ready DataLoader(...) line with what is known of the current settings and the change."""
    settings = {"num_workers": loader.num_workers or None, "persistent_workers": loader.persistent_workers}
    if loader.pin_memory is not None:
        settings["pin_memory"] = loader.pin_memory
    settings.update(changes)
    dataset = (loader.dataset or "dataset")[:1].lower() + (loader.dataset or "dataset")[1:]
    args = ", ".join(f"{k}={v!r}" for k, v in settings.items() if v is not None)
    return f"DataLoader({dataset}, ..., {args})"
