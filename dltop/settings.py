"""Every threshold and hold time dltop judges by, with its documented default: one ``Settings``
that the collector (what counts as stuck), the rules, the live views and the command line
(``--hang-after``) share. The figures docs/findings.md and the README restate are checked against
these by a unit test (tests/unit/test_vocabulary.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    # stuck (worker-hung, trainer-stalled, the STUCK activity): same stack, no CPU, this long (--hang-after)
    hang_after_s: float = 20.0
    # a stack held this long without CPU is shown with its age and watched as a possible hang
    still_notice_s: float = 5.0
    # a live view shows a finding once it has held this long and keeps it until it has been absent
    # this long, so a value near a threshold does not flicker (errors show at once)
    raise_after_s: float = 5.0
    clear_after_s: float = 15.0
    # run-stopped: a rank that has kept its stack without CPU for this share of the longest wait of
    # its run's ranks is blocked (it stopped when they did); less, it is running (a tick's worth)
    stopped_still_share: float = 0.5
    # "the trainer waits for data": share of its recent samples inside the DataLoader's __next__
    trainer_waiting_percent: float = 50.0
    # exits this close together belong to one event (a job killed as a whole, an epoch end)
    same_event_s: float = 2.0
    # fd-near-limit: open fds above this share of the soft limit
    fd_limit_share: float = 0.8
    fd_error_share: float = 0.95  # an error from this share on
    # workers-respawning: whole sets of workers replaced at least this often; a warning when starting
    # them takes at least this share of the trainer's time (else info)
    respawn_epochs: int = 2
    respawn_cost_percent: float = 2.0
    # input-bound: data-wait share (of the trainer's sampled time) for info / warning
    input_bound_percent: float = 30.0
    input_bound_warning_percent: float = 50.0
    min_stack_samples: int = 30  # trainer samples before a share is trusted
    # rank-straggler: a gap between two ranks' waits counts beyond this many standard errors of it
    advice_spread_errors: float = 2.0
    # the capacity model's inputs (data wait, workers' busy share and CPU, the job's CPU) read at this
    # many standard errors either side, each error counted by its effective samples (neighbours alike
    # count less: n (1 - rho) / (1 + rho), the lag-1 autocorrelation rho read up to its ceiling; and
    # where fewer, what the spread of the trainer's windows' waits says, once it has this many windows)
    capacity_errors: float = 1.0
    min_error_windows: int = 8
    # the model's own error, one standard error as a share of its prediction: what its inputs' errors
    # leave out (the RMS of predicted against measured over the advice harness's 28 predictions,
    # docs/findings.md); added to the predicted pace's interval and to the best's, whose low end
    # decides whether the count moves at all (now's pace is measured), not to the tolerance between
    # counts (widened by it, the count moved at none of the 9 configurations the harness checked)
    model_error_share: float = 0.055
    max_autocorrelation: float = 0.95
    # the count suggested: the fewest workers whose predicted pace is within this share of the best the
    # model sees, or within the best's error where that is wider (dltop bench's rule for measurements)
    same_pace_share: float = 0.05
    # the CPUs other processes keep of those the job may use are said in the advice from this many
    others_cpu_worth_saying: float = 0.25
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
    # the capacity model: the speed-up the CPUs allow below which the job is CPU-bound; where a wait's
    # upper spread stops (the pace model divides by 1 - W); the CPU share of a busy worker below which
    # it waits on I/O; the share of available memory more workers may take
    cpu_bound_speedup: float = 1.15
    max_wait_share: float = 0.99
    io_bound_cpu_share: float = 0.5
    workers_memory_share: float = 0.5
    # gil-bound: a thread pipeline's threads and the trainer's main thread together use at least
    # this many cores (Python runs one thread of a process at a time: a core, less the GIL's hand-offs
    # and the sampling noise of /proc's tick-counted times) and at most the ceiling (beyond it their
    # work runs outside the GIL, in parallel), the threads at least as much as the main thread and
    # busy at least this share of their samples: the pipeline then runs at the pace its GIL allows,
    # whatever the data wait shows (the trainer waits for the lock in its step, where samples count
    # it as running)
    gil_cores: float = 0.85
    gil_cores_max: float = 1.25
    gil_busy_percent: float = 50.0
    # worker-died for a pipeline thread: gone at least this long, the trainer waiting for data, and no
    # thread of its kind in its place (an epoch's reset replaces them within a tick or two)
    thread_gone_s: float = 5.0
    # cpu-oversubscribed: CPU wanted (used + runnable waiting for a CPU) over the CPUs the job may use
    oversubscribed_ratio: float = 1.25
    # workers restarting every epoch explain cpu-oversubscribed when start-up takes this share of the
    # trainer's time (their imports and unpickling are what wants the CPUs)
    startup_storm_percent: float = 25.0
    # disk-saturated: a device the job reads from, busy this share of the time with this read await
    disk_util_percent: float = 90.0
    disk_await_ms: float = 10.0
    # worker-memory-growth: a straight-line rise through at least this many distinct readings, with a fit
    # (R^2) and a slope this many standard errors from zero, rising at least this much: evidence, not time
    memory_growth_points: int = 4
    memory_growth_fit: float = 0.8
    memory_growth_t: float = 6.0
    memory_growth_min_bytes: int = 16 << 20
    memory_error_s: float = 600.0  # an error when available memory runs out within this, at this rate
    memory_quiet_s: float = 30.0  # readings unchanged this long mean no growth, not "not judged yet"
    # shm-low: /dev/shm at its fullest in the window above this share
    shm_full_share: float = 0.8
    shm_error_share: float = 0.95  # an error from this share on
    # gpu-underutilized: mean GPU busy share below this, over at least this many NVML readings
    gpu_busy_percent: float = 50.0
    gpu_min_readings: int = 5


DEFAULTS = Settings()
