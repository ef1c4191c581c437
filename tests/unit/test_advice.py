"""Advice rules on hand-built windows, at, below and above their thresholds."""

from __future__ import annotations

import dataclasses

import pytest

from dltop.diagnose import diagnose
from dltop.diagnose.window import ShownAdvice
from dltop.model import JobInfo, LoaderSample, ProcessSample, Snapshot, TrainerTime
from dltop.settings import Settings
from tests.windows import bound_window, ids


def window(processes=(), loaders=()):
    job = JobInfo(1, 1, "python train.py", "running", "fork", [1])
    return [Snapshot("2026-01-01T00:00:10+00:00", 1.0, job, None, list(processes), list(loaders), [], "ok", [],
                     stacks_status="ok")]  # fmt: skip


def proc(num_fds, fd_limit=1024, kinds=None, role="worker"):
    return ProcessSample(7, 1, role, 1, "pt_data_worker", "", "sleeping", num_fds=num_fds, fd_limit=fd_limit,
                         fd_kinds=kinds)  # fmt: skip


@pytest.mark.parametrize("num_fds, expect", [(800, []), (820, ["fd-near-limit"]), (1000, ["fd-near-limit"])])
def test_fd_near_limit_threshold(num_fds, expect):
    assert ids(diagnose(window([proc(num_fds, kinds={"file": num_fds})]))) == expect


def test_fd_near_limit_says_what_the_fds_are():
    (shm,) = diagnose(window([proc(1000, kinds={"shm": 990, "file": 10}, role="trainer")]))
    assert "set_sharing_strategy('file_system')" in shm.suggestion and shm.severity == "error"
    (files,) = diagnose(window([proc(850, kinds={"file": 840, "shm": 2})]))
    assert "worker_init_fn" in files.suggestion and files.severity == "warning" and files.pids == [7]


def loader(respawns, persistent=False, startup=5.0, workers=2):
    spent = TrainerTime(100, 30.0, 10.0, 0.0, startup, 90.0 - startup)
    return LoaderSample(1, workers, [2, 3], persistent, False, "spawn", 10.0, respawns, trainer_time=spent,
                        dataset="ImageFolder")  # fmt: skip


@pytest.mark.parametrize(
    "respawns, persistent, startup, expect",
    [(3, False, 5.0, None), (4, False, 5.0, "warning"), (4, False, 0.5, "info"), (8, None, 5.0, None),
     (8, True, 5.0, None)],
)  # fmt: skip
def test_workers_respawning(respawns, persistent, startup, expect):
    found = diagnose(window(loaders=[loader(respawns, persistent, startup)]))
    assert [f.severity for f in found] == ([expect] if expect else [])
    if expect:  # the change itself, paste-ready, and the loader it goes in, spelt as the job spells it
        assert found[0].suggestion == (
            "persistent_workers=True  # in the DataLoader over ImageFolder; now persistent_workers=False"
        )
        assert found[0].evidence["starting_workers_percent"] == startup and found[0].impact == startup / 100


def test_thresholds_are_settings():
    strict = Settings(fd_limit_share=0.5)
    assert ids(diagnose(window([proc(600, kinds={"file": 600})]), strict)) == ["fd-near-limit"]


def test_findings_do_not_flicker():
    from dltop.diagnose.stable import StableFindings
    from dltop.model import Finding

    def finding(severity="warning"):
        return Finding("input-bound", severity, "t", "d", [1], {}, "s")

    stable = StableFindings(raise_after_s=5, clear_after_s=15)
    assert stable.update(0, [finding()]) == []  # not yet: it must hold a while
    assert stable.update(3, []) == [] and stable.update(4, [finding()]) == []
    assert [f.id for f in stable.update(6, [finding()])] == ["input-bound"]  # held since 0
    assert [f.id for f in stable.update(10, [])] == ["input-bound"]  # a dip does not clear it
    assert stable.update(22, []) == []  # absent 16 s: cleared
    assert stable.update(23, [finding()]) == []  # and must hold again before it shows
    assert [f.id for f in StableFindings().update(0, [finding("error")])] == ["input-bound"]  # faults at once


def test_a_held_finding_is_said_to_be_held_until_it_shows():
    """While a finding holds before showing, the live view's pending list says so (the badge then
    never reads HEALTHY): with what it is and how long yet."""
    from dltop.diagnose.stable import StableFindings
    from dltop.model import Finding

    waits = Finding("input-bound", "warning", "Trainer 1 waits for data 87% of the time", "d", [1], {}, "s")
    stable = StableFindings(raise_after_s=5)
    stable.update(0, [waits])
    assert stable.held(0) == [(waits, 5.0)]
    stable.update(3, [waits])
    assert stable.held(3) == [(waits, 2.0)]
    stable.update(4, [])
    assert stable.held(4) == []  # gone this tick: nothing is held back
    stable.update(5, [waits])
    assert stable.update(5, [waits]) == [waits] and stable.held(5) == []  # shown: no longer held


def test_pin_memory_advice_follows_the_gpu():
    from dltop.model import GpuProcess, GpuSample

    def snap(pin, trainer_on_gpu, status="ok"):
        gpu = GpuSample(0, "H200", 50.0, 1, 2, None, None, None, None,
                        [GpuProcess(1 if trainer_on_gpu else 99, 1 << 30, None)])  # fmt: skip
        job = JobInfo(1, 1, "python train.py", "running", "fork", [1])
        ld = LoaderSample(1, 2, [2, 3], True, pin, "fork", 10.0, 0)
        return [Snapshot("t", 1.0, job, None, [], [ld], [gpu] if status == "ok" else [], status, [])]

    (unpinned,) = diagnose(snap(False, True))
    assert unpinned.id == "pin-memory" and "pin_memory=True" in unpinned.suggestion
    assert "non_blocking=True" in unpinned.suggestion
    (wasted,) = diagnose(snap(True, False))
    assert wasted.severity == "warning" and "pin_memory=False" in wasted.suggestion
    assert diagnose(snap(True, True)) == [] and diagnose(snap(False, False)) == []
    assert diagnose(snap(True, False, status="no-nvml")) == []  # cannot tell: say nothing


@pytest.mark.parametrize("wait, cpus, expect", [
    (10.0, 8.0, None),  # at most 1.11x: within what a measurement can tell from now
    (20.0, 8.0, "info"),  # under the 30% line, but a third worker surely makes it 1.25x faster
    (20.0, 2.0, None),  # the same wait with the CPUs full: no count helps
    (35.0, 8.0, "info"),
    (80.0, 8.0, "warning"),
])  # fmt: skip
def test_input_bound_holds_above_its_line_and_below_it_where_more_workers_surely_help(wait, cpus, expect):
    found = [f for f in diagnose(bound_window(wait, cpus_allowed=cpus)) if f.id == "input-bound"]
    assert [f.severity for f in found] == ([expect] if expect else [])
    if expect == "info" and wait < 30:
        assert found[0].evidence["predicted_speedup_low"] > 1.05 and found[0].evidence["suggested_workers"] == 3


def test_input_bound_suggests_workers_from_the_model():
    (finding,) = [f for f in diagnose(bound_window(80.0, built_at="/home/me/train.py:41")) if f.id == "input-bound"]
    # 2 workers busy 100% while the trainer waits 80%: its own pace allows 5x; the job uses 1 + 2 x 0.9
    # = 2.8 of 8 CPUs: they allow 2.86x, the best. N workers supply N / 2: the fewest within 5% of the
    # best (its error is none: the CPU readings do not move) is 6 (2.72 x 2 = 5.4 -> 6), at 2.86x, each
    # worker busy 2 x 2.86 / 6 = 95% of the time: their CPU and the trainer's fill the 8 CPUs, no more (the
    # trainer surely waits, so its workers deliver all it gets, busy all the time whatever 4 stacks say)
    assert finding.evidence["speedup_by_pace"] == 5.0 and finding.evidence["speedup_by_cpus"] == 2.86
    assert finding.evidence["suggested_workers"] == 6 and finding.evidence["binding"] == "cpus"
    # its interval is the model's own error alone (5.5%): the inputs' move nothing
    ev = finding.evidence
    assert (ev["predicted_speedup_low"], ev["predicted_speedup"], ev["predicted_speedup_high"]) == (2.70, 2.86, 3.01)
    where = "in the DataLoader over Images (/home/me/train.py:41)"
    assert finding.suggestion == f"num_workers=6  # {where}; now num_workers=2"
    assert "2.86x faster before the CPUs the job may use stop it" in finding.detail
    assert "about 6 worker(s) (capped by cpus), each busy about 95%" in finding.detail
    assert "Predicted: 2.86x (2.70x-3.01x) its pace now, bound by the CPUs the job may use" in finding.detail
    assert finding.evidence["change"] == {"num_workers": 6} and finding.bench_args


def test_input_bound_at_the_cpu_cap_says_make_samples_cheaper():
    """6 workers at 0.9 and the trainer's 1.0 on 6 CPUs: no room left, whatever the headroom says."""
    (finding,) = [f for f in diagnose(bound_window(80.0, workers=6, cpus_allowed=6.0)) if f.id == "input-bound"]
    assert finding.evidence["suggested_workers"] == 6 and "more will not help" in finding.detail
    # the worker's own costly frame, not the trainer's loop it inherited below _worker_loop
    assert "cheaper, starting with decode (/home/me/img.py:40)" in finding.suggestion
    assert finding.bench_args is None and "num_workers=" not in finding.suggestion


def test_intra_op_threads_that_take_the_workers_cpus_are_cut_first():
    """The trainer uses 1.5 cores, 1.0 of them intra-op threads, beside 1 worker on 2 CPUs."""
    window = bound_window(65.0, workers=1, cpu=90.0, cpus_allowed=2.0, trainer_cpu=150.0, trainer_main_cpu=50.0)
    (finding,) = [f for f in diagnose(window) if f.id == "input-bound"]
    assert finding.suggestion.startswith("OMP_NUM_THREADS=1 for the trainer")
    assert finding.evidence["change"]["OMP_NUM_THREADS"] == 1 and finding.evidence["trainer_threads_cpu"] == 1.0


def test_input_bound_on_a_saturated_disk_does_not_add_workers():
    findings = diagnose(bound_window(80.0, util=99.0, r_await=20.0))
    (finding,) = [f for f in findings if f.id == "input-bound"]
    assert finding.evidence["binding"] == "disk" and finding.explained_by == "disk-saturated"
    assert findings[0].id == "disk-saturated" and "shards" in findings[0].suggestion  # the cause first


def test_without_evidence_it_says_what_it_needs_instead_of_a_number():
    window = [dataclasses.replace(s, system=None) for s in bound_window(80.0)]
    (finding,) = [f for f in diagnose(window) if f.id == "input-bound"]
    assert finding.evidence["suggested_workers"] is None and "num_workers=" not in finding.suggestion
    assert "the CPUs the job may use" in finding.suggestion


def test_too_few_samples_say_nothing():
    assert not [f for f in diagnose(bound_window(80.0, samples=10)) if f.id == "input-bound"]


def test_a_suggestion_holds_while_the_wait_stays_within_its_noise():
    """Advice moves when the evidence does, not every tick: a count shown before holds while it is
    within the range the data wait's noise allows, and a change says from what and why."""

    def input_bound(shown=None):
        found = diagnose(bound_window(60.0, workers=2, cpu=20.0, ticks=10, samples=400), shown_advice=shown)
        (finding,) = [f for f in found if f.id == "input-bound"]
        return finding.evidence, finding.detail

    fresh, detail = input_bound()
    assert fresh["suggested_range"] == [5, 6] and fresh["suggested_workers"] == 5 == fresh["workers_needed"]
    assert "(any of 5-6 fits the measured figures)" in detail
    held, _ = input_bound({(1, "Images"): ShownAdvice(6, "2026-01-01T00:00:05+00:00")})
    assert held["suggested_workers"] == 6 and held["change_reason"] is None  # within the noise: it holds
    moved, now = input_bound({(1, "Images"): ShownAdvice(16, "2026-01-01T00:00:05+00:00")})
    assert moved["suggested_workers"] == 5 and moved["change_reason"].startswith("16 fell outside 5-6")
    assert "It said 16 until now: 16 fell outside 5-6" in now  # the tick it changes says so too
    _, said = input_bound({(1, "Images"): ShownAdvice(5, "2026-01-01T00:00:05+00:00", 16, moved["change_reason"])})
    assert "It said 16 until" in said and "16 fell outside 5-6 when the data wait read 60%" in said


def test_a_count_that_asks_for_more_never_rounds_down_to_what_runs_now():
    """The model needs 5 where 4 run and the busy share's error spans 4-5: the count asks for more,
    not the 4 that run, which the advice would then call "more will not help"."""
    from dltop.diagnose.capacity import capacity
    from dltop.diagnose.window import ShownAdvice, Window

    ticks = bound_window(20.0, workers=4, cpu=20.0, ticks=10, samples=400)
    # too-many-workers' line above the wait: the workers' busy share is read, with its error
    base = capacity(Window(ticks), ticks[-1].loaders[0], Settings(too_many_wait_percent=30.0))
    cap = dataclasses.replace(base, figures=dataclasses.replace(base.figures, busy_error=0.2))
    assert cap.chosen == 5 and cap.needed_range is not None and cap.needed_range[0] <= 4
    assert cap.suggested_range == (5, 5) and cap.suggested == 5
    assert dataclasses.replace(cap, shown=ShownAdvice(4, "2026-01-01T00:00:05+00:00")).suggested == 5  # no anchor at 4


def test_fewer_intra_op_threads_predict_the_cpus_they_free_at_most():
    """One worker, busy all the time but on a CPU 60% of it (40% waiting for one), beside a trainer
    whose intra-op threads use 1.0 of the 2 CPUs: OMP_NUM_THREADS=1 frees that core, and the
    prediction counts all of it, and the worker's wait for a CPU, as gone (at most)."""
    window = bound_window(65.0, workers=1, cpu=60.0, cpu_wait=40.0, cpus_allowed=2.0, trainer_cpu=150.0,
                          trainer_main_cpu=50.0)  # fmt: skip
    (finding,) = [f for f in diagnose(window) if f.id == "input-bound"]
    ev = finding.evidence
    assert ev["change"]["OMP_NUM_THREADS"] == 1
    # the job's 2.1 cores less the threads' 1.0: the CPUs allow 2 / 1.1; the worker then works 60% of its time
    assert ev["speedup_by_cpus"] == pytest.approx(2 / 1.1, abs=0.01)
    assert ev["predicted_speedup"] > 1.2 and "At most: it counts all 1.0 cores the trainer's intra-op" in finding.detail
    # with no intra-op threads to cut, the same job's CPUs stay as full as they are
    plain = bound_window(65.0, workers=1, cpu=60.0, cpu_wait=40.0, cpus_allowed=2.0, trainer_cpu=50.0)
    (same,) = [f for f in diagnose(plain) if f.id == "input-bound"]
    assert "OMP_NUM_THREADS" not in (same.evidence["change"] or {}) and "At most" not in same.detail


def test_intra_op_threads_are_cut_with_the_workers_that_will_fill_the_cpus():
    """pytorch/examples' imagenet at -j 1 on 2 CPUs: the trainer waits 32%, its intra-op threads use
    0.37 cores beside its main thread's 0.36, which waits runnable for a CPU 34% of the time. Now
    the CPUs leave room (2 / 1.68 = 1.19x), but the second worker the wait asks for fills them, and
    the threads then take what it needs (measured: 2 workers 1.63x, with OMP_NUM_THREADS=1 1.81x).
    Where the CPUs stay free, the threads stay."""

    def input_bound(cpus, waiting=34.0):
        window = bound_window(32.0, workers=1, cpu=95.0, cpus_allowed=cpus, trainer_cpu=73.0, trainer_main_cpu=36.0,
                              trainer_cpu_wait=waiting, ticks=10, samples=400)  # fmt: skip
        (finding,) = [f for f in diagnose(window) if f.id == "input-bound"]
        return finding

    full = input_bound(2.0)
    assert full.evidence["speedup_by_cpus"] == pytest.approx(2 / 1.31, abs=0.01)  # the threads' 0.37 freed
    assert full.evidence["change"] == {"OMP_NUM_THREADS": 1, "num_workers": 2}
    assert full.suggestion.startswith("OMP_NUM_THREADS=1 for the trainer") and "num_workers=2" in full.suggestion
    assert "At most: it counts all 0.4 cores the trainer's intra-op threads use" in full.detail
    # its main thread's wait for a CPU goes with the threads, as a worker's does: the CPUs bind, not
    # its pace; a main thread that was off a CPU (asleep) instead keeps that time, and waits longer
    assert full.evidence["binding"] == "cpus" and full.evidence["predicted_speedup"] == pytest.approx(1.53, abs=0.01)
    asleep = input_bound(2.0, waiting=0.0)
    assert asleep.evidence["binding"] == "pace" and asleep.evidence["predicted_speedup"] < 1.4
    roomy = input_bound(8.0)
    assert roomy.evidence["binding"] == "pace" and "OMP_NUM_THREADS" not in (roomy.evidence["change"] or {})
    assert (
        roomy.evidence["speedup_by_cpus"] > 1.15
        and full.evidence["speedup_by_pace"] > roomy.evidence["speedup_by_pace"]
    )


def test_the_count_changes_only_where_the_best_is_surely_faster_than_now():
    """2 workers computing on 2 CPUs, the job at 1.88 cores (the advice harness's cpu-8 in one run;
    1.92-1.94 in others): the CPUs leave 6% (1.06x), and even the low end of that best, with the
    model's own error, must be a pace dltop bench tells from now's (5% faster): now's pace is
    measured. A third worker measured 0.91x-0.94x in three runs: the count stays, in a snapshot and
    in a live view that showed 3 before; so does num_workers=0 beside a busy trainer. At 1.67 cores
    (1.2x) the third worker is asked for."""

    def evidence(window, shown=None):
        (finding,) = [f for f in diagnose(window, shown_advice=shown) if f.id == "input-bound"]
        return finding.evidence, finding.detail

    def computing(worker_cpu):
        return bound_window(55.0, workers=2, cpu=worker_cpu, cpus_allowed=2.0, trainer_cpu=7.0, trainer_main_cpu=7.0,
                            samples=1000, ticks=11)  # fmt: skip

    full, said = evidence(computing(90.5))
    assert full["job_cpu"] == 1.88 and full["binding"] == "cpus" and full["suggested_workers"] == 2
    assert not full["change"] and full["suggested_range"] == [2, 2]
    assert "could reach 1.06x at best (1.01x-1.12x), too close to its pace now to be sure of a gain" in said
    held, _ = evidence(computing(90.5), shown={(1, "Images"): ShownAdvice(3, "2026-01-01T00:00:05+00:00")})
    assert held["suggested_workers"] == 2 and not held["change"]
    fetching, _ = evidence(bound_window(40.0, workers=0, cpus_allowed=2.0, trainer_cpu=196.0, trainer_main_cpu=196.0))
    assert not fetching["change"]
    roomy, _ = evidence(computing(80.0))
    assert roomy["change"] == {"num_workers": 3} and roomy["predicted_speedup_low"] > 1.05


def test_intra_op_threads_are_cut_where_cutting_them_surely_gains_whatever_they_use():
    """pytorch/examples' imagenet at -j 2 on 2 CPUs, read in several runs: its intra-op threads used
    0.21 to 0.28 cores; a 0.25-core line asked for OMP_NUM_THREADS=1 in some reads and for nothing in
    others (measured with nothing attached: 1.22x). No line of cores decides, the gain does: every
    read asks for it, and threads that free too little to tell from noise stay."""

    def input_bound(threads_per_tick, cpus=2.0, wait=56.0):
        ticks = bound_window(wait, workers=2, cpu=74.0, cpus_allowed=cpus, trainer_main_cpu=25.0, ticks=11,
                             samples=400)  # fmt: skip
        ticks = [
            dataclasses.replace(snap, processes=[
                dataclasses.replace(p, cpu_percent=25.0 + threads_per_tick[i % len(threads_per_tick)])
                if p.role == "trainer" else p for p in snap.processes])
            for i, snap in enumerate(ticks)
        ]  # fmt: skip
        (finding,) = [f for f in diagnose(ticks) if f.id == "input-bound"]
        return finding.evidence

    either_side = input_bound([14.0, 34.0])  # a mean of 0.24 cores, read ±0.035
    assert either_side["trainer_threads_cpu"] == 0.24 and either_side["change"]["OMP_NUM_THREADS"] == 1
    assert either_side["predicted_speedup"] > 1.05 and either_side["binding"] == "cpus"
    for steady in (21.0, 24.0, 28.0):
        assert input_bound([steady])["change"] == either_side["change"]
    # 0.03 cores freed of the job's 1.8: 2%, which no run could tell from noise
    assert "OMP_NUM_THREADS" not in (input_bound([3.0])["change"] or {})
    # the CPUs bind, but only just below the trainer's own pace: cutting 0.4 cores of threads would
    # gain 1.5%, which no run could tell from noise: they stay
    near_pace = input_bound([40.0], cpus=2.8, wait=30.0)
    assert near_pace["binding"] == "cpus" and near_pace["change"] == {"num_workers": 3}
