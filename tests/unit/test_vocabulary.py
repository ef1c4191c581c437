"""The finding registry, the vocabulary's helpers and the figures the docs restate: each id and
threshold is defined once, and the docs say what the code does."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.model import Finding, ProcessSample, judged_stuck, sampling_broken, sampling_works
from dltop.model.findings import FAULTS, FINDINGS, HANGS, REGISTRY, is_fault, is_hang
from dltop.settings import DEFAULTS, Settings

ROOT = Path(__file__).resolve().parents[2]
FINDINGS_DOC = (ROOT / "docs" / "findings.md").read_text()
README = (ROOT / "README.md").read_text()


def _readme_table() -> dict[str, str]:
    """The README's findings-at-a-glance rows: id -> what it says."""
    section = README.split("## Findings at a glance", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `([a-z-]+)` \| (.+) \|$", section, re.MULTILINE))


def test_registry_ids_are_unique_and_documented():
    ids = [t.id for t in REGISTRY]
    assert len(ids) == len(set(ids)) == len(FINDINGS)
    documented = re.findall(r"^### `([a-z-]+)`$", FINDINGS_DOC, re.MULTILINE)
    assert sorted(documented) == sorted(ids)
    assert list(_readme_table()) == ids  # the README lists them in the registry's order


def test_kinds_and_hangs():
    assert FAULTS == {"worker-hung", "worker-died", "ranks-restarted", "trainer-stalled", "run-stopped"}
    assert HANGS == {"worker-hung", "trainer-stalled"} and HANGS <= FAULTS
    assert is_fault("ranks-restarted") and not is_fault("rank-straggler") and not is_fault("stacks-unavailable")
    assert is_hang("trainer-stalled") and not is_hang("worker-died")
    assert all(t.means and t.kind in ("fault", "performance", "info") for t in REGISTRY)


def test_each_finding_id_is_spelled_once_in_the_code_that_reads_the_registry():
    """The rules and the front ends that read the registry spell no id themselves. "input-bound" is
    also a demo scenario's name and a badge's state (BadgeState): there it is no finding id."""
    not_yet = {"dltop/demo/scenarios.py", "dltop/tui/widgets.py"}
    for finding_id in FINDINGS:
        spelled = [
            str(path.relative_to(ROOT))
            for path in (ROOT / "dltop").rglob("*.py")
            for _ in re.finditer(rf"[\"']{re.escape(finding_id)}[\"']", path.read_text())
        ]
        elsewhere = [p for p in spelled if p not in not_yet]
        if finding_id == "input-bound":  # also a word of the badge (BadgeState), not a finding id there
            elsewhere = [p for p in elsewhere if p not in ("dltop/model/vocabulary.py", "dltop/tui/view.py")]
        assert elsewhere == ["dltop/model/findings.py"], finding_id


def test_incidents_open_on_faults_and_errors():
    from dltop.record.incidents import IncidentDetector

    def finding(finding_id: str, severity: str) -> Finding:
        return Finding(finding_id, severity, "t", "d", [1], {}, "")  # type: ignore[arg-type]

    raised = IncidentDetector().new(
        [finding("ranks-restarted", "warning"), finding("rank-straggler", "warning"), finding("shm-low", "error")]
    )
    assert [f.id for f in raised] == ["ranks-restarted", "shm-low"]


def test_sampling_helpers():
    assert sampling_works("ok") and not sampling_broken("ok") and not sampling_broken("off")
    assert sampling_broken("denied") and sampling_broken("no-py-spy") and sampling_broken("error: py-spy died")


def _process(activity: str, stuck_s: float) -> ProcessSample:
    return ProcessSample(1, 0, "worker", 2, "python", "python train.py", "sleeping", activity=activity, stuck_s=stuck_s)  # type: ignore[arg-type]


def test_live_view_calls_stuck_what_the_model_calls_stuck():
    from dltop.tui.view import activity_text

    assert judged_stuck(_process("stuck", 25.0))
    assert activity_text(_process("stuck", 25.0)) == "STUCK 0:25"
    assert activity_text(_process("fetching", 7.0)) == "still 0:07"  # below --hang-after: not stuck yet
    assert activity_text(_process("fetching", 2.0)) == "fetching"
    assert activity_text(_process("waiting-for-data", 9.0)) == "waiting 0:09"
    assert activity_text(_process("idle", 60.0)) == "idle"


def test_help_lists_every_badge_the_view_shows():
    from dltop.tui import view
    from dltop.tui.screens import HELP

    texts = {text for text, _ in view.BADGES}
    assert {b.text for b in view.CAUSE_BADGES.values()} <= texts
    assert {"HUNG", "ATTENTION", "EXITED", "NO STACKS", "MEASURING", "HEALTHY"} <= texts
    assert all(text in _flat(HELP) for text in texts)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _percent(share: float) -> str:
    return f"{share * 100:g}%"


# (text in docs/findings.md with {} where the figure goes, the figure as Settings has it)
FINDINGS_FIGURES = [
    ("`--hang-after S` sets the hang threshold (default {} s)", f"{DEFAULTS.hang_after_s:g}"),
    ("show a finding once it has held for {} s", f"{DEFAULTS.raise_after_s:g}"),
    ("keep it until it has been absent for {} s", f"{DEFAULTS.clear_after_s:g}"),
    ("its data wait is ≥ {}", f"{DEFAULTS.trainer_waiting_percent:g}%"),
    ("start-up takes at least {} of the trainer's time", f"{DEFAULTS.startup_storm_percent:g}%"),
    ("start-up excluded) is ≥ {} of the trainer's sampled time", f"{DEFAULTS.input_bound_percent:g}%"),
    ("over ≥ {} samples", f"{DEFAULTS.min_stack_samples}"),
    ("Severity `warning` at ≥ {}, else `info`. Under its", f"{DEFAULTS.input_bound_warning_percent:g}%"),
    ("`info`. Under its {} line it", f"{DEFAULTS.input_bound_percent:g}%"),
    ("predicted pace's low end is more than {} above now's", f"{DEFAULTS.same_pace_share * 100:g}%"),
    ("waits at least {} points more than the median", f"{DEFAULTS.straggler_gap_percent:g}"),
    ("are busy ≥ {} of their stacks", f"{DEFAULTS.starving_siblings_busy_percent:g}%"),
    ("idle in all of ≥ {} of its stacks", f"{DEFAULTS.starving_min_stacks}"),
    ("data wait < {} (≥ 30 samples)", f"{DEFAULTS.too_many_wait_percent:g}%"),
    ("CPU share) < {} but not 0", f"{DEFAULTS.idle_workers_percent:g}%"),
    ("ceil(N × working × {})", f"{DEFAULTS.fewer_workers_headroom:g}"),
    ("or within {} of it where that is wider", _percent(DEFAULTS.same_pace_share)),
    ("the detail names them from {} cores", f"{DEFAULTS.others_cpu_worth_saying:g}"),
    ("surely use more than {} of a rank's CPUs", _percent(DEFAULTS.same_pace_share)),
    (
        "autocorrelation of the trainer's waiting / not-waiting samples (read up to {})",
        f"{DEFAULTS.max_autocorrelation:g}",
    ),
    ("waits says (once there are {} ticks: a periodic step", f"{DEFAULTS.min_error_windows}"),
    ("each input moved alone by {} standard error", "one" if DEFAULTS.capacity_errors == 1 else "?"),
    ("replaced ≥ {} times", f"{DEFAULTS.respawn_epochs}"),
    ("when start-up takes ≥ {} of the trainer's time, else `info`", f"{DEFAULTS.respawn_cost_percent:g}%"),
    ("averaged over the window, ≥ {} × the CPUs the job may use", f"{DEFAULTS.oversubscribed_ratio:g}"),
    ("the device is ≥ {} busy", f"{DEFAULTS.disk_util_percent:g}%"),
    ("reads waiting ≥ {} ms", f"{DEFAULTS.disk_await_ms:g}"),
    ("through ≥ {} distinct readings", f"{DEFAULTS.memory_growth_points}"),
    ("with R² ≥ {}", f"{DEFAULTS.memory_growth_fit:g}"),
    ("a slope ≥ {} standard errors", f"{DEFAULTS.memory_growth_t:g}"),
    ("≥ {} MiB of rise", f"{DEFAULTS.memory_growth_min_bytes >> 20}"),
    ("runs out within {} minutes", f"{DEFAULTS.memory_error_s / 60:g}"),
    ("at its fullest in the window ≥ {} of its size", _percent(DEFAULTS.shm_full_share)),
    ("Severity `error` at ≥ {}, else `warning`. * **Evidence**: `shm_total_bytes`", _percent(DEFAULTS.shm_error_share)),
    ("open fds above {} of the soft limit", _percent(DEFAULTS.fd_limit_share)),
    ("Severity `error` at ≥ {}, else `warning`. What the fds are", _percent(DEFAULTS.fd_error_share)),
    ("mean busy share < {} over", f"{DEFAULTS.gpu_busy_percent:g}%"),
    ("over ≥ {} NVML readings", f"{DEFAULTS.gpu_min_readings}"),
    ("(start-up ≥ {} of the trainer's time)", f"{DEFAULTS.input_bound_percent:g}%"),
    ("main thread together use ≥ {} cores", f"{DEFAULTS.gil_cores:g}"),
    ("cores and ≤ {} cores (window means)", f"{DEFAULTS.gil_cores_max:g}"),
    ("threads are busy ≥ {} of their samples", f"{DEFAULTS.gil_busy_percent:g}%"),
    ("once it has been gone ≥ {} s", f"{DEFAULTS.thread_gone_s:g}"),
]
README_FIGURES = [
    ("the trainer waits for data ≥ {} of its time", f"{DEFAULTS.input_bound_percent:g}%"),
    ("the job wants ≥ {}× the CPUs it may use", f"{DEFAULTS.oversubscribed_ratio:g}"),
    ("a disk the job reads is ≥ {} busy", f"{DEFAULTS.disk_util_percent:g}%"),
    ("/dev/shm ≥ {} full", _percent(DEFAULTS.shm_full_share)),
    ("a process above {} of its open-file limit", _percent(DEFAULTS.fd_limit_share)),
    ("a GPU the job holds is busy < {};", f"{DEFAULTS.gpu_busy_percent:g}%"),
]


@pytest.mark.parametrize(("text", "figure"), FINDINGS_FIGURES, ids=[t for t, _ in FINDINGS_FIGURES])
def test_findings_doc_says_what_settings_holds(text: str, figure: str):
    assert _flat(text.format(figure)) in _flat(FINDINGS_DOC)


@pytest.mark.parametrize(("text", "figure"), README_FIGURES, ids=[t for t, _ in README_FIGURES])
def test_readme_table_says_what_settings_holds(text: str, figure: str):
    assert _flat(text.format(figure)) in _flat(" ".join(_readme_table().values()))


def test_every_setting_is_a_number_with_a_default():
    for name, value in vars(Settings()).items():
        assert isinstance(value, (int, float)), name


def test_the_recorder_names_the_faults_that_open_an_incident():
    """Its help and docs/recorder.md list what the registry calls a fault."""
    recorder_doc = _flat((ROOT / "docs" / "recorder.md").read_text())
    result = subprocess.run([sys.executable, "-m", "dltop", "record", "--help"], capture_output=True, text=True)
    for fault in FAULTS:
        assert f"`{fault}`" in recorder_doc and fault in _flat(result.stdout), fault
