"""The layering contracts (import-linter, configured in pyproject.toml), run as its own program,
as a maintainer would."""

from __future__ import annotations

import re
import subprocess

from tests.support import ROOT, dev_tool


def test_the_layering_contracts_hold():
    result = subprocess.run([dev_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    kept = re.search(r"Contracts: (\d+) kept, 0 broken", result.stdout)
    assert kept and int(kept.group(1)) >= 3, result.stdout[-2000:]  # the core, the one-way flow, no circles
