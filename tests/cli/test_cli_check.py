"""``lance-partitioned check`` (issue 32): what an interrupted write leaves behind (uncommitted
table versions, orphan tables younger than the grace) is reported as leftovers, harmless, and
does not fail the check unless ``--strict``; real problems (schema, unreadable pinned
versions, orphans older than the grace, rows in the wrong partition) fail it either way."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from helpers.cli import run
from helpers.data import sample_table

from dagster_lance_partitioned import PartitionedNamespace, PartitionField

FIELDS = [PartitionField.identity("country"), PartitionField.year("event_date")]


def kv_lines(out: str) -> dict[str, str]:
    """The ``key  value`` lines at the top of the report."""
    found = {}
    for line in out.splitlines():
        if not line.strip():
            break
        key, value = re.split(r"\s{2,}", line, maxsplit=1)
        found[key] = value
    return found


def interrupted(root: Path, before_commit) -> PartitionedNamespace:
    """A namespace whose last write was interrupted before its manifest commit: one
    uncommitted version (US 2025 appended to) and one orphan table (JP 2025, new)."""
    ns = PartitionedNamespace.create(root, sample_table(0).schema, FIELDS)
    ns.write(sample_table(12))

    def killed(pending: list) -> None:
        raise RuntimeError("killed before the manifest commit")

    before_commit(ns, killed)
    with pytest.raises(RuntimeError, match="killed"):
        ns.write(sample_table(2, countries=("US", "JP"), start=700))
    before_commit(ns, None)
    return PartitionedNamespace.open(root)


def age(path: str, days: float) -> None:
    """Every file and directory under ``path`` made ``days`` old."""
    old = time.time() - days * 24 * 3600
    for dirpath, _dirs, names in os.walk(path):
        for name in [*names, "."]:
            os.utime(os.path.join(dirpath, name), (old, old))


def test_leftovers_of_an_interrupted_write_pass_unless_strict(capsys, tmp_path, before_commit):
    ns = interrupted(tmp_path / "ns", before_commit)
    code, out, err = run(capsys, "check", ns.uri, "--max-width", "0")
    assert (code, err) == (0, ""), out
    kv = kv_lines(out)
    assert kv["schema"] == kv["read versions"] == "ok"
    assert kv["uncommitted"] == "1 table (leftover)"
    assert kv["orphans"].startswith("1 orphan table (") and "0 older than 168 h" in kv["orphans"]
    assert "\nleftovers of interrupted writes (harmless" in out
    assert "\nuncommitted versions:\n" in out and "\norphan tables younger than 168 h:\n" in out
    assert out.splitlines()[-1] == (
        "healthy; 2 leftovers of interrupted writes (harmless; --strict counts them)"
    )

    code, out, _ = run(capsys, "check", ns.uri, "--json")
    doc = json.loads(out)
    assert code == 0
    assert (doc["healthy"], doc["issues"], doc["leftovers"], doc["strict"]) == (True, 0, 2, False)
    assert len(doc["uncommitted"]) == 1 and [o["stale"] for o in doc["orphans"]] == [False]

    code, out, _ = run(capsys, "check", ns.uri, "--strict")
    assert code == 1
    assert out.splitlines()[-1] == "2 leftovers of interrupted writes found (--strict)"
    code, out, _ = run(capsys, "check", ns.uri, "--strict", "--json")
    doc = json.loads(out)
    assert code == 1 and (doc["healthy"], doc["leftovers"], doc["strict"]) == (True, 2, True)

    # the maintenance the report names removes them: a later write of the partition
    # supersedes the uncommitted version, vacuum removes the orphan once past the grace
    ns.write(sample_table(1, countries=("US",), start=800))
    code, out, err = run(capsys, "vacuum", ns.uri, "--grace-hours", "0")
    assert code == 0, err
    code, out, _ = run(capsys, "check", ns.uri, "--strict")
    assert code == 0 and out.splitlines()[-1] == "healthy", out


def test_real_problems_fail_check_beside_leftovers(capsys, tmp_path, before_commit):
    ns = interrupted(tmp_path / "ns", before_commit)
    (orphan,) = [o.location for o in ns.inspect.find_orphans()]
    age(os.path.join(ns.uri, orphan), days=8)  # past vacuum's grace: maintenance is not running
    code, out, _ = run(capsys, "check", ns.uri, "--max-width", "0")
    assert code == 1
    assert "1 older than 168 h" in kv_lines(out)["orphans"]
    problems, leftovers = out.split("\nleftovers of interrupted writes")
    assert "orphan tables older than 168 h (run `vacuum`):\n" in problems and orphan in problems
    assert orphan not in leftovers and "uncommitted versions:" in leftovers
    assert out.splitlines()[-1] == "1 issue found; 1 leftover of interrupted writes"
    doc = json.loads(run(capsys, "check", ns.uri, "--json")[1])
    assert (doc["healthy"], doc["issues"], doc["leftovers"]) == (False, 1, 1)
    code, _, _ = run(capsys, "check", ns.uri, "--grace-hours", "240")
    assert code == 0  # younger than a 10-day grace: a leftover again

    broken = next(p for p in ns.inspect.partitions() if p["values"]["country"] == "FR")
    shutil.rmtree(os.path.join(ns.uri, broken["location"]))
    code, out, _ = run(capsys, "check", ns.uri, "--grace-hours", "240")
    assert code == 1 and kv_lines(out)["read versions"] == "1 unreadable table"
    assert out.splitlines()[-1] == "1 issue found; 2 leftovers of interrupted writes"
