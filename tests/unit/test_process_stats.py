"""The per-process figures read from /proc directly (no psutil per tick): parsers on recorded
contents, and the readers on this test's own process beside psutil's reading of the same."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from dltop.collect import procfs
from dltop.collect.host.system import SystemSampler, parse_meminfo
from dltop.collect.processes.discovery import Member
from dltop.collect.processes.stats import NOT_READ_YET, ProcessSampler

IO = b"rchar: 1200\nwchar: 34\nsyscr: 5\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: 0\ncancelled_write_bytes: 0\n"
SMAPS = b"""55d0c0000000-7ffd00000000 ---p 00000000 00:00 0                          [rollup]
Rss:              163840 kB
Pss:               20480 kB
Pss_Anon:          10240 kB
Shared_Clean:     143360 kB
Private_Clean:      4096 kB
Private_Dirty:      8192 kB
Private_Hugetlb:       0 kB
Swap:                  0 kB
"""


def test_parsers():
    assert procfs.parse_io(IO)["read_bytes"] == 4096 and procfs.parse_io(IO)["rchar"] == 1200
    assert procfs.parse_smaps_rollup(SMAPS) == ((4096 + 8192) * 1024, 20480 * 1024)  # Pss_Anon is not Pss
    meminfo = parse_meminfo(
        "MemTotal: 1000 kB\nMemAvailable: 600 kB\nSwapTotal: 50 kB\nSwapFree: 20 kB\nHugePages_Total: 0\n"
    )
    assert meminfo["MemAvailable"] == 600 * 1024 and meminfo["HugePages_Total"] == 0


def test_stat_readers_agree_with_psutil():
    me, proc = os.getpid(), psutil.Process()
    sum(range(3_000_000))  # some CPU time to read
    stat = procfs.read_stat(me)
    times = proc.cpu_times()
    assert abs(stat.cpu_ticks / procfs.CLOCK_TICKS - (times.user + times.system)) < 0.1
    assert stat.num_threads == proc.num_threads()
    assert abs(stat.rss_pages * procfs.PAGE_SIZE - proc.memory_info().rss) < 8 << 20
    # fds of another process: listing adds none. The child says when it is ready: right after exec
    # the dynamic loader briefly holds a file of its own open, and the two counts may straddle it.
    ready = "import sys, time; print(flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", ready], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"\n"
        assert procfs.count_fds(child.pid) == psutil.Process(child.pid).num_fds() >= 3
    finally:
        child.kill()
        child.wait()
    io = procfs.read_io(me)
    assert io["rchar"] <= proc.io_counters().read_chars
    uss, pss = procfs.read_private_memory(me)
    assert abs(uss - proc.memory_full_info().uss) < 8 << 20 and pss > 0
    assert abs(procfs.read_uptime_s() - (time.time() - psutil.boot_time())) < 5


def test_children_are_read_whole_however_many(monkeypatch):
    children = [subprocess.Popen(["sleep", "30"]) for _ in range(3)]
    try:
        expected = sorted(c.pid for c in children)
        me = os.getpid()
        assert set(expected) <= set(procfs.read_children(me, me))  # other tests may leave children too
        monkeypatch.setattr(procfs, "CHILDREN_READ", 4)  # fewer bytes than the list: the rest is read too
        assert set(expected) <= set(procfs.read_children(me, me))  # other tests may leave children too
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_a_sample_of_this_process_and_a_new_process_says_measuring():
    sampler = ProcessSampler()
    me = os.getpid()
    member = Member(me, os.getppid(), "trainer", me)
    first = sampler.sample(member, procfs.read_stat(me), "python", None, read_memory=False)
    assert first.uss_bytes is None and first.unavailable["uss_bytes"] == NOT_READ_YET
    time.sleep(0.05)
    second = sampler.sample(member, procfs.read_stat(me), "python", None, read_memory=True)
    assert second.uss_bytes > 0 and "uss_bytes" not in second.unavailable
    assert second.state in ("running", "sleeping") and second.num_fds > 0 and second.fd_limit
    assert second.started_at and second.user == psutil.Process().username()
    assert second.cpu_percent is not None and second.read_chars_per_s is not None


def test_system_sample_reads_memory_once_and_limits_on_a_ttl():
    clock = [0.0]
    sampler = SystemSampler(clock=lambda: clock[0])
    first = sampler.sample(os.getpid())
    memory = psutil.virtual_memory()
    assert first.mem_total_bytes == memory.total and abs(first.mem_available_bytes - memory.available) < 256 << 20
    assert first.swap_used_bytes >= 0 and first.cpus_allowed >= 1
    clock[0] = 5.0
    assert sampler.sample(os.getpid()).cpu_quota == first.cpu_quota  # cached


def test_dltops_own_cpu_counts_its_samplers_so_the_model_does_not_take_them_for_other_processes():
    """A child of the monitor (as py-spy and Austin are) spinning for a second shows in
    monitor_cpu_percent: of the host's busy CPUs, what leaves with dltop."""
    sampler = SystemSampler()
    assert sampler.sample(os.getpid()).monitor_cpu_percent is None  # a rate needs a sample before it
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        sampler.sample(os.getpid())
        time.sleep(1.5)
        used = sampler.sample(os.getpid()).monitor_cpu_percent
    finally:
        spinner.kill()
        spinner.wait()
    assert used is not None and 30 <= used <= 100 * (os.cpu_count() or 1) + 20, used
