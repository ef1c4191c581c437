"""Bad input on the command line ends in one clear line and exit 2, never a traceback or a name
from inside dltop; the forms the docs offer read as written."""

from __future__ import annotations

import json
import subprocess
import sys

from dltop import install_hint
from dltop.cli.options import join_dashed_values
from tests.recordings import write_synthetic
from tests.support import ROOT, assert_one_line_error, run_dltop

HEALTHY = json.loads((ROOT / "tests/fixtures/snapshots/healthy.json").read_text())


def test_a_time_of_day_that_is_no_time_is_one_line(tmp_path):
    path = tmp_path / "r.dltop"
    write_synthetic(path, [HEALTHY] * 20)
    for at in ("25:00", "12:61", "11:56:99"):
        assert_one_line_error(run_dltop("replay", str(path), "--at", at), "cannot read the time")


def test_a_time_from_the_end_reads_as_written(tmp_path):
    path = tmp_path / "r.dltop"
    write_synthetic(path, [HEALTHY] * 20)
    apart, joined = (run_dltop("replay", str(path), *at, "--json") for at in (("--at", "-5s"), ("--at=-5s",)))
    assert apart.returncode == 0, apart.stderr
    assert json.loads(apart.stdout) == json.loads(joined.stdout)


def test_only_a_dashed_word_after_at_joins_it():
    assert join_dashed_values(["replay", "f", "--at", "-5m", "--json"]) == ["replay", "f", "--at=-5m", "--json"]
    assert join_dashed_values(["replay", "f", "--at", "--json"]) == ["replay", "f", "--at", "--json"]
    assert join_dashed_values(["snapshot", "--pid", "-5"]) == ["snapshot", "--pid", "-5"]


def test_a_value_that_is_no_number_names_the_option_and_what_it_takes():
    for args, option in (
        (("snapshot", "--pid", "1", "--duration", "abc"), "--duration"),
        (("snapshot", "--pid", "1", "--interval", "nan"), "--interval"),
        (("exporter", "--port", "abc"), "--port"),
    ):
        result = run_dltop(*args)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result
        (error,) = [line for line in result.stderr.splitlines() if "error:" in line]
        assert f"argument {option}: must be" in error and "invalid" not in error, error


def test_demo_without_torch_says_what_to_install_before_it_starts_anything():
    code = "import sys; sys.modules['torch'] = None; from dltop.cli import main; sys.exit(main(['demo']))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert_one_line_error(result, install_hint("bench"))  # and no "starting the bundled training job"
