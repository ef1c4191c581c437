"""The flight recorder: `dltop record` on real jobs (a clean exit, a deadlocked worker, SIGKILL),
damaged files, --max-size, `dltop replay` scripted and through Pilot, an SVG of the replay screen."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dltop.model import snapshot_from_dict
from dltop.record import format as fmt
from dltop.record.reader import Recording
from dltop.record.writer import RecordingWriter
from tests.support import ROOT, assert_one_line_error, run_dltop, wait_for

SNAPSHOTS = ROOT / "tests/fixtures/snapshots"
PID_MAX = int(Path("/proc/sys/kernel/pid_max").read_text())
SYNTHETIC_START = 1_780_000_000.0  # 2026-05-28 20:26:40 UTC


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


def write_synthetic(path: Path, docs: list, start: float = SYNTHETIC_START, incidents: tuple = (),
                    max_size=None) -> None:  # fmt: skip
    """A recording of ``docs``, one a second from ``start``; an incident record after each frame
    number in ``incidents`` (for its first error finding)."""
    header = {"schema": fmt.SCHEMA, "recording_id": "synthetic", "host": "test", "job": docs[0]["job"],
              "settings": {"interval_s": 1.0}}  # fmt: skip
    writer = RecordingWriter(path, header, max_size)
    for frame, doc in enumerate(docs):
        snap = snapshot_from_dict(doc)
        writer.frame(start + frame, fmt.pack(doc), fmt.frame_meta(snap.job.state, snap.findings))
        if frame in incidents:
            finding = next(f for f in doc["findings"] if f["severity"] == "error")
            writer.incident(start + frame, {"number": incidents.index(frame) + 1, "finding": finding, "bundle": None})
    writer.close("synthetic")


def fixture_doc(name: str) -> dict:
    return json.loads((SNAPSHOTS / f"{name}.json").read_text())


def hung_story(frames: int = 300, hung_from: int = 180) -> list:
    """Healthy, then a worker deadlocks (the hung-worker fixture) until the end."""
    healthy, hung = fixture_doc("healthy"), fixture_doc("hung-worker")
    return [healthy if i < hung_from else hung for i in range(frames)]


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


def test_a_moment_at_either_end_is_inside_the_recording(tmp_path):
    """Ends are inclusive to the whole second, as people read them: a recording of 19.0 s from a
    start at .7 s ends before +19.2s, and the summary calls it 19 s long."""
    path = tmp_path / "end.dltop"
    write_synthetic(path, [fixture_doc("healthy")] * 20, start=SYNTHETIC_START + 0.7)
    for at in ("+19s", "+19.2s", "end", "start", "+0s"):
        result = run_dltop("replay", str(path), "--at", at, "--json")
        assert result.returncode == 0, (at, result.stderr)
    assert_one_line_error(run_dltop("replay", str(path), "--at", "+21s"), "outside the recording")


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_group_access_lets_that_group_read_and_no_one_else(tmp_path):
    from dltop.record.access import access_for

    group = str(os.getgid())
    access = access_for(group)
    write = RecordingWriter(tmp_path / "g.dltop", {"schema": fmt.SCHEMA, "job": {}}, access=access)
    write.close("test")
    access.mkdir(tmp_path / "bundle")
    access.write_text(tmp_path / "bundle" / "report.txt", "x")
    for path, expected in ((tmp_path / "g.dltop", 0o640), (fmt.index_path(tmp_path / "g.dltop"), 0o640),
                           (tmp_path / "bundle", 0o750), (tmp_path / "bundle" / "report.txt", 0o640)):  # fmt: skip
        assert mode(path) == expected and path.stat().st_gid == int(group), path
    old = os.umask(0)  # a permissive umask changes nothing: never the world's
    try:
        private = RecordingWriter(tmp_path / "p.dltop", {"schema": fmt.SCHEMA, "job": {}})
        private.close("test")
    finally:
        os.umask(old)
    assert mode(tmp_path / "p.dltop") == 0o600
    assert_one_line_error(run_dltop("record", "--pid", "1", "--group", "no-such-group-here"), "no such group")


def test_not_a_recording_newer_formats_and_bad_pids_are_one_line(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    assert_one_line_error(run_dltop("replay", str(text)), "not a dltop recording")
    assert_one_line_error(run_dltop("replay", str(tmp_path / "missing.dltop")), "no recording at")
    newer = tmp_path / "newer.dltop"
    newer.write_bytes(fmt.PREAMBLE.pack(fmt.MAGIC, fmt.FORMAT + 1) + b"\0" * 64)
    assert_one_line_error(run_dltop("replay", str(newer), "--summary"), f"format {fmt.FORMAT + 1}")
    schema = tmp_path / "schema.dltop"
    writer = RecordingWriter(schema, {"schema": "dltop.recording/9", "recording_id": "x"})
    writer.close("test")
    assert_one_line_error(run_dltop("replay", str(schema)), "dltop.recording/9")
    assert_one_line_error(run_dltop("record", "--pid", str(PID_MAX + 1)), "no process with pid")
    # a folder that is not there: one line, before any word about recording
    assert_one_line_error(run_dltop("record", "--pid", str(os.getpid()), "-o", "/nonexistent/dir/x.dltop"),
                          "there is no directory /nonexistent/dir")  # fmt: skip
    assert_one_line_error(run_dltop("replay", str(schema), "--json"), "--json goes with")


def test_a_slow_hook_is_killed_with_what_it_started():
    from dltop.record.incidents import run_hook

    began = time.monotonic()
    outcome = run_hook("sleep 30 & echo $! > /dev/null; sleep 30", {}, timeout_s=0.5)
    assert outcome == "timed out after 0.5s (killed)" and time.monotonic() - began < 10
    assert run_hook("exit 0", {}, 5) is None


# -- the replay screen ------------------------------------------------------------------------------


@pytest.fixture
def utc(monkeypatch):
    """Times shown in UTC, whatever this machine's zone (the SVG must not depend on it)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_replay_navigation_through_pilot(tmp_path, utc):
    from dltop.tui.replay import GotoScreen, ReplayApp, ReplayHelpScreen, TimelineBar
    from dltop.tui.screens import StackScreen

    path = tmp_path / "story.dltop"
    docs = hung_story()
    write_synthetic(path, docs, incidents=(180,))

    async def run():
        with Recording(path) as recording:
            app = ReplayApp(recording)
            async with app.run_test(size=(110, 34), notifications=True) as pilot:
                await wait_shown(pilot)
                assert app.cursor == 0 and app.snapshot.taken_at == docs[0]["taken_at"]
                await pilot.press("right", "right", "left")
                assert app.cursor == 1
                await pilot.press("right_square_bracket")
                assert app.cursor == 61
                await pilot.press("n")
                assert app.cursor == 180 and [f.id for f in app.snapshot.findings][0] == "worker-hung"
                bar = str(app.query_one(TimelineBar).render())
                assert "REPLAY  2026-05-28 20:29:40 UTC · frame 181/300" in bar and "▼" in bar
                await pilot.press("N")
                assert app.cursor == 180 and "No earlier incident" in said(app)
                await pilot.press("g")
                assert isinstance(app.screen, GotoScreen)
                await pilot.press(*"20:28:00", "enter")
                assert app.cursor == 80 and not isinstance(app.screen, GotoScreen)
                await pilot.press("g", *"+4h", "enter")
                assert app.cursor == 80 and "outside the recording" in said(app)
                app.goto(200)
                await pilot.pause()
                hung_worker = next(f for f in app.snapshot.findings if f.id == "worker-hung").pids[0]
                app.query_one("WorkersTable").move_cursor(app.query_one("WorkersTable").keys.index(str(hung_worker)))
                await pilot.press("s")
                assert isinstance(app.screen, StackScreen)
                await pilot.press("left", "d")
                assert app.cursor == 199 and "no live process to dump" in said(app)
                await pilot.press("escape", "question_mark")
                assert isinstance(app.screen, ReplayHelpScreen)
                await pilot.press("escape", "shift+left", "space")
                assert app.cursor == 139
                await pilot.pause(1.5)
                await pilot.press("space")
                assert app.cursor > 139  # played on at the recorded pace

    asyncio.run(run())


def said(app) -> str:
    return " | ".join(str(n.message) for n in app._notifications)


async def wait_shown(pilot) -> None:
    while pilot.app.snapshot is None:
        await pilot.pause(0.05)


def test_snapshot_replay_screen(snap_compare, tmp_path, utc):
    from dltop.tui.replay import ReplayApp

    path = tmp_path / "story.dltop"
    write_synthetic(path, hung_story(), incidents=(180,))
    recording = Recording(path)

    async def at_the_incident(pilot):
        await wait_shown(pilot)
        await pilot.press("n", "right", "right")

    try:
        assert snap_compare(ReplayApp(recording), terminal_size=(110, 34), run_before=at_the_incident)
    finally:
        recording.close()
