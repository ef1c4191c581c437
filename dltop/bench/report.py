"""What ``dltop bench`` prints: a table (best first), the rate against the worker count as a
terminal chart, the recommended line; and the ``dltop.bench/1`` JSON document. The rate and the
count are named as the configs name them (samples/s and num_workers for a DataLoader; batches/s
and concurrency, say, for a pipeline)."""

from __future__ import annotations

import dataclasses
import statistics
from typing import Optional

from dltop.units import human_bytes, percent

SCHEMA = "dltop.bench/1"
BAR_WIDTH = 40


def trial_row(trial) -> dict:
    data = dataclasses.asdict(trial)
    data["config"] = dataclasses.asdict(trial.config)
    data["label"] = trial.config.label()
    data["spread"] = round(trial.spread, 4)
    return data


def document(setup: dict, trials: list, best, recommended, ceiling: Optional[dict], comparison=None,
             stopped: Optional[str] = None) -> dict:  # fmt: skip
    doc = {
        "schema": SCHEMA,
        **setup,
        "trials": [trial_row(t) for t in trials],
        "best": best.config.label() if best else None,
        "recommended": recommended.config.label() if recommended else None,
        "ceiling": ceiling,
        "stopped": stopped,
    }
    if comparison is not None:
        doc["compare"] = [
            {"label": t.config.label(), "ratio": statistics.median(r), "ratio_low": min(r), "ratio_high": max(r)}
            for t, r in zip(comparison.results, comparison.ratios)
        ]
    return doc


def table(trials: list, ceiling: Optional[dict]) -> str:
    head = f"{'config':<52} {_unit(trials):>10} {'range':>15} {'first':>7} {'epoch':>7} {'wait':>6} {'wRSS':>7}" \
        f" {'USS/w':>7} {'shm':>7} {'GPU':>5}" + (" ceiling" if ceiling else "")  # fmt: skip
    lines = [head]
    for t in sorted(trials, key=lambda t: -t.samples_per_s):
        share = f" {100 * t.samples_per_s / ceiling['samples_per_s']:.0f}%" if ceiling else ""
        lines.append(
            f"{t.config.label():<52} {t.samples_per_s:>10.1f} {f'{t.low:.0f}-{t.high:.0f}':>15}"
            f" {t.first_batch_s:>6.2f}s {_seconds(t.epoch_start_s):>7} {t.data_wait_percent:>5.0f}%"
            f" {human_bytes(t.workers_peak_rss_bytes):>7} {human_bytes(t.workers_peak_uss_bytes):>7}"
            f" {human_bytes(t.shm_peak_bytes):>7} {percent(t.gpu_util_percent):>5}{share}"
        )
    return "\n".join(lines)


def chart(trials: list) -> str:
    """The rate against the worker count (one bar per count: the best config with that count)."""
    by_workers: dict = {}
    for t in trials:
        n = t.config.num_workers
        if n not in by_workers or t.samples_per_s > by_workers[n].samples_per_s:
            by_workers[n] = t
    if not by_workers:
        return ""
    top = max(t.samples_per_s for t in by_workers.values()) or 1.0
    lines = [f"{_unit(trials)} by {trials[0].config.knob}"]
    for n in sorted(by_workers):
        rate = by_workers[n].samples_per_s
        eighths = round(BAR_WIDTH * 8 * rate / top)
        bar = "█" * (eighths // 8) + ("▏▎▍▌▋▊▉"[eighths % 8 - 1] if eighths % 8 else "")
        lines.append(f"{n:>4} │{bar:<{BAR_WIDTH}} {rate:.1f}")
    return "\n".join(lines)


def comparison_text(comparison) -> str:
    first, unit = comparison.results[0].config.label(), _unit(comparison.results)
    lines = [f"compared with {first} ({len(comparison.ratios[0])} alternating rounds):"]
    for t, r in zip(comparison.results[1:], comparison.ratios[1:]):
        lines.append(f"  {t.config.label()}: {statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f}),"
                     f" {t.samples_per_s:.1f} vs {comparison.results[0].samples_per_s:.1f} {unit}")  # fmt: skip
    return "\n".join(lines)


def _unit(trials: list) -> str:
    return trials[0].config.unit if trials else "samples/s"


def _seconds(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.2f}s"
