"""The flight recorder without a job: recordings written by hand, moments at either end, group
access, bad files, a slow hook, `dltop replay` through Pilot and an SVG of the replay screen."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from dltop.record import format as fmt
from dltop.record.reader import Recording
from dltop.record.writer import RecordingWriter
from tests.recordings import SYNTHETIC_START, mode, write_synthetic
from tests.support import ROOT, assert_one_line_error, run_dltop

SNAPSHOTS = ROOT / "tests/fixtures/snapshots"
PID_MAX = int(Path("/proc/sys/kernel/pid_max").read_text())


def fixture_doc(name: str) -> dict:
    return json.loads((SNAPSHOTS / f"{name}.json").read_text())


def hung_story(frames: int = 300, hung_from: int = 180) -> list:
    """Healthy, then a worker deadlocks (the hung-worker fixture) until the end."""
    healthy, hung = fixture_doc("healthy"), fixture_doc("hung-worker")
    return [healthy if i < hung_from else hung for i in range(frames)]


def test_a_moment_at_either_end_is_inside_the_recording(tmp_path):
    """Ends are inclusive to the whole second, as people read them: a recording of 19.0 s from a
    start at .7 s ends before +19.2s, and the summary calls it 19 s long."""
    path = tmp_path / "end.dltop"
    write_synthetic(path, [fixture_doc("healthy")] * 20, start=SYNTHETIC_START + 0.7)
    for at in ("+19s", "+19.2s", "end", "start", "+0s"):
        result = run_dltop("replay", str(path), "--at", at, "--json")
        assert result.returncode == 0, (at, result.stderr)
    assert_one_line_error(run_dltop("replay", str(path), "--at", "+21s"), "outside the recording")


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


def test_an_index_that_chains_by_itself_but_points_between_records_is_not_trusted(tmp_path):
    """Another file's index can be whole (entry to entry) and land on this file's first and last
    records while pointing between the others: the reader checks entries against the data."""
    path = tmp_path / "r.dltop"
    docs = [fixture_doc("healthy"), fixture_doc("hung-worker"), fixture_doc("input-bound"), fixture_doc("healthy")]
    write_synthetic(path, docs)
    index = fmt.index_path(path).read_bytes()
    entries = list(fmt.INDEX.iter_unpack(index[fmt.PREAMBLE.size :]))
    (time_1, offset_1, size_1, kind_1, flags_1), (_, _, size_2, _, _) = entries[1:3]
    merged = (time_1, offset_1, size_1 + size_2, kind_1, flags_1)  # frames 0 and 1 as one record
    forged = [entries[0], merged, *entries[3:]]
    fmt.index_path(path).write_bytes(index[: fmt.PREAMBLE.size] + b"".join(fmt.INDEX.pack(*e) for e in forged))
    with Recording(path) as recording:
        assert [recording.document(i) for i in range(len(recording))] == docs
