"""Advice on real jobs that have the problem: files hoarded, workers respawning, an input-bound
job, idle workers, copy-on-read growth, workers fighting for a CPU; one suggestion agreed by the
live view and two reports."""

from __future__ import annotations

import sys
import threading
import time

from dltop.diagnose import diagnose
from dltop.diagnose.figures import wait_error
from tests.support import watch
from tests.windows import ids

MB = 1 << 20


# -- real jobs ------------------------------------------------------------------------


def test_a_worker_hoarding_files_is_named(start_job, attach):
    job = start_job("--workers", "2", "--persistent", "--open-files", "220", "--step-ms", "5",
                    launcher=["prlimit", "--nofile=256:256", sys.executable])  # fmt: skip
    job.wait_workers(2)
    ticks, findings = watch(attach(job.pid), lambda t, f: "fd-near-limit" in ids(f), 60, "fd-near-limit")
    near = [f for f in findings if f.id == "fd-near-limit"]
    assert {f.pids[0] for f in near} == set(job.live_workers())
    assert all(f.evidence["fd_limit"] == 256 and f.evidence["fd_kinds"]["file"] >= 220 for f in near)
    assert "worker_init_fn" in near[0].suggestion


def test_respawning_workers_get_persistent_workers_advice(start_job, attach):
    job = start_job("--workers", "2", "--batches", "3", "--sample-ms", "1", "--step-ms", "5")
    job.wait_workers(2)
    ticks, findings = watch(attach(job.pid), lambda t, f: "workers-respawning" in ids(f), 60, "workers-respawning")
    (advice,) = [f for f in findings if f.id == "workers-respawning"]
    assert advice.pids == [job.pid] and advice.evidence["respawns"] >= 2 * advice.evidence["num_workers"] >= 2
    assert "persistent_workers=True" in advice.suggestion


def test_persistent_job_gets_no_respawn_advice(start_job, attach):
    job = start_job("--workers", "2", "--persistent", "--batches", "3", "--step-ms", "5")
    job.wait_workers(2)
    collector = attach(job.pid)
    ticks = [collector.tick()]
    for _ in range(8):
        time.sleep(0.5)
        ticks.append(collector.tick())
    assert ticks[-1].loaders[0].persistent_workers is True
    assert "workers-respawning" not in ids(diagnose(ticks))


def test_input_bound_job_gets_a_worker_count_that_removes_the_wait(start_job, attach):
    """Samples that wait on I/O (20 ms each, no CPU): one worker starves the trainer."""
    job = start_job("--workers", "1", "--persistent", "--sample-ms", "0", "--slow-every", "1", "--slow-ms", "20",
                    "--step-ms", "10", "--batches", "200")  # fmt: skip
    job.wait_workers(1)
    ticks, findings = watch(attach(job.pid), lambda t, f: "input-bound" in ids(f), 60, "input-bound")
    (finding,) = [f for f in findings if f.id == "input-bound"]
    ev = finding.evidence
    assert ev["data_wait_percent"] > 60 and ev["worker_busy_percent"] >= 50 and "num_workers=" in finding.suggestion
    # 80 ms of waiting per 4-sample batch against a 10 ms step: the model asks for ~10 workers (the
    # 1 / (1 - wait) term is steep near 100%, so allow a wide range on a noisy machine). The first
    # finding may come from 3 s of samples (the wait ±19 points): its count is then provisional, and
    # the range it says fits must reach what the job needs.
    low, high = ev["suggested_range"]
    assert low <= 40 and high >= 4 and ev["workers_needed"] <= 40
    assert ev["provisional"] or ev["workers_needed"] >= 4, (ev, finding.detail)


def test_idle_workers_get_a_smaller_count(start_job, attach):
    """4 workers, 4 ms of work per batch against a 50 ms step: one worker keeps up."""
    job = start_job("--workers", "4", "--persistent", "--sample-ms", "1", "--step-ms", "50", "--batches", "1000")
    job.wait_workers(4)
    ticks, findings = watch(attach(job.pid), lambda t, f: "too-many-workers" in ids(f), 60, "too-many-workers")
    (finding,) = [f for f in findings if f.id == "too-many-workers"]
    assert 1 <= finding.evidence["suggested_workers"] <= 2 and finding.evidence["memory_freed_bytes"] > 0
    # under 5% within two standard errors: it may fire on ~20 samples, where one is 5%
    (loader,) = ticks[-1].loaders
    assert finding.evidence["data_wait_percent"] - 200 * wait_error(loader) < 5, loader.trainer_time
    assert "input-bound" not in ids(findings) and finding.pids == [job.pid]


def test_copy_on_read_growth_is_caught_with_its_rate(start_job, attach):
    """The dataset holds 160 MB of Python objects; each worker reads its share of them (fork):
    about 80 MB per worker over a 45 s epoch, ~1.8 MB/s each."""
    job = start_job("--workers", "2", "--persistent", "--objects-mb", "160", "--sample-ms", "0", "--step-ms", "30",
                    "--batches", "1500")  # fmt: skip
    job.wait_workers(2)
    ticks, findings = watch(attach(job.pid), lambda t, f: "worker-memory-growth" in ids(f), 60, "worker-memory-growth")
    (finding,) = [f for f in findings if f.id == "worker-memory-growth"]
    assert set(finding.pids) <= set(job.live_workers()) and finding.pids
    per_worker = list(finding.evidence["per_worker_bytes_per_s"].values())
    assert all(0.3 * MB <= rate <= 6 * MB for rate in per_worker), per_worker
    assert finding.evidence["start_method"] == "fork" and "numpy" in finding.suggestion


def test_a_healthy_job_gets_no_warnings(start_job, attach):
    """2 workers busy ~60% keep a 20 ms step fed: nothing to fix, nothing raised."""
    job = start_job("--workers", "2", "--persistent", "--sample-ms", "6", "--step-ms", "20", "--batches", "1000")
    job.wait_workers(2)
    began = time.monotonic()
    ticks, findings = watch(attach(job.pid), lambda t, f: time.monotonic() - began > 20, 40, "20 s")
    assert [f for f in findings if f.severity != "info"] == []
    assert not {"input-bound", "too-many-workers", "cpu-oversubscribed"} & set(ids(findings)), findings


def test_workers_fighting_for_one_cpu_are_oversubscribed(start_job, attach):
    """3 CPU-bound workers and their trainer pinned to one CPU (taskset): they want ~3 CPUs."""
    job = start_job("--workers", "3", "--persistent", "--sample-ms", "20", "--step-ms", "0",
                    launcher=["taskset", "-c", "0", sys.executable])  # fmt: skip
    job.wait_workers(3)
    ticks, findings = watch(attach(job.pid), lambda t, f: "cpu-oversubscribed" in ids(f), 60, "cpu-oversubscribed")
    (finding,) = [f for f in findings if f.id == "cpu-oversubscribed"]
    assert finding.evidence["cpus_allowed"] == 1 and finding.evidence["cpu_waiting"] >= 0.5
    assert "num_workers=1" in finding.suggestion and finding.pids == [job.pid]


def test_a_python_thread_beside_the_trainers_main_one_is_not_intra_op_work(start_job, attach):
    """A trainer whose log compressor (a Python thread: zlib, the GIL released) uses about half a
    core, beside one CPU-bound worker on 2 CPUs: OMP_NUM_THREADS would leave that thread as it is,
    so none of its CPU counts as intra-op threads and no fewer of them are asked for."""
    job = start_job("--workers", "1", "--persistent", "--sample-ms", "6", "--step-ms", "5", "--busy-thread")
    job.wait_workers(1)
    ticks, findings = watch(attach(job.pid), lambda t, f: len(t) >= 16 and "input-bound" in ids(f), 60, "input-bound")
    # read from its second reading after the samples first name it: every one of the last 8 ticks
    python = [p.python_threads_cpu_percent for t in ticks[-8:] for p in t.processes if p.pid == job.pid]
    assert all(share is not None for share in python) and sorted(python)[len(python) // 2] >= 20, python
    (finding,) = [f for f in findings if f.id == "input-bound"]
    assert finding.evidence["trainer_threads_cpu"] < 0.15, finding.evidence
    assert "OMP_NUM_THREADS" not in (finding.evidence["change"] or {}), finding.suggestion


def test_one_steady_job_gets_one_suggestion_in_the_live_view_and_in_two_reports(start_job):
    """The demo's input-bound job watched live for 20 s: the suggestion shown moves only as its
    evidence firms up past the noise it was first shown within (the window grows from 1 s to 20 s:
    at most twice, each time says what it replaced), never back to a count it left. Two
    separate 12 s reports (as a user would take, one after the other, taken while the live view
    watches: the same job, and no idle wait for either) never contradict each other: both ask for
    more workers, and their ranges share a count (their data waits differ by more than their
    samples' error on a loaded 2-core machine, so one count each is not promised)."""
    import json

    from dltop.demo.scenarios import SCENARIOS
    from dltop.live.loop import open_loop
    from tests.support import run_dltop

    job = start_job(*SCENARIOS["input-bound"])
    job.wait_workers(1)
    taken: list = []  # the two reports' results, in order

    def take_reports() -> None:
        for _ in range(2):
            taken.append(run_dltop("snapshot", "--pid", str(job.pid), "--duration", "12", "--json"))

    reporter = threading.Thread(target=take_reports, name="reports", daemon=True)
    loop = open_loop(job.pid)
    shown, details = [], []
    reporter.start()
    try:
        for _ in range(20):
            snap = loop.step()
            found = [f for f in snap.findings if f.id == "input-bound"]
            shown += [f.evidence["suggested_workers"] for f in found]
            details += [f.detail for f in found]
            time.sleep(1)
    finally:
        loop.close()
        reporter.join(timeout=150)  # each report's run_dltop gives up after 60 s
    changes = [i for i in range(1, len(shown)) if shown[i] != shown[i - 1]]
    counts = [shown[0], *(shown[i] for i in changes)]
    # the demo's own 9 -> 10 -> 9 -> 8 -> 9 fails here
    assert len(shown) >= 10 and len(changes) <= 2 and len(set(counts)) == len(counts), shown
    for i in changes:
        assert f"It said {shown[i - 1]} until" in details[i], details[i]
    assert not reporter.is_alive() and len(taken) == 2, taken
    reports = []
    for result in taken:
        assert result.returncode == 0, result.stderr
        (finding,) = [f for f in json.loads(result.stdout)["findings"] if f["id"] == "input-bound"]
        reports.append(finding["evidence"])
    assert all(r["suggested_workers"] > r["num_workers"] for r in reports), reports
    (low_a, high_a), (low_b, high_b) = (r["suggested_range"] for r in reports)
    assert max(low_a, low_b) <= min(high_a, high_b), reports  # a count both reports accept
