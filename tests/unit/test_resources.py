"""Rules about resources and idle workers on hand-built windows, at, below and above their
thresholds (the real-job checks are in tests/integration/test_advice.py)."""

from __future__ import annotations

import dataclasses

import pytest

from dltop.diagnose import diagnose, pending
from dltop.diagnose.window import MemoryReadings
from dltop.model import DiskSample
from dltop.settings import Settings
from tests.windows import GiB, bound_window, ids, with_worker_memory

MiB = 1 << 20


def only(findings, rule):
    return [f for f in findings if f.id == rule]


# -- too-many-workers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wait, cpu, workers, expect",
    [(1.0, 10.0, 4, 1), (1.0, 20.0, 8, 3), (1.0, 30.0, 4, None), (6.0, 10.0, 4, None), (1.0, 0.0, 4, None),
     (1.0, 10.0, 1, None)],
)  # fmt: skip
def test_too_many_workers(wait, cpu, workers, expect):
    found = only(diagnose(bound_window(wait, workers=workers, cpu=cpu, activity="idle")), "too-many-workers")
    assert [f.evidence["suggested_workers"] for f in found] == ([expect] if expect else [])
    if expect:
        assert f"num_workers={expect}" in found[0].suggestion
        assert found[0].evidence["memory_freed_bytes"] == (workers - expect) * 200 * MiB


def test_busy_stacks_outweigh_a_low_cpu_share():
    """Workers that wait on I/O use no CPU but are busy: not idle."""
    assert not only(diagnose(bound_window(1.0, workers=4, cpu=5.0, activity="fetching")), "too-many-workers")


# -- cpu-oversubscribed ------------------------------------------------------------------------


@pytest.mark.parametrize("cpu_wait, expect", [(10.0, False), (30.0, True), (None, False)])
def test_cpu_oversubscribed(cpu_wait, expect):
    # 2 CPUs: trainer 40% + 4 workers at 40% = 2.0 used; waiting 4 x cpu_wait
    # the trainer waits 1% for data (within its noise of none): it has workers to spare
    window = bound_window(1.0, workers=4, cpu=40.0, cpu_wait=cpu_wait, cpus_allowed=2.0, trainer_cpu=40.0)
    found = only(diagnose(window), "cpu-oversubscribed")
    assert bool(found) == expect
    if expect:
        assert found[0].evidence["cpu_used"] == 2.0 and found[0].evidence["cpu_waiting"] == 1.2
        # each worker wants 0.7 of a core; 2 CPUs less the trainer's 0.4 fit 2 of them
        assert "num_workers=2" in found[0].suggestion


def oversubscribed_ranks(trainer_main_cpu):
    """Two ranks on 4 CPUs, each trainer using 2.5 cores (``trainer_main_cpu`` of them its main thread)
    and waiting for data 1% of the time (none, within its noise)."""
    one = bound_window(1.0, workers=4, cpu=60.0, cpu_wait=80.0, cpus_allowed=4.0, trainer_cpu=250.0,
                       trainer_main_cpu=trainer_main_cpu)[0]  # fmt: skip
    second = [dataclasses.replace(p, pid=p.pid + 100, trainer_pid=101) for p in one.processes]
    loader2 = dataclasses.replace(one.loaders[0], trainer_pid=101, worker_pids=[110, 111, 112, 113])
    snap = dataclasses.replace(one, processes=one.processes + second, loaders=one.loaders + [loader2])
    (found,) = only(diagnose([snap, snap]), "cpu-oversubscribed")
    return found


def test_oversubscribed_ranks_get_advice_per_rank():
    found = oversubscribed_ranks(trainer_main_cpu=None)
    assert found.evidence["ranks"] == 2 and not found.evidence["trainer_waits_for_data"]
    assert "trainer 1;" in found.suggestion and "trainer 101" in found.suggestion


def test_intra_op_threads_are_cut_before_workers():
    """Rules agree: when the trainers' own threads oversubscribe, fix those first, then re-judge."""
    found = oversubscribed_ranks(trainer_main_cpu=100.0)
    assert found.evidence["trainer_threads_cpu"] == 1.5 and found.suggestion.startswith("OMP_NUM_THREADS=1")
    assert "num_workers=" not in found.suggestion and "watch again before changing num_workers" in found.suggestion
    # threads using 0.05 of a rank's 2 CPUs free less than a run could tell from noise: workers are the change
    assert "OMP_NUM_THREADS" not in oversubscribed_ranks(trainer_main_cpu=245.0).suggestion


@pytest.mark.parametrize("wait", [60.0, 26.0, 10.0])
def test_oversubscribed_never_takes_workers_from_a_trainer_that_waits_for_data(wait):
    """Rules agree: input-bound would add workers, so cpu-oversubscribed must not remove them; nor
    below input-bound's line (the truth harness: 4 CPU-bound workers on 2 CPUs, the trainer waiting
    26%, cut to 2 by this rule once, ran at 0.76x)."""
    window = bound_window(wait, workers=4, cpu=40.0, cpu_wait=30.0, cpus_allowed=2.0, trainer_cpu=40.0)
    findings = diagnose(window)
    (found,) = only(findings, "cpu-oversubscribed")
    assert "keep num_workers" in found.suggestion and "num_workers=" not in found.suggestion.split("keep")[0]
    assert found.evidence["trainer_waits_for_data"]
    if wait >= 30:
        (bound,) = only(findings, "input-bound")
        assert bound.explained_by == "cpu-oversubscribed" and bound.suggestion == ""


# -- disk-saturated ------------------------------------------------------------------------------


@pytest.mark.parametrize("util, r_await, expect", [(95.0, 20.0, True), (95.0, 2.0, False), (50.0, 50.0, False)])
def test_disk_saturated(util, r_await, expect):
    found = only(diagnose(bound_window(80.0, util=util, r_await=r_await)), "disk-saturated")
    assert bool(found) == expect
    if expect:
        assert found[0].severity == "warning" and "vda" in found[0].title  # the trainer waits: a warning


def test_a_saturated_disk_the_job_does_not_use_is_not_named():
    snap = bound_window(80.0)[0]
    other = DiskSample("sdb", 100.0, 0.0, 1e7, 0.0, 50.0, None, 9.0, 99.0, False)
    assert not only(diagnose([dataclasses.replace(snap, disks=[other])] * 2), "disk-saturated")


# -- worker-memory-growth ------------------------------------------------------------------------


def test_worker_memory_growth_estimates_rate_and_time_to_exhaustion():
    window = with_worker_memory(bound_window(10.0, ticks=41), lambda i, pid: 200 * MiB + i * MiB)
    (found,) = only(diagnose(window), "worker-memory-growth")
    assert found.evidence["bytes_per_s"] == 2 * MiB  # two workers at 1 MiB/s
    assert found.evidence["seconds_to_exhaustion"] == 16 * GiB // (2 * MiB)  # 16 GiB available
    assert found.pids == [10, 11] and "numpy" in found.suggestion


def test_a_worker_re_read_every_two_minutes_still_shows_its_growth():
    """A node of 73 processes re-reads each USS about every 110 s: a 120 s window holds one or two
    readings of a worker, and no line. The readings a live loop keeps (30 min) give it its last
    four: 0.5 MiB/s each, found once a worker has four readings, and not from the window alone."""
    ticks = with_worker_memory(
        bound_window(10.0, ticks=500), lambda i, pid: 200 * MiB + ((i + pid) // 110 * 110) * MiB // 2
    )
    memory = MemoryReadings()
    for tick in ticks:
        memory.add(tick)
    window = ticks[-120:]
    assert not only(diagnose(window), "worker-memory-growth")
    (found,) = only(diagnose(window, memory=memory), "worker-memory-growth")
    assert found.evidence["bytes_per_s"] == pytest.approx(MiB, rel=0.01)  # two workers at 0.5 MiB/s
    assert {c["points"] for c in found.evidence["confidence"].values()} == {4}


def test_an_unread_uss_does_not_fall_back_to_rss():
    """Before its first USS reading a worker shows only RSS (shared pages too): not a drop to ignore."""
    window = with_worker_memory(bound_window(10.0, ticks=41), lambda i, pid: None if i == 0 else 200 * MiB + i * MiB)
    window[0] = dataclasses.replace(window[0], processes=[dataclasses.replace(p, rss_bytes=900 * MiB)
                                                          for p in window[0].processes])  # fmt: skip
    assert only(diagnose(window), "worker-memory-growth")[0].evidence["bytes_per_s"] == 2 * MiB


@pytest.mark.parametrize(
    "ticks, per_s, noise",
    [(3, 8 * MiB, 0), (41, 0.2 * MiB, 0), (41, MiB, 40 * MiB)],
    ids=["too-few-readings", "too-small", "not-steady"],
)
def test_worker_memory_that_does_not_grow_steadily_is_not_flagged(ticks, per_s, noise):
    window = with_worker_memory(
        bound_window(10.0, ticks=ticks), lambda i, pid: int(200 * MiB + i * per_s + (noise if i % 2 else 0))
    )
    assert not only(diagnose(window), "worker-memory-growth")


def test_a_steep_clean_line_is_caught_within_seconds():
    """Evidence, not timers: 22 MB/s on a straight line (1.3 GB/min) is sure after 5 readings in 4 s."""
    window = with_worker_memory(bound_window(10.0, ticks=5), lambda i, pid: 200 * MiB + i * 22 * MiB + pid)
    (found,) = only(diagnose(window), "worker-memory-growth")
    assert found.evidence["confidence"][10]["points"] == 5 and found.evidence["confidence"][10]["t"] > 100


def test_memory_readings_that_repeat_are_not_points():
    """USS is re-read within a budget: a reading held for 10 ticks is one point, not ten."""
    window = with_worker_memory(bound_window(10.0, ticks=41), lambda i, pid: 200 * MiB + (i // 20) * 16 * MiB)
    assert not only(diagnose(window), "worker-memory-growth")  # 3 distinct readings: too few to call a line
    window = with_worker_memory(bound_window(10.0, ticks=41), lambda i, pid: 200 * MiB + (i // 10) * 8 * MiB)
    assert only(diagnose(window), "worker-memory-growth")  # 5 readings on a line


# -- shm-low ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("used_mb, expect", [(40, None), (55, "warning"), (62, "error")])
def test_shm_low(used_mb, expect):
    found = only(diagnose(bound_window(10.0, shm=(used_mb * MiB, 64 * MiB))), "shm-low")
    assert [f.severity for f in found] == ([expect] if expect else [])
    if expect:
        assert "--shm-size=1g" in found[0].suggestion


# -- gpu-underutilized ------------------------------------------------------------------------------


def test_a_gpu_starved_by_input_points_at_input_bound():
    findings = diagnose(bound_window(80.0, gpu_util=20.0, ticks=12))
    (found,) = only(findings, "gpu-underutilized")
    assert found.severity == "warning" and found.evidence["input_bound"] and found.explained_by == "input-bound"
    assert found.suggestion == "" and "num_workers=" in only(findings, "input-bound")[0].suggestion


def test_a_gpu_idle_without_input_wait_says_the_step_is_the_bottleneck():
    (found,) = only(diagnose(bound_window(2.0, gpu_util=20.0, ticks=12)), "gpu-underutilized")
    assert found.severity == "info" and "torch.profiler" in found.suggestion


@pytest.mark.parametrize("util, ticks", [(80.0, 12), (20.0, 4)], ids=["busy", "too-few-readings"])
def test_gpu_underutilized_needs_a_low_share_held_a_while(util, ticks):
    assert not only(diagnose(bound_window(80.0, gpu_util=util, ticks=ticks)), "gpu-underutilized")


def test_new_thresholds_are_settings():
    window = bound_window(10.0, shm=(40 * MiB, 64 * MiB))
    assert ids(diagnose(window, Settings(shm_full_share=0.5))).count("shm-low") == 1


def test_a_gpu_idle_while_the_data_wait_is_not_judged_yet_blames_nothing():
    """94% wait from 10 samples: not yet input-bound, and surely not 'the step leaves it idle'
    (seen on a GPU job's first seconds); the pending list says what is missing."""
    window = bound_window(94.0, gpu_util=20.0, ticks=12, samples=10)
    assert not only(diagnose(window), "gpu-underutilized")
    assert "input-bound" in [p.id for p in pending(window, Settings())]


def test_a_gpu_idle_with_a_low_wait_names_the_wait_it_measured():
    findings = diagnose(bound_window(12.0, gpu_util=20.0, ticks=12))
    (found,) = only(findings, "gpu-underutilized")
    assert "waits for data only 12%" in found.detail and "training step" in found.title
    # a third worker surely makes it 1.14x faster (input-bound says so), yet the step idles the GPU
    (fed,) = only(findings, "input-bound")
    assert not fed.evidence["above_line"] and found.explained_by is None


def test_a_gpu_idle_without_stacks_says_the_cause_is_unknown():
    snap = bound_window(94.0, gpu_util=20.0)[0]
    unmeasured = dataclasses.replace(snap.loaders[0], trainer_time=None, data_wait_percent=None)
    window = [dataclasses.replace(snap, stacks_status="denied", loaders=[unmeasured])] * 12
    (found,) = only(diagnose(window), "gpu-underutilized")
    assert "cause unknown" in found.title and "training step" not in found.detail


def test_a_gpu_is_starved_by_input_exactly_when_input_bound_says_so():
    """gpu-underutilized reads the data wait input-bound reads, not input-bound itself: over many
    waits and sample counts the two agree where the wait clears input-bound's line, on the finding
    and on the figure they print."""
    for wait in (20.0, 29.0, 31.0, 33.0, 34.55, 57.46, 90.0):
        for samples in (10, 40, 100, 2000):
            findings = diagnose(bound_window(wait, gpu_util=20.0, ticks=6, samples=samples), related=False)
            bound, gpu = only(findings, "input-bound"), only(findings, "gpu-underutilized")
            starved = [f for f in gpu if f.evidence["input_bound"]]
            above = [f for f in bound if f.evidence["above_line"]]
            assert len(starved) == len(above), (wait, samples)
            for cause, idle in zip(above, starved):
                said = cause.title.split("waits for data ")[1].split("%")[0]
                assert f"waits for data {said}% of the time" in idle.detail
                assert idle.suggestion == "Feed it faster: see input-bound for trainer 1."
