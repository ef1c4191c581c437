"""Advice: input pipeline settings that waste time or resources, each with the change to paste
in the pipeline's own words (``knobs``): DataLoader's settings are advised on DataLoaders alone.

Pure rules over a window of Snapshots (newest last); thresholds in ``Settings``; the worker
counts all come from one model (``capacity.py``), so input-bound, too-many-workers and
cpu-oversubscribed never contradict each other.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime
from typing import Optional

from dltop.diagnose.capacity import Capacity, capacities, starved_wait
from dltop.diagnose.figures import input_bound_wait, loader_change, wait_error
from dltop.diagnose.knobs import count_keyword, is_dataloader, on_threads, thread_unit
from dltop.diagnose.threads import hot_thread_frame
from dltop.diagnose.twin import bench_args
from dltop.diagnose.window import Window
from dltop.frames import costly_frame
from dltop.model import Finding, LoaderSample, Severity, Snapshot, gpus_read
from dltop.model.findings import (
    DISK_SATURATED,
    GIL_BOUND,
    INPUT_BOUND,
    PIN_MEMORY,
    TOO_MANY_WORKERS,
    WORKERS_RESPAWNING,
)
from dltop.settings import Settings
from dltop.units import human_bytes


def workers_respawning(window: Window, settings: Settings) -> list[Finding]:
    latest = window.latest
    findings = []
    for loader in latest.loaders:
        workers = loader.num_workers  # the most seen alive at once until a worker's settings are read
        if not workers or loader.persistent_workers is not False or not is_dataloader(loader):
            continue
        if loader.worker_respawns < workers * settings.respawn_epochs:
            continue
        spent = loader.trainer_time
        startup = spent.starting_workers_percent if spent else None
        cost = (
            f" The trainer spent {startup:.0f}% of its time starting (and stopping) them, waiting for each"
            " epoch's first batches."
            if startup is not None
            else ""
        )
        findings.append(
            Finding(
                id=WORKERS_RESPAWNING,
                severity="warning" if startup is not None and startup >= settings.respawn_cost_percent else "info",
                title=f"DataLoader workers of trainer {loader.trainer_pid} are restarted every epoch"
                + (f": start-up takes {startup:.0f}% of its time" if startup is not None else ""),
                detail=f"At least {loader.worker_respawns} worker processes replaced so far (workers that live less"
                f" than a tick go unseen; {loader.start_method} start: each epoch pays process start-up, dataset"
                f" pickling and worker_init_fn again).{cost}",
                pids=[loader.trainer_pid],
                evidence={
                    "trainer_pid": loader.trainer_pid,
                    "respawns": loader.worker_respawns,
                    "num_workers": loader.num_workers,
                    "start_method": loader.start_method,
                    "starting_workers_percent": startup,
                    "change": {"persistent_workers": True},
                },
                suggestion=loader_change(loader, persistent_workers=True),
                impact=(startup or 0.0) / 100,
            )
        )
    return findings


def pin_memory(window: Window, settings: Settings) -> list[Finding]:
    """Pinned host memory makes host-to-GPU copies async; it only helps a job that uses a GPU."""
    latest = window.latest
    on_gpu = {p.pid for gpu in latest.gpus for p in gpu.processes}
    findings = []
    for loader in filter(is_dataloader, latest.loaders):
        uses_gpu = loader.trainer_pid in on_gpu
        if uses_gpu and loader.pin_memory is False:
            findings.append(
                _pin_finding(
                    loader,
                    "info",
                    "Batches are not pinned although the trainer uses a GPU",
                    "Without pin_memory each host-to-GPU copy is synchronous and staged through a bounce "
                    "buffer; pinned batches copy asynchronously while the GPU computes.",
                    f"{loader_change(loader, pin_memory=True)}; and batch.to(device, non_blocking=True)",
                )
            )
        elif loader.pin_memory and not uses_gpu and gpus_read(latest.gpu_status):
            findings.append(
                _pin_finding(
                    loader,
                    "warning",
                    "pin_memory=True but the trainer uses no GPU",
                    "A pin-memory thread copies every batch into page-locked memory that nothing reads "
                    "asynchronously: CPU time and locked RAM for nothing.",
                    loader_change(loader, pin_memory=False),
                )
            )
    return findings


def _pin_finding(loader: LoaderSample, severity: Severity, title: str, detail: str, suggestion: str) -> Finding:
    return Finding(
        id=PIN_MEMORY,
        severity=severity,
        title=title,
        detail=detail,
        pids=[loader.trainer_pid],
        evidence={"trainer_pid": loader.trainer_pid, "pin_memory": loader.pin_memory},
        suggestion=suggestion,
        impact=0.02,
    )


def input_bound(window: Window, settings: Settings) -> list[Finding]:
    """The trainer waits for data (``starved_wait``): how many workers would keep up (capacity.py's
    model), or, when the CPUs bind, what frees them."""
    return [
        _input_bound_finding(window, cap, wait, settings)
        for cap in capacities(window, settings)
        if (wait := starved_wait(cap)) is not None
    ]


def _input_bound_finding(window: Window, cap: Capacity, wait: float, settings: Settings) -> Finding:
    loader, workers = cap.loader, cap.workers
    pids = set(loader.worker_pids) or {loader.trainer_pid}
    hot = hot_thread_frame(window, loader) if on_threads(loader) else _costly_frame(window, pids)
    suggested, binding, prediction, spent = cap.suggested, cap.binding, cap.prediction, loader.trainer_time
    detail, suggestion, change, replay = _input_bound_advice(cap, wait, hot, suggested, binding, cap.trainer_threads())
    return Finding(
        id=INPUT_BOUND,
        severity="warning" if wait * 100 >= settings.input_bound_warning_percent else "info",
        title=f"Trainer {loader.trainer_pid} waits for data {wait * 100:.0f}% of the time"
        f" (±{(wait_error(loader) or 0) * 100:.0f})",
        detail=detail,
        pids=[loader.trainer_pid],
        evidence={
            "trainer_pid": loader.trainer_pid,
            "dataset": loader.dataset,
            "pipeline": loader.pipeline,
            "data_wait_percent": round(wait * 100, 1),
            "receiving_percent": round(cap.receiving * 100, 1),
            "data_wait_error_percent": round((wait_error(loader) or 0.0) * 100, 1),
            "above_line": input_bound_wait(loader, settings) is not None,
            "samples": loader.trainer_time.samples if loader.trainer_time else None,
            "starting_workers_percent": loader.trainer_time.starting_workers_percent if loader.trainer_time else None,
            "num_workers": workers,
            "worker_busy_percent": round(cap.figures.busy * 100, 1),
            "worker_busy_error_percent": round(cap.figures.busy_error * 100, 1),
            "worker_cpu_percent": round(cap.figures.cpu * 100, 1),
            "workers_needed": cap.needed,
            "suggested_workers": suggested,
            "suggested_range": list(cap.suggested_range) if cap.suggested_range else None,
            "change_reason": change_reason(cap),
            "speedup_by_pace": _round(cap.speedup_pace),
            "speedup_by_cpus": _round(cap.speedup_cpus),
            "cpus_allowed": cap.cpus_allowed,
            "job_cpu": _round(cap.job_cpu),
            "trainer_threads_cpu": round(cap.trainer_threads_cpu, 2),
            "caps": cap.caps,
            "binding": binding,
            "predicted_speedup": _round(prediction.speedup if prediction else None),
            "predicted_speedup_low": _round(prediction.low if prediction else None),
            "predicted_speedup_high": _round(prediction.high if prediction else None),
            "queueing_loss_percent": _round(cap.queueing_loss * 100 if cap.queueing_loss is not None else None),
            "data_wait_effective_samples": _round(spent.effective_samples if spent else None),
            "provisional": cap.too_uncertain,
            "dataset_kind": loader.dataset_kind,
            "parts": cap.caps.get("parts"),
            "needs": cap.missing,
            "hottest_user_frame": hot,
            "change": change,
        },
        suggestion=suggestion,
        bench_args=replay,
        impact=wait,
    )


def _input_bound_advice(
    cap: Capacity,
    wait: float,
    hot: Optional[str],
    suggested: Optional[int],
    binding: Optional[str],
    threads: Optional[int],
) -> tuple[str, str, Optional[dict[str, int]], Optional[list[str]]]:
    """(detail, suggestion, change, bench args): one story, its sentences agreeing with its figures."""
    loader, workers, unit = cap.loader, cap.workers, thread_unit(cap.loader)
    if workers:
        now = f"{workers} {unit}, each busy {cap.figures.busy * 100:.0f}% of the time"
    else:
        now = f"num_workers=0: the trainer fetches every batch itself, {wait * 100:.0f}% of its time"
    if cap.missing is not None:
        return (f"{now}. dltop cannot size num_workers yet: it needs {cap.missing}.",
                f"Not enough evidence for a number yet: dltop needs {cap.missing}.", None, None)  # fmt: skip
    limit = f"{_cpus_named(cap)} stop" if cap.limited_by_cpus else "its own pace stops"
    reach = f"{now}. The trainer could run {(cap.speedup or 1.0):.2f}x faster before {limit} it"
    if binding == "disk":
        return (f"{reach}, but the disk it reads is saturated.",
                f"More workers will not help: the disk is saturated (see {DISK_SATURATED}).", None, None)  # fmt: skip
    if binding == "gil":
        return (f"{reach}, but its threads' Python work fills the one core their GIL allows.",
                f"More threads will not help: they share one GIL (see {GIL_BOUND}).", None, None)  # fmt: skip
    more = suggested if suggested is not None and suggested > workers else None  # the workers to ask for
    reshard = _reshard(cap) if binding == "parts" else None
    parts, change = _changes(cap, more, threads, reshard)
    if more is not None:
        detail = f"{reach}: {_more_workers_story(cap, wait, more, binding)}{_provisional(cap)}"
        replay = bench_args(loader, cap.figures, wait, cap.trainer_cpu, num_workers=more)
    else:
        detail, replay = f"{reach}; {_no_more_story(cap, binding, threads is not None)}", None
    if more is None and reshard is None:
        parts.append(
            "make each sample cheaper" + (f", starting with {hot}" if hot else "")
            + " (decode smaller images, cache preprocessed samples, move augmentation to the GPU)"
        )  # fmt: skip
    span = cap.suggested_range
    unsettled = f" (provisional: any of {span[0]}-{span[1]} fits so far)" if more and span and cap.too_uncertain else ""
    return detail, "; then ".join(parts) + unsettled, change or None, replay


def _no_more_story(cap: Capacity, binding: Optional[str], threads_cut: bool) -> str:
    """Why no more workers are asked for: they would not help, or not surely enough to tell."""
    unit = thread_unit(cap.loader)
    what = f"{binding} limit" if binding not in (None, "pace") else "no more are needed at this pace"
    predicted = _predicted(cap) if threads_cut else ""  # what freeing the threads' CPUs gives
    best = cap.best_interval
    if best is not None and not cap.best_surely_helps and best.speedup > 1 + cap.settings.same_pace_share:
        return (f"more {unit} could reach {_times(best.speedup)} at best ({_times(best.low)}-{_times(best.high)}),"
                f" too close to its pace now to be sure of a gain, so no other count is asked for"
                f" ({what}).{predicted}")  # fmt: skip
    return f"{cap.needed} {unit} would do, so more will not help ({what}).{predicted}"


# what sets the best pace the model sees, as a sentence names it
BINDS = {
    "pace": "the trainer's own pace",
    "cpus": "the CPUs the job may use",
    "parts": "the source's parts",
    "memory": "the memory free for more workers",
    "disk": "the disk it reads",
    "gil": "the GIL its threads share",
}


def _provisional(cap: Capacity) -> str:
    """Where the counts at the inputs' errors lie more than a preferred step apart, the count is the
    model's best guess, not yet one answer: the range that fits, and how long a window settles it."""
    if not cap.too_uncertain or cap.suggested_range is None:
        return ""
    low, high = cap.suggested_range
    more, spent = cap.settled_in_s(), cap.loader.trainer_time
    read = (f" ({spent.window_s:.0f} s of samples read the wait ±{(wait_error(cap.loader) or 0) * 100:.0f} points)"
            if spent and spent.window_s else "")  # fmt: skip
    total = spent.window_s + more if more is not None and spent and spent.window_s else None
    settle = (f"; about {total:.0f} s of samples settle one count (dltop snapshot --duration {math.ceil(total)})"
              if total is not None else "")  # fmt: skip
    return f" Provisional: any of {low}-{high} fits the figures so far{read}{settle}."


def _changes(
    cap: Capacity, more: Optional[int], threads: Optional[int], reshard: Optional[str]
) -> tuple[list[str], dict[str, int]]:
    """(the changes in words, as data), in the order to make them: the trainer's intra-op threads
    first where they take the workers' CPUs, then the workers, then the source's parts."""
    parts: list[str] = []
    change: dict[str, int] = {}
    if threads is not None:
        parts.append(
            f"OMP_NUM_THREADS={threads} for the trainer (or torch.set_num_threads({threads})): its intra-op"
            f" threads use {cap.trainer_threads_cpu:.1f} of the {cap.cpus_allowed:g} CPUs its workers need"
        )
        change["OMP_NUM_THREADS"] = threads
    if more is not None:
        parts.append(loader_change(cap.loader, num_workers=more) + _across_ranks(cap, more))
        change[count_keyword(cap.loader)] = more
    if reshard is not None:
        parts.append(reshard)
    return parts, change


def _more_workers_story(cap: Capacity, wait: float, more: int, binding: Optional[str]) -> str:
    """Why ``more`` workers: how busy each would be, the range that fits the wait's noise, whether
    they wait on I/O (so more of them than CPUs fit), the parts they need, and what it said before."""
    workers, speedup, unit = cap.workers, cap.speedup or 1.0, thread_unit(cap.loader)
    who = f"Its {unit.removesuffix('(s)')}s" if workers else "The fetch"
    io = f" {who} mostly wait (storage, network) rather than compute, so more of them than CPUs fit." if (
        cap.io_bound_workers and more > (cap.cpus_per_rank or more)) else ""  # fmt: skip
    capped = f" (capped by {binding})" if binding not in (None, "pace") else ""
    pace = cap.prediction.speedup if cap.prediction is not None else speedup
    each = cap.each_busy(pace, more, wait)
    shared = (" Threads share one GIL: this holds while their Python work stays under a core."
              if on_threads(cap.loader) else "")  # fmt: skip
    return (f"that takes about {more} {unit}{capped}{_within(cap)}, each busy about"
            f" {each * 100:.0f}%.{_predicted(cap)}{io}{shared}{_parts_needed(cap, more)}{_since(cap)}")  # fmt: skip


def _predicted(cap: Capacity) -> str:
    """The pace the count predicts, with its interval and what binds it."""
    prediction, binding = cap.prediction, cap.binding
    if prediction is None or binding is None:
        return ""
    bound = _cpus_named(cap) if binding == "cpus" else BINDS[binding]
    # with num_workers=0 no batch crosses processes yet: what receiving one costs the trainer is unseen
    unseen = (" At most: workers hand each batch over through shared memory, a cost to the trainer dltop sees"
              " only once they run." if not cap.workers and not on_threads(cap.loader) else "")  # fmt: skip
    # fewer intra-op threads free at most all they use: their useful work moves to the main thread
    freed = (f" At most: it counts all {cap.threads_freed:.1f} cores the trainer's intra-op threads use as"
             " freed for the workers." if cap.threads_freed else "")  # fmt: skip
    loss = cap.queueing_loss or 0.0
    queued = (f" That counts the wait for a CPU the job's processes, busier, would bring one another: {loss * 100:.0f}%"
              " of the pace the CPUs alone would allow." if loss >= cap.settings.same_pace_share else "")  # fmt: skip
    return (f" Predicted: {_times(prediction.speedup)} ({_times(prediction.low)}-{_times(prediction.high)}) its"
            f" pace now, bound by {bound}; more would be within the figures' error of it."
            f"{queued}{unseen}{freed}")  # fmt: skip


def _cpus_named(cap: Capacity) -> str:
    """The CPUs that bind, with what other processes keep of them where that is a share worth saying."""
    allowed, free = cap.cpus_allowed or 0.0, cap.cpus_free or 0.0
    if allowed - free < cap.settings.others_cpu_worth_saying:
        return BINDS["cpus"]
    return f"the CPUs free for the job ({allowed:g} it may use, {allowed - free:.1f} kept by other processes)"


def _times(speedup: float) -> str:
    return f"{speedup:.2f}x" if speedup < 10 else f"{speedup:.1f}x"


def _across_ranks(cap: Capacity, per_rank: int) -> str:
    """Every rank on the node runs the same line: the count asked for, times the ranks, on the
    CPUs they share."""
    if cap.ranks < 2:
        return ""
    cpus = f" on {cap.cpus_allowed:g} CPUs" if cap.cpus_allowed else ""
    return f" ({per_rank} per rank x {cap.ranks} ranks = {per_rank * cap.ranks} workers{cpus})"


def _parts_needed(cap: Capacity, workers: int) -> str:
    """An iterable source whose parts dltop could not count: the count holds only if there are enough."""
    loader = cap.loader
    if loader.dataset_kind != "iterable" or "parts" in cap.caps:
        return ""
    seen = (f" Its workers were seen reading {loader.parts_read} of the {loader.parts_source} so far: it has at"
            " least that many parts, and all of them if it reads the whole folder." if loader.parts_read is not None
            else "")  # fmt: skip
    return (f" An IterableDataset gives each worker its own part of the source (shards, files): {workers}"
            f" workers need at least {workers} parts, or the extra ones get nothing (webdataset stops the"
            f" job).{seen}")  # fmt: skip


def _reshard(cap: Capacity) -> Optional[str]:
    """The parts of an iterable source bind: more, smaller shards let more workers read at once."""
    parts = cap.caps["parts"]
    want = min([cap.needed or parts, *(v for k, v in cap.caps.items() if k != "parts")])
    if want <= parts:
        return None
    how = f" ({cap.parts_source})" if cap.parts_source else ""
    return (f"re-shard the source into at least {want} parts (it has {parts}{how}: workers beyond the parts get"
            f" nothing), then {loader_change(cap.loader, num_workers=want)}{_across_ranks(cap, want)}")  # fmt: skip


def _within(cap: Capacity) -> str:
    """The range the inputs' errors leave the count in, where it is more than one count."""
    span = cap.suggested_range
    if cap.too_uncertain:  # said with how long settles it (_provisional)
        return ""
    return f" (any of {span[0]}-{span[1]} fits the measured figures)" if span and span[0] != span[1] else ""


def _since(cap: Capacity) -> str:
    """When the count shown changed last, and why: advice that moves says so."""
    shown = cap.shown
    if shown is not None and shown.workers != cap.suggested:  # it changes now
        reason = change_reason(cap)
        return f" It said {shown.workers} until now: {reason}." if reason else ""
    if shown is None or shown.previous is None:
        return ""
    since = datetime.fromisoformat(shown.since).astimezone().strftime("%H:%M:%S")
    return f" It said {shown.previous} until {since}: {shown.because}."


def change_reason(cap: Capacity) -> Optional[str]:
    """Why the count moves from what a live view showed: the evidence left its range."""
    shown, span = cap.shown, cap.suggested_range
    if shown is None or span is None or span[0] <= shown.workers <= span[1]:
        return None
    wait = cap.loader.data_wait_percent or 0.0
    return f"{shown.workers} fell outside {span[0]}-{span[1]} when the data wait read {wait:.0f}%"


def _round(value: Optional[float]) -> Optional[float]:
    return round(value, 2) if value is not None else None


def _costly_frame(window: Window, pids: set[int]) -> Optional[str]:
    """Where the fetch spends its time, counted over the window's stacks of these processes."""
    counts: Counter[str] = Counter()
    for frames in window.per_tick(_costly_frames, frozenset(pids)):
        counts.update(frames)
    return max(counts, key=counts.__getitem__) if counts else None


def _costly_frames(snap: Snapshot, pids: frozenset[int]) -> Counter[str]:
    """Where each of these processes' stacks spends the fetch, at one tick."""
    found = (costly_frame(p.stack) for p in snap.processes if p.pid in pids and p.stack)
    return Counter(frame.where() for frame in found if frame is not None)


def too_many_workers(window: Window, settings: Settings) -> list[Finding]:
    """The trainer never waits and the workers idle: the fewest workers that still keep up.

    Same model as input-bound with W ~ 0: N workers working a share u of the time supply what
    N * u workers working flat out would, so ceil(N * u * headroom) keep up; the headroom is
    generous (1.5) because a loader must absorb slow samples, not just the mean.
    """
    findings = []
    for cap in capacities(window, settings):
        loader, workers, figures, wait = cap.loader, cap.loader.num_workers, cap.figures, cap.wait
        # idle threads hold little (the trainer's memory is theirs): fewer of them frees nothing worth advice
        if wait is None or wait * 100 >= settings.too_many_wait_percent or workers < 2 or on_threads(loader):
            continue
        # Workers that did nothing at all belong to a loader not being iterated now (a validation
        # loader between passes): nothing to judge.
        if not 0.01 <= figures.working < settings.idle_workers_percent / 100:
            continue
        suggested = max(1, math.ceil(round(workers * figures.working * settings.fewer_workers_headroom, 6)))
        if suggested >= workers:
            continue
        freed = (workers - suggested) * figures.memory
        findings.append(
            Finding(
                id=TOO_MANY_WORKERS,
                severity="info",
                title=f"{workers} workers of trainer {loader.trainer_pid} idle {100 - figures.working * 100:.0f}%"
                " of the time",
                detail=f"The trainer waits for data {wait * 100:.1f}% of the time and its workers work"
                f" {figures.working * 100:.0f}% of theirs: {suggested} would keep up"
                + (f", freeing about {human_bytes(freed)} of worker memory" if freed else "")
                + f" and {workers - suggested} process(es).",
                pids=[loader.trainer_pid],
                evidence={
                    "trainer_pid": loader.trainer_pid,
                    "data_wait_percent": round(wait * 100, 1),
                    "num_workers": workers,
                    "worker_busy_percent": round(figures.working * 100, 1),
                    "suggested_workers": suggested,
                    "memory_freed_bytes": round(freed),
                    "change": {"num_workers": suggested},
                },
                suggestion=loader_change(loader, num_workers=suggested),
                bench_args=bench_args(loader, figures, wait, cap.trainer_cpu, num_workers=suggested),
                impact=0.01,
            )
        )
    return findings
