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


def test_nothing_refers_to_a_document_the_repository_does_not_hold():
    """Code, tests, benchmarks and docs say what a thing is, not which issue or design note asked for it."""
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()
    pointer = re.compile(r"DESIGN\.md|\bissues? #?\d+|§\s?\d", re.IGNORECASE)
    found = [
        f"{name}:{number}"
        for name in tracked
        if name.endswith((".py", ".md", ".yml", ".yaml", ".toml", ".sh")) and name != "CHANGELOG.md"
        for number, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1)
        if pointer.search(line)
    ]
    assert not found, found
