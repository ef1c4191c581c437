"""The TUI: pilot tests against real jobs, SVG snapshots of recorded reports, view functions on
hand-built snapshots, and one run of `dltop demo` in a real terminal (tmux)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from dltop.model import ExitedWorker, Finding, snapshot_from_dict
from dltop.tui import view
from tests.support import ROOT, assert_one_line_error, run_dltop, wait_for
from tests.windows import bound_window

RECORDINGS = ROOT / "tests/fixtures/snapshots"
PID_MAX = int(Path("/proc/sys/kernel/pid_max").read_text())


def recorded(name: str):
    return snapshot_from_dict(json.loads((RECORDINGS / f"{name}.json").read_text()))


def recorded_app(name: str):
    from dltop.tui.app import DltopApp
    from dltop.tui.source import RecordedSource

    source = RecordedSource([recorded(name)])
    return DltopApp(lambda: source, interval=3600)


def live_app(pid: int, **kwargs):
    from dltop.live import open_loop
    from dltop.tui.app import DltopApp

    source = open_loop(pid, kwargs.pop("hang_after_s", 20.0))
    return DltopApp(lambda: source, interval=0.5, **kwargs)


async def until(pilot, condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await pilot.pause(0.2)


def table_pids(app) -> set:
    from dltop.tui.widgets import WorkersTable

    return {int(key) for key in app.query_one(WorkersTable).keys if key.isdigit()}


# -- pilot tests against real jobs -------------------------------------------------------------------


def test_table_shows_the_real_workers_and_a_workers_stack(start_job):
    from dltop.tui.screens import StackScreen
    from dltop.tui.widgets import WorkersTable

    job = start_job("--workers", "2", "--persistent", "--sample-ms", "5", "--step-ms", "20")
    workers = set(job.wait_workers(2))

    async def run():
        app = live_app(job.pid)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: table_pids(app) >= workers | {job.pid}, 30, "the job's pids in the table")
            assert table_pids(app) == workers | {job.pid}
            table = app.query_one(WorkersTable)
            worker = sorted(workers)[0]
            table.move_cursor(row=table.keys.index(str(worker)))
            await pilot.press("s")
            assert isinstance(app.screen, StackScreen) and app.screen.pid == worker
            text = lambda: str(app.screen.query_one("#stack").render())  # noqa: E731
            await until(pilot, lambda: "_worker_loop" in text(), 30, "the worker's stack")
            assert f"worker {worker}" in text()
            await pilot.press("escape")
            assert not isinstance(app.screen, StackScreen)

    asyncio.run(run())


def test_a_hung_worker_turns_the_badge_and_names_the_frame(start_job):
    from dltop.tui.widgets import FindingsPanel

    job = start_job("--workers", "2", "--persistent", "--hang", "lock", "--hang-at", "8", "--step-ms", "5")
    job.wait_workers(2)

    async def run():
        app = live_app(job.pid, hang_after_s=3.0)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.snapshot and view.badge(app.snapshot).state == "hung", 60, "HUNG")
            (hung,) = [f for f in app.query_one(FindingsPanel).findings if f.id == "worker-hung"]
            assert "_hang" in hung.title
            rows = {r.pid: r for r in view.rows(app.snapshot)}
            assert rows[hung.pids[0]].alert == "hung"

    asyncio.run(run())


def test_the_job_exiting_keeps_the_last_view(start_job):
    job = start_job("--workers", "2", "--epochs", "1", "--batches", "30", "--step-ms", "50")
    job.wait_workers(2)

    async def run():
        app = live_app(job.pid)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.snapshot and app.snapshot.job.state == "exited", 60, "the exit")
            await pilot.pause(1.0)
            assert app.is_running and view.badge(app.snapshot).state == "exited"
            await pilot.press("q")
        assert app.return_code in (0, None)

    asyncio.run(run())


def test_the_picker_lists_a_running_job_and_attaches(start_job):
    from textual.widgets import DataTable

    from dltop.live import open_loop
    from dltop.tui.app import DltopApp
    from dltop.tui.screens import PickerScreen

    job = start_job("--workers", "1", "--persistent", "--step-ms", "20")
    worker = set(job.wait_workers(1))

    async def run():
        app = DltopApp(lambda pid: open_loop(pid), interval=0.5, pick=True)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, PickerScreen), 10, "the picker")
            jobs = app.screen.query_one("#jobs", DataTable)
            await until(pilot, lambda: str(job.pid) in [k.value for k in jobs.rows], 30, "the job in the picker")
            jobs.move_cursor(row=[k.value for k in jobs.rows].index(str(job.pid)))
            await pilot.press("enter")
            await until(pilot, lambda: table_pids(app) >= worker | {job.pid}, 30, "the job's table")

    asyncio.run(run())


def test_a_bad_pid_is_one_line():
    assert_one_line_error(run_dltop("--pid", str(PID_MAX + 1)), "no process with pid")


def test_keys_sort_pause_help_and_the_palette():
    from dltop.tui.screens import HelpScreen
    from dltop.tui.widgets import JobHeader, WorkersTable

    async def run():
        app = recorded_app("healthy")
        async with app.run_test(size=(100, 30)) as pilot:
            await _shown(pilot)
            table = app.query_one(WorkersTable)
            await pilot.press("o")
            by_cpu = [r.pid for r in view.rows(app.snapshot, "cpu")]
            assert table.sort_by == "cpu" and [int(k) for k in table.keys] == by_cpu
            await pilot.press("p")
            assert app.paused and "PAUSED" in str(app.query_one(JobHeader).render())
            await pilot.press("p", "question_mark")
            assert not app.paused and isinstance(app.screen, HelpScreen)
            await pilot.press("escape")
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert {"Sort by cpu", "Bench the fix", "Stack"} <= set(titles)

    asyncio.run(run())


# -- SVG snapshots of recorded reports (deterministic) -------------------------------------------


async def _shown(pilot) -> None:
    while pilot.app.snapshot is None:
        await pilot.pause(0.05)


def test_snapshot_healthy(snap_compare):
    assert snap_compare(recorded_app("healthy"), terminal_size=(100, 30), run_before=_shown)


def test_snapshot_input_bound_at_80x24(snap_compare):
    assert snap_compare(recorded_app("input-bound"), terminal_size=(80, 24), run_before=_shown)


def test_snapshot_hung_worker_stack(snap_compare):
    async def open_stack(pilot):
        await _shown(pilot)
        await pilot.press("down", "s")

    assert snap_compare(recorded_app("hung-worker"), terminal_size=(100, 30), run_before=open_stack)


# -- view functions --------------------------------------------------------------------------------------


def finding(fid, severity="warning", pids=(1,)):
    return Finding(fid, severity, "t", "d", list(pids), {}, "s")


@pytest.mark.parametrize(
    "ids, state",
    [((), "healthy"), (("too-many-workers",), "healthy"), (("input-bound",), "input-bound"),
     (("input-bound", "worker-hung"), "hung"), (("worker-died",), "dead"), (("fd-near-limit",), "attention")],
)  # fmt: skip
def test_badge(ids, state):
    snap = bound_window(10.0)[0]
    severities = {"too-many-workers": "info"}
    found = [finding(i, severities.get(i, "warning")) for i in ids]
    assert view.badge(dataclasses.replace(snap, findings=found)).state == state
    exited = dataclasses.replace(snap, job=dataclasses.replace(snap.job, state="exited", exit_code=-9))
    assert view.badge(exited).text == "EXITED (-9)"


def test_rows_group_workers_under_their_trainer_and_show_the_dead():
    snap = bound_window(10.0, workers=2)[0]
    second = [dataclasses.replace(p, pid=p.pid + 100, trainer_pid=101) for p in snap.processes]
    dead = ExitedWorker(99, 1, 5.0, "t", exit_code=-9, cause="died")
    loaders = [dataclasses.replace(snap.loaders[0], workers_exited=[dead])]
    snap = dataclasses.replace(snap, processes=snap.processes + second, loaders=loaders)
    assert [r.pid for r in view.rows(snap)] == [1, 10, 11, 99, 101, 110, 111]
    (died,) = [r for r in view.rows(snap) if r.pid == 99]
    assert died.alert == "dead" and died.cells["activity"] == "DIED SIGKILL"
    assert [r.pid for r in view.rows(snap, "pid")] == [1, 10, 11, 99, 101, 110, 111]


# -- a real terminal ----------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_dltop_demo_in_a_real_terminal():
    session = f"dltop-test-{time.monotonic_ns()}"
    command = f"cd {ROOT} && exec python -m dltop demo --scenario healthy"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "30", command], check=True)
    try:

        def screen() -> str:
            return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout

        wait_for(lambda: "└ worker" in screen(), 90, "the worker table in tmux")
        assert "HEALTHY" in screen() or "data wait" in screen()
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        wait_for(lambda: subprocess.run(["tmux", "has-session", "-t", session]).returncode != 0, 30, "dltop to quit")
        wait_for(lambda: not _demo_jobs(), 15, "the demo job to be gone")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        for pid in _demo_jobs():
            subprocess.run(["kill", "-9", str(pid)])


def _demo_jobs() -> list:
    out = subprocess.run(["pgrep", "-f", "dltop.demo.job"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_the_gpu_panel_draws_history_and_the_jobs_memory():
    from dltop.tui.widgets import GpuPanel

    windows = [bound_window(10.0, gpu_util=u)[0] for u in (0.0, 50.0, 100.0)]

    async def run():
        source_snaps = iter(windows)
        from dltop.tui.app import DltopApp
        from dltop.tui.source import RecordedSource

        app = DltopApp(lambda: RecordedSource(windows[:1]), interval=3600)
        async with app.run_test(size=(100, 30)) as pilot:
            await _shown(pilot)
            for snap in source_snaps:
                app.show(snap)
            text = str(app.query_one(GpuPanel).render())
            assert "GPU0 100% ▁▁▅█" in text and "(job 1.0G)" in text  # first frame, then 0, 50, 100
            assert view.gpu_util(windows[1]) == 50.0

    asyncio.run(run())


def test_a_collection_error_keeps_the_last_view_and_says_why():
    from dltop.tui.app import DltopApp

    class Failing:
        pid = 1

        def __init__(self):
            self.calls = 0

        def step(self):
            self.calls += 1
            if self.calls > 1:
                raise OSError("proc vanished")
            return recorded("healthy")

        def watch(self, pid):
            pass

        def close(self):
            pass

    async def run():
        app = DltopApp(Failing, interval=0.05)
        async with app.run_test(size=(100, 30), notifications=True) as pilot:
            await _shown(pilot)
            await pilot.pause(0.5)
            assert app.is_running and app.snapshot is not None
            assert any("proc vanished" in str(n.message) for n in app._notifications)

    asyncio.run(run())
