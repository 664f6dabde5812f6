"""Health inspection (core/ops/health.py): every check passes on a healthy namespace and names the
fault of a namespace broken on purpose -- a wrong column type, a cleaned-up read_version, a
missing table, an unresolvable tag or branch, an orphan table, an uncommitted write, rows in
the wrong partition. Real pylance tables throughout."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.data import SCHEMA, sample_table
from lance import LanceOperation
from lance.fragment import write_fragments

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import PartitionReadError
from dagster_lance_partitioned.core.manifest.state import load_snapshot
from dagster_lance_partitioned.core.manifest.store import ManifestEdit
from dagster_lance_partitioned.core.ops import health
from dagster_lance_partitioned.core.ops.health import (
    IntegrityIssue,
    UncommittedVersion,
    manifest_file_version,
)
from dagster_lance_partitioned.core.storage import DETACHED_BIT

FIELDS = [PartitionField.identity("country"), PartitionField.year("event_date")]


# -- helpers ----------------------------------------------------------------------------------
def make_ns(root: Path) -> PartitionedNamespace:
    """country x year(event_date): six partitions, written, then appended to (detached pins)."""
    ns = PartitionedNamespace.create(root, SCHEMA, FIELDS)
    ns.write(sample_table(12))
    ns.write(sample_table(12, start=100))
    return ns


def part(ns: PartitionedNamespace, country: str, year: int = 2025) -> dict[str, Any]:
    """The registered partition (country, year)."""
    (found,) = [
        p
        for p in ns.inspect.partitions()
        if p["values"] == {"country": country, "event_date_year": year}
    ]
    return found


def table_uri(ns: PartitionedNamespace, p: dict[str, Any]) -> str:
    return os.path.join(ns.uri, p["location"])


def repin(ns: PartitionedNamespace, object_id: str, **columns: Any) -> int:
    """Set manifest columns of one table row in one manifest commit (as a foreign tool might)."""
    snap = ns.state.store.commit(
        load_snapshot, lambda s: ManifestEdit(upserts={object_id: columns})
    )
    ns.refresh()
    return snap.version


def append_detached(uri: str, base: int, rows: list[dict[str, Any]]) -> int:
    """Append ``rows`` to the table at ``uri`` as a detached version built on ``base``."""
    ds = lance.dataset(uri, version=base)
    data = pa.Table.from_pylist(rows, schema=ds.schema)
    frags = write_fragments(
        data, uri, schema=ds.schema, mode="overwrite", data_storage_version=ds.data_storage_version
    )
    new = lance.LanceDataset.commit(
        uri, LanceOperation.Append(frags), read_version=base, detached=True
    )
    return new.version


def assert_healthy(ns: PartitionedNamespace) -> None:
    assert health.check_schemas(ns) == []
    assert health.check_read_versions(ns) == ([], [])
    assert health.check_read_versions(ns, history=None) == ([], [])
    assert health.find_orphans(ns) == []
    assert health.check_integrity(ns) == []


@pytest.fixture
def ns(tmp_path: Path) -> PartitionedNamespace:
    return make_ns(tmp_path / "ns")


# -- healthy ----------------------------------------------------------------------------------
def test_healthy_namespace_passes_every_check(ns):
    assert len(ns.inspect.partitions()) == 6
    assert all(
        p["read_version"] >= DETACHED_BIT for p in ns.inspect.partitions()
    )  # appended: detached
    assert_healthy(ns)


def test_evolved_namespace_is_healthy(tmp_path):
    """Old tables lack an added column and hold a renamed one under its old name; tables of an
    older spec version are checked by their own spec."""
    ns = make_ns(tmp_path / "ns")
    ns.add_columns(pa.field("note", pa.utf8()))
    ns.rename_column("value", "amount")
    ns.update_spec([PartitionField.identity("country")])
    new = sample_table(3, start=500).rename_columns(["id", "country", "event_date", "amount"])
    ns.write(new.append_column("note", pa.array(["x"] * 3)))
    assert {p["spec_id"] for p in ns.inspect.partitions()} == {1, 2}
    assert_healthy(ns)


def test_manifest_file_names():
    assert manifest_file_version("1.manifest") == 1
    assert manifest_file_version("18446744073709551614.manifest") == 1  # V2: u64::MAX - 1
    assert manifest_file_version("d9223372036854775809.manifest") == DETACHED_BIT + 1
    assert manifest_file_version("latest_version_hint.json") is None
    assert manifest_file_version(".tmp_abc.manifest") is None


# -- schemas ----------------------------------------------------------------------------------
def test_wrong_column_type_is_reported(ns):
    us = part(ns, "US")
    uri = table_uri(ns, us)
    data = lance.dataset(uri, version=us["read_version"]).to_table()
    idx = data.schema.get_field_index("value")
    data = data.set_column(idx, pa.field("value", pa.utf8()), pc.cast(data["value"], pa.utf8()))
    rewritten = lance.write_dataset(data, uri, mode="overwrite")
    repin(ns, us["object_id"], read_version=rewritten.version)

    issues = health.check_schemas(ns)
    assert len(issues) == 1
    (issue,) = issues
    assert issue.object_id == us["object_id"]
    assert issue.location == us["location"]
    assert issue.values == {"country": "US", "event_date_year": 2025}
    assert issue.column == "value"
    assert "string" in issue.problem and "double" in issue.problem
    assert health.check_read_versions(ns)[0] == []  # readable: only the schema is wrong


def test_narrower_type_is_fine_missing_required_and_unknown_columns_are_not(ns):
    fr, de = part(ns, "FR"), part(ns, "DE")
    # FR: id stored as int32 (widens to the namespace's int64): no issue
    fr_uri = table_uri(ns, fr)
    data = lance.dataset(fr_uri, version=fr["read_version"]).to_table()
    data = data.set_column(0, pa.field("id", pa.int32(), False), pc.cast(data["id"], pa.int32()))
    repin(
        ns,
        fr["object_id"],
        read_version=lance.write_dataset(data, fr_uri, mode="overwrite").version,
    )
    # DE: no id (not nullable in the namespace), an extra column nobody knows
    de_uri = table_uri(ns, de)
    data = lance.dataset(de_uri, version=de["read_version"]).to_table().drop_columns(["id"])
    data = data.append_column("mystery", pa.array([1] * data.num_rows, pa.int8()))
    repin(
        ns,
        de["object_id"],
        read_version=lance.write_dataset(data, de_uri, mode="overwrite").version,
    )

    issues = sorted(health.check_schemas(ns), key=lambda i: i.column)
    assert [(i.object_id, i.column) for i in issues] == [
        (de["object_id"], "id"),
        (de["object_id"], "mystery"),
    ]
    assert "not nullable" in issues[0].problem
    assert "not in the namespace schema" in issues[1].problem


# -- read versions ----------------------------------------------------------------------------
def test_read_version_whose_manifest_was_removed(ns):
    us = part(ns, "US")
    version = us["read_version"]
    os.remove(os.path.join(table_uri(ns, us), "_versions", f"d{version}.manifest"))

    issues, uncommitted = health.check_read_versions(ns)
    assert [(i.object_id, i.problem) for i in issues] == [
        (us["object_id"], "read_version cleaned up")
    ]
    assert str(version) in issues[0].detail
    assert uncommitted == []  # the Restore base the append was built on is no write
    with pytest.raises(PartitionReadError):
        ns.to_table()
    # the other checks skip what cannot be opened instead of failing
    assert health.check_schemas(ns) == []
    assert health.check_integrity(ns) == []


def test_lance_cleanup_deletes_files_a_detached_pin_still_reads(ns):
    """pylance 14's cleanup_old_versions ignores detached versions: once the main line moved
    on, it deletes the old main-line files a pinned detached version reads."""
    us = part(ns, "US")
    uri = table_uri(ns, us)
    assert lance.dataset(uri).version == 1  # main line: the creating write only
    lance.write_dataset(sample_table(3, start=900), uri, mode="overwrite")  # main line: v2
    before = set(os.listdir(os.path.join(uri, "data")))
    stats = lance.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))
    assert stats.old_versions == 1  # v1
    assert os.path.exists(os.path.join(uri, "_versions", f"d{us['read_version']}.manifest"))
    assert len(set(os.listdir(os.path.join(uri, "data")))) < len(before)

    issues, _ = health.check_read_versions(ns)
    assert [(i.object_id, i.problem) for i in issues] == [
        (us["object_id"], "read_version cleaned up")
    ]
    assert "are gone" in issues[0].detail
    with pytest.raises((PartitionReadError, OSError, ValueError)):  # ArrowInvalid: not found
        ns.to_table()


def test_missing_table_directory(ns):
    us = part(ns, "US")
    shutil.rmtree(table_uri(ns, us))
    issues, uncommitted = health.check_read_versions(ns)
    assert [(i.object_id, i.problem) for i in issues] == [(us["object_id"], "missing table")]
    assert us["location"] in issues[0].detail
    assert uncommitted == []
    assert health.check_schemas(ns) == []
    assert health.check_integrity(ns) == []


def test_tag_and_branch_that_do_not_resolve(ns):
    us, fr, de = part(ns, "US"), part(ns, "FR"), part(ns, "DE")
    repin(ns, us["object_id"], read_version=None, read_tag="nope")
    repin(ns, fr["object_id"], read_branch="nope")
    # a tag that resolves is fine
    lance.dataset(table_uri(ns, de)).tags.create("good", de["read_version"])
    repin(ns, de["object_id"], read_version=None, read_tag="good")

    issues, _ = health.check_read_versions(ns)
    found = sorted((i.object_id, i.problem) for i in issues)
    assert found == sorted(
        [
            (us["object_id"], "tag does not resolve"),
            (fr["object_id"], "branch does not resolve"),
        ]
    )
    assert any("'nope'" in i.detail for i in issues)
    assert health.check_integrity(ns) == []  # DE read through its tag


# -- uncommitted versions and orphans ----------------------------------------------------------
def test_failed_write_leaves_an_orphan_and_an_uncommitted_version(ns, before_commit):
    dirs = set(os.listdir(ns.uri))
    us = part(ns, "US")

    def boom(pending: list) -> None:
        raise RuntimeError("injected failure before the manifest commit")

    failed = sample_table(2, countries=("US", "JP"), start=700)  # US 2025 exists, JP is new
    before_commit(ns, boom)
    with pytest.raises(RuntimeError, match="injected"):
        ns.write(failed)
    before_commit(ns, None)

    (new_dir,) = set(os.listdir(ns.uri)) - dirs
    orphans = health.find_orphans(ns)
    assert [o.location for o in orphans] == [new_dir]
    size = sum(
        os.path.getsize(os.path.join(d, f))
        for d, _, files in os.walk(os.path.join(ns.uri, new_dir))
        for f in files
    )
    assert orphans[0].bytes == size > 0
    assert 0 <= orphans[0].age_seconds < 120

    issues, uncommitted = health.check_read_versions(ns)
    assert issues == []
    assert len(uncommitted) == 1
    (u,) = uncommitted
    assert (u.object_id, u.location, u.read_version) == (
        us["object_id"],
        us["location"],
        us["read_version"],
    )
    assert len(u.versions) == 1 and u.versions[0] != us["read_version"]
    assert os.path.exists(
        os.path.join(table_uri(ns, us), "_versions", f"d{u.versions[0]}.manifest")
    )

    # a later write registering the partition makes it healthy again (its version is newer)
    ns.write(sample_table(1, countries=("US",), start=800))
    assert health.check_read_versions(ns) == ([], [])


def test_commits_made_to_a_table_directly_are_uncommitted_versions(ns):
    us, fr = part(ns, "US"), part(ns, "FR")
    main = lance.write_dataset(
        sample_table(1, countries=("US",), start=900), table_uri(ns, us), mode="append"
    ).version
    detached = append_detached(
        table_uri(ns, fr),
        fr["read_version"],
        sample_table(1, countries=("FR",), start=901).to_pylist(),
    )
    _, uncommitted = health.check_read_versions(ns)
    assert sorted(uncommitted, key=lambda u: u.object_id) == sorted(
        [
            UncommittedVersion(us["object_id"], us["location"], us["read_version"], (main,)),
            UncommittedVersion(fr["object_id"], fr["location"], fr["read_version"], (detached,)),
        ],
        key=lambda u: u.object_id,
    )
    repin(ns, fr["object_id"], read_version=detached)  # registered now
    assert [u.object_id for u in health.check_read_versions(ns)[1]] == [us["object_id"]]


def test_cleaned_up_pin_and_the_write_that_replaced_it_are_both_reported(tmp_path):
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, FIELDS)
    ns.write(sample_table(12))
    us = part(ns, "US")
    assert us["read_version"] == 1  # created on the main line
    uri = table_uri(ns, us)
    outside = lance.write_dataset(sample_table(1, countries=("US",), start=50), uri, mode="append")
    outside.cleanup_old_versions(older_than=dt.timedelta(0), delete_unverified=True)
    issues, uncommitted = health.check_read_versions(ns)
    assert [(i.object_id, i.problem) for i in issues] == [
        (us["object_id"], "read_version cleaned up")
    ]
    assert uncommitted == [UncommittedVersion(us["object_id"], us["location"], 1, (2,))]


def test_history_decides_what_counts_as_referenced(ns):
    first = ns.version - 1  # after the first write; the append's versions are pinned later
    old = PartitionedNamespace.open(ns.uri, version=first)
    # later manifest versions reference the newer table versions: nothing is uncommitted
    assert health.check_read_versions(old) == ([], [])

    dropped = part(ns, "US")
    ns.maintenance.drop_partitions("country = 'US' AND event_date < DATE '2026-01-01'")
    assert all(p["object_id"] != dropped["object_id"] for p in ns.inspect.partitions())
    # older manifest versions still reference the dropped table (time travel reads it) ...
    assert health.find_orphans(ns) == []
    # ... unless only the latest version counts
    assert [o.location for o in health.find_orphans(ns, history=0)] == [dropped["location"]]


def test_directories_that_are_not_tables_are_not_orphans(ns):
    os.makedirs(os.path.join(ns.uri, "notes"))
    Path(ns.uri, "notes", "readme.txt").write_text("mine")
    assert health.find_orphans(ns) == []


# -- integrity --------------------------------------------------------------------------------
def test_rows_in_the_wrong_partition(ns):
    us = part(ns, "US")
    stray = [
        {"id": 999, "country": "FR", "event_date": dt.date(2025, 6, 1), "value": 1.0},
        {"id": 998, "country": None, "event_date": dt.date(2025, 6, 1), "value": 2.0},
        {"id": 997, "country": "US", "event_date": dt.date(2024, 6, 1), "value": 3.0},
    ]
    version = append_detached(table_uri(ns, us), us["read_version"], stray)
    repin(ns, us["object_id"], read_version=version)

    issues = health.check_integrity(ns)
    assert len(issues) == 1
    (issue,) = issues
    assert issue.object_id == us["object_id"]
    assert issue.values == {"country": "US", "event_date_year": 2025}
    assert issue.rows_wrong == 3  # another country, a NULL country, another year
    assert issue.sample["id"] == 999 and issue.sample["country"] == "FR"

    # sampling: deterministic per seed, and a full sample finds it
    n = len(ns.inspect.partitions())
    assert health.check_integrity(ns, sample=n) == issues
    assert health.check_integrity(ns, sample=0) == []
    for seed in range(4):
        once = health.check_integrity(ns, sample=2, seed=seed)
        assert once == health.check_integrity(ns, sample=2, seed=seed)
        assert once in ([], issues)
    assert any(health.check_integrity(ns, sample=1, seed=s) == issues for s in range(40))


def test_table_written_for_another_partition(ns):
    """A whole table registered under the wrong values (e.g. a mis-registered import): FR's
    row points at a copy of US's table (two rows never share one directory)."""
    us, fr = part(ns, "US"), part(ns, "FR")
    copy = "0badc0de_v1$copyofuscopyofus$dataset"
    shutil.copytree(table_uri(ns, us), os.path.join(ns.uri, copy))
    repin(ns, fr["object_id"], location=copy, read_version=us["read_version"])
    issues = health.check_integrity(ns)
    rows = lance.dataset(table_uri(ns, us), version=us["read_version"]).count_rows()
    assert issues == [
        IntegrityIssue(
            fr["object_id"],
            {"country": "FR", "event_date_year": 2025},
            rows,
            issues[0].sample,
        )
    ]
    assert issues[0].sample["country"] == "US"
