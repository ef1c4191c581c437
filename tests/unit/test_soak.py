"""The exporter soak's own bookkeeping (tests/soak.py) on made-up scans: a sampler is left behind
only when it is stale in both scans."""

from __future__ import annotations

from tests import soak as soak_module
from tests.soak import Options, Soak


def test_a_sampler_is_left_behind_only_when_stale_in_both_scans(monkeypatch, tmp_path):
    """The end check scans the exporters' samplers twice, a few passes apart. A py-spy window
    sampling at the first scan that ended just before the second (a zombie until the exporter's
    next tick reaps it: the exporter's windows last up to 30 s) is not left behind; a zombie in
    both scans is, and so is a run aimed at a soak job in both."""
    soak = Soak(Options(directory=tmp_path), tmp_path, lambda line: None)
    scans = iter(
        [
            {(1, 0.0): ("1 py-spy record (sleeping)", False, 9), (2, 0.0): ("2 py-spy (zombie)", True, 9),
             (3, 0.0): ("3 austin -p 77 (sleeping)", True, 9)},
            {(1, 0.0): ("1 py-spy (zombie)", True, 9), (2, 0.0): ("2 py-spy (zombie)", True, 9),
             (3, 0.0): ("3 austin -p 77 (sleeping)", True, 9), (4, 0.0): ("4 py-spy (zombie)", True, 9)},
        ]
    )  # fmt: skip
    monkeypatch.setattr(soak, "_sampler_scan", lambda: next(scans))
    monkeypatch.setattr(soak, "_slowest_pass", lambda phase=None: 0.0)
    monkeypatch.setattr(soak_module.time, "sleep", lambda seconds: None)
    assert soak._leftover_samplers() == ["2 py-spy (zombie)", "3 austin -p 77 (sleeping)"]
