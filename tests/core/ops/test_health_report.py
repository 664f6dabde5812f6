"""``ns.inspect.check()``: every health check in one call, as a frozen :class:`HealthReport`
sorting what was found into problems (schemas, unreadable pinned versions, orphans past the
grace, rows in the wrong partition) and leftovers of interrupted writes (uncommitted versions,
orphans within the grace) -- what ``lance-partitioned check`` prints. Real namespaces with
real interrupted writes and real damage."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
import time

import pytest
from helpers.data import sample_table

from dagster_lance_partitioned import HealthReport, PartitionedNamespace, PartitionField

FIELDS = [PartitionField.identity("country"), PartitionField.year("event_date")]


def interrupted(root, before_commit) -> PartitionedNamespace:
    """A namespace whose last write was killed before its manifest commit: one uncommitted
    version (US 2025 appended to) and one orphan table (JP 2025, new)."""
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
    old = time.time() - days * 24 * 3600
    for dirpath, _dirs, names in os.walk(path):
        for name in [*names, "."]:
            os.utime(os.path.join(dirpath, name), (old, old))


def test_a_healthy_namespace(tmp_path):
    ns = PartitionedNamespace.create(tmp_path / "ns", sample_table(0).schema, FIELDS)
    ns.write(sample_table(12))
    report = ns.inspect.check()
    assert isinstance(report, HealthReport)
    assert (report.ok, report.leftovers_only, report.problems, report.leftovers) == (
        True,
        False,
        0,
        0,
    )
    assert report.uri == ns.uri and report.manifest_version == ns.version
    assert report.partitions == report.integrity_checked == len(ns.inspect.partitions())
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.partitions = 0  # type: ignore[misc]
    assert ns.inspect.check(sample=2).integrity_checked == 2


def test_leftovers_of_an_interrupted_write_are_only_leftovers(tmp_path, before_commit):
    ns = interrupted(tmp_path / "ns", before_commit)
    report = ns.inspect.check()
    assert report.ok and report.leftovers_only
    us_2025 = {"country": "US", "event_date_year": 2025}
    [appended] = [p["object_id"] for p in ns.inspect.partitions() if p["values"] == us_2025]
    assert [u.object_id for u in report.uncommitted] == [appended]
    assert len(report.young_orphans) == 1 and report.stale_orphans == ()
    assert report.leftovers == 2 and report.problems == 0
    assert report.to_dict()["leftovers"] == 2


def test_problems_are_told_from_leftovers(tmp_path, before_commit):
    ns = interrupted(tmp_path / "ns", before_commit)
    [orphan] = ns.inspect.check().young_orphans
    age(os.path.join(ns.uri, orphan.location), days=8)  # past the 7-day grace
    report = ns.inspect.check()
    assert not report.ok and not report.leftovers_only
    assert [o.location for o in report.stale_orphans] == [orphan.location]
    assert (report.problems, report.leftovers) == (1, 1)
    assert ns.inspect.check(grace=dt.timedelta(days=10)).leftovers_only  # within a longer grace

    fr = next(p for p in ns.inspect.partitions() if p["values"]["country"] == "FR")
    shutil.rmtree(os.path.join(ns.uri, fr["location"]))
    report = ns.inspect.check(grace=dt.timedelta(days=10))
    assert [(i.object_id, i.problem) for i in report.version_issues] == [
        (fr["object_id"], "missing table")
    ]
    assert not report.ok and report.problems == 1
