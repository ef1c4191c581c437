"""The type checker (mypy over dltop/), run as its own program, as a maintainer would (it reads
the whole package: seconds, so it runs with the integration tests)."""

from __future__ import annotations

import re
import subprocess

from tests.support import ROOT, dev_tool


def test_the_type_checker_finds_nothing():
    result = subprocess.run([dev_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert re.search(r"Success: no issues found in \d+ source files", result.stdout), result.stdout
