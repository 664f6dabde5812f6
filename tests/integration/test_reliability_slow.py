"""The reliability measurements of ``bench/bench_reliability.py``, with assertions.

Slow (excluded from the default run): ``pytest -m slow tests/integration/test_reliability_slow.py``.
``RELIABILITY_TRIALS`` sets the number of kill -9 trials (default 200; they cycle through
``bench.KILL_MODES``, plain writes and writes in a transaction adding a column),
``RELIABILITY_WRITES`` the writes per concurrent writer (default 10).
Figures: docs/explanation/reliability.md.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "bench_reliability.py"
_spec = importlib.util.spec_from_file_location("bench_reliability", _PATH)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_reliability"] = bench  # dataclasses resolve their module by name
_spec.loader.exec_module(bench)

TRIALS = int(os.environ.get("RELIABILITY_TRIALS", "200"))
WRITES = int(os.environ.get("RELIABILITY_WRITES", "10"))

pytestmark = pytest.mark.slow


def test_kill_9_leaves_the_old_or_the_new_state(tmp_path: Path) -> None:
    rep = bench.run_kill_trials(TRIALS, tmp_path)
    print(bench.kill_markdown(rep))
    assert rep.trials == TRIALS
    assert rep.mixed == 0, bench.kill_markdown(rep)
    assert rep.errors == 0, bench.kill_markdown(rep)
    assert rep.rows_lost == 0
    # every mode took its turns, plain writes and transactions (adding a column) alike
    assert set(rep.modes) == set(bench.KILL_MODES), rep.modes
    for mode, counts in rep.modes.items():
        assert counts.get("MIXED", 0) == 0 and counts.get("ERROR", 0) == 0, (mode, counts)
        assert counts.get("rows lost", 0) == 0, (mode, counts)
    for r in rep.records:
        # a transaction may leave its schema change without its data, a plain write may not
        allowed = ("old", "changes only", "new") if r.mode.startswith("tx_") else ("old", "new")
        assert r.outcome in allowed, (r.trial, r.mode, r.phase, r.outcome, r.detail)
        assert r.rows_lost == 0, (r.trial, r.mode, r.outcome)
    # both sides of the commit were hit, so the trials really straddle it
    assert rep.outcomes.get("old", 0) > 0 and rep.outcomes.get("new", 0) > 0, rep.outcomes
    if TRIALS >= 100:  # and kills landed between a transaction's two commits (28 of 100 once)
        assert rep.outcomes.get("changes only", 0) > 0, rep.outcomes
    assert rep.unchanged_after_vacuum == TRIALS
    assert rep.version_issues_after_vacuum == 0
    assert rep.follow_up_ok == TRIALS
    assert rep.orphan_dirs_after_vacuum == 0, "vacuum(grace=0) left orphan directories"
    assert not [r for r in rep.records if r.detail], [r.detail for r in rep.records if r.detail]


@pytest.mark.parametrize("writers", [4, 8])
@pytest.mark.parametrize("scenario", bench.SCENARIOS)
def test_concurrent_writers_lose_nothing(tmp_path: Path, scenario: str, writers: int) -> None:
    r = bench.run_concurrency(scenario, writers, WRITES, tmp_path)
    print(bench.concurrency_markdown([r]))
    assert r.other_errors == 0, r.errors
    assert r.rows_lost == 0 and r.rows_unexpected == 0
    assert r.rows_seen == r.rows_expected
    assert r.versions_wrong == 0, "a committed version does not hold exactly the writes before it"
    # every committed write is one manifest version; the manifest may add its own compactions
    assert r.manifest_versions_added >= r.commits
    assert r.commits + r.conflicts == writers * WRITES
    if scenario == bench.SCENARIOS[2]:
        assert r.commits >= 1
    else:
        assert r.conflicts == 0, "appends rebase; they never conflict"


@pytest.mark.parametrize("case", bench.BAD_INPUTS, ids=[c[0] for c in bench.BAD_INPUTS])
def test_bad_input_is_refused_and_changes_nothing(tmp_path: Path, case: bench.Case) -> None:
    r = bench.run_bad_input(case, tmp_path)
    print(bench.bad_input_markdown([r]))
    assert r.exception is not None, "accepted"
    assert r.package_error, f"{r.exception} is not a PartitionedNamespaceError: {r.message}"
    assert r.reader_state_unchanged
    assert r.files_unchanged, f"+{r.files_added} -{r.files_removed} ~{r.files_modified}"
