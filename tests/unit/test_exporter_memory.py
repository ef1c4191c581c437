"""The exporter's memory under churn: what a job's stacks make the collector read is
kept compactly, bounded, and goes with the job.

A job's stacks run through dozens of torch and stdlib files; SourceLines kept each as a list of
lines, a str per line (16-70 thousand small objects a job), made and freed for every job that
came and went: Python's allocator kept the arenas they had filled, and the exporter's RSS crept
up with stack sampling on (docs/performance.md, "The exporter over an hour of churn").
"""

from __future__ import annotations

import gc
import os
import sys

from dltop.collect.stacks import source_lines
from dltop.collect.stacks.source_lines import SourceLines


def _write(path, lines: int) -> list[str]:
    text = [f"value_{i} = compute({i}, 'a string that makes the line as long as real code is')" for i in range(lines)]
    path.write_text("\n".join(text) + "\n")
    return text


def test_a_read_file_is_a_few_blocks_not_a_str_per_line(tmp_path):
    path = tmp_path / "big_module.py"
    text = _write(path, 5000)
    sources = SourceLines()
    gc.collect()
    before = sys.getallocatedblocks()
    assert sources.line(os.getpid(), str(path), 1234) == text[1233]
    gc.collect()
    kept = sys.getallocatedblocks() - before
    assert kept < 200, f"{kept} blocks kept for one line of a 5000-line file"  # a str per line: over 5000


def test_lines_are_numbered_as_python_numbers_them(tmp_path):
    path = tmp_path / "mixed.py"
    path.write_bytes(b"first\r\n\r\n  third  \rfourth\n\x0cfifth\nlast without an end")
    sources, pid = SourceLines(), os.getpid()
    assert [sources.line(pid, str(path), n) for n in range(1, 8)] == [
        "first",
        None,
        "third",
        "fourth",
        "\x0cfifth".strip(),
        "last without an end",
        None,
    ]
    assert sources.line(pid, str(path), 0) is None
    empty = tmp_path / "empty.py"
    empty.write_bytes(b"")
    assert sources.line(pid, str(empty), 1) is None
    assert sources.line(pid, str(tmp_path / "missing.py"), 1) is None


def test_what_a_job_keeps_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(source_lines, "KEPT_BYTES_MAX", 64 << 10)
    sources, pid = SourceLines(), os.getpid()
    for index in range(20):
        path = tmp_path / f"module_{index}.py"
        text = _write(path, 200)  # ~16 KB each
        assert sources.line(pid, str(path), 7) == text[6]
    assert sources._kept_bytes <= 64 << 10
    assert len(sources._files) < 20
    assert sources.line(pid, str(tmp_path / "module_0.py"), 8) is not None  # dropped, read again


def test_a_gone_trainers_loader_sites_go_with_it(tmp_path):
    train = tmp_path / "train.py"
    train.write_text("from torch.utils.data import DataLoader\nloader = DataLoader(ds, num_workers=4)\n")
    sources = SourceLines()
    assert sources.loader_call(os.getpid(), [str(train)], None) is not None
    assert sources.loader_call(os.getpid() + 1, [str(train)], None) is not None
    sources.forget(os.getpid())
    assert [key[0] for key in sources._sites] == [os.getpid() + 1]
    assert not sources._decoded  # the lines one analysis decoded are not kept
