"""A twin of a loader for ``dltop bench`` (the TUI's ``b`` key): what dltop measured of the job,
as arguments that replay it, current settings against a suggested change."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from dltop.diagnose.figures import WorkerFigures
from dltop.diagnose.knobs import is_dataloader
from dltop.model import LoaderSample

TWIN_STEP_MS = 20.0


def bench_args(
    loader: LoaderSample, figures: WorkerFigures, wait: float, trainer_cpu: float, **changes: object
) -> Optional[list[str]]:
    """``dltop bench`` arguments that replay this loader on a twin, current settings vs ``changes``;
    None for another pipeline than a DataLoader (the twin is one).

    The twin keeps what dltop measured as ratios, scaled to a 20 ms step (the absolute batch rate
    is not known): per batch, the trainer's own time S and the workers' time N * working * S / (1 - W),
    split into CPU and waiting as the workers' CPU share says, spread over the batch's real size
    when a worker showed it. The step computes on CPU when the trainer did, with as many threads as
    the cores it kept busy while running (its intra-op threads compete with the workers, as in the
    job), else sleeps (a GPU step).
    """
    if not is_dataloader(loader):
        return None
    workers = loader.num_workers
    period = TWIN_STEP_MS / max(1 - wait, 0.05)
    batch_ms = (workers * figures.working if workers else wait) * period
    cpu_share = min(1.0, figures.cpu / figures.working) if workers and figures.working else 1.0
    running_cores = trainer_cpu / max(1 - wait, 0.05)
    step = ["--step-kind", "cpu", "--step-threads", str(max(1, round(running_cores)))] if running_cores > 0.5 else []
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


def _bench_config(settings: Mapping[str, object]) -> str:
    """'num_workers=4,persistent_workers=True' (dltop.bench.config syntax; unknown settings left out)."""
    return ",".join(f"{k}={v}" for k, v in settings.items() if v is not None and (k == "num_workers" or
                                                                                 settings["num_workers"]))  # fmt: skip
