"""A twin of a loader for ``dltop bench`` (the TUI's ``b`` key): what dltop measured of the job,
as arguments that replay it, current settings against a suggested change."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from dltop.diagnose.figures import WorkerFigures
from dltop.diagnose.knobs import is_dataloader
from dltop.model import LoaderSample

TWIN_STEP_MS = 20.0
MIN_STEP_CPU_MS = 0.1  # less of the trainer's own CPU per twin step is left out (the twin's own loop costs that)


def bench_args(
    loader: LoaderSample, figures: WorkerFigures, wait: float, trainer_cpu: float, **changes: object
) -> Optional[list[str]]:
    """``dltop bench`` arguments that replay this loader on a twin, current settings vs ``changes``;
    None for another pipeline than a DataLoader (the twin is one).

    The twin keeps what dltop measured as ratios, scaled to a 20 ms step (the absolute batch rate
    is not known): per batch, the trainer's own time S and the workers' time N * working * S / (1 - W),
    split into CPU and waiting as the workers' CPU share says (without workers: the trainer's own
    loading, W * S / (1 - W), as CPU as far as the trainer's CPU goes), spread over the batch's real
    size when a worker showed it. The step computes on CPU when the trainer did, with as many threads as
    the cores it kept busy while running (its intra-op threads compete with the workers, as in the
    job), else sleeps (a GPU step) after spending the share of it the trainer spent on its own CPU
    (receiving batches, the loop's Python): on a few cores that share is what the workers lack.
    """
    if not is_dataloader(loader):
        return None
    workers = loader.num_workers
    running = max(1 - wait, 0.05)  # the trainer's share of the period outside next()
    loading, cpu_share, step_cpu = _loading(workers, figures, wait, trainer_cpu)
    batch_ms = loading * TWIN_STEP_MS / running
    step = _step(step_cpu / running)
    size = loader.batch_size or 1
    current = {"num_workers": workers, "persistent_workers": loader.persistent_workers, "pin_memory": loader.pin_memory}
    proposed = {**current, **changes}
    return [
        "--workload",
        f"twin:cpu_ms={batch_ms * cpu_share / size:.4g},io_ms={batch_ms * (1 - cpu_share) / size:.4g},sample_kb=4",
        "--batch-size",
        str(size),
        "--step-ms",
        f"{TWIN_STEP_MS:g}",
        *step,
        "--compare",
        _bench_config(current),
        _bench_config(proposed),
    ]


def _loading(workers: int, figures: WorkerFigures, wait: float, trainer_cpu: float) -> tuple[float, float, float]:
    """(the loading's time per batch over the period, its CPU share, the trainer's cores outside it).
    Without workers the trainer loads inside next(): its CPU goes to the loading first (a GPU job's
    step costs the host little), the rest to its step."""
    if workers:
        cpu_share = min(1.0, figures.cpu / figures.working) if figures.working else 1.0
        return workers * figures.working, cpu_share, trainer_cpu
    cpu_share = min(1.0, trainer_cpu / wait) if wait else 1.0
    return wait, cpu_share, max(0.0, trainer_cpu - wait * cpu_share)


def _step(running_cores: float) -> list[str]:
    """The step's arguments for a trainer that kept ``running_cores`` busy while not waiting for data:
    compute on that many threads when it computed, else wait with its own CPU share spent first."""
    if running_cores > 0.5:
        return ["--step-kind", "cpu", "--step-threads", str(max(1, round(running_cores)))]
    cpu_ms = running_cores * TWIN_STEP_MS
    return ["--step-cpu-ms", f"{cpu_ms:.2g}"] if cpu_ms >= MIN_STEP_CPU_MS else []


def _bench_config(settings: Mapping[str, object]) -> str:
    """'num_workers=4,persistent_workers=True' (dltop.bench.config syntax; unknown settings left out)."""
    return ",".join(f"{k}={v}" for k, v in settings.items() if v is not None and (k == "num_workers" or
                                                                                 settings["num_workers"]))  # fmt: skip
