"""Thresholds of the diagnosis rules, with their documented defaults."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    # worker-hung / trainer-stalled: same stack, no CPU, for this long (--hang-after)
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
