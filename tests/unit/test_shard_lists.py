"""An iterable dataset's parts by its own list of shards: brace patterns counted as webdataset
expands them, the lists real py-spy dumps show in a worker's locals, and which count wins (the
dataset's own account, a pattern it was given, a folder's files, the files seen read)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from braceexpand import braceexpand

from dltop.collect.processes import shards
from dltop.collect.processes.shard_lists import brace_count, brace_matches, command_line_parts, listed_parts
from dltop.collect.processes.shards import ShardFiles
from dltop.collect.stacks.pyspy import parse_dump
from dltop.frames import worker_loop_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pyspy"
PATTERNS = {
    "shard-{000..009}.tar": 10,
    "{a,b}": 2,
    "s3://b/{train,val}/part-{0..3}.tar": 8,
    "x-{1..10..3}.tar": 4,  # 1 4 7 10
    "x-{10..1}.tar": 10,
    "x-{a..e}{1,2,3}.tar": 15,
    "x-{a,{b,c}}.tar": 3,
    "x-{,a}.tar": 2,
    "x-{a}.tar": 1,  # no comma, no range: a literal group
    r"x-\{a,b\}.tar": 1,  # escaped
    "/a/x-{0..3}.tar::/b/y-{a,b}.tar": 6,  # webdataset's "::" joins patterns
}


def _config(fixture: str) -> dict:
    """What a worker's first dump (with locals) says, as the sampler reads it."""
    config: dict = {}
    for thread in parse_dump((FIXTURES / fixture).read_text()):
        config.update(worker_loop_config(thread.locals or {}))
    return config


@pytest.mark.parametrize("pattern,count", PATTERNS.items())
def test_a_brace_pattern_counts_as_braceexpand_expands_it(pattern, count):
    assert brace_count(pattern) == count
    if "::" not in pattern:
        names = list(braceexpand(pattern))
        assert len(names) == count and all(brace_matches(pattern, n) for n in names)


def test_every_short_pattern_counts_as_braceexpand_does():
    for text in map("".join, itertools.product("{},.a1", repeat=5)):
        try:
            expected = len(list(braceexpand(text)))
        except ValueError:  # unbalanced braces
            expected = None
        assert brace_count(text) == expected, text


def test_a_pattern_matches_the_files_it_names_wherever_they_are_read_from():
    assert brace_matches("/d/shard-{000..009}.tar", "/d/shard-003.tar")
    assert brace_matches("https://host/d/shard-{000..009}.tar", "/cache/shard-003.tar")  # a local copy
    assert not brace_matches("/d/shard-{000..009}.tar", "/d/val-003.tar")
    assert brace_count("x-{0..3.tar") is None


def test_a_forked_webdataset_worker_shows_the_list_its_trainer_built_the_dataset_from():
    """A real dump of tests/jobs/wds_job.py's one worker on the first of 2 shards."""
    config = _config("worker_webdataset_locals.json")
    assert config["shard_url"] == "/tmp/wds-sl/train-0000.tar"
    counted = listed_parts(config["shard_lists"], {config["shard_url"]})
    assert counted is not None and counted.parts == 2 and counted.seen is None
    assert counted.where == "2 shards listed in main's urls"
    assert listed_parts(config["shard_lists"], {"/other/train-0000.tar"}) is not None  # by its name
    assert listed_parts(config["shard_lists"], {"/tmp/wds-sl/val-0000.tar"}) is None  # lists no file read


def test_a_list_py_spy_cut_short_counts_nothing_and_a_pattern_local_counts_exactly():
    lists = _config("shard_list_locals.json")["shard_lists"]
    cut_short = {"main's urls": lists["main's urls"]}
    assert cut_short["main's urls"].endswith(", ...]")
    assert listed_parts(cut_short, {"/data/some/long/folder/name/train-000003.tar"}) is None
    counted = listed_parts(lists, {"/data/shards/train-000042.tar"})
    assert counted is not None and counted.parts == 100
    counted = listed_parts(lists, {"/b/y-a.tar"})
    assert counted is not None and counted.parts == 6
    counted = listed_parts(lists, {"/d/a-1.tar"})
    assert counted is not None and counted.parts == 3


def test_datasets_streaming_workers_show_their_shard_indices_and_no_list():
    config = _config("worker_datasets_streaming_locals.json")
    assert config["shard_indices"] == [0, 1] and "shard_lists" not in config


def test_a_pattern_on_the_command_line_counts_once_it_names_a_file_read():
    argv = ["python", "train.py", "--shards", "/d/shard-{000..009}.tar", "--val", "/d/val-{0..1}.tar"]
    counted = command_line_parts(argv, {"/d/shard-004.tar"})
    assert counted is not None and counted.parts == 10 and "on the command line" in counted.where
    assert command_line_parts(argv, {"/e/other-4.tar"}) is None


@pytest.fixture
def folder(tmp_path):
    """Four shards in a folder, the first held open by this process (as a worker holds its shard)."""
    for index in range(4):
        (tmp_path / f"train-{index}.tar").write_bytes(b"")
    with open(tmp_path / "train-0.tar", "rb"):
        yield tmp_path


def _counted(files: ShardFiles, configs: list, argv: list, monkeypatch) -> tuple:
    monkeypatch.setattr(shards, "read_cmdline", lambda pid: argv)
    clock = iter(range(0, 1000, 10))
    files._clock = lambda: next(clock)
    counted = files.parts((1, "WebDataset"), [shards.os.getpid()], configs, len(configs))
    return counted, files.seen((1, "WebDataset"))


def test_the_dataset_s_own_count_beats_a_pattern_which_beats_the_folder(folder, monkeypatch):
    read = str(folder / "train-0.tar")
    listed = {"main's urls": f'["{read}", "{folder}/train-1.tar"]'}
    argv = ["train.py", f"{folder}/train-{{0..2}}.tar"]

    (parts, where), seen = _counted(ShardFiles(), [{}], [], monkeypatch)
    assert (parts, seen) == (4, 1) and where == f"4 shard files like {read}"  # a folder: an upper bound
    assert _counted(ShardFiles(), [{}], argv, monkeypatch) == ((3, f"3 shards of {argv[1]} on the command line"), None)
    assert _counted(ShardFiles(), [{"shard_lists": listed}], argv, monkeypatch)[0][0] == 2
    dealt = [{"shard_lists": listed, "shard_indices": [0, 5]}]
    assert _counted(ShardFiles(), dealt, argv, monkeypatch)[0][0] == 6


def test_a_count_from_a_better_source_stays_when_new_workers_are_not_read_yet(folder, monkeypatch):
    files = ShardFiles()
    listed = {"main's urls": f'["{folder}/train-0.tar", "{folder}/train-1.tar"]'}
    assert _counted(files, [{"shard_lists": listed}], [], monkeypatch)[0][0] == 2
    assert _counted(files, [None], [], monkeypatch) == ((2, "2 shards listed in main's urls"), None)
