"""A maintenance run between a write's table commits and its manifest commit makes the write fail
cleanly (the retirement protocol, core/manifest/retire.py), and an empty write makes no commit."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from helpers.data import SCHEMA, fingerprint, sample_table, sorted_rows
from helpers.faults import CommitHooks

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import MaintenanceConflictError, VersionGoneError

FIELDS = [PartitionField.identity("country")]


def _ns(tmp_path: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, FIELDS)
    ns.write(sample_table(6))
    return ns


@pytest.mark.parametrize(
    ("maintenance", "countries"),
    [
        ("vacuum", ("US", "NL")),  # NL is a new partition: its table is an orphan until commit
        ("cleanup", ("US", "FR")),  # existing partitions: their new versions are unpinned
    ],
)
def test_maintenance_between_table_and_manifest_commit_fails_the_write_cleanly(
    tmp_path: Path, maintenance: str, countries: tuple[str, ...], before_commit: CommitHooks
) -> None:
    ns = _ns(tmp_path)
    before_rows = sorted_rows(ns.to_table())
    before_version = ns.version
    other = PartitionedNamespace.open(ns.uri)

    def meanwhile(_pending) -> None:
        if maintenance == "vacuum":
            other.maintenance.vacuum(grace=dt.timedelta(0))
        else:
            other.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)

    before_commit(ns, meanwhile)
    with pytest.raises(MaintenanceConflictError) as info:
        ns.write(sample_table(4, countries=countries, start=100), mode="append")
    assert isinstance(info.value, VersionGoneError)  # what callers caught before the protocol
    assert "retired" in str(info.value) and "retry" in str(info.value)
    fresh = PartitionedNamespace.open(ns.uri)
    assert fresh.version == before_version + 2  # the maintenance's announcement, no write
    assert sorted_rows(fresh.to_table()) == before_rows  # readable, unchanged
    before_commit(ns, None)
    ns.write(sample_table(4, countries=countries, start=100))  # a retry lands
    assert PartitionedNamespace.open(ns.uri).count_rows() == len(before_rows) + 4


def test_an_empty_write_makes_no_commit(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    before = fingerprint(ns.uri)
    for mode in ("append", "overwrite_partitions"):
        result = ns.write(sample_table(0), mode=mode)
        assert result.committed is False
        assert result.manifest_version == before["manifest_version"]
        assert result.partitions == ()
    assert fingerprint(ns.uri) == before


def test_an_empty_whole_table_overwrite_still_empties_the_table(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    result = ns.write(sample_table(0), mode="overwrite")
    assert result.committed is True and len(result.removed) == 3
    assert ns.count_rows() == 0
    again = ns.write(sample_table(0), mode="overwrite")  # nothing left to remove
    assert again.committed is False and again.manifest_version == result.manifest_version


def test_named_empty_partitions_still_commit(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    result = ns.write(sample_table(0), "overwrite_partitions", partitions=[{"country": "US"}])
    assert result.committed is True
    assert ns.count_rows("country = 'US'") == 0
