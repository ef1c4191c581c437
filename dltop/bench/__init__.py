"""``dltop bench``: measure DataLoader configurations on a workload, or the user's own pipeline
(torchdata.nodes, SPDL, a prefetcher) at several worker counts, with a training-step stand-in
running alongside, so results show how loading overlaps compute as in training.

Only this package (and the demo job) imports torch; the monitor never does.
"""

from __future__ import annotations

import importlib.util

from dltop import install_hint

INSTALL_HINT = f"{install_hint('bench')} (it brings PyTorch; or install torch as your job has it)"


def missing_torch() -> str | None:
    """Why ``dltop bench`` cannot run here, or None: it runs DataLoaders itself, so it needs the
    torch the monitor was rightly installed without."""
    if importlib.util.find_spec("torch") is not None:
        return None
    return f"dltop bench runs DataLoaders itself and needs PyTorch, which is not installed here: {INSTALL_HINT}"
