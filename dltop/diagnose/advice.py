"""Advice: DataLoader settings that waste time or resources, each with the change to paste.

Pure rules over a window of Snapshots (newest last); thresholds in ``Settings``.
"""

from __future__ import annotations

import math

from dltop.diagnose.settings import Settings
from dltop.frames import user_frame
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
        workers = loader.num_workers  # 0 between epochs when the setting was not read yet: wait
        if not workers or loader.persistent_workers is not False:
            continue
        if loader.worker_respawns < workers * settings.respawn_epochs:
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


def pin_memory(window: list, settings: Settings) -> list:
    """Pinned host memory makes host-to-GPU copies async; it only helps a job that uses a GPU."""
    latest: Snapshot = window[-1]
    on_gpu = {p.pid for gpu in latest.gpus for p in gpu.processes}
    findings = []
    for loader in latest.loaders:
        uses_gpu = loader.trainer_pid in on_gpu
        if uses_gpu and loader.pin_memory is False:
            findings.append(
                _pin_finding(
                    loader,
                    "info",
                    "Batches are not pinned although the trainer uses a GPU",
                    "Without pin_memory each host-to-GPU copy is synchronous and staged through a bounce "
                    "buffer; pinned batches copy asynchronously while the GPU computes.",
                    f"{_loader_call(loader, pin_memory=True)}  # and batch.to(device, non_blocking=True)",
                )
            )
        elif loader.pin_memory and not uses_gpu and latest.gpu_status == "ok":
            findings.append(
                _pin_finding(
                    loader,
                    "warning",
                    "pin_memory=True but the trainer uses no GPU",
                    "A pin-memory thread copies every batch into page-locked memory that nothing reads "
                    "asynchronously: CPU time and locked RAM for nothing.",
                    _loader_call(loader, pin_memory=False),
                )
            )
    return findings


def _pin_finding(loader: LoaderSample, severity: str, title: str, detail: str, suggestion: str) -> Finding:
    return Finding(
        id="pin-memory",
        severity=severity,
        title=title,
        detail=detail,
        pids=[loader.trainer_pid],
        evidence={"trainer_pid": loader.trainer_pid, "pin_memory": loader.pin_memory},
        suggestion=suggestion,
    )


BUSY = ("fetching", "collating", "sending", "stuck")


def input_bound(window: list, settings: Settings) -> list:
    """The trainer waits for data: how many workers would keep up, from a model, within the caps.

    With data-wait share W and N workers busy a share u of the time, producing at the rate the
    trainer consumes, the trainer's own time per batch is (1 - W) of it; workers needed to keep up
    with that alone: N * u / (1 - W) (num_workers=0: W / (1 - W), the fetch then runs in the
    trainer). Capped by the CPUs the job may use (minus what the trainers use), by memory (the
    workers' private memory), and not raised at all when a disk the job reads is saturated.
    """
    latest: Snapshot = window[-1]
    findings = []
    for loader in latest.loaders:
        spent = loader.trainer_time
        if spent is None or spent.samples < settings.min_stack_samples or loader.data_wait_percent is None:
            continue
        wait = loader.data_wait_percent / 100
        if wait * 100 < settings.input_bound_percent:
            continue
        findings.append(_input_bound_finding(window, latest, loader, wait, settings))
    return findings


def _input_bound_finding(window: list, latest: Snapshot, loader: LoaderSample, wait: float, settings: Settings):
    pids = set(loader.worker_pids)
    workers = max(loader.num_workers, len(pids))
    busy, cpu, uss = _worker_figures(window, pids)
    needed = math.ceil(round((workers * busy if workers else 1) / max(1 - wait, 0.05) * settings.workers_headroom, 6))
    caps = _caps(latest, loader, busy, cpu, uss)
    suggested = max(workers, min([needed, *caps.values()]))
    binding = min(caps, key=caps.get) if caps and min(caps.values()) < needed else None
    hot = _hottest_user_frame(window, pids or {loader.trainer_pid})
    evidence = {
        "trainer_pid": loader.trainer_pid,
        "data_wait_percent": round(wait * 100, 1),
        "num_workers": workers,
        "worker_busy_percent": round(busy * 100, 1),
        "worker_cpu_percent": round(cpu * 100, 1),
        "workers_needed": needed,
        "caps": caps,
        "hottest_user_frame": hot,
    }
    if suggested > workers:
        limit = f" (capped by {binding})" if binding else ""
        suggestion = f"{_loader_call(loader, num_workers=suggested)}  # from {workers}{limit}"
    elif binding == "disk":
        suggestion = "More workers will not help: the disk is saturated (see disk-saturated)."
    else:
        suggestion = (
            f"More workers will not fit ({binding or 'model'} limit): make each sample cheaper"
            + (f", starting with {hot}" if hot else "")
            + " (decode smaller images, cache preprocessed samples, move augmentation to the GPU)."
        )
    return Finding(
        id="input-bound",
        severity="warning" if wait * 100 >= settings.input_bound_warning_percent else "info",
        title=f"Trainer {loader.trainer_pid} waits for data {wait * 100:.0f}% of the time",
        detail=f"{workers} worker(s), busy {busy * 100:.0f}% of the time; keeping up would take about {needed}"
        f" worker(s).",
        pids=[loader.trainer_pid],
        evidence=evidence,
        suggestion=suggestion,
    )


def _worker_figures(window: list, pids: set) -> tuple:
    """(busy share, CPU share of a core, USS bytes) per worker, averaged over the window."""
    activities = [p.activity for snap in window for p in snap.processes if p.pid in pids and p.activity != "unknown"]
    cpus = [p.cpu_percent / 100 for snap in window[1:] for p in snap.processes if p.pid in pids and p.cpu_percent]
    uss = [p.uss_bytes for p in window[-1].processes if p.pid in pids and p.uss_bytes]
    cpu = sum(cpus) / len(cpus) if cpus else 0.0
    busy = sum(a in BUSY for a in activities) / len(activities) if activities else min(1.0, cpu)
    return busy, cpu, (sum(uss) / len(uss) if uss else 0)


def _caps(latest: Snapshot, loader: LoaderSample, busy: float, cpu: float, uss: float) -> dict:
    caps = {}
    system = latest.system
    if system is not None and busy > 0 and cpu / busy > 0.05:
        trainers = sum((p.cpu_percent or 0) / 100 for p in latest.processes if p.role == "trainer")
        caps["cpus"] = max(1, math.floor((system.cpus_allowed - trainers) / (cpu / busy)))
    if system is not None and uss:
        caps["memory"] = len(loader.worker_pids) + math.floor(0.5 * system.mem_available_bytes / uss)
    if any(d.used_by_job and d.util_percent >= 90 for d in latest.disks):
        caps["disk"] = loader.num_workers
    return caps


def _hottest_user_frame(window: list, pids: set):
    counts: dict = {}
    for snap in window:
        for p in snap.processes:
            if p.pid in pids and p.stack:
                frame = user_frame(p.stack)
                if frame is not None:
                    counts[frame.where()] = counts.get(frame.where(), 0) + 1
    return max(counts, key=counts.get) if counts else None
