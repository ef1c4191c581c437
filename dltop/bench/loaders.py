"""DataLoaders over a workload, as the bench measures them: num_workers from 0, the other knobs
at the best count, samples/s against what the machine could do, and the ``DataLoader(...)`` line."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from dltop.bench.config import Config, LoaderConfig
from dltop.bench.results import TrialResult
from dltop.bench.step import Step
from dltop.bench.trial import Timing, run_trial
from dltop.bench.workloads import Workload

CEILING_PROBE_S = 0.5


class Loaders:
    least = 0

    def __init__(self, workload: Workload, batch_size: int) -> None:
        self.workload, self.batch_size = workload, batch_size
        self.name, self.params = workload.name, workload.params

    def __enter__(self) -> Loaders:
        return self

    def __exit__(self, *exc: object) -> None:
        self.workload.close()

    def named(self, config: Config) -> Config:
        return config

    def describe(self) -> str:
        return f"batch {self.batch_size}"

    def trial(self, config: LoaderConfig, step: Step, timing: Timing,
              gpu_util: Optional[Callable[[], Optional[float]]] = None) -> TrialResult:  # fmt: skip
        return run_trial(self.workload, config, self.batch_size, step, timing, gpu_util)

    def knobs(self, base: Config, step: Step, methods: list[str]) -> tuple[dict[str, Any], ...]:
        """What is worth a try at the best count, beside the count itself."""
        assert isinstance(base, LoaderConfig)
        knobs: list[dict[str, Any]] = [{"prefetch_factor": 4}, {"persistent_workers": not base.persistent_workers}]
        knobs += [{"pin_memory": True}] if step.kind == "cuda" and not base.pin_memory else []
        knobs += [{"start_method": m} for m in methods]
        return tuple(knobs)

    def max_workers(self, cpus: int) -> int:
        return 2 * cpus

    def ceiling(self, step: Step, cpus: int) -> Optional[dict[str, Any]]:
        """What this machine could do at most: the CPU one sample costs in one process, times the
        CPUs allowed, and the step's own pace; the lower one binds (waiting is free: it overlaps)."""
        dataset = self.workload.base["dataset"]
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__") or len(dataset) == 0:
            return None
        began, cpu_began, n = time.perf_counter(), time.thread_time(), 0
        while time.perf_counter() - began < CEILING_PROBE_S and n < len(dataset):
            dataset[n]
            n += 1
        wall, cpu = (time.perf_counter() - began) / n, (time.thread_time() - cpu_began) / n
        estimates = {
            "cpu": cpus / cpu if cpu > 1e-6 else None,
            "step": self.batch_size / step.step_s if step.step_s else None,
        }
        bounds = {k: v for k, v in estimates.items() if v is not None}
        if not bounds:
            return None
        bound = min(bounds, key=bounds.__getitem__)
        return {
            "samples_per_s": bounds[bound],
            "bound": bound,
            "sample_cpu_ms": cpu * 1000,
            "sample_wall_ms": wall * 1000,
        }

    def code(self, config: Config) -> str:
        assert isinstance(config, LoaderConfig)
        return config.code(batch_size=self.batch_size)
