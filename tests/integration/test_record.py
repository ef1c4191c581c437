"""`dltop record` on real jobs (a clean exit, a deadlocked worker, SIGKILL), and --max-size and
damaged files of a real recording replayed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dltop.record import format as fmt
from dltop.record.reader import Recording
from tests.recordings import SYNTHETIC_START, mode, write_synthetic
from tests.support import ROOT, assert_one_line_error, run_dltop, wait_for


def start_record(*args: str) -> subprocess.Popen:
    """`dltop record ARGS` in a session of its own (the test kills it if it is still running)."""
    return subprocess.Popen([sys.executable, "-m", "dltop", "record", *args], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip


def finish(proc: subprocess.Popen, sig=None, timeout: float = 60) -> str:
    """Stop `dltop record` (by ``sig``, else wait for it to end by itself); its stderr."""
    if sig is not None:
        proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return err


def documents(path: Path) -> list:
    with Recording(path) as recording:
        return [recording.document(i) for i in range(len(recording))]


# -- real jobs ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exited_recording(tmp_path_factory):
    """A 2-worker job recorded at 0.5 s until it exits by itself: (path, ground-truth workers, stderr, rc)."""
    from tests.support import TRAIN, Job

    where = tmp_path_factory.mktemp("exited")
    report = where / "report"
    report.mkdir()
    command = [sys.executable, str(TRAIN), "--report", str(report), "--workers", "2", "--persistent",
               "--epochs", "1", "--batches", "150", "--step-ms", "40"]  # fmt: skip
    job = Job(subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL), report)  # fmt: skip
    try:
        workers = set(job.wait_workers(2))
        path = where / "job.dltop"
        proc = start_record("--pid", str(job.pid), "-o", str(path), "--interval", "0.5", "--no-stacks")
        err = finish(proc, timeout=90)
    finally:
        job.stop()
    return path, workers, err, proc.returncode


def test_record_until_the_job_exits_then_replay_it(exited_recording):
    path, workers, err, returncode = exited_recording
    assert returncode == 0, err
    docs = documents(path)
    with Recording(path) as recording:
        assert recording.end["reason"] == "the job exited" and recording.end["frames"] == len(recording)
        assert recording.stopped is None
        recorded_s = recording.times[-1] - recording.times[0]
    assert f"{len(docs)} frames" in err
    ticks = recorded_s / 0.5
    assert 0.5 * ticks <= len(docs) - 1 <= ticks + 2  # one frame a tick, on schedule
    assert docs[-1]["job"]["state"] == "exited" and all(d["job"]["state"] == "running" for d in docs[:-1])
    seen = {p["pid"] for d in docs for p in d["processes"] if p["role"] == "worker"}
    assert workers <= seen

    middle = docs[len(docs) // 2]["taken_at"]
    newest_of_that_second = [d for d in docs if d["taken_at"] == middle][-1]
    result = run_dltop("replay", str(path), "--at", middle, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == newest_of_that_second
    text = run_dltop("replay", str(path), "--at", "+1s")
    assert text.returncode == 0 and f"job {docs[0]['job']['pid']}" in text.stdout and "worker" in text.stdout
    assert_one_line_error(run_dltop("replay", str(path), "--at", "+3h"), "outside the recording")

    summary = json.loads(run_dltop("replay", str(path), "--summary", "--json").stdout)
    assert summary["frames"] == len(docs) and summary["ended"] == "the job exited"
    assert summary["job_exited_at"] == docs[-1]["taken_at"]


def test_a_deadlocked_worker_gives_one_bundle_and_one_hook_run(start_job, tmp_path):
    job = start_job("--workers", "2", "--persistent", "--hang", "lock", "--hang-at", "8", "--step-ms", "5")
    job.wait_workers(2)
    path, hooks = tmp_path / "hang.dltop", tmp_path / "hooks.txt"
    hook = f'echo "$DLTOP_FINDING_ID|$DLTOP_FINDING_TITLE|$DLTOP_INCIDENT_DIR" >> {hooks}; exit 3'
    proc = start_record("--pid", str(job.pid), "-o", str(path), "--interval", "0.5", "--hang-after", "3",
                        "--on-incident", hook)  # fmt: skip
    try:
        wait_for(lambda: hooks.exists(), 60, "the incident's hook")
        time.sleep(4)  # the hang goes on: still one incident
    finally:
        err = finish(proc, signal.SIGTERM)
    assert proc.returncode == 0, err
    (bundle,) = tmp_path.glob("hang.incident-*")
    assert bundle.name == "hang.incident-1-worker-hung"
    incident = json.loads((bundle / "incident.json").read_text())
    assert incident["finding"]["id"] == "worker-hung" and "_hang" in incident["finding"]["title"]
    hung_pid = incident["finding"]["pids"][0]
    stacks = (bundle / "stacks.txt").read_text()
    worker_part = stacks.split(f"worker {hung_pid} ")[1]
    assert "▶ _hang (" in worker_part and "_FLUSH_LOCK" in worker_part  # the stuck frame and its source line
    assert "worker-hung" in (bundle / "report.txt").read_text()
    # the bundle holds stacks with source lines and log tails: the recording user's alone
    assert mode(bundle) == 0o700 and {mode(f) for f in bundle.iterdir()} == {0o600}
    assert mode(path) == mode(fmt.index_path(path)) == 0o600
    assert incident["access"]["recorded_by"] == incident["access"]["job_user"] == psutil.Process().username()
    with Recording(bundle / "frames.dltop") as frames:
        assert len(frames) >= 2 and frames.document(len(frames) - 1)["findings"]
    (line,) = hooks.read_text().splitlines()
    assert line == f"worker-hung|{incident['finding']['title']}|{bundle}"
    assert "--on-incident exited with code 3" in err  # reported, and the recording went on
    outcome = (bundle / "on-incident.txt").read_text()
    assert outcome == "--on-incident: exited with code 3\n" and "echo" not in outcome  # not the command: a token?
    with Recording(path) as recording:
        (marked,) = recording.incidents
        assert marked["bundle"] == bundle.name and recording.times[-1] - marked["at"] >= 3
    summary = run_dltop("replay", str(path), "--summary").stdout
    assert "INCIDENT 1 worker-hung" in summary and "raised   [error] worker-hung" in summary


def test_sigkill_mid_recording_replays_to_the_last_frame_and_max_size_holds(start_job, tmp_path):
    job = start_job("--workers", "2", "--persistent", "--step-ms", "20")
    job.wait_workers(2)
    path = tmp_path / "killed.dltop"
    proc = start_record("--pid", str(job.pid), "-o", str(path), "--interval", "0.2", "--max-size", "32K")
    try:
        wait_for(lambda: path.exists() and len(list(tmp_path.glob("killed.dltop*"))) >= 2, 30, "the recording")
        time.sleep(5)
    finally:
        finish(proc, signal.SIGKILL)
    on_disk = sum(p.stat().st_size for p in tmp_path.glob("killed.dltop*"))
    assert on_disk <= 32 << 10
    with Recording(path) as recording:
        assert recording.end is None and len(recording) >= 5
        recording.document(len(recording) - 1)  # the last complete frame decodes
    summary = run_dltop("replay", str(path), "--summary")
    assert summary.returncode == 0 and "ended: not cleanly" in summary.stdout


def test_max_size_drops_the_oldest_parts(exited_recording, tmp_path):
    docs = documents(exited_recording[0]) * 30
    path = tmp_path / "rotated.dltop"
    write_synthetic(path, docs, max_size=32 << 10)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [
        f"rotated.dltop{suffix}" for suffix in ("", ".1", ".1.idx", ".2", ".2.idx", ".3", ".3.idx", ".idx")
    ]
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 32 << 10
    with Recording(path) as recording:
        kept = len(recording)
        assert recording.dropped and 0 < kept < len(docs) and recording.end["reason"] == "synthetic"
        assert [recording.document(i) for i in (0, kept - 1)] == [docs[len(docs) - kept], docs[-1]]
        assert list(recording.times) == [SYNTHETIC_START + i for i in range(len(docs) - kept, len(docs))]
    assert "older frames were dropped" in run_dltop("replay", str(path), "--summary").stdout


# -- damaged and foreign files ------------------------------------------------------------------------


def test_a_garbage_tail_or_a_cut_replays_to_the_last_good_frame(exited_recording, tmp_path):
    source = exited_recording[0]
    docs, size = documents(source), source.stat().st_size
    garbage = tmp_path / "garbage.dltop"
    garbage.write_bytes(source.read_bytes() + os.urandom(3000))
    index = fmt.index_path(source).read_bytes()
    fmt.index_path(garbage).write_bytes(index)
    cut = tmp_path / "cut.dltop"  # power lost mid-write: a frame half there, no index
    *_, (_, last_frame, last_size, kind, _), _end = fmt.INDEX.iter_unpack(index[fmt.PREAMBLE.size :])
    assert kind in fmt.FRAMES
    cut.write_bytes(source.read_bytes()[: last_frame + last_size - 10])
    for path, frames, stop in ((garbage, len(docs), size), (cut, len(docs) - 1, last_frame)):
        with Recording(path) as recording:
            assert len(recording) == frames, path
            assert f"stopped at byte {stop:,} of {path.stat().st_size:,}" in recording.stopped
            assert recording.document(frames - 1) == docs[frames - 1]
    result = run_dltop("replay", str(garbage), "--at", "end", "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["job"]["state"] == "exited"
    assert "stopped at byte" in result.stderr
    other, stale = tmp_path / "other.dltop", tmp_path / "stale.dltop"  # another file's index is not trusted
    write_synthetic(other, docs[:3])
    stale.write_bytes(source.read_bytes())
    fmt.index_path(stale).write_bytes(fmt.index_path(other).read_bytes())
    assert documents(stale) == docs
