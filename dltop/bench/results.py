"""What one trial measured (torch-free: the search, the report and tests use it without torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from dltop.bench.config import Config


@dataclass
class TrialResult:
    config: Config
    samples_per_s: float  # median over the chunks, in config.unit (batches/s for a pipeline)
    low: float  # slowest chunk
    high: float  # fastest chunk
    first_batch_s: float
    epoch_start_s: Optional[float]  # iter() to the first batch of a later epoch
    data_wait_percent: float
    batches: int
    workers_peak_rss_bytes: int = 0
    workers_peak_uss_bytes: int = 0  # the largest one worker held alone
    total_peak_rss_bytes: int = 0  # the bench process and its workers together
    shm_peak_bytes: Optional[int] = None
    gpu_util_percent: Optional[float] = None
    chunk_rates: list[float] = field(default_factory=list)
    # a pipeline's threads and child processes still running after it was stopped (pipelines only)
    left_running: Optional[int] = None

    @property
    def spread(self) -> float:
        """Relative spread of the chunks: (fastest - slowest) / median."""
        return (self.high - self.low) / self.samples_per_s if self.samples_per_s else 0.0
