"""The house rules, enforced: the layering contracts (import-linter, configured in pyproject.toml)
and the type checker (mypy over dltop/). Each runs as its own program, as a maintainer would."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: `pip install -e '.[test]'` brings it")
    return found


def test_the_layering_contracts_hold():
    result = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    kept = re.search(r"Contracts: (\d+) kept, 0 broken", result.stdout)
    assert kept and int(kept.group(1)) >= 3, result.stdout[-2000:]  # the core, the one-way flow, no circles


def test_the_type_checker_finds_nothing():
    result = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert re.search(r"Success: no issues found in \d+ source files", result.stdout), result.stdout
