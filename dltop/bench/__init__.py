"""``dltop bench``: measure DataLoader configurations on a workload, or the user's own pipeline
(torchdata.nodes, SPDL, a prefetcher) at several worker counts, with a training-step stand-in
running alongside, so results show how loading overlaps compute as in training.

Only this package (and the demo job) imports torch; the monitor never does.
"""

from __future__ import annotations

import importlib.util

from dltop import install_hint

INSTALL_HINT = f"{install_hint('bench')} (it brings PyTorch; or install torch as your job has it)"

# How far a twin's ratio (``dltop bench <a finding's bench_args>``, the TUI's ``b``) was from the real
# job's ratio at the same two settings, on dltop's truth harness (tests/jobs/train.py and the
# imagenet-like job on 2 CPUs, the job's own batches/s with nothing attached, medians of alternating
# runs, 34 configurations, its last three full runs): the largest error where samples wait on I/O
# (or partly), and where they are CPU-bound (the twin's CPU competes with whatever else runs on the
# machine, at its own 20 ms step).
TWIN_WAITING_ERROR_PERCENT = 16
TWIN_CPU_ERROR_PERCENT = 28
TWIN_TRUST = (
    f"How far to trust a twin: on dltop's test jobs (2 CPUs) its ratio was within {TWIN_WAITING_ERROR_PERCENT}% of"
    f" the real job's where samples wait on I/O, and up to {TWIN_CPU_ERROR_PERCENT}% off where they are CPU-bound."
    " It reproduces each sample's CPU and waiting, the step and the trainer's own CPU; not memory traffic, a job's"
    " per-batch costs at its own pace (the twin runs a 20 ms step), an OMP_NUM_THREADS change the advice pairs with"
    " the workers (it benches the workers alone), nor what else uses the CPUs while it runs: for"
    " a CPU-bound loader take its ratio as a direction, not a number. It is built from the figures the window read:"
    " a wait misread by a short window misleads it as it does the prediction."
)


def missing_torch() -> str | None:
    """Why ``dltop bench`` cannot run here, or None: it runs DataLoaders itself, so it needs the
    torch the monitor was rightly installed without."""
    if importlib.util.find_spec("torch") is not None:
        return None
    return f"dltop bench runs DataLoaders itself and needs PyTorch, which is not installed here: {INSTALL_HINT}"
