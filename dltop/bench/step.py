"""The training-step stand-in the bench runs on every batch, so loading overlaps compute as in
training: on CUDA the batch is copied with ``non_blocking=True`` and a matmul loop sized to
``step_ms`` runs; without CUDA the step sleeps (the GPU computing while the host waits) or
computes (``cpu``: a CPU-only job whose step competes with the workers for cores): one thread
spins, several run a CPU matmul loop on torch's intra-op pool, as a trainer's model does. A step
that waits on a GPU may first spend ``cpu_ms`` of the trainer's own CPU (receiving the batch, the
loop's Python), which competes with the workers for cores as the job's does."""

from __future__ import annotations

import time
from typing import Any

import torch

MATMUL_N = 1024
CPU_MATMUL_N = 128  # small enough that a step of a few ms is many matmuls (fine-grained calibration)


def to_device(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    """Any batch structure (tensors, dicts, tuples, lists, other objects left as they are)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved = [to_device(v, device, non_blocking) for v in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return batch


def count_samples(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor (1 when it holds none)."""
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor) and batch[0].dim():
        return batch[0].shape[0]  # the common (inputs, targets) batch, fast
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    values = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    for value in values:
        found = count_samples(value)
        if found:
            return found
    return 0 if values else 1


class Step:
    """Call with a batch; takes about ``step_ms``, ``cpu_ms`` of it on the trainer's CPU where the
    rest waits (sleep, CUDA)."""

    def __init__(self, step_ms: float, kind: str = "sleep", threads: int = 1, cpu_ms: float = 0.0) -> None:
        self.kind = "cuda" if torch.cuda.is_available() else kind
        self.device = torch.device("cuda") if self.kind == "cuda" else None
        self.threads = threads if self.kind == "cpu" else 1
        self.step_s = step_ms / 1000
        self.cpu_s = 0.0 if self.kind == "cpu" else min(cpu_ms, step_ms) / 1000
        self._rest_s = self.step_s - self.cpu_s  # what is left to compute or wait
        if self.threads > 1:
            torch.set_num_threads(self.threads)  # the DataLoader's workers set their own to 1
        self._iterations = self._calibrate() if self.kind == "cuda" or self.threads > 1 else 0

    def _calibrate(self) -> int:
        size = MATMUL_N if self.kind == "cuda" else CPU_MATMUL_N
        a = torch.randn(size, size, device=self.device)
        for _ in range(3):
            a @ a
        self._sync()
        began = time.perf_counter()
        for _ in range(20):
            a @ a
        self._sync()
        per = (time.perf_counter() - began) / 20
        self._a = a
        return max(1, round(self._rest_s / per)) if self._rest_s else 0

    def _sync(self) -> None:
        if self.kind == "cuda":
            torch.cuda.synchronize()

    def __call__(self, batch: Any) -> None:
        if self.cpu_s:
            _spin_cpu(self.cpu_s)
        if self.device is not None:
            to_device(batch, self.device, non_blocking=True)
            for _ in range(self._iterations):
                self._a @ self._a
            self._sync()  # as loss.item() would: the step ends when the GPU is done
        elif self.threads > 1:
            for _ in range(self._iterations):
                self._a @ self._a
        elif self.kind == "cpu":
            deadline = time.perf_counter() + self.step_s
            while time.perf_counter() < deadline:
                pass
        elif self._rest_s:
            time.sleep(self._rest_s)


def _spin_cpu(seconds: float) -> None:
    """``seconds`` of this thread's CPU time: under contention it takes longer, as the job's own work does."""
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass
