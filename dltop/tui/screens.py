"""Screens over the main view: a process's stack, help, the job picker, a bench run."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Optional

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from dltop.bench import TWIN_TRUST
from dltop.model import LoaderSample, Snapshot, WorkerThread
from dltop.text_report import workers_summary
from dltop.tui import view
from dltop.units import bytes_held, clock, human_bytes, percent

KIND_STYLE = {"user": "bold", "library": "", "torch": "dim", "stdlib": "dim"}


class StackScreen(Screen):
    """The newest stack of one process or pipeline thread, user frames marked; ``d`` takes a full
    dump with locals (of a thread's process: py-spy dumps processes)."""

    BINDINGS = [
        Binding("escape,s", "app.pop_screen", "back"),
        Binding("d", "full_dump", "full dump (pauses it)"),
    ]

    def __init__(self, pid: int, thread_of: Optional[int] = None) -> None:
        super().__init__()
        self.pid = pid  # a thread's tid
        self.process = thread_of or pid  # the process a dump pauses
        self.dumped = False

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="stack")
            yield Static(id="dump")
        yield Footer()

    def show(self, snap: Snapshot) -> None:
        if not self.is_mounted:
            return
        self.query_one("#stack", Static).update(stack_text(snap, self.pid))

    def action_full_dump(self) -> None:
        self.notify(f"Pausing pid {self.process} for a few milliseconds while py-spy reads it with locals")
        self.query_one("#dump", Static).update(Text("taking a full dump…", style="dim"))
        self._dump()

    @work(thread=True, exclusive=True)
    def _dump(self) -> None:
        from dltop.collect.stacks.full_dump import dump_job, render_dump
        from dltop.errors import DltopError

        try:
            text = render_dump(dump_job(self.process, only=self.process))
        except DltopError as err:
            text = f"no dump: {err}"
        self.app.call_from_thread(self.query_one("#dump", Static).update, Text(text))


def stack_text(snap: Snapshot, pid: int) -> Text:
    proc = next((p for p in snap.processes if p.pid == pid), None)
    text = Text()
    if proc is None and _thread(snap, pid) is not None:
        return _thread_text(snap, pid)
    if proc is None:
        gone = [w for ld in snap.loaders for w in ld.workers_exited if w.pid == pid]
        if not gone:
            return Text(f"pid {pid} is no longer part of the job")
        text.append(f"worker {pid} exited ({gone[-1].cause}); its last stack:\n\n", style="bold")
        return _frames(text, gone[-1].last_stack)
    if proc.state == "zombie":
        code = "" if proc.exit_code is None else f" ({view.exit_text(proc.exit_code)})"
        text.append(f"{proc.role} {pid} has exited{code}; its parent {proc.ppid} has not reaped it yet (a zombie)\n\n",
                    style="bold red")  # fmt: skip
        return text
    text.append(f"{proc.role} {pid}", style="bold")
    text.append(f" · {proc.state} · activity {proc.activity} · CPU {percent(proc.cpu_percent)}"
                f" · USS {human_bytes(proc.uss_bytes)}")  # fmt: skip
    if proc.stuck_s:
        text.append(f" · same stack for {clock(proc.stuck_s)} without CPU", style="bold red")
    text.append(f"\nsampled {proc.stack_at or 'not yet'} (non-blocking; py-spy)\n\n", style="dim")
    if not proc.stack:
        text.append(f"no stack yet (stacks: {snap.stacks_status})")
        if snap.stacks_fix:
            text.append(f"\n{snap.stacks_fix}")
        return text
    return _frames(text, proc.stack)


def _thread(snap: Snapshot, tid: int) -> Optional[tuple[LoaderSample, WorkerThread]]:
    """The pipeline thread with this tid and its loader (a thread gone since: among its exits)."""
    return next(((ld, t) for ld in snap.loaders for t in ld.worker_threads + ld.threads_exited if t.tid == tid), None)


def _thread_text(snap: Snapshot, tid: int) -> Text:
    """A pipeline thread's newest stack, read with its trainer's."""
    found = _thread(snap, tid)
    assert found is not None
    loader, thread = found
    text = Text()
    role = view.THREAD_ROLES[thread.kind].strip(" └")
    text.append(f"{role} {tid} {thread.name or ''}".rstrip() + f" of trainer {loader.trainer_pid}", style="bold")
    if thread.gone_at:
        text.append(f" · gone at {thread.gone_at}; its last stack", style="bold")
    else:
        text.append(f" · activity {thread.activity} · CPU {percent(thread.cpu_percent)}"
                    f" · busy {percent(thread.busy_percent)}")  # fmt: skip
    if thread.stuck_s:
        text.append(f" · same stack for {clock(thread.stuck_s)} without CPU", style="bold red")
    trainer = next((p for p in snap.processes if p.pid == loader.trainer_pid), None)
    at = trainer.stack_at if trainer is not None and trainer.stack_at else "not yet"
    text.append(f"\n{workers_summary(loader)}; sampled {at} with its trainer (non-blocking; py-spy)\n\n", style="dim")
    if not thread.stack:
        text.append(f"no stack yet (stacks: {snap.stacks_status})")
        return text
    return _frames(text, thread.stack)


def _frames(text: Text, frames) -> Text:
    for frame in reversed(frames or []):  # innermost first, as tracebacks read
        mark = "▶ " if frame.kind == "user" else "  "
        text.append(f"{mark}{frame.function}", style=KIND_STYLE.get(frame.kind, ""))
        text.append(f"  {frame.file}:{frame.line}\n", style="dim")
        if frame.code:
            text.append(f"      {frame.code.strip()}\n", style="italic" if frame.kind == "user" else "dim")
    return text


HELP_WIDTH = 76
BADGE_HELP = textwrap.fill("Badge: " + ", ".join(f"{text} ({means})" for text, means in view.BADGES) + ".", HELP_WIDTH)
HELP = f"""\
dltop watches a PyTorch training job read-only: its trainers and DataLoader
workers, what each is doing (py-spy stacks, non-blocking), how long the
trainer waits for data, and what to change.

Keys
  up/down j/k  move in the table      enter s  stack of the selected process
  tab          table <-> findings     d        (stack view) full dump with
  o            sort: group, CPU,               locals: pauses it briefly
               memory, read, pid      b        bench the selected finding's
  p            pause the display               fix on a twin of this job
  ?            this help              ctrl+p   command palette
  q            quit (dltop demo also stops its job)

{BADGE_HELP}

Columns: CPU% (100 = one core) · USS: memory the process alone holds ·
FDS: open / limit · READ/s: from storage · ACTIVITY: from the newest stack
(STUCK: the same stack, no CPU, past --hang-after; still 0:07: not yet).
Rows: └ worker, a DataLoader worker process; └ thread and (dim) └ feeder,
threads of a pipeline of threads (torchdata.nodes, SPDL, your own thread
pool), their PID the thread's id and NAME its Python name.
"""


class HelpScreen(Screen):
    BINDINGS = [Binding("escape,question_mark,q", "app.pop_screen", "back")]

    def compose(self) -> ComposeResult:
        with VerticalScroll():  # taller than a 24-line terminal: it scrolls
            yield Static(HELP)
        yield Footer()


class PickerScreen(Screen):
    """``dltop`` without --pid: the training jobs on this machine; enter attaches."""

    BINDINGS = [Binding("q,escape", "app.quit", "quit"), Binding("r", "refresh", "refresh")]

    def compose(self) -> ComposeResult:
        yield Static("Training jobs on this machine (enter: watch · r: refresh · q: quit)", id="title")
        yield DataTable(cursor_type="row", id="jobs")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#jobs", DataTable)
        for label in ("PID", "USER", "RANKS", "WORKERS", "GPU MEM", "COMMAND"):
            table.add_column(label, key=label)
        self.action_refresh()
        self.set_interval(3.0, self.action_refresh)

    @work(thread=True, exclusive=True)
    def action_refresh(self) -> None:
        from dltop.collect.host.gpu import GpuSampler
        from dltop.collect.jobs import list_jobs

        jobs = list_jobs(GpuSampler())
        self.app.call_from_thread(self._fill, jobs)

    def _fill(self, jobs: list) -> None:
        table = self.query_one("#jobs", DataTable)
        table.clear()
        for job in jobs:
            table.add_row(str(job.pid), job.user or "?", str(len(job.trainer_pids)), str(job.workers),
                          bytes_held(job.gpu_mem_bytes), job.cmdline[:200], key=str(job.pid))  # fmt: skip
        if not jobs:
            self.query_one("#title", Static).update(
                "No PyTorch training jobs found on this machine (r: refresh · q: quit). Try `dltop demo`."
            )

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.dismiss(int(str(event.row_key.value)))


class BenchLog(VerticalScroll):
    """A bench's command line and output, long lines wrapped at the widget's width (Textual's Log
    cuts them and scrolls sideways): nothing to scroll to sideways, and a resize wraps them again.
    It follows the output while it is scrolled to its end."""

    DEFAULT_CSS = """
    BenchLog {
        background: $surface;
        color: $text;
        overflow-x: hidden;
        &:focus { background-tint: $foreground 5%; }
    }
    BenchLog > Static { width: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.lines: list[str] = []

    def compose(self) -> ComposeResult:
        yield Static()

    def write_line(self, line: str) -> None:
        follow = self.is_vertical_scroll_end
        self.lines.append(line)
        self.query_one(Static).update(Text("\n".join(self.lines)))  # a Text: brackets are not markup
        if follow:
            self.call_after_refresh(self.scroll_end, animate=False)


class BenchScreen(Screen):
    """Runs ``dltop bench <finding's bench_args>`` and streams its output."""

    BINDINGS = [Binding("escape", "close", "back (stops the bench)")]

    def __init__(self, finding) -> None:
        super().__init__()
        self.finding = finding
        self.proc: Optional[subprocess.Popen[str]] = None

    def compose(self) -> ComposeResult:
        yield Static(Text(f"Benching: {self.finding.suggestion}\n(a twin of this job, current vs suggested; the job"
                          " itself is not touched)", style="bold"))  # fmt: skip
        yield Static(Text(TWIN_TRUST), id="trust")
        yield BenchLog(id="log")
        yield Footer()

    def on_mount(self) -> None:
        self._run()

    @work(thread=True, exclusive=True)
    def _run(self) -> None:
        command = [sys.executable, "-m", "dltop", "bench", *self.finding.bench_args]
        log = self.query_one("#log", BenchLog)
        self.app.call_from_thread(log.write_line, "$ dltop bench " + " ".join(self.finding.bench_args))
        self.proc = proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                            start_new_session=True)  # fmt: skip
        for line in proc.stdout or ():
            self.app.call_from_thread(log.write_line, line.rstrip())
        proc.wait()

    def action_close(self) -> None:
        self.stop()
        self.app.pop_screen()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
