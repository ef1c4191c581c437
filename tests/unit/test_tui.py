"""The TUI on recorded reports and hand-built snapshots: keys, layout, SVG snapshots, badges and
view functions."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from dltop import install_hint
from dltop.collect.processes.stats import NOT_READ_YET
from dltop.diagnose.relations import grouped
from dltop.model import ExitedWorker, Finding, Pending, snapshot_from_dict
from dltop.tui import view
from tests.support import ROOT, assert_one_line_error, run_dltop
from tests.windows import bound_window

RECORDINGS = ROOT / "tests/fixtures/snapshots"
PID_MAX = int(Path("/proc/sys/kernel/pid_max").read_text())


def recorded(name: str):
    return snapshot_from_dict(json.loads((RECORDINGS / f"{name}.json").read_text()))


def recorded_app(name: str, change=lambda snap: snap):
    from dltop.tui.app import DltopApp

    return DltopApp(first=change(recorded(name)))


def explained(snap):
    """The hung-worker recording with its trainer's wait explained by the hang (as diagnose says it)."""
    ids = {f.id for f in snap.findings}
    if "worker-hung" not in ids:
        return snap
    findings = [
        dataclasses.replace(f, explained_by="worker-hung") if f.id == "input-bound" else f for f in snap.findings
    ]
    return dataclasses.replace(snap, findings=findings)


def test_a_tick_that_arrives_as_the_app_closes_draws_nothing():
    """The collecting thread may post a tick just before the app closes: handled after its
    widgets are gone, it draws nothing (it raised NoMatches on the way out)."""
    from dltop.tui.app import Collected
    from dltop.tui.widgets import JobHeader

    async def run():
        app = recorded_app("healthy")
        async with app.run_test(size=(100, 30)) as pilot:
            await _shown(pilot)
            await app.query_one(JobHeader).remove()
            app.on_collected(Collected(recorded("healthy")))

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
    while pilot.app.snapshot is None or not pilot.app._layout:  # the layout fits the findings after a refresh
        await pilot.pause(0.05)
    await pilot.pause(0.1)  # ... and the screen is laid out again with it


def _screen_text(app) -> str:
    """The screen as plain text, borders blanked (words touching a border stay words)."""
    from rich.console import Console

    console = Console(width=app.size.width, record=True, file=io.StringIO(), color_system=None)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text().translate(str.maketrans("│─╭╮╰╯", "      "))


def sixteen_workers(snap):
    """The recording with 16 workers (the table must scroll at 80x24)."""
    worker = next(p for p in snap.processes if p.role == "worker" and p.activity == "idle")
    more = [dataclasses.replace(worker, pid=90000 + i) for i in range(14)]
    return explained(dataclasses.replace(snap, processes=snap.processes + more))


@pytest.mark.parametrize("size", [(80, 24), (120, 36), (160, 45)])
@pytest.mark.parametrize("change", [explained, sixteen_workers])
def test_the_screen_has_no_holes_and_cuts_no_word(size, change):
    from dltop.tui.widgets import FindingsPanel, GpuPanel, WorkersTable

    async def run():
        app = recorded_app("hung-worker", change)
        async with app.run_test(size=size) as pilot:
            await _shown(pilot)
            table, panel = app.query_one(WorkersTable), app.query_one(FindingsPanel)
            assert not app.query_one(GpuPanel).display  # no GPU: a line among the system figures
            assert table.region.bottom == panel.region.y and panel.region.bottom == size[1] - 1  # no band
            text = _screen_text(app)
            words = set(text.split())
            cause = panel.entries[0].cause
            assert cause.id == "worker-hung" and [c.id for c in panel.entries[0].consequences] == ["input-bound"]
            for part in (cause.title, cause.detail, cause.suggestion):
                assert [w for w in part.split() if w not in words] == [], part  # whole, and no word cut
            job_line = text.splitlines()[1].replace("…", " ").split()
            full = f"{view.figures_line(app.snapshot)} · {view.header_line(app.snapshot)}".split()
            assert len(job_line) >= 12 and job_line == full[: len(job_line)]  # cut between words
            assert "HUNG" in text and "GPU  none (no NVML library)" in text
            trainer, stuck = app.snapshot.job.trainer_pids[0], cause.pids[0]
            assert f"{trainer} trainer" in text and f"{stuck}  └ worker" in text
            detail_line = next(line for line in text.splitlines() if cause.detail.split()[0] in line)
            title_line = next(line for line in text.splitlines()[2:] if cause.title in line)  # not the headline
            assert detail_line.index(cause.detail.split()[0]) == title_line.index(cause.title)  # hanging indent

    asyncio.run(run())


@pytest.mark.parametrize(
    "recording, size",
    [("hung-worker", (80, 24)), ("input-bound", (120, 36)), ("hung-worker", (160, 45)), ("healthy", (120, 36)),
     ("spdl-threads", (120, 36))],
)  # fmt: skip
def test_snapshot(snap_compare, recording, size):
    assert snap_compare(recorded_app(recording, explained), terminal_size=size, run_before=_shown)


def test_snapshot_hung_worker_stack(snap_compare):
    async def open_stack(pilot):
        await _shown(pilot)
        await pilot.press("down", "s")

    assert snap_compare(recorded_app("hung-worker"), terminal_size=(100, 30), run_before=open_stack)


# -- a pipeline of threads (spdl-threads: built by hand on a py-spy dump of an SPDL job) ---------------


def one_stuck_one_gone(snap):
    """spdl-threads with its first worker thread stuck and a thread gone since."""
    loader = snap.loaders[0]
    stuck = dataclasses.replace(loader.worker_threads[0], activity="stuck", stuck_s=25.0)
    gone = dataclasses.replace(loader.worker_threads[3], tid=19299, gone_at="2026-12-03T12:40:11+00:00")
    loader = dataclasses.replace(loader, worker_threads=[stuck, *loader.worker_threads[1:]], threads_exited=[gone])
    return dataclasses.replace(snap, loaders=[loader])


def test_a_pipelines_threads_are_rows_under_their_trainer_workers_first_feeders_dim():
    snap = one_stuck_one_gone(recorded("spdl-threads"))
    table = view.rows(snap)
    assert [(r.pid, r.cells["role"], r.cells["name"]) for r in table[:2]] == [
        (19272, "trainer", "python"), (19279, " └ thread", "spdl_worker_thread__0")]  # fmt: skip
    assert [r.cells["role"] for r in table[1:]] == [" └ thread"] * 4 + [" └ feeder"] * 2
    assert [r.alert for r in table[1:]] == ["hung", None, None, None, "feeder", "feeder"]
    assert table[1].cells["activity"] == "STUCK 0:25" and table[1].key == "19279t" and table[1].thread_of == 19272
    assert {table[2].cells[c] for c in ("state", "rss", "uss", "fds", "read", "age")} == {"n/a"}  # its process's
    assert 19299 not in [r.pid for r in table]  # a thread gone is no row (its stack stays readable)
    assert [r.pid for r in view.rows(snap, "cpu")][:3] == [19272, 19277, 19279]  # under its trainer, by CPU
    assert view.table_columns(120, True) == view.WIDE_THREADS and view.table_columns(120, False) == view.WIDE
    assert view.table_columns(80, True) == view.NARROW_THREADS and view.table_columns(80, False) == view.NARROW
    assert view.cpu_meters(snap) == {19272: view.sparkline([3.1, 2.8, 1.2, 0.9])}  # worker threads, not feeders
    assert view.pipeline_text(snap) == "4 threads (spdl)" and "· 4 threads (spdl) ·" in view.header_line(snap)


@pytest.mark.parametrize(
    "pipeline, method, text",
    [("torchdata.nodes", "thread", "2 threads (torchdata.nodes)"),
     ("torchdata.nodes", "fork", "2 workers (torchdata.nodes, processes)"),
     ("dataloader", "fork", "fork"), (None, "fork", "fork")],
)  # fmt: skip
def test_the_header_says_what_runs_a_pipeline_and_a_dataloaders_start_method(pipeline, method, text):
    snap = bound_window(10.0)[0]
    loader = dataclasses.replace(snap.loaders[0], pipeline=pipeline, start_method=method)
    assert view.pipeline_text(dataclasses.replace(snap, loaders=[loader])) == text


def test_the_stack_of_a_thread_row_is_the_threads_and_watches_its_trainer():
    from dltop.tui.screens import StackScreen, stack_text

    snap = one_stuck_one_gone(recorded("spdl-threads"))
    watched: list = []

    async def run():
        app = recorded_app("spdl-threads", one_stuck_one_gone)
        async with app.run_test(size=(120, 36)) as pilot:
            await _shown(pilot)
            app.source = SimpleNamespace(watch=watched.append, close=lambda: None)
            await pilot.press("down", "s")
            assert isinstance(app.screen, StackScreen) and (app.screen.pid, app.screen.process) == (19279, 19272)
            await pilot.pause()
            text = _screen_text(app)
            assert "thread 19279 spdl_worker_thread__0 of trainer 19272 · activity stuck" in text and "▶ decode" in text
            await pilot.press("escape")
        assert watched[0] == 19272  # py-spy samples the trainer; the thread's stack comes with it

    asyncio.run(run())
    stuck = str(stack_text(snap, 19279))
    assert "same stack for 0:25 without CPU" in stuck and "4 threads (spdl); sampled 2026-12-03T12:40:20" in stuck
    gone = str(stack_text(snap, 19299))
    assert "thread 19299 spdl_worker_thread__3 of trainer 19272 · gone at" in gone and "_worker" in gone


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
    severities = {"too-many-workers": "info", "worker-hung": "error", "worker-died": "error"}
    found = [finding(i, severities.get(i, "warning")) for i in ids]
    assert view.badge(dataclasses.replace(snap, findings=found)).state == state
    exited = dataclasses.replace(snap, job=dataclasses.replace(snap.job, state="exited", exit_code=-9))
    assert view.badge(exited).text == "EXITED (-9)"


def test_until_the_data_wait_is_known_the_headline_says_measuring_and_how_long():
    snap = bound_window(10.0)[0]
    unknown = [dataclasses.replace(ld, data_wait_percent=None) for ld in snap.loaders]
    early = dataclasses.replace(snap, loaders=unknown, stacks_status="ok",
                                pending=[Pending("input-bound", "30 samples of the trainer's time", 12.4)])  # fmt: skip
    assert view.badge(early).text == "MEASURING"
    assert view.headline(early) == "measuring the trainer's data wait: 30 samples of the trainer's time, about 13 s yet"
    assert view.badge(dataclasses.replace(early, pending=[])).text == "MEASURING"  # never HEALTHY without a verdict
    assert view.badge(dataclasses.replace(early, stacks_status="off")).text == "NO STACKS"
    later = dataclasses.replace(snap, pending=[Pending("worker-memory-growth", "30 s of USS", 20.0)])
    assert view.badge(later).text == "HEALTHY" and "still judging worker-memory-growth" in view.headline(later)


def test_never_healthy_while_a_finding_is_held_or_the_wait_is_not_yet_judged():
    """The wait is known (87%) but not yet judged, or a finding waits to prove steady: the verdict
    is open, so the badge says MEASURING and the headline says what for — not the slowest reading."""
    snap = bound_window(87.0)[0]
    memory = Pending("worker-memory-growth", "4 memory readings of each worker", 30.0)
    unsure = Pending("input-bound", "more stack samples of trainer 1: its data wait 31 ± 4% is not yet clear", 6.0)
    near = dataclasses.replace(snap, pending=[memory, unsure])
    assert view.badge(near).text == "MEASURING"
    assert view.headline(near) == f"measuring the trainer's data wait: {unsure.needs}, about 6 s yet"
    held = Pending("input-bound", "Trainer 1 waits for data 87% of the time: shown once it holds 5 s", 3.0, held=True)
    holding = dataclasses.replace(snap, pending=[memory, held])
    assert view.badge(holding).text == "MEASURING"
    assert view.headline(holding) == f"judging input-bound: {held.needs}, about 3 s yet"
    assert view.badge(dataclasses.replace(snap, pending=[memory])).text == "HEALTHY"


def test_the_empty_findings_panel_follows_the_measurement():
    from dltop.tui.widgets import FindingsPanel

    snap = bound_window(20.0)[0]
    early = dataclasses.replace(snap, pending=[Pending("input-bound", "30 stack samples (has 0)", 2.0)])
    done = dataclasses.replace(snap, pending=[])

    async def run():
        app = recorded_app("healthy", lambda _: early)
        async with app.run_test(size=(100, 30)) as pilot:
            await _shown(pilot)
            assert "No findings yet: measuring the trainer's data wait" in _screen_text(app)
            app.show(done)
            await pilot.pause()
            text = _screen_text(app)
            assert "No findings: nothing to fix right now." in text and "No findings yet" not in text
            assert app.query_one(FindingsPanel).content == [("", "No findings: nothing to fix right now.")]

    asyncio.run(run())


def test_a_consequence_is_one_entry_with_its_cause_and_is_never_the_fix():
    from dltop.tui.widgets import FindingsPanel

    hung = Finding("worker-hung", "error", "Worker 10 deadlocked", "d", [10], {}, "set timeout=120")
    wait = Finding("input-bound", "warning", "Trainer waits 100%", "d", [1], {}, "num_workers=22",
                   bench_args=["--x"], explained_by="worker-hung", impact=1.0)  # fmt: skip
    # the consequence arrives first (more impact), yet the headline names the root cause
    snap = dataclasses.replace(bound_window(100.0)[0], findings=[wait, hung])
    (entry,) = grouped(snap.findings)
    assert entry.cause is hung and entry.consequences == (wait,)
    assert view.badge(snap).text == "HUNG" and view.headline(snap) == "Worker 10 deadlocked"

    async def run():
        app = recorded_app("healthy", lambda _: snap)
        async with app.run_test(size=(100, 30), notifications=True) as pilot:
            await _shown(pilot)
            panel = app.query_one(FindingsPanel)
            assert panel.entries == [entry] and panel.selected() is hung
            text = _screen_text(app)
            assert "fix: set timeout=120" in text and "↳ Trainer waits 100%" in text and "num_workers=22" not in text
            await pilot.press("b")  # the only bench_args belong to the consequence: nothing to bench
            assert any("No finding with a suggestion" in str(n.message) for n in app._notifications)

    asyncio.run(run())


def test_a_live_view_redraws_a_findings_figures_every_few_seconds_and_a_new_finding_at_once():
    """A finding's figures change nearly every tick on a busy node: its entry is redrawn once its
    figures have shown figures_every_s (what `b` acts on is always the newest); one that comes or
    changes its fix shows at once."""
    from dltop.tui.widgets import FindingsPanel

    snap = bound_window(50.0)[0]

    def waiting(percent: int, *more: Finding):
        wait = Finding("input-bound", "warning", f"Trainer waits {percent}%", "d", [1], {}, "num_workers=4")
        return dataclasses.replace(snap, findings=[wait, *more])

    async def run():
        app = recorded_app("healthy", lambda _: waiting(50))
        async with app.run_test(size=(100, 30)) as pilot:
            await _shown(pilot)
            panel = app.query_one(FindingsPanel)
            panel.figures_every_s = 60.0
            app.show(waiting(51))
            await pilot.pause()
            assert "Trainer waits 50%" in _screen_text(app)  # its figures alone changed: held
            assert panel.selected().title == "Trainer waits 51%"
            app.show(waiting(52, finding("fd-near-limit")))
            await pilot.pause()
            text = _screen_text(app)
            assert "Trainer waits 52%" in text and "fd-near-limit" in text
            panel.figures_every_s = 1.0
            app.show(waiting(53, finding("fd-near-limit")))
            await pilot.pause(1.5)  # their time came: drawn with no tick to bring them
            assert "Trainer waits 53%" in _screen_text(app)

    asyncio.run(run())


def test_the_bench_key_without_torch_says_what_to_install(monkeypatch):
    from dltop.tui.screens import BenchScreen

    wait = Finding("input-bound", "warning", "Trainer waits 80%", "d", [1], {}, "num_workers=4", bench_args=["--x"])
    snap = dataclasses.replace(bound_window(80.0)[0], findings=[wait])
    monkeypatch.setitem(sys.modules, "torch", None)  # as installed from a wheel or pipx: no torch

    async def run():
        app = recorded_app("healthy", lambda _: snap)
        async with app.run_test(size=(100, 30), notifications=True) as pilot:
            await _shown(pilot)
            await pilot.press("b")
            assert not isinstance(app.screen, BenchScreen)
            assert any(install_hint("bench") in str(n.message) for n in app._notifications)

    asyncio.run(run())


def test_sort_keeps_workers_under_their_trainer_and_new_figures_say_measuring():
    snap = bound_window(10.0, workers=2)[0]
    second = [dataclasses.replace(p, pid=p.pid + 100, trainer_pid=101, cpu_percent=(p.cpu_percent or 0) / 2)
              for p in snap.processes]  # fmt: skip
    busy = [dataclasses.replace(p, cpu_percent=95.0) if p.pid == 11 else p for p in snap.processes]
    new = dataclasses.replace(second[-1], uss_bytes=None, unavailable={"uss_bytes": NOT_READ_YET})
    zombie = dataclasses.replace(second[1], state="zombie", exit_code=-11, activity="unknown",
                                 cpu_percent=None, ppid=101)  # fmt: skip
    snap = dataclasses.replace(snap, processes=busy + [second[0], zombie, new])
    order = [r.pid for r in view.rows(snap, "cpu")]
    assert order == [1, 11, 10, 101, 111, 110]  # trainers by CPU, each one's workers under it by CPU
    cells = {r.pid: r.cells for r in view.rows(snap)}
    assert cells[111]["uss"] == "measuring" and cells[10]["uss"] == "200M"
    row = next(r for r in view.rows(snap) if r.pid == 110)
    assert row.cells["activity"] == "ZOMBIE SIGSEGV" and row.alert == "dead"
    from dltop.tui.screens import stack_text

    assert "worker 110 has exited (SIGSEGV); its parent 101 has not reaped it" in str(stack_text(snap, 110))


def test_words_are_never_cut_and_meters_fill_columns():
    assert view.fit_words("data wait 12% · job 4891 · python train.py --workers 2", 30) == "data wait 12% · job 4891…"
    lines = ["CPU  job 1.0/2", "mem  2G free", "shm  1M used", "GPU  none"]
    assert view.columns(lines, 80) == ["CPU  job 1.0/2   mem  2G free   shm  1M used   GPU  none"]
    assert view.columns(lines, 33) == ["CPU  job 1.0/2   shm  1M used", "mem  2G free     GPU  none"]
    assert view.columns(lines, 10) == lines


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


def test_the_gpu_panel_draws_history_and_the_jobs_memory():
    from dltop.tui.widgets import GpuPanel

    windows = [bound_window(10.0, gpu_util=u)[0] for u in (0.0, 50.0, 100.0)]

    async def run():
        source_snaps = iter(windows)
        from dltop.tui.app import DltopApp

        app = DltopApp(first=windows[0])
        async with app.run_test(size=(100, 30)) as pilot:
            await _shown(pilot)
            for snap in source_snaps:
                app.show(snap)
            text = str(app.query_one(GpuPanel).render())
            assert "GPU0 100% ▁▁▅█" in text and "(job 1.0G)" in text  # first frame, then 0, 50, 100
            assert view.gpu_util(windows[1]) == 50.0

    asyncio.run(run())


def test_the_trainer_time_panel_shows_the_wait_over_time_and_where_it_goes():
    from dltop.tui.widgets import TrainerTimePanel

    windows = [bound_window(wait)[0] for wait in (10.0, 50.0, 90.0)]
    assert view.chart([0.0, 50.0, 100.0, None], 2) == [" ▁█ ", "▁██ "]  # a 0 read is shown; a gap is not
    spent = windows[-1].loaders[0].trainer_time
    assert sum(len(run) for run, _ in view.phase_bar(spent, 20)) == 20

    async def run(size: tuple, rows: int, bottom: str = "", top: str = "") -> str:
        app = recorded_app("healthy", lambda _: windows[0])
        async with app.run_test(size=size) as pilot:
            await _shown(pilot)
            for snap in windows[1:]:
                app.show(snap)
            await pilot.pause()
            panel = app.query_one(TrainerTimePanel)
            assert panel.display == (rows > 0)
            if rows:
                text = str(panel.render()).splitlines()
                assert len(text) == rows, text
                assert "now  90% waiting" in text[0] and "workers' CPU" in text[-1]
                # waits of 10, 50 and 90%, oldest first, the newest on the right
                assert text[-1].split("│")[1].endswith(bottom) and text[0].split("│")[1].endswith(top), text
            return _screen_text(app)

    asyncio.run(run((160, 45), 3, bottom="▃██", top="  ▆"))  # a tall screen: a chart of the wait
    asyncio.run(run((120, 36), 1, bottom="▁▅█", top="▁▅█"))  # one line a trainer
    asyncio.run(run((80, 24), 0))  # 80x24 needs every row for the table


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


def test_a_text_panel_repaints_only_its_changed_lines():
    from rich.text import Text
    from textual.app import App

    from dltop.tui.widgets import TextPanel

    class One(App):
        CSS = "TextPanel { height: auto; }"

        def compose(self):
            yield TextPanel("CPU 1%\nmem 2G\n" + "x" * 200)

    async def run():
        app = One()
        async with app.run_test(size=(40, 10)) as pilot:
            panel = app.query_one(TextPanel)
            await pilot.pause()
            # the long line is cut to the width with an ellipsis, not wrapped
            assert panel.size.height == 3 and panel.render_line(2).text.rstrip().endswith("…")
            before = [panel.render_line(y) for y in range(3)]
            panel.set_text(Text("CPU 9%\nmem 2G\n" + "x" * 200))
            await pilot.pause()
            after = [panel.render_line(y) for y in range(3)]
            assert after[0].text.startswith("CPU 9%") and after[1] is before[1] and after[2] is before[2]  # kept
            panel.set_text("one line")  # fewer lines: laid out again
            await pilot.pause()
            assert panel.size.height == 1 and panel.render_line(0).text.startswith("one line")

    asyncio.run(run())
