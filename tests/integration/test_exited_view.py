"""A job stopped while a live view watches it: the view keeps what it last saw, marked exited,
and calls none of the workers that ended with it dead (a real job, SIGTERM to its group)."""

from __future__ import annotations

import os
import signal
import time

from dltop.demo.scenarios import SCENARIOS
from dltop.live.loop import open_loop
from dltop.tui import view


def _step_until(loop, done, timeout: float, what: str) -> list:
    """Step the live loop every 0.5 s until ``done(snapshot)``: every step's snapshot."""
    deadline, steps = time.monotonic() + timeout, [loop.step()]
    while not done(steps[-1]):
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.5)
        steps.append(loop.step())
    return steps


def test_a_job_stopped_while_watched_keeps_its_last_view(start_job):
    job = start_job(*SCENARIOS["input-bound"])
    job.wait_workers(1)
    loop = open_loop(job.pid)
    try:
        steps = _step_until(loop, lambda snap: any(f.id == "input-bound" for f in snap.findings), 90, "input-bound")
        os.killpg(job.pid, signal.SIGTERM)
        steps += _step_until(loop, lambda snap: snap.job.state == "exited", 30, "the exit")
        before, final = steps[-2:]
    finally:
        loop.close()

    assert final.job.cmdline == before.job.cmdline != "" and final.system is not None
    assert {p.pid for p in final.processes} == {p.pid for p in before.processes}
    assert {p.state for p in final.processes} == {"exited"}
    advice = {f.id: f.suggestion for f in before.findings}
    assert {f.id: f.suggestion for f in final.findings} == advice, final.findings
    rows = view.rows(final)
    assert [r.pid for r in rows if r.cells["role"].startswith("trainer")] == [job.pid]
    assert not [r for r in rows if r.alert == "dead"], [r.cells for r in rows]
