"""Every threshold dltop judges by, with its documented default: one ``Settings`` that the
collector (what counts as stuck), the rules and the command line (``--hang-after``) share."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    # stuck (worker-hung, trainer-stalled, the STUCK activity): same stack, no CPU, this long (--hang-after)
    hang_after_s: float = 20.0
    # "the trainer waits for data": share of its recent samples inside the DataLoader's __next__
    trainer_waiting_percent: float = 50.0
    # exits this close together belong to one event (a job killed as a whole, an epoch end)
    same_event_s: float = 2.0
    # fd-near-limit: open fds above this share of the soft limit
    fd_limit_share: float = 0.8
    # workers-respawning: whole sets of workers replaced at least this often; a warning when starting
    # them takes at least this share of the trainer's time (else info)
    respawn_epochs: int = 2
    respawn_cost_percent: float = 2.0
    # input-bound: data-wait share (of the trainer's sampled time) for info / warning
    input_bound_percent: float = 30.0
    input_bound_warning_percent: float = 50.0
    min_stack_samples: int = 30  # trainer samples before a share is trusted
    workers_headroom: float = 1.1  # suggest 10% more workers than the model needs
    # the suggestion's range: the workers the model needs at the data wait minus and plus this many of
    # its standard errors (two: the samples of a wait are not independent, so one understates it)
    advice_spread_errors: float = 2.0
    # rank-straggler: a rank of a run waits for data at least this many points more than the run's
    # other ranks (their median), beyond the spread of standard errors above
    straggler_gap_percent: float = 10.0
    # worker-starving: an iterable loader's worker idle (no part of the source left) for at least this
    # many of its stacks while its siblings worked at least this share of theirs
    starving_min_stacks: int = 3
    starving_siblings_busy_percent: float = 50.0
    # too-many-workers: the trainer waits less than this, the workers work less than this share
    too_many_wait_percent: float = 5.0
    idle_workers_percent: float = 25.0
    fewer_workers_headroom: float = 1.5  # keep 50% more workers than the mean load needs
    # cpu-oversubscribed: CPU wanted (used + runnable waiting for a CPU) over the CPUs the job may use
    oversubscribed_ratio: float = 1.25
    # disk-saturated: a device the job reads from, busy this share of the time with this read await
    disk_util_percent: float = 90.0
    disk_await_ms: float = 10.0
    # worker-memory-growth: a straight-line rise through at least this many distinct readings, with a fit
    # (R^2) and a slope this many standard errors from zero, rising at least this much: evidence, not time
    memory_growth_points: int = 4
    memory_growth_fit: float = 0.8
    memory_growth_t: float = 6.0
    memory_growth_min_bytes: int = 16 << 20
    # shm-low: /dev/shm at its fullest in the window above this share
    shm_full_share: float = 0.8
    # gpu-underutilized: mean GPU busy share below this, over at least this many NVML readings
    gpu_busy_percent: float = 50.0
    gpu_min_readings: int = 5


DEFAULTS = Settings()
