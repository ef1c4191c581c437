"""Parsers against recorded /proc and /sys contents: no live system needed."""

from __future__ import annotations

import os

import pytest

from dltop.collect import procfs
from dltop.collect.host import system
from dltop.collect.host.disk import disk_rates, mount_sources, parse_diskstats
from dltop.collect.processes.discovery import is_launcher_cmdline
from dltop.units import cpu_list, human_bytes
from tests.support import FIXTURES


def test_stat_with_spaces_and_parens_in_comm_and_exit_code():
    fields = ["Z", "41"] + ["0"] * 17 + ["123456"] + ["0"] * 29 + [str(9)]  # field 52 = killed by SIGKILL
    stat = procfs.parse_stat("77 (my (odd) name) " + " ".join(fields))
    assert (stat.pid, stat.comm, stat.state, stat.ppid, stat.start_ticks) == (77, "my (odd) name", "Z", 41, 123456)
    assert procfs.decode_exit_status(stat.exit_status) == -9
    assert procfs.decode_exit_status(3 << 8) == 3
    assert procfs.parse_stat("5 (old) S 1 " + " ".join(["0"] * 20)).exit_status is None  # kernels < 3.5


def test_stat_of_a_live_process():
    stat = procfs.read_stat(os.getpid())
    assert stat.ppid == os.getppid() and stat.state in "RS" and stat.exit_status == 0


def test_limits_nspid_and_environ():
    limits = "Limit  Soft Limit  Hard Limit  Units\nMax open files    1024    4096    files\n"
    assert procfs.parse_nofile_soft_limit(limits) == 1024
    assert procfs.parse_nofile_soft_limit("Max open files  unlimited  unlimited  files") is None
    assert procfs.parse_nspid("Name:\tpython\nNSpid:\t81234\t17\n") == [81234, 17]
    assert procfs.read_environ(os.getpid(), ("PATH",))["PATH"]  # our own initial environment


def test_torch_dir_from_maps():
    maps = (
        "7f00-7f01 r-xp 00000000 fd:01 123 /usr/lib/libc.so.6\n"
        "7f02-7f03 r-xp 00000000 fd:01 456 /venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so\n"
    )
    assert procfs.torch_dir_from_maps(maps) == "/venv/lib/python3.11/site-packages/torch"
    assert procfs.torch_dir_from_maps("7f00-7f01 r-xp 0 fd:01 1 /usr/lib/libc.so.6\n") is None


@pytest.mark.parametrize("layout", [14, 18, 20])
def test_diskstats_layouts(layout):
    devices = parse_diskstats((FIXTURES / f"diskstats_{layout}.txt").read_text())
    assert devices and all(len(line.split()) == layout for line in (FIXTURES / f"diskstats_{layout}.txt").open())
    first = next(iter(devices.values()))
    assert first.reads > 0 and first.io_ticks_ms > 0


def test_iostat_formulas():
    before = parse_diskstats((FIXTURES / "diskstats_14.txt").read_text())["sda"]
    after = parse_diskstats("8 0 sda 4100 10 82048 8500 2050 20 40400 6250 0 5500 14900")["sda"]
    rates = disk_rates(before, after, 2.0, True, None)
    assert rates.reads_per_s == 50 and rates.writes_per_s == 25
    assert rates.read_bytes_per_s == 2048 * 512 / 2 and rates.write_bytes_per_s == 400 * 512 / 2
    assert rates.r_await_ms == 5.0 and rates.w_await_ms == 5.0  # 500 ms over 100 reads, 250 ms over 50 writes
    assert rates.util_percent == 25.0 and rates.aqu_sz == 0.45
    idle = disk_rates(before, before, 1.0, False, None)
    assert idle.r_await_ms is None and idle.util_percent == 0


def test_mount_sources():
    text = (
        "25 1 0:23 / /data rw - btrfs /dev/sdb1 rw\n"
        "26 1 0:24 / /dev/shm rw,nosuid - tmpfs tmpfs rw\n"
        "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
    )
    assert mount_sources(text) == {"0:23": "/dev/sdb1", "254:0": "/dev/vda"}


def test_cgroup_parsers():
    assert system.parse_cpu_max("max 100000\n") is None
    assert system.parse_cpu_max("150000 100000\n") == 1.5
    v1 = "4:memory:/job\n2:cpu,cpuacct:/job\n0::/\n"
    assert system.parse_cgroup_paths(v1) == {"memory": "/job", "cpu": "/job", "cpuacct": "/job", "": "/"}


def test_cgroup_v2_limits_take_the_tightest_ancestor(tmp_path, monkeypatch):
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "cgroup").write_text("0::/slurm/job7\n")
    (cg / "slurm" / "job7").mkdir(parents=True)
    (cg / "cgroup.controllers").write_text("cpu memory\n")
    (cg / "slurm" / "cpu.max").write_text("400000 100000\n")
    (cg / "slurm" / "job7" / "cpu.max").write_text("250000 100000\n")
    (cg / "slurm" / "job7" / "memory.max").write_text(f"{8 << 30}\n")
    (cg / "slurm" / "memory.max").write_text("max\n")
    monkeypatch.setattr(procfs, "PROC", proc)
    monkeypatch.setattr(system, "CGROUP_ROOT", cg)
    assert system.cgroup_limits(42) == (2.5, 8 << 30)


def test_cgroup_v1_quota(tmp_path, monkeypatch):
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "cgroup").write_text("3:cpu,cpuacct:/docker/abc\n2:memory:/docker/abc\n")
    quota_dir = cg / "cpu,cpuacct" / "docker" / "abc"
    quota_dir.mkdir(parents=True)
    (quota_dir / "cpu.cfs_quota_us").write_text("300000\n")
    (quota_dir / "cpu.cfs_period_us").write_text("100000\n")
    (cg / "memory" / "docker" / "abc").mkdir(parents=True)
    (cg / "memory" / "docker" / "abc" / "memory.limit_in_bytes").write_text(f"{1 << 62}\n")
    monkeypatch.setattr(procfs, "PROC", proc)
    monkeypatch.setattr(system, "CGROUP_ROOT", cg)
    assert system.cgroup_limits(42) == (3.0, None)


def test_units():
    assert cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert human_bytes(None) == "n/a" and human_bytes(512) == "512B" and human_bytes(1536) == "1.5K"


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["/venv/bin/torchrun", "--nproc_per_node", "2", "train.py"], True),
        (["python", "-m", "torch.distributed.run", "--standalone", "train.py"], True),
        (["python3", "-u", "-m", "torch.distributed.launch", "train.py"], True),
        (["/usr/bin/python3", "/venv/bin/torchrun", "train.py"], True),
        (["accelerate", "launch", "train.py"], True),
        (["python", "-m", "pytest", "-k", "torchrun"], False),  # mentions it, is not one
        (["python", "train.py", "--launcher", "torch.distributed.run"], False),
        ([], False),
    ],
)
def test_launcher_command_lines(argv, expected):
    assert is_launcher_cmdline(argv) is expected
