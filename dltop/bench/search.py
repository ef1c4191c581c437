"""Which configurations to measure: an adaptive search over num_workers (coarse powers of two,
then halving the interval around the best), the other knobs at the best count, repeats where two
results are within noise, all within a time budget; and ``--compare``, configs run side by side.

Pure: it calls ``measure(config) -> TrialResult`` and a clock, so tests drive it with fakes.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Optional

from dltop.bench.config import Config

NOISE_FLOOR = 0.03  # two results closer than 3% are never called different
RECOMMEND_WITHIN = 0.05  # the recommended config: the fewest workers within 5% of the fastest


def within_noise(a, b) -> bool:
    """Closer than either result's own chunk-to-chunk spread (or 3%)."""
    margin = max(a.high - a.low, b.high - b.low, NOISE_FLOOR * max(a.samples_per_s, b.samples_per_s))
    return abs(a.samples_per_s - b.samples_per_s) <= margin


class OutOfTime(Exception):
    pass


@dataclass
class SearchResult:
    trials: list  # TrialResult, in the order run (repeats merged into one per config)
    best: object  # the fastest
    recommended: object  # the fewest workers within RECOMMEND_WITHIN of the fastest
    stopped: Optional[str] = None  # why the search ended early (budget, Ctrl-C)


class Search:
    """From ``least`` workers (0 for a DataLoader, 1 for a pipeline's pool) up to ``max_workers``;
    or exactly the ``counts`` given (``--workers 2,4,8``)."""

    def __init__(self, measure: Callable, base: Config, max_workers: int, budget_s: float, knobs: tuple = (),
                 clock: Callable[[], float] = time.monotonic, least: int = 0,
                 counts: tuple[int, ...] = ()) -> None:  # fmt: skip
        self.measure, self.base, self.max_workers, self.knobs = measure, base, max_workers, knobs
        self.least, self.counts = least, counts
        self.clock, self.deadline = clock, clock() + budget_s
        self.results: dict = {}  # Config -> TrialResult

    def run(self) -> SearchResult:
        stopped = None
        try:
            best = self._listed() if self.counts else self._refine(self._coarse())
            best = self._confirm(best)
            self._knobs(best)
        except OutOfTime:
            stopped = "time budget spent"
        except KeyboardInterrupt:
            stopped = "interrupted"
        return self.result(stopped)

    def result(self, stopped: Optional[str] = None) -> SearchResult:
        trials = list(self.results.values())
        if not trials:
            return SearchResult([], None, None, stopped)
        best = max(trials, key=lambda t: t.samples_per_s)
        near = [t for t in trials if t.samples_per_s >= (1 - RECOMMEND_WITHIN) * best.samples_per_s]
        # fewest workers first; then the base settings over a variant that is no faster beyond noise
        recommended = min(near, key=lambda t: (t.config.num_workers, not self._is_base(t), -t.samples_per_s))
        return SearchResult(trials, best, recommended, stopped)

    def _is_base(self, trial) -> bool:
        return dataclasses.replace(trial.config, num_workers=self.base.num_workers) == self.base

    def _try(self, config: Config):
        if config in self.results:
            return self.results[config]
        if self.clock() >= self.deadline:
            raise OutOfTime
        self.results[config] = self.measure(config)
        return self.results[config]

    def _workers(self, n: int):
        return self._try(dataclasses.replace(self.base, num_workers=n))

    def _listed(self):
        for n in self.counts:
            self._workers(n)
        return max(self._sweep(), key=lambda t: t.samples_per_s)

    def _coarse(self):
        """0 (or least), 1, 2, 4, 8, ... until two steps in a row bring nothing beyond noise."""
        best, flat = self._workers(self.least), 0
        n = max(1, 2 * self.least)
        while n <= self.max_workers and flat < 2:
            trial = self._workers(n)
            if trial.samples_per_s > best.samples_per_s and not within_noise(trial, best):
                best, flat = trial, 0
            else:
                flat += 1
            n *= 2
        return best

    def _refine(self, best):
        """Halve two intervals until no untried count is left in them: the one below the fewest
        workers within RECOMMEND_WITHIN of the best (the knee, where the recommendation lies),
        and the one above the best when the next count tried is slower beyond noise (a peak)."""
        while True:
            tried = sorted(self._sweep(), key=lambda t: t.config.num_workers)
            best = max(tried, key=lambda t: t.samples_per_s)
            good = next(t for t in tried if t.samples_per_s >= (1 - RECOMMEND_WITHIN) * best.samples_per_s)
            below = [t for t in tried if t.config.num_workers < good.config.num_workers]
            above = [t for t in tried if t.config.num_workers > best.config.num_workers]
            candidates = set()
            if below:
                candidates.add((below[-1].config.num_workers + good.config.num_workers) // 2)
            if above and not within_noise(above[0], best):
                candidates.add((best.config.num_workers + above[0].config.num_workers) // 2)
            untried = sorted(m for m in candidates if m not in {t.config.num_workers for t in tried})
            if not untried:
                return best
            for m in untried:
                self._workers(m)

    def _confirm(self, best):
        """Where the runner-up is within noise of the best, measure both again and keep the means."""
        rivals = [t for t in self._sweep() if t is not best and within_noise(t, best)]
        for trial in [best, *rivals[:1]]:
            self.results[trial.config] = merge(trial, self._measure_again(trial.config))
        return max(self._sweep(), key=lambda t: t.samples_per_s)

    def _measure_again(self, config: Config):
        if self.clock() >= self.deadline:
            raise OutOfTime
        return self.measure(config)

    def _knobs(self, best) -> None:
        for change in self.knobs:
            self._try(dataclasses.replace(best.config, **change))

    def _sweep(self) -> list:
        return [t for t in self.results.values() if self._is_base(t)]


def merge(a, b):
    """One result from two measurements of the same config: chunks pooled, peaks kept."""
    rates = a.chunk_rates + b.chunk_rates
    return dataclasses.replace(
        a,
        samples_per_s=statistics.median(rates),
        low=min(rates),
        high=max(rates),
        data_wait_percent=(a.data_wait_percent + b.data_wait_percent) / 2,
        batches=a.batches + b.batches,
        workers_peak_rss_bytes=max(a.workers_peak_rss_bytes, b.workers_peak_rss_bytes),
        workers_peak_uss_bytes=max(a.workers_peak_uss_bytes, b.workers_peak_uss_bytes),
        total_peak_rss_bytes=max(a.total_peak_rss_bytes, b.total_peak_rss_bytes),
        chunk_rates=rates,
        left_running=None if a.left_running is None else max(a.left_running, b.left_running or 0),
    )


@dataclass
class Comparison:
    results: list  # TrialResult per config (rounds merged), in the order given
    ratios: list  # per config: [ratio to the first config, one per round]
    stopped: Optional[str] = None


def compare(measure: Callable, configs: list, rounds: int) -> Comparison:
    """Each round runs every config, alternating the order, so drift hits all alike; the ratio
    to the first config is taken round by round."""
    merged: dict = {}
    ratios: list = [[] for _ in configs]
    stopped = None
    try:
        for r in range(rounds):
            order = list(range(len(configs)))
            if r % 2:
                order.reverse()
            this_round = {i: measure(configs[i]) for i in order}
            for i, trial in this_round.items():
                merged[i] = merge(merged[i], trial) if i in merged else trial
                ratios[i].append(trial.samples_per_s / this_round[0].samples_per_s)
    except KeyboardInterrupt:
        stopped = "interrupted"
    return Comparison([merged[i] for i in sorted(merged)], [r for r in ratios if r], stopped)
