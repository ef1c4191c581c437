"""`dltop exporter` under load and churn, the short form of benchmarks/soak_exporter.py (which runs
for 10 minutes by hand): about 36 s of real training jobs starting every few seconds and exiting by
themselves, being SIGKILLed mid-run or just as they are discovered, while several scrapers, a slow
one and a silent one hit two real exporters (one whose py-spy and Austin are /bin/false).

The exporter's memory, threads, fds and series return to their baseline, exited jobs' series
disappear within a few passes, no sampler is left behind, no scrape takes longer than a pass, and
``dltop_collection_failures_total`` counts the jobs whose sampling failed. Margins are generous (a
noisy, shared 2-core machine) but each bound can fail: see the checks in tests/soak.py.
"""

from __future__ import annotations

import pytest

from tests.soak import Options, render, run_soak


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_exporter_holds_under_churn_and_slow_scrapers(tmp_path):
    options = Options(
        minutes=0.6,
        churn_s=3.0,
        rss_margin_mb=30.0,  # RSS after <= RSS before + 30 MB
        thread_margin=2,  # threads back to baseline +-2
        fd_margin=4,
        scrape_floor_s=2.0,  # scrape p99 <= max(2 s, 3 x the slowest pass)
        scrape_passes=3.0,
        gone_passes=3.0,  # an exited job's series gone within 3 passes
        silent_s=30.0,
        directory=tmp_path,
    )
    result = run_soak(options)
    report = render(result)
    print(report)  # the figures, shown with -s or when the test fails
    failed = [f"{check.name}: {check.detail}" for check in result.checks if not check.ok]
    assert not failed, "\n".join(failed) + "\n\n" + report
